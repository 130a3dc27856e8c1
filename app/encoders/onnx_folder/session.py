"""onnxruntime sessions for a folder's models, and the checks that their inputs fit the manifest.

A session is created with no custom-op library registered unless the folder's manifest names one
(:mod:`app.encoders.onnx_folder.custom_ops`), so a model that needs an operator outside
onnxruntime's own domains is refused with the operator named instead of running code the service
did not ship. CUDA is used where onnxruntime has its provider and the
service runs on a GPU; otherwise the CPU provider.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.encoders.onnx_folder import custom_ops
from app.encoders.onnx_folder.manifest import FolderError, Manifest, Part


def providers(device: str) -> list[str]:
    import onnxruntime as ort

    available = ort.get_available_providers()
    if device.startswith("cuda") and "CUDAExecutionProvider" in available:
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]
    return ["CPUExecutionProvider"]


def open_session(manifest: Manifest, section: str, device: str, threads: int) -> Any:
    """An InferenceSession of the part's model; FolderError when onnxruntime cannot load it."""
    import onnxruntime as ort

    part = manifest.parts[section]
    path = manifest.folder / part.model
    options = ort.SessionOptions()
    options.intra_op_num_threads = max(1, threads)
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # onnxruntime's own warnings would repeat what FolderError says
    # idle intra-op threads sleep instead of spinning: on a small machine a spinning pool takes the core the
    # event loop needs to parse and decode the next requests (the built-in encoders keep queries on one thread)
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    custom_ops.register(manifest, section, options)  # only a library the manifest names, for the domains it names
    try:
        return ort.InferenceSession(str(path), sess_options=options, providers=providers(device))
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises several classes; each becomes one message
        text = str(exc)
        refusal = custom_ops.explain(manifest, section, text)
        if refusal is not None:
            raise refusal from exc
        raise FolderError(manifest.folder, "onnx_load",
                          f"{part.model} is not a model onnxruntime can load: {custom_ops.first_line(text)}") from exc


def input_of(manifest: Manifest, session: Any, section: str, *, optional: tuple[str, ...] = ()) -> Any:
    """The input the manifest names (or the model's only one); every other input must be in ``optional``."""
    part: Part = manifest.parts[section]
    inputs = {node.name: node for node in session.get_inputs()}
    name = part.input_name or next(iter(inputs))
    if name not in inputs:
        raise FolderError(manifest.folder, "input_name",
                          f"'{section}.input_name' is {name!r}, but {part.model} has inputs {sorted(inputs)}")
    extra = sorted(set(inputs) - {name} - set(optional))
    if extra:
        raise FolderError(manifest.folder, "input_name",
                          f"{part.model} needs inputs {extra} besides {name!r}, which this family does not feed")
    return inputs[name]


def output_of(manifest: Manifest, session: Any, section: str) -> Any:
    part: Part = manifest.parts[section]
    outputs = {node.name: node for node in session.get_outputs()}
    name = part.output_name or session.get_outputs()[0].name
    if name not in outputs:
        raise FolderError(manifest.folder, "output_name",
                          f"'{section}.output_name' is {name!r}, but {part.model} has outputs {sorted(outputs)}")
    return outputs[name]


def static_dims(node: Any) -> list[int | None]:
    """The node's shape with symbolic (dynamic) dimensions as None."""
    return [dim if isinstance(dim, int) and dim > 0 else None for dim in node.shape]


def check_output_width(manifest: Manifest, section: str, node: Any) -> None:
    """A model whose declared output width differs from the manifest's ``dim`` is refused before it runs."""
    dims = static_dims(node)
    if len(dims) != 2:
        raise FolderError(manifest.folder, "shape",
                          f"{manifest.parts[section].model} output {node.name!r} has shape {node.shape}; "
                          "one vector per input, (batch, dim), is expected")
    if dims[1] is not None and dims[1] != manifest.dim:
        raise FolderError(manifest.folder, "shape",
                          f"{manifest.parts[section].model} outputs {dims[1]} dimensions, the manifest's 'dim' is {manifest.dim}")


def model_path(manifest: Manifest, section: str) -> Path:
    return manifest.folder / manifest.parts[section].model
