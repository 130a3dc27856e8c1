"""A small Python client for the Recall API over httpx (the CLI and tests use it).

Errors come back as the service's own exception classes (app.errors), chosen by status code,
so client code handles `NotFound` or `Overloaded` the same way server code does.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable

import httpx

from app import errors

_BY_STATUS: dict[int, type[errors.ServiceError]] = {
    400: errors.BadRequest, 401: errors.Unauthorized, 404: errors.NotFound, 409: errors.Conflict,
    413: errors.PayloadTooLarge, 415: errors.UnsupportedMedia, 422: errors.InvalidInput,
    429: errors.Overloaded, 503: errors.Unhealthy,
}


def raise_for_error(response: httpx.Response) -> None:
    """Raise the service error class matching a 4xx/5xx response."""
    if response.status_code < 400:
        return
    try:
        body = response.json()["error"]
        message, details = body.get("message", response.text), body.get("details")
    except (ValueError, KeyError, TypeError):
        message, details = response.text, None
    cls = _BY_STATUS.get(response.status_code, errors.BackendError)
    raise cls(message, details=details)


class RecallClient:
    """Synchronous client. ``base_url`` defaults to $RECALL_URL or http://localhost:8000."""

    def __init__(self, base_url: str | None = None, api_key: str | None = None, timeout: float = 120.0, transport: httpx.BaseTransport | None = None) -> None:
        base_url = base_url or os.environ.get("RECALL_URL", "http://localhost:8000")
        api_key = api_key or os.environ.get("RECALL_API_KEY")
        headers = {"X-API-Key": api_key} if api_key else {}
        self.http = httpx.Client(base_url=base_url, headers=headers, timeout=timeout, transport=transport)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> "RecallClient":
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.http.request(method, path, **kwargs)
        raise_for_error(response)
        return response.json() if response.content else None

    # --- collections ----------------------------------------------------------------------

    def create_collection(self, name: str, modality: str, **options: Any) -> dict[str, Any]:
        return self._call("POST", "/v1/collections", json={"name": name, "modality": modality, **options})

    def list_collections(self) -> list[dict[str, Any]]:
        return self._call("GET", "/v1/collections")["data"]

    def get_collection(self, name: str) -> dict[str, Any]:
        return self._call("GET", f"/v1/collections/{name}")

    def delete_collection(self, name: str) -> None:
        self._call("DELETE", f"/v1/collections/{name}")

    def list_encoders(self) -> list[dict[str, Any]]:
        return self._call("GET", "/v1/encoders")["data"]

    # --- items ----------------------------------------------------------------------------

    def ingest(self, collection: str, paths: Iterable[str | Path], ids: list[str] | None = None, metadata: list[dict[str, Any]] | None = None, wait: bool = True) -> dict[str, Any]:
        paths = [Path(p) for p in paths]
        files = [("files", (p.name, p.read_bytes())) for p in paths]
        data: dict[str, str] = {}
        if ids:
            data["ids"] = ",".join(ids)
        if metadata:
            data["metadata"] = json.dumps(metadata)
        return self._call("POST", f"/v1/collections/{collection}/items", params={"wait": str(wait).lower()}, files=files, data=data)

    def get_item(self, collection: str, item_id: str) -> dict[str, Any]:
        return self._call("GET", f"/v1/collections/{collection}/items/{item_id}")

    def list_items(self, collection: str, limit: int = 50, offset: int = 0) -> dict[str, Any]:
        return self._call("GET", f"/v1/collections/{collection}/items", params={"limit": limit, "offset": offset})

    def delete_item(self, collection: str, item_id: str) -> None:
        self._call("DELETE", f"/v1/collections/{collection}/items/{item_id}")

    def get_job(self, job_id: str) -> dict[str, Any]:
        return self._call("GET", f"/v1/jobs/{job_id}")

    # --- search ---------------------------------------------------------------------------

    def search_file(self, collection: str, path: str | Path, **params: Any) -> dict[str, Any]:
        path = Path(path)
        data = {k: (json.dumps(v) if k == "filter" else str(v)) for k, v in params.items()}
        return self._call("POST", f"/v1/collections/{collection}/search", files={"file": (path.name, path.read_bytes())}, data=data)

    def search_item(self, collection: str, item_id: str, **params: Any) -> dict[str, Any]:
        return self._call("POST", f"/v1/collections/{collection}/search", json={"item_id": item_id, **params})

    def search_text(self, collection: str, text: str, **params: Any) -> dict[str, Any]:
        return self._call("POST", f"/v1/collections/{collection}/search", json={"text": text, **params})

    # --- health ---------------------------------------------------------------------------

    def ready(self) -> bool:
        return self.http.get("/readyz").status_code == 200
