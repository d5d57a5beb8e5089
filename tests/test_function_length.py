"""Small functions in the analytical model: no function in autopar/perf/ is longer than MAX_LINES.

Parsed with `ast`: a function's length runs from its `def` line to its last line (docstring, comments and
nested functions included), so splitting by concern is the only way under the limit.
"""

from __future__ import annotations

import ast
from pathlib import Path

PERF = Path(__file__).resolve().parent.parent / "autopar" / "perf"
MAX_LINES = 60  # the project's standard (issue 10: "an estimator you can read in one sitting")


def function_lengths(root: Path) -> dict[str, int]:
    """Lines of every function (methods and nested functions too) under `root`, by 'file:qualified name'."""
    out: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    out[f"{where}:{name}"] = child.end_lineno - child.lineno + 1
                visit(child, name + ".", where)
            else:
                visit(child, prefix, where)

    for path in sorted(root.rglob("*.py")):
        visit(ast.parse(path.read_text(encoding="utf-8")), "", path.name)
    return out


def test_no_perf_function_exceeds_the_limit():
    lengths = function_lengths(PERF)
    assert len(lengths) > 50  # the walk found the model's functions
    too_long = {k: n for k, n in lengths.items() if n > MAX_LINES}
    assert not too_long, f"functions over {MAX_LINES} lines (split them by concern): {too_long}"


def test_the_measure_counts_def_to_last_line(tmp_path: Path):
    # The guard itself: a 61-line function is reported with its length, methods by Class.method.
    body = "\n".join(f"    x{i} = {i}" for i in range(59))
    (tmp_path / "m.py").write_text(
        f"def f():\n{body}\n    return 0\n\n\nclass C:\n    def g(self):\n        pass\n"
    )
    assert function_lengths(tmp_path) == {"m.py:f": 61, "m.py:C.g": 2}


AUTOPAR = PERF.parent
# The orchestration layer (issue 23: the commands, the search, the what-if, the problem config tree) keeps the
# same limit.


def test_no_orchestration_function_exceeds_the_limit():
    lengths = {**function_lengths(AUTOPAR / "cli"), **function_lengths(AUTOPAR / "search")}
    lengths.update(function_lengths(AUTOPAR / "costs"))
    lengths.update({k: n for k, n in function_lengths(AUTOPAR).items() if k.startswith("problem.py:")})
    assert "study.py:optimize" in lengths and "problem.py:Problem.build" in lengths  # the walk found them
    too_long = {k: n for k, n in lengths.items() if n > MAX_LINES}
    assert not too_long, f"functions over {MAX_LINES} lines (split them by concern): {too_long}"
