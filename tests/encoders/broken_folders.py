"""Kinds of broken encoder folder, each made from a good one by one change, with the problem it must report.

Shared by the loader's tests (tests/encoders/test_onnx_folder.py), the command line's and the
running service's (tests/api/test_onnx_encoders.py): every kind gives one clear message naming
the folder, with ``details.problem`` equal to the kind listed here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from tests.encoders.onnx_models import audio_folder, clip_folder, write_manifest


def _manifest(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text())


def _rewrite(folder: Path, change: Callable[[dict], None]) -> None:
    """Change the manifest and recompute every checksum (so only the change is wrong)."""
    manifest = _manifest(folder)
    change(manifest)
    manifest.pop("files", None)
    write_manifest(folder, manifest)


def _custom_op_model(path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    node = helper.make_node("MagicEmbed", ["waveform"], ["embedding"], domain="com.example")
    graph = helper.make_graph([node], "custom", [helper.make_tensor_value_info("waveform", TensorProto.FLOAT, ["batch", 2000])],
                              [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", 16])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    onnx.save(model, str(path))


def no_manifest(folder: Path) -> None:
    (folder / "manifest.json").unlink()


def manifest_json(folder: Path) -> None:
    (folder / "manifest.json").write_text('{"format": "recall-encoder/1", "name": ')


def manifest_field(folder: Path) -> None:
    _rewrite(folder, lambda m: m.pop("dim"))


def unknown_family(folder: Path) -> None:
    _rewrite(folder, lambda m: m.update(family="onnx-video"))


def missing_file(folder: Path) -> None:
    (folder / "audio.onnx").unlink()


def checksum(folder: Path) -> None:
    with (folder / "audio.onnx").open("ab") as handle:
        handle.write(b"\0")


def unlisted_file(folder: Path) -> None:
    manifest = _manifest(folder)
    manifest["audio"]["model"] = "other.onnx"
    (folder / "manifest.json").write_text(json.dumps(manifest))


def pickle_weights(folder: Path) -> None:
    (folder / "audio.onnx").rename(folder / "audio.pt")
    _rewrite(folder, lambda m: m["audio"].update(model="audio.pt"))


def onnx_load(folder: Path) -> None:
    (folder / "audio.onnx").write_bytes(b"this is not an onnx protobuf at all" * 10)
    _rewrite(folder, lambda m: None)


def custom_op(folder: Path) -> None:
    _custom_op_model(folder / "audio.onnx")
    _rewrite(folder, lambda m: None)


def input_name(folder: Path) -> None:
    _rewrite(folder, lambda m: m["audio"].update(input_name="samples"))


def output_name(folder: Path) -> None:
    _rewrite(folder, lambda m: m["audio"].update(output_name="logits"))


def wrong_dim(folder: Path) -> None:
    _rewrite(folder, lambda m: m.update(dim=32, bits=32))


def wrong_window(folder: Path) -> None:
    _rewrite(folder, lambda m: m["audio"].update(window_s=0.5, hop_s=0.25))


def wrong_image_size(folder: Path) -> None:
    _rewrite(folder, lambda m: m["image"].update(size=64))


def bad_tokenizer(folder: Path) -> None:
    (folder / "tokenizer.json").write_text('{"version": "1.0", "model": {"type": "NoSuchModel"}}')
    _rewrite(folder, lambda m: None)


def path_escape(folder: Path) -> None:
    manifest = _manifest(folder)
    manifest["files"]["../audio.onnx"] = manifest["files"].pop("audio.onnx")
    manifest["audio"]["model"] = "../audio.onnx"
    (folder / "manifest.json").write_text(json.dumps(manifest))


# kind -> (which good folder it starts from, the change, the problem reported)
BROKEN: dict[str, tuple[str, Callable[[Path], None], str]] = {
    "no_manifest": ("audio", no_manifest, "no_manifest"),
    "manifest_json": ("audio", manifest_json, "manifest_json"),
    "manifest_field": ("audio", manifest_field, "manifest_field"),
    "unknown_family": ("audio", unknown_family, "unknown_family"),
    "missing_file": ("audio", missing_file, "missing_file"),
    "checksum": ("audio", checksum, "checksum"),
    "unlisted_file": ("audio", unlisted_file, "unlisted_file"),
    "pickle_weights": ("audio", pickle_weights, "pickle"),
    "onnx_load": ("audio", onnx_load, "onnx_load"),
    "custom_op": ("audio", custom_op, "custom_op"),
    "input_name": ("audio", input_name, "input_name"),
    "output_name": ("audio", output_name, "output_name"),
    "wrong_dim": ("audio", wrong_dim, "shape"),
    "wrong_window": ("audio", wrong_window, "shape"),
    "wrong_image_size": ("clip", wrong_image_size, "shape"),
    "bad_tokenizer": ("clip", bad_tokenizer, "tokenizer"),
    "path_escape": ("audio", path_escape, "manifest_field"),
}


def make_broken(root: Path, kind: str) -> Path:
    """A folder ``root/broken-<kind>`` with that one problem; its manifest names it ``broken-<kind>``."""
    start, change, _ = BROKEN[kind]
    folder = root / f"broken-{kind.replace('_', '-')}"
    if start == "audio":
        audio_folder(folder, name=folder.name)
    else:
        clip_folder(folder, name=folder.name)
    change(folder)
    return folder
