"""Domain errors and the one JSON error shape.

Domain code raises these; only this module knows about HTTP. Every error body is
``{"error": {"code": str, "message": str, "details": ...}}`` so clients parse one shape.
"""

from __future__ import annotations

from typing import Any


class ServiceError(Exception):
    """Base of every error the service reports to a client."""

    status_code = 500
    code = "internal_error"

    def __init__(self, message: str, *, details: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def to_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details is not None:
            body["details"] = self.details
        return {"error": body}


# --- client errors -------------------------------------------------------------------------


class InvalidInput(ServiceError):
    """The request is well-formed HTTP but its content cannot be used (bad media, bad parameter)."""

    status_code = 422
    code = "invalid_input"


class BadRequest(ServiceError):
    """The request body cannot be parsed (malformed JSON, base64, multipart)."""

    status_code = 400
    code = "bad_request"


class Unauthorized(ServiceError):
    """A /v1 route was called without a valid API key."""

    status_code = 401
    code = "unauthorized"


class Forbidden(ServiceError):
    """The API key is valid but lacks the scope (read, write, admin) the route needs."""

    status_code = 403
    code = "forbidden"


class NotFound(ServiceError):
    """The named collection, item or job does not exist."""

    status_code = 404
    code = "not_found"


class Conflict(ServiceError):
    """The resource already exists or the request contradicts its state."""

    status_code = 409
    code = "conflict"


class PayloadTooLarge(ServiceError):
    """The upload is over the configured size limit."""

    status_code = 413
    code = "payload_too_large"


class UnsupportedMedia(ServiceError):
    """The file is not a format the service can decode."""

    status_code = 415
    code = "unsupported_media"


# --- server state --------------------------------------------------------------------------


class Overloaded(ServiceError):
    """A bounded queue is full; the client should retry later."""

    status_code = 429
    code = "overloaded"

    def __init__(self, message: str, *, details: Any = None, retry_after: str | None = None) -> None:
        super().__init__(message, details=details)
        # the HTTP edge sends these with the error (Retry-After: whole seconds)
        self.headers = {"Retry-After": retry_after} if retry_after else None


class RateLimited(Overloaded):
    """The client (its key, or its address when keys are off) is over its request rate."""

    code = "rate_limited"


class Unhealthy(ServiceError):
    """The service is not ready (encoders or indices not loaded) or is shutting down."""

    status_code = 503
    code = "unavailable"


class RetryLater(Unhealthy):
    """503 with Retry-After: something the request needs is away or busy for now; nothing was changed."""

    def __init__(self, message: str, retry_after_s: int, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(message, details=details)
        self.headers = {"Retry-After": str(retry_after_s)}


class StorageReadOnly(Unhealthy):
    """The data directory's filesystem is read-only: writes are refused, reads and search go on."""

    status_code = 503
    code = "storage_read_only"


class InsufficientStorage(ServiceError):
    """The data directory's disk is full: nothing of the write was kept; retry once space is freed."""

    status_code = 507
    code = "insufficient_storage"


class BackendError(ServiceError):
    """A model, index or storage failure that is not the client's fault."""

    status_code = 500
    code = "backend_error"
