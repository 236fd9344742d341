"""Imports point one way: no module imports from a layer above its own (``edgeml.LAYERS``), and no imports
close a cycle between modules. Every import counts, those inside functions too: a lazy import that runs back
up the layers is still a dependency on the layer above."""

from __future__ import annotations

import ast
from pathlib import Path

import edgeml

ROOT = Path(edgeml.__file__).parent


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(name: str, path: Path) -> set[str]:
    """The edgeml modules ``name`` imports (``from edgeml.x import y`` names edgeml.x.y when that is a module)."""
    modules, out = _modules(), set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("edgeml"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base
                                                                                                   else []))
            if not base.startswith("edgeml"):
                continue
            subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules]
            out.update(subs)
            if name != base:  # importing from a package runs its __init__ first
                out.add(base)
    return {m for m in out if m != name}


def _layer(module: str) -> int:
    top = module.split(".")[1] if module.count(".") else ""
    for i, names in enumerate(edgeml.LAYERS):
        if top in names:
            return i
    raise AssertionError(f"{module} is in no layer of edgeml.LAYERS: add its top-level name there")


def test_every_module_is_in_a_layer():
    for name in _modules():
        if name != "edgeml":
            _layer(name)


def test_no_import_runs_back_up_the_layers():
    upward = []
    for name, path in _modules().items():
        if name == "edgeml":
            continue
        for target in _imports(name, path):
            if target != "edgeml" and _layer(target) < _layer(name):
                upward.append(f"{name} imports {target}")
    assert not upward, "imports that run back up the layers:\n" + "\n".join(sorted(upward))


def test_no_import_cycle():
    graph = {name: _imports(name, path) for name, path in _modules().items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"
