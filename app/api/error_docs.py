"""Error responses for the OpenAPI document: one JSON error shape, one description per status code."""

from __future__ import annotations

from typing import Any

ERROR_SHAPE = {"content": {"application/json": {"example": {"error": {"code": "...", "message": "...", "details": {}}}}}}

DESCRIPTIONS = {
    400: "malformed JSON, base64 or multipart body",
    401: "API keys are on and none (or a wrong one) was sent",
    404: "no such collection, item or job",
    409: "conflict: the collection's encoder checkpoint version is not available (re-embed it or add the checkpoint)",
    413: "body, audio length or image size over the configured limit",
    415: "unsupported media format, or media of the wrong modality",
    422: "invalid parameter, or corrupt / too short media",
    429: "the batch queue is full; retry later",
    500: "the demo media is missing from this installation",
    503: "the service is still starting, or (cluster mode) an index shard is missing; the message names it",
}


def error_responses(*codes: int, **overrides: str) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for a route: each code with its description (``overrides`` as ``e503="..."``) and the error shape."""
    return {code: {"description": overrides.get(f"e{code}", DESCRIPTIONS[code]), **ERROR_SHAPE} for code in codes}
