"""The service's use cases: what a request asks the service to do, in the terms of the engine parts.

``services`` is the container the HTTP edge hands to each use case (catalog, encoders, indices,
batchers, settings); ``ingest``, ``query``, ``jobs``, ``demo`` and ``judging`` are the use cases;
``follower`` keeps a process's collections in step with a shared catalog (cluster mode). Nothing
here imports FastAPI or the HTTP schemas (tests/test_architecture.py checks it).
"""
