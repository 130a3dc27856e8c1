"""The Python client of the Recall service: ``from recall import RecallClient``.

This package is the client alone: it imports httpx and the service's error classes
(:mod:`app.errors`, a module with no imports of its own), never the service's engine (torch,
FAISS, FastAPI), so a program that only talks to a running service loads nothing heavy
(``tests/test_architecture.py`` checks it). Errors are the service's own classes, re-exported
here, so ``except recall.NotFound`` catches what the service raised as ``NotFound``.
"""

from app.errors import (
    BackendError, BadRequest, Conflict, Forbidden, InvalidInput, NotFound, Overloaded, PayloadTooLarge, RateLimited,
    ServiceError, Unauthorized, Unhealthy, UnsupportedMedia,
)
from recall.client import AsyncRecallClient, RecallClient, raise_for_error

__all__ = [
    "RecallClient", "AsyncRecallClient", "raise_for_error",
    "ServiceError", "BadRequest", "Unauthorized", "NotFound", "Conflict", "PayloadTooLarge", "UnsupportedMedia",
    "InvalidInput", "Overloaded", "Unhealthy", "BackendError", "Forbidden", "RateLimited",
]
