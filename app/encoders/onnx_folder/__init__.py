"""Bring-your-own encoders: ONNX models in a local folder, described by a ``manifest.json``.

A folder holds the manifest (family, modality, input spec, dimension, licence, source, the sha256 of
every file) beside its ONNX files and, for text-to-image, a ``tokenizer.json``. Nothing in such a
folder is ever unpickled: the manifest is JSON, the models are ONNX protobufs run by onnxruntime with
no custom-op library registered, and the tokenizer is read by the ``tokenizers`` package.

- :mod:`.manifest`: reading and validating the manifest, checksums (``FolderError`` for every problem);
- :mod:`.session`: onnxruntime sessions (CUDA provider when present) and their input/output checks;
- :mod:`.audio`, :mod:`.clip`: the two families (audio embedder; CLIP-style image + text towers);
- :mod:`.itq`: post-hoc binary codes (PCA + ITQ) for encoders that have no trained hash head;
- :mod:`.discovery`: registry specs for every folder under a root;
- :mod:`.check`: the full check behind ``recall encoders check DIR``.
"""
