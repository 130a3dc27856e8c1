"""Request and response models of the v1 API."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Mode = Literal["binary", "float", "two_stage"]
ItemDistance = Literal["mean", "min"]

# Every number a request carries is bounded here (or by a Query(...) of its route), so an
# out-of-range value is a 422 in the one error shape before it reaches the catalog or an index.
# Bounds that are settings (k <= limits.max_k, limit <= limits.max_page_size) are checked where the
# settings are known and written into the served document by app/api/limit_docs.py.
#
# The largest page offset: SQLite and PostgreSQL hold 64-bit integers (2**63 - 1 overflowed the
# catalog with a 500); 2**53 - 1 is also the largest integer a JavaScript client holds exactly, and
# far past the last item of any collection.
MAX_OFFSET = 2**53 - 1
# Request floats are finite: JSON has no NaN or Infinity, and a form field such as max_distance=inf
# or window_s=nan must be refused, not stored or searched with (allow_inf_nan=False).
#
# JSON bodies are validated strictly (strict=True; SearchRequest per call, as its multipart form
# sends every field as text): a number is a number, not "5" or false. Lax coercion took
# {"score": false} as 0.0 and {"k": "5"} as 5, so the document's types were not the contract.


# IVF bounds: app/index/kinds.py (MIN_NLIST, MAX_NLIST); a cross-field rule (nprobe <= nlist) is the
# use case's 422 (app/usecases/services.py: index_spec).
MAX_NLIST = 65_536


class IndexConfig(BaseModel):
    """How the collection's binary codes are searched (GET /v1/collections/{name} shows which index answers)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    kind: Literal["auto", "flat", "ivf"] = Field(
        "auto", description="`flat`: exact scan of every code. `ivf`: FAISS IndexBinaryIVF, trained in the background "
        "once the collection holds 10,000 windows (39 x nlist with an explicit nlist); flat answers until then. "
        "`auto`: flat until index.auto_ivf_windows windows (a setting, default 1,000,000), then ivf",
    )
    nlist: int | None = Field(None, ge=16, le=MAX_NLIST, description="IVF lists; default the power of two nearest sqrt(windows), at most 2048, retrained as the collection grows 4x")
    nprobe: int | None = Field(None, ge=1, le=MAX_NLIST, description="IVF lists a query scans by default (at most nlist); default: enough lists to read ~8192 codes, at least 16. A search may override it")
    floats: Literal["memory", "mmap"] = Field(
        "memory", description="Where the float vectors live: `memory` (the heap) or `mmap` (memory-mapped files beside the "
        "index snapshots, paged in on demand: two-stage search reads only its shortlist's rows, so they need not fit in RAM). "
        "Same results either way",
    )


class LiveRecallPublic(BaseModel):
    """Recall@10 of the answering IVF on a sample of this collection's recent searches, measured in the background."""

    recall_at_10: float | None = Field(description="mean tie-tolerant recall@10 of the IVF's answers (at each sampled query's "
                                       "nprobe) against an exact flat scan of the same codes, as they were when measured")
    queries: int = Field(description="sampled queries measured (the sample size)")
    skipped: int = Field(0, description="sampled queries left out because one of their exact top 10 was deleted while measuring")
    nprobes: list[int] | None = Field(None, description="the nprobe overrides among the sampled queries (null: all used the collection's)")
    measured_at: float = Field(description="when the measurement ran (Unix time)")
    busy_s: float | None = Field(None, description="seconds the measurement spent searching (on one thread)")
    seconds: float | None = Field(None, description="wall seconds the measurement took: busy_s plus the pauses that keep it "
                                  "to 5% of one core")
    sampling: str | None = Field(None, description="which queries are sampled")


class ShardIndexPublic(BaseModel):
    """One cluster shard's index (each shard trains and swaps its own IVF)."""

    shard: int = Field(description="1-based shard number")
    answering: str | None = Field(description="flat or ivf on this shard (null: the shard did not answer)")
    unavailable: bool = Field(False, description="the shard did not answer in time (restarting, or its node is gone)")
    windows: int | None = Field(None, description="windows in this shard's partition")
    building: bool = False
    nlist: int | None = None
    nprobe: int | None = None
    trains_at: int | None = Field(None, description="windows of this shard's partition at which it trains its IVF")
    trained_on: int | None = None
    last_build_s: float | None = None
    last_error: str | None = None
    recall: LiveRecallPublic | None = Field(None, description="this shard's live recall@10 (see the collection's `recall`)")


class IndexPublic(BaseModel):
    kind: str = Field(description="auto, flat or ivf, as created")
    answering: str | None = Field(description="the index that answers binary searches now: flat or ivf; in cluster mode `mixed` "
                                  "while the shards differ (see `shards`); null: no binary index here")
    building: bool = Field(False, description="an IVF is being trained in the background (flat or the previous IVF answers meanwhile)")
    nlist: int | None = None
    nprobe: int | None = None
    trains_at: int | None = Field(None, description="windows at which the IVF is trained (null: never)")
    trained_on: int | None = Field(None, description="windows the answering IVF was trained on")
    last_build_s: float | None = Field(None, description="seconds the last IVF build took")
    last_error: str | None = Field(None, description="why the last IVF build failed (flat kept answering)")
    recall: LiveRecallPublic | None = Field(None, description="recall@10 measured on a sample of recent searches (1 in 16 of those "
                                            "the IVF answers, the 64 most recent, at most once a minute); null while flat "
                                            "answers (exact: recall 1) or before the first measurement")
    floats: str = Field("memory", description="where the float vectors live: memory or mmap, as created")
    float_file_bytes: int | None = Field(None, description="bytes of the memory-mapped float files (floats mmap; not in memory_bytes)")
    setting: IndexConfig | None = Field(None, description="the `index` setting as the collection was created (nlist and "
                                        "nprobe null where they were left to the service): what `recall reembed` copies")
    shards: list[ShardIndexPublic] | None = Field(None, description="cluster mode (Ray shard actors): each shard's index; "
                                                  "index.auto_ivf_windows counts each shard's partition")


class CollectionCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)

    # the pattern is documented here and checked by Services.create_collection (NAME_PATTERN)
    name: str = Field(description="1-64 letters, digits, '_', '-', '.'",
                      json_schema_extra={"pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"})
    modality: Literal["audio", "image"]
    encoder: str | None = Field(None, description="Encoder name (GET /v1/encoders); default per modality")
    index_kinds: list[Literal["binary", "float"]] | None = Field(None, min_length=1, description="Default: both")
    index: IndexConfig | None = Field(None, description="How binary codes are searched; default kind auto")
    window_s: float | None = Field(None, gt=0, le=60, description="Audio window length in seconds")
    hop_s: float | None = Field(None, gt=0, le=60, description="Audio hop between windows in seconds")
    keep_media: bool | None = Field(None, description="Keep uploaded originals for GET .../media")
    description: str | None = Field(None, max_length=1000)


class CollectionPublic(BaseModel):
    name: str
    modality: str
    encoder: str
    encoder_version: str | None = Field(None, description="Checkpoint version the collection was embedded with; it keeps using that checkpoint (null: created before versions were recorded)")
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
    index: IndexPublic
    binary_codes: dict[str, Any] | None = Field(
        None, description="A collection of a bring-your-own (ONNX) encoder: how its binary codes were fitted "
        "(method pca-itq, bits, fitted_on vectors of its first ingest); null for encoders with a trained hash head, "
        "or before the first ingest")


class CollectionsPublic(BaseModel):
    data: list[CollectionPublic]
    count: int


class ItemIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    id: str | None = None
    filename: str | None = None
    content_base64: str
    metadata: dict[str, Any] = Field(default_factory=dict)


class ItemsIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    items: list[ItemIn] = Field(min_length=1)


class SearchRequest(BaseModel):
    """Search parameters; exactly one of item_id / text in JSON, or a `file` part in multipart."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    item_id: str | None = None
    # the longest text is a setting (limits.max_text_chars), checked by the query use case
    text: str | None = Field(None, min_length=1, description="A sentence (image collections); at most limits.max_text_chars (default 2000)")
    content_base64: str | None = None
    k: int = Field(10, ge=1, description="Results to return, at most limits.max_k (default 1000)")
    mode: Mode = "two_stage"
    oversample: int | None = Field(None, ge=1, le=1000)
    nprobe: int | None = Field(
        None, ge=1, le=MAX_NLIST, description="IVF lists to scan for this query when an IVF answers (more: higher "
        "recall, slower; at least nlist: exact); ignored while the flat index answers. Default: the collection's nprobe",
    )
    filter: dict[str, Any] = Field(default_factory=dict, description="metadata equality: every key must match")
    max_distance: float | None = Field(None, ge=0)
    segments_per_item: int = Field(3, ge=1, le=100)
    nms_iou: float = Field(0.3, ge=0, le=1)
    item_distance: ItemDistance = Field(
        "mean", description="how an audio item's distance combines the query's windows: `mean` averages each query "
        "window's distance to its nearest segment of the item (every part of the query must match somewhere); `min` "
        "takes the single nearest pair. The same for a query of one window",
    )
    rerank: bool = True
    rerank_top: int = Field(100, ge=1, le=1000)
    partial: bool = Field(
        False, description="cluster mode: while an index shard is unavailable, answer 200 with the other shards' "
        "results marked `partial` instead of 503",
    )


class SegmentPublic(BaseModel):
    start: float
    end: float
    distance: float


class ResultPublic(BaseModel):
    id: str
    rank: int
    score: float
    distance: float
    metadata: dict[str, Any]
    segments: list[SegmentPublic]
    stage1_score: float | None = None
    rerank_score: float | None = None


class PartialPublic(BaseModel):
    """Present only when shards were missing and the request asked for `partial`: the results are
    those of the shards that answered."""

    missing_shards: list[int]
    shards: int
    reason: str


class SearchResponse(BaseModel):
    results: list[ResultPublic]
    timings: dict[str, float]
    mode: str
    collection: str
    partial: PartialPublic | None = None
