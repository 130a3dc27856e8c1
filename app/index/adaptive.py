"""A collection's binary codes: the exact flat index, plus an IVF once its kind asks for one.

The flat :class:`BinaryIndex` always holds every code: it is what snapshots, id checks against the
catalog, ``reconstruct`` and deep scans read, and it answers while an IVF trains. The IVF
(:class:`BinaryIVF`) is a second, sublinear search structure over the same codes, built from the
codes the flat index holds (which equal the catalog's at the applied sequence) on a background
thread and swapped in atomically:

1. under the write mutex, copy the flat index's ids and codes and start a log of later writes;
2. train and fill the IVF with no lock held (searches and writes go on against flat);
3. under the write mutex, replay the logged writes into the IVF and publish it.

Every write after step 3 goes to both structures under the same mutex, so an id removed from
the flat index is removed from the IVF before ``remove`` returns: no deleted id is ever returned
once its delete is acknowledged. Keeping the flat codes beside the IVF costs a second copy of the
codes (32 bytes per 256-bit window); it buys exact search on request, recall measured against
flat, and an IVF that is only ever a cache.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable

import faiss
import numpy as np

from app.index.base import SnapshotError
from app.index.binary_index import BinaryIndex
from app.index.ivf import BinaryIVF
from app.index.kinds import RETRAIN_GROWTH, IndexSpec, auto_nlist
from app.index.quality.live_recall import K as RECALL_K
from app.index.quality.live_recall import LiveRecall

log = logging.getLogger(__name__)

# Past this k per probed code the IVF would scan most lists anyway: a deep round (the pipeline
# widens its scan x4 until it finds k items) goes to the exact flat scan instead, which also never
# comes back short. 2 means: flat when the probed lists are expected to hold fewer than 2k codes.
_DEPTH_MARGIN = 2
# The background build runs at this niceness (its OpenMP threads inherit it), so that training
# yields the cores to queries.
BUILD_NICENESS = 10
# ... and with FAISS (and its OpenMP BLAS, as k-means uses it) on this many threads: one leaves the other core to
# queries, and on a busy machine 2 OpenMP threads were slower, not faster (bench/index/scale.py: the flat coarse
# quantizer assigned 2,800 codes per CPU-second with 2 threads, spent at barriers waiting out other jobs' time
# slices, against 215,000 with one). The setting is per OS thread: searches on other threads keep theirs.
BUILD_THREADS = 1


def ivf_path(path: str | os.PathLike[str]) -> Path:
    """The IVF snapshot beside a flat snapshot."""
    path = Path(path)
    return path.with_name(path.name + ".ivf")


class AdaptiveBinaryIndex:
    """Flat Hamming index with an optional IVF that answers searches once trained.

    Args:
        bits: code length (a positive multiple of 8).
        shards: scan threads of the flat index.
        spec: the collection's index kind and parameters.
        auto_windows: for kind "auto", the count at which the IVF is built (0: never).
    """

    def __init__(self, bits: int, shards: int = 2, spec: IndexSpec | None = None, auto_windows: int = 0) -> None:
        self.flat = BinaryIndex(bits, shards=shards)
        self.bits, self.code_bytes = bits, bits // 8
        self.spec = spec or IndexSpec()
        self.auto_windows = int(auto_windows)
        self.ivf: BinaryIVF | None = None
        self._mutex = threading.Lock()  # writes, the build log and publishing the IVF
        self._log: list[tuple[str, np.ndarray, np.ndarray | None]] | None = None
        self._builder: threading.Thread | None = None
        self._failed_at = 0  # size at which the last build failed (retried only after growth)
        self.last_build_s: float | None = None
        self.last_error: str | None = None
        # called (on the build thread) once a new IVF answers: its owner marks a snapshot as due, so that
        # a restart loads the IVF instead of training it again
        self.on_published: Callable[[], None] | None = None
        # recall@10 of the IVF on a sample of the searches it answers, measured in the background (stats)
        self.live_recall = LiveRecall()

    # --- the VectorIndex interface ---------------------------------------------------------

    def add(self, ids: Any, codes: Any) -> None:
        with self._mutex:
            self.flat.add(ids, codes)  # validates and refuses duplicates before anything changes
            ids, codes = np.asarray(ids, dtype=np.int64), np.ascontiguousarray(codes)
            if self.ivf is not None:
                self.ivf.add(ids, codes)
            if self._log is not None:
                self._log.append(("add", ids.copy(), codes.copy()))

    def remove(self, ids: Any) -> int:
        with self._mutex:
            ids = np.asarray(ids, dtype=np.int64).ravel()
            # only ids known present go on: an IVF removal scans the ids of every list
            present = self.flat.reconstruct_present(ids)[0] if self.ivf is not None or self._log is not None else ids
            removed = self.flat.remove(ids)
            if len(present):
                if self.ivf is not None:
                    self.ivf.remove(present)
                if self._log is not None:
                    self._log.append(("remove", present.copy(), None))
            return removed

    def search(self, queries: Any, k: int, nprobe: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """k nearest codes by Hamming distance: from the IVF when it answers, else exact."""
        distances, labels, by_ivf = self._search(queries, k, nprobe)
        if by_ivf and self.live_recall.offer(np.asarray(queries), nprobe):
            self.live_recall.start(self._recall_answer, self._exact_on_this_thread, self._present)
        return distances, labels

    def measure_recall(self) -> dict[str, Any] | None:
        """Measure the live-recall sample now, on the calling thread (tests; the service measures in the background)."""
        if self.answering != "ivf":
            return None
        return self.live_recall.measure(self._recall_answer, self._exact_on_this_thread, self._present)

    def _recall_answer(self, queries: np.ndarray, k: int, nprobe: int | None) -> tuple[np.ndarray, np.ndarray]:
        distances, labels, _ = self._search(queries, k, nprobe)  # as a search sees it, but not sampled again
        return distances, labels

    def _exact_on_this_thread(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        return self.flat.search(queries, k, use_pool=False)

    def _present(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.flat.reconstruct_present(np.unique(ids))

    def _search(self, queries: Any, k: int, nprobe: int | None) -> tuple[np.ndarray, np.ndarray, bool]:
        ivf = self.ivf  # one read of the reference: a swap never changes a search midway
        if ivf is None or self.spec.kind == "flat" or self._too_deep(ivf, k, nprobe):
            return (*self.flat.search(queries, k), False)
        distances, labels = ivf.search(queries, k, nprobe)
        # probed lists may hold fewer than k codes (a skewed list, a tiny nprobe): those queries are
        # answered exactly, so results are padded only when the index has fewer than k codes
        short = (labels[:, -1] < 0) if labels.shape[1] else np.zeros(0, bool)
        if short.any() and len(ivf) > (labels[short] >= 0).sum(axis=1).min():
            distances[short], labels[short] = self.flat.search(np.ascontiguousarray(np.asarray(queries)[short]), k)
        # sampled for live recall only where the IVF can answer a top 10 (a deep round's k goes to flat anyway)
        return distances, labels, not self._too_deep(ivf, RECALL_K, nprobe)

    def _too_deep(self, ivf: BinaryIVF, k: int, nprobe: int | None) -> bool:
        probe = min(ivf.nlist, nprobe or ivf.nprobe)
        return _DEPTH_MARGIN * int(k) * ivf.nlist > len(ivf) * probe

    def scan_bytes(self, k: int, nprobe: int | None = None) -> int:
        """Bytes of codes one query reads (the pipeline scans small amounts on its own thread)."""
        ivf = self.ivf
        if ivf is None or self.spec.kind == "flat" or self._too_deep(ivf, k, nprobe):
            return len(self.flat) * self.code_bytes
        probe = min(ivf.nlist, nprobe or ivf.nprobe)
        return (len(ivf) * probe // ivf.nlist + ivf.nlist) * self.code_bytes

    def reconstruct(self, ids: Any) -> np.ndarray:
        return self.flat.reconstruct(ids)

    def reconstruct_present(self, ids: Any) -> tuple[np.ndarray, np.ndarray]:
        return self.flat.reconstruct_present(ids)

    def ids(self) -> np.ndarray:
        return self.flat.ids()

    def __len__(self) -> int:
        return len(self.flat)

    def __contains__(self, item: int) -> bool:
        return item in self.flat

    @property
    def shards(self) -> int:
        return self.flat.shards

    def memory_bytes(self) -> int:
        ivf = self.ivf
        return self.flat.memory_bytes() + (ivf.memory_bytes() if ivf is not None else 0)

    # --- which index answers -----------------------------------------------------------------

    @property
    def answering(self) -> str:
        return "ivf" if self.ivf is not None and self.spec.kind != "flat" else "flat"

    @property
    def building(self) -> bool:
        builder = self._builder
        return builder is not None and builder.is_alive()

    def describe(self) -> dict[str, Any]:
        """What GET /v1/collections/{name} shows: the kind, who answers, and the IVF's shape."""
        ivf = self.ivf
        out: dict[str, Any] = {
            "kind": self.spec.kind, "answering": self.answering, "building": self.building,
            "nlist": ivf.nlist if ivf is not None else self.spec.nlist,
            "nprobe": ivf.nprobe if ivf is not None else self.spec.nprobe,
            "trains_at": self.spec.trains_at(self.auto_windows),
            "trained_on": ivf.trained_on if ivf is not None else None,
            "last_build_s": self.last_build_s,
            # null while flat answers: its recall is 1 by definition
            "recall": self.live_recall.last if self.answering == "ivf" else None,
        }
        if self.last_error:
            out["last_error"] = self.last_error
        return out

    def wants_build(self) -> bool:
        """Whether the kind asks for an IVF (first one, or a retrain after growth) and none is being built."""
        if self.building:
            return False
        threshold = self.spec.trains_at(self.auto_windows)
        n = len(self.flat)
        if threshold is None or n < threshold or (self._failed_at and n < 2 * self._failed_at):
            return False
        ivf = self.ivf
        if ivf is None:
            return True
        return self.spec.nlist is None and n >= RETRAIN_GROWTH * max(ivf.trained_on, 1) and auto_nlist(n) > ivf.nlist

    def maybe_build(self, background: bool = True) -> bool:
        """Start a build when :meth:`wants_build`; returns whether one was started."""
        with self._mutex:
            if not self.wants_build():
                return False
            ids = self.flat.ids()
            codes = self.flat.reconstruct(ids)
            self._log = []
            if background:
                self._builder = threading.Thread(target=self._build, args=(ids, codes, True), name="ivf-build", daemon=True)
                self._builder.start()
                return True
        self._build(ids, codes, False)
        return True

    def wait_for_build(self, timeout: float | None = None) -> bool:
        """Block until a running build ends; returns False on timeout."""
        builder = self._builder
        if builder is not None:
            builder.join(timeout)
            return not builder.is_alive()
        return True

    def _build(self, ids: np.ndarray, codes: np.ndarray, background: bool) -> None:
        if background:
            try:  # per-thread niceness on Linux; the OpenMP team this thread starts inherits it
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BUILD_NICENESS)
            except (OSError, AttributeError):
                pass
        started = time.perf_counter()
        threads = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(BUILD_THREADS)
        try:
            nlist = self.spec.nlist or auto_nlist(len(ids))
            ivf = BinaryIVF.train(codes, nlist, self.spec.nprobe)
            ivf.add(ids, codes)
            del codes
            with self._mutex:
                for op, op_ids, op_codes in self._log or []:
                    if op == "add":
                        ivf.add(op_ids, op_codes)
                    else:
                        ivf.remove(op_ids)
                self._log = None
                self.ivf = ivf
                self.live_recall.last = None  # measured on the IVF this one replaces
            self.last_build_s = time.perf_counter() - started
            self.last_error = None
            if self.on_published is not None:
                self.on_published()
            log.info("IVF of %d codes (%d lists) built in %.1f s", len(ivf), ivf.nlist, self.last_build_s)
        except Exception as exc:  # noqa: BLE001 - flat keeps answering; the failure is reported in describe()
            with self._mutex:
                self._log = None
                self._failed_at = max(1, len(self.flat))
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.exception("IVF build failed; the flat index keeps answering")
            if not background:
                raise
        finally:
            faiss.omp_set_num_threads(threads)  # a build on the caller's thread leaves its setting as it was

    # --- snapshots -------------------------------------------------------------------------

    def save(self, path: str | os.PathLike[str], last_seq: int) -> None:
        """Flat snapshot as before, plus the IVF beside it with the same sequence (or no IVF file)."""
        with self._mutex:  # both files describe the same set of codes
            self.flat.save(path, last_seq)
            if self.ivf is not None:
                self.ivf.save(ivf_path(path), last_seq)
            else:
                ivf_path(path).unlink(missing_ok=True)

    @classmethod
    def load(cls, path: str | os.PathLike[str], shards: int = 2, spec: IndexSpec | None = None,
             auto_windows: int = 0) -> tuple["AdaptiveBinaryIndex", int]:
        """Read the flat snapshot (SnapshotError if unusable) and the IVF beside it when it matches.

        An IVF snapshot of another sequence or size is dropped, not trusted: the caller's
        :meth:`maybe_build` trains a new one in the background.
        """
        flat, seq = BinaryIndex.load(path, shards=shards)
        self = cls(flat.bits, shards, spec, auto_windows)
        self.flat = flat
        if self.spec.kind != "flat" and ivf_path(path).exists():
            try:
                ivf, ivf_seq = BinaryIVF.load(ivf_path(path), flat.bits)
                if ivf_seq != seq or len(ivf) != len(flat):
                    raise SnapshotError(f"IVF snapshot at sequence {ivf_seq} ({len(ivf)} codes), flat at {seq} ({len(flat)})")
                if spec is not None and spec.nprobe is not None:
                    ivf.nprobe = spec.nprobe
                self.ivf = ivf
            except SnapshotError as exc:
                log.warning("%s: %s; the IVF will be rebuilt from the flat codes", ivf_path(path), exc)
        return self, seq
