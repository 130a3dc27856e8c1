"""The service over HTTP: the query path, A/B runs, load generation, profiles, backup and key checks."""
