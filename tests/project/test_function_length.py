"""Small functions: no function in autopar/ (the analytical model first) is longer than MAX_LINES.

Parsed with `ast`: a function's length runs from its `def` line to its last line (docstring, comments and
nested functions included), so splitting by concern is the only way under the limit.
"""

from __future__ import annotations

import ast
from pathlib import Path

PERF = Path(__file__).resolve().parents[2] / "autopar" / "perf"
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
        visit(ast.parse(path.read_text(encoding="utf-8")), "", path.relative_to(root).as_posix())
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


def test_no_function_in_the_package_exceeds_the_limit():
    # Issue 23: the orchestration (commands, search, what-if, the problem config tree), calibration,
    # reports and catalog keep the model's limit too.
    lengths = function_lengths(AUTOPAR)
    for found in ("search/study.py:optimize", "problem.py:Problem.build", "cli/optimize.py:optimize_cmd"):
        assert found in lengths, found  # the walk found them (keys are paths under autopar/)
    too_long = {k: n for k, n in lengths.items() if n > MAX_LINES}
    assert not too_long, f"functions over {MAX_LINES} lines (split them by concern): {too_long}"
