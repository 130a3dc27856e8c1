"""speech_embedding's convolutions kept in onnxruntime's blocked channel layout (NCHWc) from first to last.

Why: onnxruntime runs every convolution of the stack in its blocked layout, with the leaky ReLU fused in,
but each convolution's second activation, ``max(x, -0.4)`` (a Clip), has no blocked kernel, so its
optimiser turns every convolution's output back into plain layout for the Clip and forward again for the
next convolution: 38 reorders, ~0.2 ms of a 1 s query's ~2.4 ms stack on one core. A Clip is elementwise,
so on the blocked tensor it computes the same numbers. This module takes the optimiser's own graph,
removes the reorder pair around each Clip (a plain MaxPool between a Clip and its reorder moves into the
blocked domain, where the optimiser puts the other pools), and keeps the result only if it answers bit
for bit as the optimiser's graph on check inputs; otherwise the caller keeps the plain session.

The optimised graph is specific to this CPU (the block size is 8 channels with AVX2, 16 with AVX-512), so
it is made at run time, once per session, never shipped. The edit reads and writes the serialised
protobuf directly (a few fields of ModelProto, GraphProto and NodeProto; everything else is copied byte
for byte), because the service does not install the onnx package.
"""

from __future__ import annotations

import logging
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from app.features.pretrained.onnx_wire import fields, length_delimited

log = logging.getLogger(__name__)

NCHWC = "com.microsoft.nchwc"
MODEL_GRAPH, GRAPH_NODE = 7, 1  # ModelProto.graph, GraphProto.node
NODE_INPUT, NODE_OUTPUT, NODE_OP, NODE_DOMAIN = 1, 2, 4, 7  # NodeProto fields


@dataclass
class Node:
    """A NodeProto's op, domain, inputs and outputs; its other fields (name, attributes) stay raw bytes."""

    op: str
    domain: str
    inputs: list[str]
    outputs: list[str]
    rest: list[bytes] = field(default_factory=list)

    @classmethod
    def parse(cls, data: bytes) -> "Node":
        node = cls("", "", [], [])
        for number, _, raw, payload in fields(data):
            if number == NODE_INPUT:
                node.inputs.append(payload.decode())
            elif number == NODE_OUTPUT:
                node.outputs.append(payload.decode())
            elif number == NODE_OP:
                node.op = payload.decode()
            elif number == NODE_DOMAIN:
                node.domain = payload.decode()
            else:
                node.rest.append(raw)
        return node

    def encode(self) -> bytes:
        parts = [length_delimited(NODE_INPUT, name.encode()) for name in self.inputs]
        parts += [length_delimited(NODE_OUTPUT, name.encode()) for name in self.outputs]
        parts.append(length_delimited(NODE_OP, self.op.encode()))
        if self.domain:
            parts.append(length_delimited(NODE_DOMAIN, self.domain.encode()))
        return b"".join(parts + self.rest)


def _graph_nodes(model: bytes) -> list[Node]:
    graph = next(payload for number, _, _, payload in fields(model) if number == MODEL_GRAPH)
    return [Node.parse(payload) for number, _, _, payload in fields(graph) if number == GRAPH_NODE]


def _with_nodes(model: bytes, nodes: list[Node]) -> bytes:
    """``model`` with its graph's node list replaced (every other field kept as it was)."""
    out = []
    for number, _, raw, payload in fields(model):
        if number == MODEL_GRAPH:
            others = [raw_g for n, _, raw_g, _ in fields(payload) if n != GRAPH_NODE]
            raw = length_delimited(MODEL_GRAPH, b"".join([length_delimited(GRAPH_NODE, node.encode()) for node in nodes] + others))
        out.append(raw)
    return b"".join(out)


# -- the edit -----------------------------------------------------------------------------------------------

def _is(node: Node | None, op: str, domain: str) -> bool:
    return node is not None and node.op == op and node.domain == domain


def clips_kept_blocked(nodes: list[Node]) -> tuple[list[Node], int]:
    """The nodes with every ``ReorderOutput -> Clip -> [MaxPool ->] ReorderInput`` run on the blocked tensor,
    and how many Clips were moved. Node order stays topological: nodes are only removed or rewired."""
    producer = {name: node for node in nodes for name in node.outputs}
    consumers: dict[str, list[Node]] = defaultdict(list)
    for node in nodes:
        for name in node.inputs:
            consumers[name].append(node)
    dropped: set[int] = set()
    moved = 0
    for clip in nodes:
        before = producer.get(clip.inputs[0]) if clip.inputs else None
        if not _is(clip, "Clip", "") or not _is(before, "ReorderOutput", NCHWC) or len(consumers[before.outputs[0]]) != 1:
            continue
        after = consumers[clip.outputs[0]]
        if len(after) != 1:
            continue
        if _is(after[0], "ReorderInput", NCHWC):
            clip.inputs[0], clip.outputs[0] = before.inputs[0], after[0].outputs[0]
            dropped |= {id(before), id(after[0])}
        elif _is(after[0], "MaxPool", "") and len(consumers[after[0].outputs[0]]) == 1 \
                and _is(consumers[after[0].outputs[0]][0], "ReorderInput", NCHWC):
            pool, reorder = after[0], consumers[after[0].outputs[0]][0]
            clip.inputs[0] = before.inputs[0]
            pool.domain, pool.outputs[0] = NCHWC, reorder.outputs[0]
            dropped |= {id(before), id(reorder)}
        else:
            continue
        moved += 1
    return [node for node in nodes if id(node) not in dropped], moved


def optimised_graph(path: Path, make_options: Callable[[], Any]) -> bytes:
    """The graph as onnxruntime's optimiser leaves it on this CPU (all levels, the blocked layout included)."""
    import onnxruntime

    with tempfile.TemporaryDirectory(prefix="recall-ort-") as folder:
        options = make_options()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.optimized_model_filepath = str(Path(folder) / "optimised.onnx")
        onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        return Path(options.optimized_model_filepath).read_bytes()


def check_inputs(n_mels: int = 32) -> list[np.ndarray]:
    """Fixed mel batches of several sizes and lengths (a 1.4 s window is 137 frames) in the range the
    stack sees (``mel / 10 + 2``), on which the edited graph must answer bit for bit as the optimiser's."""
    rng = np.random.default_rng(0)
    return [(6.0 + 3.0 * rng.standard_normal((batch, frames, n_mels))).astype(np.float32)
            for batch, frames in ((1, 137), (2, 137), (3, 76), (1, 201))]


def differs(session: Any, reference: Any, input_name: str = "mel") -> str:
    """Why ``session`` does not answer bit for bit as ``reference`` on :func:`check_inputs`, or "" where it does."""
    for mel in check_inputs():
        feed = {input_name: mel}
        if not np.array_equal(session.run(None, feed)[0], reference.run(None, feed)[0]):
            return f"differs from the reference on a batch of {mel.shape}"
    return ""


def blocked_session(path: Path, make_options: Callable[[], Any], reference: Any, input_name: str = "mel") -> Any | None:
    """A session of ``path`` whose Clips run on blocked tensors, or None where there is nothing to move or
    the edited graph does not answer exactly as ``reference`` (a session of ``path`` at the default level)."""
    import onnxruntime

    try:
        model = optimised_graph(path, make_options)
        nodes, moved = clips_kept_blocked(_graph_nodes(model))
        if not moved:
            return None
        options = make_options()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL  # optimised already
        session = onnxruntime.InferenceSession(_with_nodes(model, nodes), options, providers=["CPUExecutionProvider"])
        if problem := differs(session, reference, input_name):
            raise ValueError(f"the edited graph {problem}")
    except Exception as exc:  # noqa: BLE001 - any failure keeps the optimiser's own graph, which is always right
        log.warning("%s: keeping onnxruntime's graph, the blocked Clips were not exact: %s", path.name, exc)
        return None
    return session
