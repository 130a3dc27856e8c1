"""How good an approximate index's answers are, measured on the service's own queries (see live_recall)."""
