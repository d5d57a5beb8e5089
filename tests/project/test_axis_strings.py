"""Parallel axes are named by `autopar.layouts.Axis` in code logic, not by raw "tp"/"pp"/... strings.

Raw axis names stay only where they ARE an external format (CSV columns, Optuna parameter names, table
headers, Strategy field lists): the modules in EXTERNAL_FORMATS. Parsed with `ast`, so comments, docstrings
and f-string text do not count; a plain string constant equal to an axis value does.
"""

from __future__ import annotations

import ast
from pathlib import Path

from autopar.layouts import Axis

ROOT = Path(__file__).resolve().parents[2] / "autopar"
AXIS_NAMES = {a.value for a in Axis}
# Modules whose axis strings are external names, with what they name.
EXTERNAL_FORMATS = {
    "knobs.py": "the Axis enum itself (the knob registry; autopar.layouts re-exports it)",
    "specs.py": "Strategy field names (layouts imports specs, so specs cannot import Axis)",
    "calibration/records/columns.py": "run-record CSV columns (the schema)",
    "calibration/records/strategy_spec.py": "run-record CSV columns (a record's layout cells)",
    "calibration/records/workload_spec.py": "run-record CSV columns (the tp cell of a NeMo record)",
    "cli/calibrate.py": "run-record row keys (kept raw: importing Axis would load pydantic at CLI start-up)",
    "cli/common.py": "CLI option parameter names (same start-up reason)",
    "cli/options.py": "CLI option parameter names (the one option registry) and the knob option keys",
    "cli/launch.py": "CLI option parameter names of `launch` (one per mesh axis)",
    "cli/dryrun.py": "keys of the `dryrun --json` document's slice degrees",
    "dryrun/record.py": "run-record columns (as calibration/records/columns.py)",
    "cli/estimate.py": "CLI option parameter names a --strategy label sets (same start-up reason)",
    "reports/table.py": "Pareto table columns and headers",
    "search/pareto.py": "Pareto DataFrame columns",
    "search/space.py": "Optuna parameter names",
    "search/nsga2.py": "Optuna parameter names",
}


def raw_axis_strings(root: Path) -> dict[str, list[int]]:
    """Lines of every plain string constant equal to an axis name, by module path (f-string parts excluded)."""
    out: dict[str, list[int]] = {}
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        in_fstring = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
        lines = [
            n.lineno
            for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and n.value in AXIS_NAMES and id(n) not in in_fstring
        ]
        if lines:
            out[path.relative_to(root).as_posix()] = sorted(lines)
    return out


def test_axes_in_code_logic_are_axis_members():
    found = raw_axis_strings(ROOT)
    stray = {k: v for k, v in found.items() if k not in EXTERNAL_FORMATS}
    assert not stray, f"raw axis strings (use autopar.layouts.Axis, a StrEnum equal to them): {stray}"


def test_the_scan_finds_raw_strings_and_skips_prose(tmp_path: Path):
    (tmp_path / "m.py").write_text(
        '"""tp in a docstring"""\nx = {"tp": 1}\ny = f"tp{x}"\nz = "tpx"\nw = ("ep",)\n'
    )
    assert raw_axis_strings(tmp_path) == {"m.py": [2, 5]}
