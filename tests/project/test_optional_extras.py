"""scikit-learn (and SciPy with it) is the `calibrate` extra: every command applies the packaged calibration
without it (autopar/calibration/models/predictor.py), and fitting a model without it is one line naming the extra.

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
    assert "scikit-learn" in res.stderr
    _assert_names_this_checkout(res.stderr, CALIBRATE_EXTRA)
    assert not (tmp_path / "model.json").exists()


ROOT = Path(__file__).resolve().parents[2]


def _assert_names_this_checkout(message: str, extra: str) -> None:
    """Issue 46 item 4: from a checkout, the hint is the pip command for THIS checkout (plain 'autopar[extra]'
    would look on the package index), run by this interpreter, naming an extra pyproject.toml declares."""
    import re
    import shlex
    import tomllib

    m = re.search(r"(\S+) -m pip install -e ('[^']+')", message)
    assert m, message
    python, target = m[1], shlex.split(m[2])[0]
    assert Path(python) == Path(sys.executable)
    root, _, rest = target.partition("[")
    assert Path(root) == ROOT and rest == f"{extra}]"
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extra in declared


def test_tune_without_the_extra_names_this_checkout(tmp_path: Path):
    res = _autopar(tmp_path, "tune", "--runner", "dryrun", "--model", "llama-3.1-8b", "--gpus", "8")
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
    _assert_names_this_checkout(res.stderr, "tune")


def test_setup_extras_installs_every_extra_a_hint_names():
    """scripts/setup.sh extras adds what calibrate fit, tune, Parquet records and PostgreSQL studies need."""
    import re

    text = (ROOT / "scripts" / "setup.sh").read_text()
    m = re.search(r'extras\) TARGET="\.\[([a-z,-]+)\]"', text)
    assert m, "setup.sh has no extras target"
    assert set(m[1].split(",")) == {"calibrate", "tune", "parquet", "postgres", "serve"}
