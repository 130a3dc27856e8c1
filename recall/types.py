"""Response and request shapes of the Recall API, as TypedDicts for the Python clients.

TypedDicts keep responses plain JSON dicts at run time (printable, serialisable, indexable the
way the CLI and scripts already use them) while a type checker knows every field. They mirror
:mod:`app.api.schemas` and the route handlers; ``NotRequired`` marks fields that appear only
sometimes.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

Mode = Literal["binary", "float", "two_stage"]


class ErrorBody(TypedDict):
    code: str
    message: str
    details: NotRequired[Any]


class Readiness(TypedDict):
    status: Literal["ready", "unavailable"]
    reasons: NotRequired[list[str]]
    collections: NotRequired[int]


class EncoderInfo(TypedDict):
    name: str
    modality: Literal["audio", "image", "unknown"]  # unknown: an ONNX folder whose manifest cannot be read
    source: str  # a built-in's checkpoint path; an ONNX folder's manifest "source" (where the weights come from)
    version: str
    loaded: bool
    default: bool
    licence: str | None
    dim: int | None  # None for a built-in encoder not loaded yet
    # ONNX encoder folders (RECALL_ENCODERS__ONNX_DIR)
    family: NotRequired[str | None]
    folder: NotRequired[str]
    problem: NotRequired[str]  # why the folder cannot be used; a collection naming it gets this as a 422
    # present once the encoder is loaded
    bits: NotRequired[int]
    sample_rate: NotRequired[int | None]
    default_window_s: NotRequired[float | None]
    default_hop_s: NotRequired[float | None]
    supports_text: NotRequired[bool]
    supports_rerank: NotRequired[bool]
    description: NotRequired[str]
    device: NotRequired[str]


class Collection(TypedDict):
    name: str
    modality: Literal["audio", "image"]
    encoder: str
    encoder_version: str | None
    index_kinds: list[str]
    dim: int
    bits: int
    window_s: float | None
    hop_s: float | None
    keep_media: bool
    description: str
    created_at: float
    items: int
    segments: int
    indexed_segments: int
    memory_bytes: int


class Item(TypedDict):
    id: str
    filename: str | None
    media_type: str | None
    has_media: bool
    duration_s: float | None
    width: int | None
    height: int | None
    metadata: dict[str, Any]
    created_at: float
    segments: NotRequired[int]


class ItemPage(TypedDict):
    data: list[Item]
    count: int
    limit: int
    offset: int


class ItemIn(TypedDict):
    """One item of a JSON ingest: base64 content plus optional id, filename and metadata."""

    content_base64: str
    id: NotRequired[str]
    filename: NotRequired[str]
    metadata: NotRequired[dict[str, Any]]


class IndexedItem(TypedDict):
    id: str
    filename: str
    segments: int


class FileError(TypedDict):
    file: str
    id: str
    status: int
    error: ErrorBody


class Job(TypedDict):
    id: str
    collection: str
    status: Literal["queued", "running", "completed", "failed"]
    total: int
    done: int
    indexed: int
    errors: list[FileError]
    created_at: float
    finished_at: float | None
    error: NotRequired[str]


class IngestReport(TypedDict):
    indexed: list[IndexedItem]
    errors: list[FileError]
    collection: str
    # when the service ran the batch as a background job: the finished job and its count
    indexed_count: NotRequired[int]
    job: NotRequired[Job]


class SearchParams(TypedDict, total=False):
    """Optional search parameters (keyword arguments of the search methods)."""

    k: int
    mode: Mode
    oversample: int
    filter: dict[str, Any]
    max_distance: float
    segments_per_item: int
    nms_iou: float
    item_distance: Literal["mean", "min"]
    rerank: bool
    rerank_top: int


class Segment(TypedDict):
    start: float
    end: float
    distance: float


class SearchResult(TypedDict):
    id: str
    rank: int
    score: float
    distance: float
    metadata: dict[str, Any]
    segments: list[Segment]
    stage1_score: NotRequired[float]
    rerank_score: NotRequired[float]


class SearchResponse(TypedDict):
    results: list[SearchResult]
    timings: dict[str, float]
    mode: Mode
    collection: str


class Judgment(TypedDict):
    qid: str
    doc: str
    grade: int
    path: NotRequired[str]


class JudgmentList(TypedDict):
    data: list[Judgment]
    count: int
    path: str


class PairConfidence(TypedDict):
    system_a: str
    system_b: str
    expected_difference: float
    variance: float
    confidence: float


class Confidence(TypedDict):
    k: int
    systems: list[str]
    judgments: int
    confidence: float | None
    reason: NotRequired[str]
    queries: NotRequired[int]
    pool_pairs: NotRequired[int]
    judged_in_pool: NotRequired[int]
    system_means: NotRequired[dict[str, float]]
    pairs: NotRequired[list[PairConfidence]]
    next: NotRequired[list[dict[str, str]]]
