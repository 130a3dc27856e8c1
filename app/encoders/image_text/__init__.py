"""The text-to-image family (paper 003's block network): image tower, text tower over MiniLM sentence vectors, relevance head."""
