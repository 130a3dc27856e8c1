"""How to measure one client's latency on a noisy shared machine: servers taking turns request by request
(interleaved.py), and what an idle spell between queries costs (idle_gap.py)."""
