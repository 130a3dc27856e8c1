"""Custom operators: refused unless the manifest names them, and then only from the library it names.

A model that uses an operator outside onnxruntime's own domains needs native code to run it: a
shared library with onnxruntime's ``RegisterCustomOps`` entry point. Such a library runs inside the
service with its rights, so it is loaded only when the folder's manifest names it, with the domains
it provides::

    "custom_ops": {"library": "libmyops.so", "domains": ["com.example"]}

The library must be listed in ``files`` (its sha256 is checked before anything is loaded, like every
file's), and the model may import no operator domain beyond onnxruntime's own and the named ones
(read from the model's ``opset_import`` before the library is registered). Without ``custom_ops`` no
library is ever registered, and a model that needs one is refused with the operator and domain named.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from app.encoders.onnx_folder.manifest import FolderError, Manifest
from app.features.pretrained.onnx_wire import LENGTH_DELIMITED, fields, string_field

# onnxruntime's own operator domains (ONNX, ONNX-ML, its contrib ops and the training/preview ones)
BUILT_IN_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "com.microsoft", "com.microsoft.nchwc", "ai.onnx.training",
                              "ai.onnx.preview.training", "com.microsoft.experimental", "com.ms.internal.nhwc"})
_UNREGISTERED = re.compile(r"([\w.\-]*):([\w.\-]+)\(-?\d+\) is not a registered function/op")


def register(manifest: Manifest, section: str, options: Any) -> None:
    """Register the manifest's custom-op library on ``options`` after checking the model imports no other domain."""
    custom = manifest.custom_ops
    if custom is None:
        return
    model = manifest.parts[section].model
    foreign = sorted(set(opset_domains(manifest.folder / model)) - BUILT_IN_DOMAINS - set(custom.domains))
    if foreign:
        raise FolderError(manifest.folder, "custom_op",
                          f"{model} imports operator domain(s) {foreign}, which neither onnxruntime has nor 'custom_ops.domains' "
                          f"({list(custom.domains)}) names")
    try:
        options.register_custom_ops_library(str(manifest.folder / custom.library))
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own classes
        raise FolderError(manifest.folder, "custom_op_library",
                          f"{custom.library} is not an onnxruntime custom-op library this machine can load: {first_line(str(exc))}") from exc


def explain(manifest: Manifest, section: str, error: str) -> FolderError | None:
    """The clear refusal for onnxruntime's load error when it is about an operator it does not have; else None."""
    model = manifest.parts[section].model
    error = error.replace(str(manifest.folder / model), model)  # the folder's own name must not match below
    found = _UNREGISTERED.search(error)
    if found is None and not any(word in error.lower() for word in ("custom op", "domain")):
        return None
    op = f"operator {found.group(2)} of domain {found.group(1)!r}" if found else "an operator onnxruntime does not have"
    custom = manifest.custom_ops
    if custom is None:
        return FolderError(manifest.folder, "custom_op",
                           f"{model} uses {op}, which onnxruntime does not have; custom ops are not supported unless the "
                           "manifest names the library that provides them ('custom_ops': {'library', 'domains'}, README "
                           "'Bring your own encoder'); or export the model with standard ONNX operators")
    return FolderError(manifest.folder, "custom_op",
                       f"{model} uses {op}, which the manifest's custom-op library {custom.library} does not provide "
                       f"(it names domains {list(custom.domains)})")


def opset_domains(path: Path) -> list[str]:
    """The operator domains a model file imports (ModelProto.opset_import), read from the protobuf wire format
    so that no ``onnx`` package is needed at run time; [] for a file that is not a readable model (onnxruntime
    then says why)."""
    try:  # OperatorSetIdProto is ModelProto's field 8; its domain is field 1 (absent: the ONNX domain "")
        return [string_field(payload, 1) for number, wire, _, payload in fields(path.read_bytes())
                if number == 8 and wire == LENGTH_DELIMITED]
    except (IndexError, ValueError):  # truncated, a wire type no model has, or not UTF-8
        return []


def first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else text
    return line[:300]
