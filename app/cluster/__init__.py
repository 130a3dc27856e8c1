"""Cluster mode: a shared PostgreSQL catalog, index shards and embedding workers on Ray."""
