"""scikit-learn (and SciPy with it) is the `calibrate` extra: every command applies the packaged calibration
without it (autopar/calibration/predictor.py), and fitting a model without it is one line naming the extra.

Each command runs in a fresh interpreter where `import sklearn` / `import scipy` fail, as on an install
without the extra (`None` in sys.modules is how Python marks a module that cannot be imported)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from autopar.errors import CALIBRATE_EXTRA

WITHOUT_EXTRA = (
    "import sys\n"
    "for name in ('sklearn', 'scipy'):\n"
    "    sys.modules[name] = None\n"
    "from autopar.cli import main\n"
    "sys.argv = ['autopar', *sys.argv[1:]]\n"
    "main()\n"
)


def _autopar(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"AUTOPAR_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin", "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_EXTRA, *args], capture_output=True, text=True, env=env, cwd=tmp_path
    )


@pytest.mark.parametrize(
    "args",
    [
        ("optimize", "--json"),
        ("estimate", "--json"),
        ("compare", "TP8+SP PP2 DP4/Z1 mb1", "TP4+SP PP4 DP4/Z1 mb1", "--json"),
        ("fix", "--strategy", "TP8+SP PP2 DP4/Z1 mb1", "--goal", "faster", "--json"),
    ],
    ids=lambda a: a[0],
)
def test_commands_apply_the_default_calibration_without_the_extra(tmp_path: Path, args: tuple[str, ...]):
    res = _autopar(tmp_path, *args)
    assert res.returncode in (0, 1), res.stderr
    assert "Traceback" not in res.stderr
    if args[0] in ("optimize", "estimate"):
        out = json.loads(res.stdout)
        assert "published runs (default)" in json.dumps(out["calibration"])  # corrected, not analytical only


def test_fitting_without_the_extra_is_one_line_naming_it(tmp_path: Path):
    res = _autopar(tmp_path, "calibrate", "fit", "--out", "model.json")
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
    assert f"pip install 'autopar[{CALIBRATE_EXTRA}]'" in res.stderr and "scikit-learn" in res.stderr
    assert not (tmp_path / "model.json").exists()
