"""Cluster mode (PostgreSQL + Ray): throughput, sizing, the soak."""
