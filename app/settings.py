"""Service configuration: one Settings object, read from RECALL_* environment variables.

Nested groups use ``__``: ``RECALL_BATCHING__MAX_BATCH_SIZE=64``. Nothing reads the environment
at import time; ``create_app(settings=None)`` builds Settings when it is called.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


class BatchingSettings(BaseModel):
    max_batch_size: int = Field(
        32, ge=1, le=1024, description="Largest batch handed to an encoder; bigger batches raise throughput and latency."
    )
    max_wait_ms: float = Field(
        5.0, ge=0, le=1000, description="How long the first request of a batch waits for company; 0 disables waiting."
    )
    max_queue: int = Field(
        1024, ge=1, description="Requests waiting per encoder before new ones get 429; a low limit refuses clients instead of letting them wait too long."
    )
    query_lane: bool = Field(
        True, description="Run query batches on a thread of their own, beside the ingest batch in flight, instead of "
        "after it; ingest model work keeps to one thread while queries keep coming (app/worker/batcher.py; "
        "bench/results/ingest_search_ab.json). false: one thread, queries first, ingest batches cut small while they come."
    )
    ingest_batch_while_queried: int = Field(
        0, ge=0, le=1024, description="Most ingest inputs per batch while queries keep coming (one in the last second); "
        "0: a quarter of max_batch_size with one lane (a query waits for the ingest batch in flight), all of it with "
        "query_lane."
    )
    ingest_nice: int = Field(
        0, ge=0, le=19, description="With query_lane, how much lower the ingest thread's CPU priority is than the "
        "service's (Linux thread niceness, added once when the thread starts): a query batch beside an ingest batch "
        "then gets the core first. 0: the same priority."
    )


class IndexSettings(BaseModel):
    shards: int = Field(
        2, ge=1, le=64, description="Index shards searched in parallel threads; one per core saturates memory bandwidth."
    )
    snapshot_every: int = Field(
        2000, ge=1, description="Write an index snapshot after this many applied changes; fewer means faster restarts, more I/O."
    )
    oversample: int = Field(10, ge=1, le=1000, description="Default two-stage shortlist size as a multiple of k.")
    auto_ivf_windows: int = Field(
        1_000_000, ge=0, le=10**12,
        description="A collection of index kind 'auto' (the default) trains an IVF over its binary codes in the "
        "background once it holds this many windows, and answers from it once trained; the exact flat index answers "
        "until then. 0: never. At 10^6 256-bit codes one query's flat scan takes ~1.3 ms, the IVF's ~0.17 ms at "
        "recall@10 0.99 against flat (bench/results/index_kinds.json); training it takes minutes, in the background.",
    )


class EncoderSettings(BaseModel):
    default_audio: str = Field(
        "general-audio-commercial",
        description="Encoder for new audio collections when none is named: speech in any language and everyday sounds, "
        "trained on commercially usable data only; `general-audio` (ESC-50, non-commercial) finds unseen sound classes "
        "better (reports/audio/generalisation.md, README 'Data and licences').",
    )
    default_image: str = Field("image-text-minilm", description="Encoder for new image collections when none is named.")
    preload: list[str] = Field(default_factory=list, description="Encoders loaded at startup besides those collections use.")
    extra_dirs: list[str] = Field(default_factory=list, description="Directories with extra trained checkpoints.")
    onnx_dir: str | None = Field(
        None,
        description="Folder of bring-your-own encoders: each subfolder holds an ONNX model (audio embedder, or CLIP-style "
        "image + text towers) with a manifest.json (README, 'Bring your own encoder'); loaded at start, checked with "
        "`recall encoders check DIR`. A broken subfolder is reported, never fatal.",
    )
    posthoc_fit_vectors: int = Field(
        10_000, ge=8, le=1_000_000,
        description="A collection of an ONNX encoder (no trained hash head) fits its binary codes (PCA + ITQ) on at "
        "most this many vectors of its first ingest; `recall reembed` refits.",
    )
    text_query_precision: Literal["int8_block32", "int8_block64", "int8_token", "half", "int8", "float32"] = Field(
        "int8_block32",
        description="How image-text encoders embed text queries on CPU. Through onnxruntime: int8_block32 (the "
        "default: every MiniLM product one fused 8-bit operator, weights and each token's input rounded per block "
        "of 32 values; it met issue 35's quality rule on the dev sets), int8_block64 (blocks of 64: ~0.5 ms faster "
        "a query, but it missed the rule against half by one held-out photo caption), int8_token (each token's "
        "input rounded on its own grid, query/key/value products in float32: the default before), float32 (the "
        "library's vectors to ~1e-6), int8 (inputs rounded per tensor: it missed the rule). Or half: MiniLM's "
        "products with half-precision weights in torch. README, Numbers.",
    )
    audio_frontend_precision: Literal["float32", "int8"] = Field(
        "float32",
        description="How audio encoders on Google's speech_embedding (general-audio and its variants) run its "
        "convolutions on CPU: float32, or int8 (8-bit integer products: ~2x faster for a 1 s query window, ~3x per "
        "window when ingesting; MAP within 0.004 on the generalisation sets but top-10 overlap 0.82-0.89, under issue "
        "35's 0.90, so opt-in: README, Numbers). CUDA always runs float32.",
    )

    def all_dirs(self) -> list[str]:
        """Every root the registry scans: extra checkpoint directories, then the ONNX folder."""
        return [*self.extra_dirs, *([self.onnx_dir] if self.onnx_dir else [])]


class LimitSettings(BaseModel):
    max_upload_bytes: int = Field(50 * 1024 * 1024, ge=1, description="Largest accepted request body; larger gets 413.")
    max_audio_seconds: float = Field(3600.0, gt=0, description="Longest audio file accepted for ingest.")
    max_query_seconds: float = Field(60.0, gt=0, description="Longest audio accepted as a query.")
    min_audio_seconds: float = Field(0.1, ge=0, description="Shorter audio is refused: too little signal to embed.")
    max_image_pixels: int = Field(40_000_000, ge=1, description="Images with more pixels are refused (decompression bombs).")
    max_k: int = Field(1000, ge=1, description="Largest k a search may ask for.")
    sync_ingest_files: int = Field(
        16, ge=1, description="Batches with more files answer 202 with a job id instead of waiting."
    )
    max_files: int = Field(1000, ge=1, description="Most files (multipart parts or JSON items) in one ingest request; more gets 422.")
    max_text_chars: int = Field(2000, ge=1, description="Longest text query, in characters; longer gets 422.")
    max_page_size: int = Field(1000, ge=1, description="Largest `limit` when listing items; larger gets 422.")
    max_pending_jobs: int = Field(
        64, ge=1, description="Ingest jobs accepted by this process and not finished yet; one more gets 429 with Retry-After."
    )
    rate_per_s: float = Field(
        500.0, ge=0,
        description="Requests per second each API key (or client address, with keys off) may make to /v1 routes, "
        "refilled continuously; over it a request gets 429 with Retry-After. 0 turns the limit off.",
    )
    rate_burst: int = Field(1000, ge=1, description="Requests a client may make at once before rate_per_s applies.")


class ClusterSettings(BaseModel):
    shard_cpus: float = Field(
        0.25, ge=0, description="CPUs Ray reserves per index shard actor (placement only; a shard scans with index.shards threads)."
    )
    embed_workers: int = Field(
        0, ge=0, le=256,
        description="With ray_address: Ray actors that run encoders for ingest (0 keeps encoding in the API process). "
        "Each takes one GPU when the Ray cluster has GPUs, else embed_cpus CPUs.",
    )
    embed_cpus: float = Field(1.0, gt=0, description="CPUs Ray reserves per embedding worker on a cluster without GPUs.")
    shard_timeout_s: float = Field(
        10.0, gt=0,
        description="How long one search waits for an index shard actor (which first replays the catalog up to "
        "the latest write) before counting it missing: 503, or a marked partial result on request.",
    )
    shard_snapshot_s: float = Field(
        30.0, ge=0,
        description="How often an index shard actor writes a snapshot of its partition when it has changed (0: never). "
        "A restarted shard loads it and replays only the catalog's writes since, instead of its whole partition.",
    )
    shard_snapshot_dir: Path | None = Field(
        None,
        description="Where shard actors keep their snapshots, on the Ray node they run on (one sub-folder per shard); "
        "unset: recall-shards under the node's temporary folder. A persistent or shared volume keeps them across "
        "node restarts; a shard started where its snapshot is not rebuilds from the catalog.",
    )
    tombstone_retention_s: float = Field(
        3600.0, gt=0,
        description="Cluster mode keeps deletion records this long for replicas to replay; a replica (API process "
        "or shard actor) further behind rebuilds its index from the catalog instead.",
    )
    job_lease_s: float = Field(
        20.0, gt=0,
        description="An ingest job's runner renews its claim this often (x4); a job whose runner stayed silent this "
        "long (its process died) is taken over by another API process sharing the catalog.",
    )
    ray_auth_token_file: Path | None = Field(
        None,
        description="With ray_address: file holding the Ray head's authentication token (the head's "
        "RAY_AUTH_TOKEN_PATH, else ~/.ray/auth_token where it was started). A head finding a token starts with "
        "token authentication on, and a process joining it by address sends none unless told: set this (or "
        "ray_auth_token) on every API process. Unset, both: Ray's own RAY_AUTH_MODE/RAY_AUTH_TOKEN* apply.",
    )
    ray_auth_token: SecretStr | None = Field(
        None, description="With ray_address: the Ray head's authentication token itself (prefer ray_auth_token_file).",
    )
    node_ip: str | None = Field(
        None,
        description="With ray_address: this machine's Ray node address, the --node-ip-address its Ray node (the head "
        "on one machine) was started with; unset, Ray picks the address of the default route. A loopback address "
        "(127.0.0.1) keeps Ray on loopback (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0; start the head with it too).",
    )

    @model_validator(mode="after")
    def _one_token_source(self) -> "ClusterSettings":
        if self.ray_auth_token is not None and self.ray_auth_token_file is not None:
            raise ValueError("set RECALL_CLUSTER__RAY_AUTH_TOKEN_FILE or RECALL_CLUSTER__RAY_AUTH_TOKEN, not both")
        return self


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RECALL_", env_nested_delimiter="__", extra="ignore")

    data_dir: Path = Field(Path("data"), description="Where the SQLite catalog, media and index snapshots live.")
    catalog_url: str | None = Field(
        None,
        description="Cluster mode: a postgresql:// URL makes PostgreSQL the catalog, shared by every API process "
        "pointing at it (media still live under data_dir: share that directory between processes). "
        "Unset: the embedded SQLite file under data_dir.",
    )
    ray_address: str | None = Field(
        None,
        description="Cluster mode: a Ray address ('auto', 'ray://head:10001', 'local' for a private local Ray) puts "
        "index shards and embedding workers on Ray actors. Unset: indices and encoders live in this process.",
    )
    index_shards: int = Field(
        2, ge=1, le=256,
        description="With ray_address: index shard actors per collection (a hash partition of the items; all "
        "windows of an item on one shard). Not the same as index.shards, the scan threads inside one index.",
    )
    host: str = Field("0.0.0.0", description="Interface uvicorn binds.")
    port: int = Field(8000, ge=1, le=65535, description="Port uvicorn binds.")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto uses CUDA when present.")
    api_keys: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=list,
        description="Plain keys, each with every scope (read, write, admin); any key here or in keys_file turns keys on "
        "for every /v1 route. Prefer keys_file: `recall keys create` stores only a hash, with the scopes you give.")
    keys_file: Path | None = Field(
        None, description="JSON file of hashed, scoped keys written by `recall keys`; default <data_dir>/keys.json. "
        "Re-read when it changes: new and revoked keys take effect without a restart.")
    torch_threads: int = Field(2, ge=1, description="torch intra-op threads; with faiss also threaded, more is slower.")
    keep_media: bool = Field(True, description="Default for new collections: keep uploaded originals.")
    demo: bool = Field(False, description="Seed a demo collection on first start when the catalog is empty.")
    log_level: str = Field("info", description="uvicorn and app log level.")
    background_start: bool = Field(
        False,
        description="Load encoders and indices after the server starts listening: /healthz answers at once and "
        "/readyz and /v1 answer 503 until loading ends. `recall serve` turns it on; in-process users get a ready app.",
    )
    batching: BatchingSettings = Field(default_factory=BatchingSettings)
    index: IndexSettings = Field(default_factory=IndexSettings)
    encoders: EncoderSettings = Field(default_factory=EncoderSettings)
    cluster: ClusterSettings = Field(default_factory=ClusterSettings)
    limits: LimitSettings = Field(default_factory=LimitSettings)

    @field_validator("api_keys", mode="before")
    @classmethod
    def _split_keys(cls, value: object) -> object:
        # RECALL_API_KEYS=a,b is friendlier than a JSON list in a compose file
        if isinstance(value, str):
            return [k.strip() for k in value.split(",") if k.strip()]
        return value

    def resolved_keys_file(self) -> Path:
        return self.keys_file if self.keys_file is not None else self.data_dir / "keys.json"

    def resolved_device(self) -> str:
        if self.device != "auto":
            return self.device
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
