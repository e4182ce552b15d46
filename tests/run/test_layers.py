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
              "rnshmc.versions"]


def module_name(path):
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported(path):
    """The rnshmc modules a file imports (anywhere in it), as written."""
    name = module_name(path)
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


def test_the_graph_sees_a_circle():
    """The check itself: a circle made on purpose is found."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert sorted(n for n in graph if n in reachable(graph, n)) == ["a", "b", "c"]
