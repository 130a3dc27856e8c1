"""The package layout as a rule: imports go one way down the layers, and nothing imports in a cycle.

ARCHITECTURE.md draws the layers; this test is their definition. Every import statement counts,
including imports inside functions and under ``TYPE_CHECKING`` (a lazy or type-only import is
still a dependency a reader has to follow). A new folder or loose module under ``app/`` fails
here until it is given a layer.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("app", "recall")
# the benchmarks have no layers of their own (they sit on top of everything) but may not import in a cycle either
CYCLE_PACKAGES = (*PACKAGES, "bench")

# Top to bottom. A unit (a folder under app/, a loose module, or the `recall` client) may import
# units in the layers below its own, never above; units that share a layer are independent of
# each other.
LAYERS: list[set[str]] = [
    {"app.cli"},  # command line: serve, ingest/search through the client, train, eval
    {"app.main"},  # create_app: wires the HTTP edge to the services
    {"app.web"},  # the browser page (mounts the judgments and demo routes)
    {"app.api"},  # HTTP edge: routes, schemas, uploads, middleware, auth
    {"app.usecases"},  # ingest, query, jobs, demo seeding, judgments, the services container
    {"app.cluster", "app.training"},  # Ray shards and workers / offline training
    {"app.search"},  # candidates, grouping, ranking
    {"app.worker", "app.eval"},  # batching of model calls / metrics and evaluation (search shares its IoU)
    {"app.encoders"},  # models and checkpoints
    {"app.storage"},  # catalog and index snapshots
    {"app.index", "app.features", "app.media"},  # FAISS/Hamming indices / spectrograms, windows / decoding
    {"app.settings", "app.metrics", "app.errors"},  # configuration, Prometheus metrics, domain errors
]
# Inside app/training, the same rule one level down: each folder (or loose module) by what it trains.
TRAINING_LAYERS: list[set[str]] = [
    {"cli"},  # `recall train`: hands each subcommand to its recipe
    {"general_audio", "image_text"},  # the recipes of the shipped checkpoints
    {"audio"},  # `recall train audio`: the trainer, its data, augmentation and batches
    {"synthesis"},  # training data made here (espeak-ng speech, generated non-speech, captioned images)
    {"losses", "retrieval"},  # the papers' objectives; retrieval metrics for validation
]

# The client stands apart: it may import only the service's error classes (so `except NotFound`
# works on both sides), and only the command line imports it.
CLIENT = "recall"
CLIENT_MAY_IMPORT = {"app.errors"}
CLIENT_IMPORTED_BY = {"app.cli"}


def unit_of(module: str) -> str:
    parts = module.split(".")
    return parts[0] if parts[0] == CLIENT else ".".join(parts[:2])


def modules(packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    found = {}
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def imports(module: str, path: Path, known: dict[str, Path], *, top_level_only: bool = False) -> set[str]:
    """Modules of this project that ``module`` imports (``from a import b`` counts ``a.b`` when that is a module)."""
    tree = ast.parse(path.read_text(), str(path))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from app.index import _idmap` depends on the module app.index._idmap, not on app/index/__init__.py
            out |= {f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names}
    return {name for name in out if name.split(".")[0] in CYCLE_PACKAGES}


def layer_of(unit: str) -> int:
    for depth, layer in enumerate(LAYERS):
        if unit in layer:
            return depth
    raise AssertionError(f"{unit} has no layer: add it to LAYERS in tests/test_architecture.py and to ARCHITECTURE.md")


def upward_imports() -> list[str]:
    known = modules()
    problems = []
    for module, path in known.items():
        source = unit_of(module)
        if source == "app":
            continue  # app/__init__.py
        for target in sorted(imports(module, path, known)):
            dest = unit_of(target)
            if dest in (source, "app"):
                continue
            if source == CLIENT or dest == CLIENT:
                allowed = dest in CLIENT_MAY_IMPORT if source == CLIENT else source in CLIENT_IMPORTED_BY
            else:
                allowed = layer_of(dest) > layer_of(source)
            if not allowed:
                problems.append(f"{module} imports {target}")
    return problems


def cycles_of(graph: dict[str, list[str]]) -> list[list[str]]:
    """The import cycles of ``graph`` (module -> the modules it imports): its strongly connected components of
    more than one module, by Tarjan's algorithm."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in graph[node]:
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return cycles


def import_cycles() -> list[list[str]]:
    """Cycles among every import of app/, recall/ and bench/ (lazy ones inside functions and type-only ones
    under TYPE_CHECKING too: each is a dependency a reader must follow, and a lazy import that closes a loop only
    hides it; where a lower module must call back up, it takes a callback or a Protocol), by Tarjan's algorithm."""
    known = modules(CYCLE_PACKAGES)
    graph = {m: sorted(t for t in imports(m, p, known) if t in known and t != m) for m, p in known.items()}
    return cycles_of(graph)


def test_every_unit_has_a_layer():
    for module in modules():
        if unit_of(module) not in ("app", CLIENT):
            layer_of(unit_of(module))


def test_imports_go_one_way_down_the_layers():
    assert upward_imports() == []


def upward_training_imports() -> list[str]:
    known = modules()

    def part(module: str) -> str | None:
        parts = module.split(".")
        return parts[2] if parts[:2] == ["app", "training"] and len(parts) > 2 else None

    def depth(name: str) -> int:
        for d, layer in enumerate(TRAINING_LAYERS):
            if name in layer:
                return d
        raise AssertionError(f"app/training/{name} has no layer: add it to TRAINING_LAYERS and to ARCHITECTURE.md")

    problems = []
    for module, path in known.items():
        source = part(module)
        if source is None:
            continue
        for target in sorted(imports(module, path, known)):
            dest = part(target)
            if dest is not None and dest != source and depth(dest) <= depth(source):
                problems.append(f"{module} imports {target}")
    return problems


def test_training_is_layered_by_what_it_trains():
    assert upward_training_imports() == []


def test_no_folder_holds_more_than_15_modules_and_no_module_more_than_400_lines():
    """A folder is one role a reader can hold in mind; a module past ~400 lines does two things (issue 36)."""
    counts: dict[str, int] = {}
    long = []
    for module, path in modules(CYCLE_PACKAGES).items():
        if path.name != "__init__.py":
            folder = path.parent.relative_to(ROOT).as_posix()
            counts[folder] = counts.get(folder, 0) + 1
        if len(path.read_text().splitlines()) > 400:
            long.append(module)
    assert {folder: n for folder, n in counts.items() if n > 15} == {}
    assert long == []


def test_no_import_cycles():
    assert import_cycles() == []


def grimp_cycles(*packages: str) -> list[list[str]]:
    """Import cycles by an independent parser: grimp (import-linter's graph), lazy and type-only imports included."""
    import grimp

    graph = grimp.build_graph(*packages, include_external_packages=False, exclude_type_checking_imports=False)
    return cycles_of({m: sorted(graph.find_modules_directly_imported_by(m) - {m}) for m in sorted(graph.modules)})


def test_an_independent_import_graph_finds_no_cycle_either(tmp_path, monkeypatch):
    assert grimp_cycles(*CYCLE_PACKAGES) == []
    # and it can fail: a lazy import closing a loop in a throwaway package
    (tmp_path / "loopy").mkdir()
    (tmp_path / "loopy" / "__init__.py").write_text("")
    (tmp_path / "loopy" / "a.py").write_text("import loopy.b\n")
    (tmp_path / "loopy" / "b.py").write_text("def late():\n    from loopy import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert grimp_cycles("loopy") == [["loopy.a", "loopy.b"]]


def test_the_checks_catch_an_upward_import_and_a_cycle(tmp_path, monkeypatch):
    # the rule must be able to fail: a search module importing a use case, and two modules importing each other
    for name, text in {
        "app/__init__.py": "",
        "app/search/__init__.py": "",
        "app/search/bad.py": "from app.usecases.query import run_search\n",
        "app/usecases/__init__.py": "",
        "app/usecases/query.py": "from app.usecases import loop\n",
        "app/usecases/loop.py": "from app.usecases.query import run_search\n",
        "recall/__init__.py": "import app.usecases.query\n",
        # a lazy import that closes a loop counts, in bench/ too
        "bench/__init__.py": "",
        "bench/a.py": "import bench.b\n",
        "bench/b.py": "def late():\n    from bench import a\n",
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert upward_imports() == ["app.search.bad imports app.usecases.query", "recall imports app.usecases.query"]
    assert sorted(import_cycles()) == [["app.usecases.loop", "app.usecases.query"], ["bench.a", "bench.b"]]


def test_the_client_loads_no_part_of_the_engine():
    # `pip install` then `from recall import RecallClient` in a program that only talks to a
    # service: none of torch, FAISS, numpy, FastAPI or the service's own modules may load
    code = (
        "import sys, recall; "
        "from recall import RecallClient, AsyncRecallClient, NotFound; "
        "heavy = ('torch', 'faiss', 'numpy', 'fastapi', 'starlette', 'pydantic', 'numba', 'ray', 'psycopg'); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy "
        "or (m.startswith('app.') and m != 'app.errors')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT, timeout=60)
    assert out.stdout.strip() == "[]"
