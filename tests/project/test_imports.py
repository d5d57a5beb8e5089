"""Import layering: no cycle between modules, no import from a lower package into a higher one.

Every module of autopar is parsed with `ast` (imports inside functions and under TYPE_CHECKING count: a
lazy import hides a dependency, it does not remove it). The layers, lowest first, are those of the
README's "Layout" section; a package may import its own layer and anything below it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from docs_pages import page_text

ROOT = Path(__file__).resolve().parents[2] / "autopar"

# Lowest first. The root package (`autopar/__init__.py`) imports nothing statically (its public names load
# lazily by string), so it sits at the bottom with the leaf modules; `data` only holds files.
LAYERS: list[set[str]] = [
    {
        "autopar",
        "errors",
        "text",
        "inputs",
        "units",
        "knobs",
        "specs",
        "layouts",
        "defaults",
        "lazy",
        "data",
        "files",
        "constraints",
        "parse",
        "cliinput",
        "workloads",
    },
    {"catalog"},
    {"perf"},
    {"launch"},
    {"calibration"},
    {"objectives"},
    {"problem"},  # the problem tree: search reads it, it reads no search module (issue 47)
    {"search"},
    {"costs"},
    {"reports"},
    {"dryrun"},
    {"tune"},
    {"cli", "__main__", "service"},  # the service runs the CLI's commands; `autopar serve` starts it
]
LAYER_OF = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _target(name: str) -> str | None:
    """The autopar module an imported dotted name lives in (longest existing prefix)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str, path: Path) -> set[str]:
    """Every autopar module `module` imports, anywhere in its body."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            # `from pkg import sub` imports the submodule when there is one, else a name of pkg itself
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        found |= {t for n in names if n.split(".")[0] == "autopar" and (t := _target(n)) and t != module}
    return found


GRAPH = {m: _imports(m, p) for m, p in MODULES.items()}


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "autopar"


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on_stack.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_every_package_has_a_layer():
    assert {_package(m) for m in MODULES} <= set(LAYER_OF)


def test_no_import_cycles():
    assert _cycles(GRAPH) == []


def test_no_upward_imports():
    upward = [
        f"{a} -> {b}"
        for a, deps in GRAPH.items()
        for b in deps
        if LAYER_OF[_package(b)] > LAYER_OF[_package(a)]
    ]
    assert upward == []


def test_the_checker_sees_lazy_imports_and_cycles():
    # The graph includes imports inside functions (search.evaluate imports perf lazily in Evaluator).
    assert (
        "autopar.perf" in GRAPH["autopar.search.evaluate"]
        or "autopar.perf.estimate" in GRAPH["autopar.search.evaluate"]
    )
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("module", ["autopar.layouts", "autopar.units", "autopar.specs", "autopar.errors"])
def test_spine_modules_import_only_the_bottom_layer(module):
    assert all(LAYER_OF[_package(d)] == 0 for d in GRAPH[module])


def test_readme_states_these_layers():
    readme = page_text("layout.md")
    order = " → ".join(
        [
            "catalog",
            "perf",
            "launch",
            "calibration",
            "objectives",
            "problem",
            "search",
            "costs",
            "reports",
            "dryrun",
            "tune",
            "cli",
        ]
    )
    assert order in " ".join(readme.split()), "README 'Layout' must list the import layers of LAYERS"
    named = order.split(" → ")[:-1]
    assert len(named) == len(LAYERS[1:-1]) and all(
        n in layer for n, layer in zip(named, LAYERS[1:-1], strict=True)
    )
