"""Hostile names never run as shell: the written sbatch script, run with stubbed srun/torchrun/scontrol,
executes only the intended commands, and a name with a control character is refused in one line."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autopar.catalog import get_model
from autopar.cli import app
from autopar.launch.megatron import PLACEHOLDERS
from autopar.text import one_line, shell_comment

runner = CliRunner()
HF = Path(__file__).parents[1] / "data" / "hf" / "llama-3.1-70b.json"

# Printable names that would run `touch` if they reached the shell unquoted.
HOSTILE = [
    "$(touch PWNED)",
    "`touch PWNED`",
    "x; touch PWNED",
    "x' ; touch PWNED; echo '",
    'x" ; touch PWNED; echo "',
    "x && touch PWNED",
    "x | touch PWNED",
    "${IFS}touch${IFS}PWNED",
]
# Names with control characters: refused (a newline would end the header comment).
CONTROL = ["x\ntouch PWNED", "x\rtouch PWNED", "x\x1b]0;title\x07", "x\u2028touch PWNED", "x\u202ey"]

STUB = """#!/bin/bash
echo "$(basename "$0") $*" >> "$STUB_LOG"
{extra}
"""


def _stubs(tmp: Path) -> Path:
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    extras = {"scontrol": "echo node001", "srun": '"$@"', "torchrun": ""}
    for name, extra in extras.items():
        f = bin_dir / name
        f.write_text(STUB.format(extra=extra))
        f.chmod(f.stat().st_mode | stat.S_IEXEC)
    return bin_dir


def _write_spec(tmp: Path, name: str) -> Path:
    """A ModelSpec file (the catalog's Llama-3.1-70B fields) whose `name` is `name`."""
    fields = get_model("llama-3.1-70b").model_dump(exclude_defaults=True)
    spec = tmp / "model.json"
    spec.write_text(json.dumps({**fields, "name": name}))
    return spec


def _launch(spec: Path, out: Path) -> object:
    args = ["launch", "--model", str(spec), "--gpu", "H100-SXM", "--gpus", "16", "--seq-len", "4096"]
    args += ["--global-batch", "64", "--strategy", "TP8+SP PP2 DP1 mb1", "--framework", "all"]
    return runner.invoke(app, [*args, "--out", str(out)])


def test_one_line_escapes_every_control_character() -> None:
    assert one_line("a\nb\x1b[2J\u202e") == "a\\nb\\x1b[2J\\u202e"
    assert shell_comment("x\n rm -rf /") == "# x\\n rm -rf /"


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_name_runs_nothing(tmp_path: Path, name: str) -> None:
    spec = tmp_path / "spec"
    spec.mkdir()
    res = _launch(_write_spec(spec, name), tmp_path / "out")
    assert res.exit_code == 0, res.output
    script = tmp_path / "out" / "autopar.sbatch"
    work = tmp_path / "work"
    work.mkdir()
    log = tmp_path / "stub.log"
    env = {**os.environ, "PATH": f"{_stubs(tmp_path)}:{os.environ['PATH']}", "STUB_LOG": str(log)}
    env |= {"SLURM_JOB_NODELIST": "node001", "SLURM_NNODES": "2", "SLURM_JOB_ID": "1"}
    env |= {k: "1" for k in PLACEHOLDERS}
    done = subprocess.run(
        ["bash", str(script)], cwd=work, env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert not list(work.iterdir()), "the script created a file: a name reached the shell"
    ran = [line.split()[0] for line in log.read_text().splitlines()]
    assert ran == ["scontrol", "srun", "torchrun"]


@pytest.mark.parametrize("name", CONTROL)
def test_control_character_in_name_is_refused(tmp_path: Path, name: str) -> None:
    res = _launch(_write_spec(tmp_path, name), tmp_path / "out")
    assert res.exit_code == 2
    assert "Traceback" not in res.output
    assert "control character" in res.output
    assert not (tmp_path / "out").exists()


def test_config_in_a_folder_whose_name_holds_a_newline(tmp_path: Path) -> None:
    folder = tmp_path / "evil\ntouch PWNED"
    folder.mkdir()
    (folder / "config.json").write_text(HF.read_text())
    res = _launch(folder, tmp_path / "out")
    assert res.exit_code == 2, res.output
    assert "control character" in res.output
    assert "\ntouch" not in res.output
