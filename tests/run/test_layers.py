"""The package's import graph: every arrow points down (no circle), counting imports inside
functions too, and the low floors import nothing of the samplers (docs/architecture.md)."""
import ast
import pathlib

import pytest

import rnshmc

ROOT = pathlib.Path(rnshmc.__file__).parent
# modules that must not import the samplers or anything above them
LOW_FLOORS = ["rnshmc.state", "rnshmc.targets", "rnshmc.results", "rnshmc.surrogate",
              "rnshmc.models", "rnshmc.fem", "rnshmc.adaptation", "rnshmc.diagnostics",
              "rnshmc.validation", "rnshmc.parallel", "rnshmc.serve", "rnshmc.gaussian_process",
              "rnshmc.versions", "rnshmc.calibration"]


def module_name(path, root=ROOT):
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported(path, root=ROOT):
    """The rnshmc modules a file imports (anywhere in it), as written."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if not module.startswith("rnshmc"):
                continue
            if node.module:
                found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("rnshmc"))
    return found


def import_graph():
    files = {module_name(p): p for p in ROOT.rglob("*.py")}
    graph = {}
    for name, path in files.items():
        edges = set()
        for target in imported(path):
            while target and target not in files:  # a name imported from a module
                target = target.rpartition(".")[0]
            if not target or target == name:
                continue
            edges.add(target)
            # importing a submodule runs its packages' __init__ (outside one's own package)
            parent = target.rpartition(".")[0]
            while parent and not name.startswith(parent + ".") and parent != name:
                edges.add(parent)
                parent = parent.rpartition(".")[0]
        graph[name] = edges
    return graph


def reachable(graph, start):
    seen, stack = set(), [start]
    while stack:
        for nxt in graph.get(stack.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen


def test_the_import_graph_has_no_circle():
    graph = import_graph()
    circles = sorted(name for name in graph if name in reachable(graph, name))
    assert not circles, f"modules on an import circle: {circles}"


@pytest.mark.parametrize("module", LOW_FLOORS)
def test_low_floors_import_no_sampler(module):
    below = reachable(import_graph(), module)
    assert not [m for m in below if m.startswith("rnshmc.samplers") or m in
                ("rnshmc", "rnshmc.auto", "rnshmc.demos", "rnshmc.papers", "rnshmc.__main__")
                ], sorted(below)


@pytest.mark.parametrize("module", ["rnshmc.samplers", "rnshmc.experiments"])
def test_the_library_does_not_import_the_papers_or_the_command_line(module):
    """rnshmc.papers (the papers' settings), the front door, the demos and the command line
    sit on top: the samplers and the comparison helpers they use import none of them."""
    graph = import_graph()
    below = reachable(graph, module) | {m for m in graph if m.startswith(module + ".")}
    for name in list(below):
        below |= reachable(graph, name)
    assert not below & {"rnshmc.papers", "rnshmc.demos", "rnshmc.__main__", "rnshmc.auto"
                        }, sorted(below)


# the concrete samplers, which may import models (RMHMC: the metrics of built-in models)
CONCRETE_SAMPLERS = ["hmc", "rns", "arns", "gradient_free", "rmhmc", "l2hmc"]


def imports_of_models(root):
    """The modules under ``root/samplers`` that import from rnshmc.models (anywhere in the
    file), but the concrete samplers."""
    concrete = {f"rnshmc.samplers.{name}" for name in CONCRETE_SAMPLERS}
    found = {}
    for path in sorted((root / "samplers").rglob("*.py")):
        name = module_name(path, root)
        models = sorted(m for m in imported(path, root)
                        if m == "rnshmc.models" or m.startswith("rnshmc.models."))
        if models and name not in concrete:
            found[name] = models
    return found


def test_the_engine_imports_no_model():
    """The sampler base, the engine and the checkpoints know no model (docs/architecture.md):
    a model that checkpoints rebuild registers itself in rnshmc.targets."""
    assert not imports_of_models(ROOT)


def test_the_engine_check_sees_an_import_of_a_model(tmp_path):
    """The check itself: an import of a model inside a function of the engine is found."""
    (tmp_path / "rnshmc" / "samplers").mkdir(parents=True)
    (tmp_path / "rnshmc" / "samplers" / "engine.py").write_text(
        "def rebuild(spec):\n    from ..models import Gaussian\n    return Gaussian(**spec)\n")
    (tmp_path / "rnshmc" / "samplers" / "rmhmc.py").write_text(
        "from ..models import EllipticPDE\n")  # (a concrete sampler may)
    assert imports_of_models(tmp_path / "rnshmc") == {
        "rnshmc.samplers.engine": ["rnshmc.models", "rnshmc.models.Gaussian"]}


def test_the_graph_sees_a_circle():
    """The check itself: a circle made on purpose is found."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert sorted(n for n in graph if n in reachable(graph, n)) == ["a", "b", "c"]


# the rooms of rnshmc/samplers/phases in a run's time order: each imports only rooms before it
# (online and riemannian sit beside the last, docs/architecture.md)
PHASE_ROOMS = ["base", "exact", "exploration", "fit", "dynamics", "online", "riemannian"]


def phase_rooms_imported(graph):
    """{room: the rooms it imports} of rnshmc.samplers.phases."""
    prefix = "rnshmc.samplers.phases."
    return {room: {m[len(prefix):] for m in graph.get(prefix + room, ()) if m.startswith(prefix)}
            for room in PHASE_ROOMS}


def rooms_out_of_order(imports):
    """(room, the room it imports that is not before it) pairs."""
    return sorted((room, other) for room, others in imports.items() for other in others
                  if other not in PHASE_ROOMS or PHASE_ROOMS.index(other)
                  >= PHASE_ROOMS.index(room) or {room, other} == {"online", "riemannian"})


def test_the_phase_rooms_import_only_the_rooms_before_them():
    graph = import_graph()
    assert sorted(m for m in graph if m.startswith("rnshmc.samplers.phases.")) == sorted(
        "rnshmc.samplers.phases." + room for room in PHASE_ROOMS), "a room not in PHASE_ROOMS"
    assert not rooms_out_of_order(phase_rooms_imported(graph))


def test_the_phase_rooms_check_sees_a_room_out_of_order():
    """The check itself: an earlier room importing a later one, and the two side rooms
    importing each other, are found."""
    imports = {room: set() for room in PHASE_ROOMS}
    imports["fit"] = {"base", "dynamics"}
    imports["online"] = {"riemannian"}
    assert rooms_out_of_order(imports) == [("fit", "dynamics"), ("online", "riemannian")]


def chunk_runners(root):
    """The modules under ``root/samplers`` but the runner that run chunks of the C loop
    (``run_chunks``) or define an ``iterate`` of their own."""
    found = set()
    for path in sorted((root / "samplers").rglob("*.py")):
        if path.name == "_runner.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and node.attr == "run_chunks") or (
                    isinstance(node, ast.FunctionDef) and node.name == "iterate"):
                found.add(module_name(path, root))
    return found


def test_only_the_runner_runs_chunks():
    """A phase says where its segments stop and what happens after one; the runner alone runs
    them (docs/architecture.md, the phases' rooms)."""
    assert not chunk_runners(ROOT)


def test_the_chunk_check_sees_a_phase_that_iterates(tmp_path):
    (tmp_path / "rnshmc" / "samplers" / "phases").mkdir(parents=True)
    (tmp_path / "rnshmc" / "samplers" / "phases" / "dynamics.py").write_text(
        "class P:\n    def iterate(self, run, chain, budget):\n"
        "        return run.run_chunks(self, chain, budget)\n")
    assert chunk_runners(tmp_path / "rnshmc") == {"rnshmc.samplers.phases.dynamics"}


@pytest.mark.parametrize("room", PHASE_ROOMS)
def test_every_phase_room_says_what_it_owns(room):
    path = ROOT / "samplers" / "phases" / f"{room}.py"
    docstring = ast.get_docstring(ast.parse(path.read_text()))
    assert docstring and len(docstring.split()) >= 30, room
