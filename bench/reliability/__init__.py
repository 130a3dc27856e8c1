"""Fuzzing the API (schemathesis) against a seeded service."""
