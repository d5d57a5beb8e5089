"""Every command shown in README.md and the documentation pages (docs/, mkdocs.yml) runs and exits 0.

The fenced ```bash blocks (and `$ autopar ...` lines of the ```text output samples) are parsed:
backslash continuations joined, comments dropped. `autopar` commands run in-process (CliRunner) in a
scratch folder that the test fills with the files the commands name (runs.csv, more.jsonl, train.log
and its run.yaml, extra.csv — small copies of the shipped published runs and test logs). Search
budgets are cut to SMALL_BUDGET and `calibrate fit/report` use `--no-public` (the shipped 106 runs
make them ~15 s each); everything else runs as written. `bash scripts/*.sh` lines are checked with
`bash -n` and the autopar/ruff commands inside the script are run — not setup.sh's pip install (the
test already runs in that environment) nor test.sh's pytest (this very suite). `python bench/search.py`
(~1.5 min), `python bench/adapt.py` (~5 min) and `python bench/recipes.py` (~3 min) run only with AUTOPAR_RUN_SLOW=1. The ```python block is executed with the same budget cut.
"""

from __future__ import annotations

import csv
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from docs_pages import docs_text
from typer.testing import CliRunner

from autopar.cli import app

ROOT = Path(__file__).resolve().parents[2]
README = docs_text()  # the README and the MkDocs pages (tests/docs_pages.py): every command they show runs
SMALL_BUDGET = "40"
SLOW_BENCHES = {
    "bench/search.py": "~1.5 min",
    "bench/adapt.py": "~5 min",
    "bench/recipes.py": "~3 min",
}  # run only with AUTOPAR_RUN_SLOW=1
LOGS = ROOT / "tests" / "data" / "logs"
# README commands that need this host's GPUs: on a machine without them they must fail cleanly (exit 2, one
# line naming what was looked for); the recorded form that follows each (`--from gpu-node`,
# `detect@gpu-node`) is run on a recorded H100 node.
NEEDS_GPU = {
    "autopar topology --save gpu-node": "probes nvidia-smi/rocm-smi/ibstat on a GPU node",
}
TOPOLOGY_FIXTURE = ROOT / "tests" / "fixtures" / "topology" / "hgx-h100"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, re.S)


def readme_commands() -> list[list[str]]:
    """Shell commands of the README as word lists (continuations joined, comments removed)."""
    cmds = []
    for block in _blocks("bash"):
        joined = re.sub(r"\\\n\s*", " ", block)
        cmds += [ln.strip() for ln in joined.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    for block in _blocks("text"):
        cmds += [ln[2:].strip() for ln in block.splitlines() if ln.startswith("$ autopar ")]
    return [shlex.split(c, comments=True) for c in cmds]


def _small(args: list[str]) -> list[str]:
    """Cut search budgets; public runs out of calibrate fit/report (speed only)."""
    args = list(args)
    if "--budget" in args:
        args[args.index("--budget") + 1] = SMALL_BUDGET
    elif args[:1] in (["optimize"], ["whatif"]):
        args += ["--budget", SMALL_BUDGET]
    # (the `calibrate plan` worked example's fit keeps the public runs: its store holds the two proposed runs,
    # fewer than a fit needs on their own)
    if args[:2] in (["calibrate", "fit"], ["calibrate", "report"]) and "my.db" not in args:
        args.append("--no-public")
    return args


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """A scratch folder with the files the README's commands name, and a private run store."""
    d = tmp_path_factory.mktemp("readme")
    rows = list(csv.DictReader((ROOT / "autopar" / "data" / "published_runs.csv").open()))
    by_source: dict[str, list[dict]] = {}
    for r in rows:
        by_source.setdefault(r["source"], []).append(r)
    sources = sorted(by_source, key=lambda s: -len(by_source[s]))
    for name, src in (("runs.csv", sources[0]), ("extra.csv", sources[2])):
        with (d / name).open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(by_source[src][:6])
    import json

    with (d / "more.jsonl").open("w") as f:
        for r in by_source[sources[1]][:6]:
            f.write(json.dumps(r) + "\n")
    shutil.copytree(TOPOLOGY_FIXTURE, d / "gpu-node")  # what `autopar topology --save gpu-node` records
    shutil.copy(LOGS / "megatron_gpt_tp2.log", d / "train.log")
    shutil.copy(LOGS / "megatron_gpt_tp2.yaml", d / "run.yaml")
    for n in (1, 2):  # the `calibrate plan` worked example's simulated logs
        shutil.copy(ROOT / "tests" / "fixtures" / "plan" / f"run{n}.log", d / f"run{n}.log")
    old_cwd, old_home = os.getcwd(), os.environ.get("AUTOPAR_HOME")
    os.chdir(d)
    os.environ["AUTOPAR_HOME"] = str(d / "home")
    yield d
    os.chdir(old_cwd)
    if old_home is None:
        os.environ.pop("AUTOPAR_HOME", None)
    else:
        os.environ["AUTOPAR_HOME"] = old_home


def _run_script_commands(script: Path) -> None:
    subprocess.run(["bash", "-n", str(script)], check=True)
    for line in script.read_text().splitlines():
        words = shlex.split(line, comments=True)
        env = dict(os.environ)
        while words and re.fullmatch(r"[A-Z0-9_]+=\S*", words[0]) and not words[0].startswith("PY="):
            key, _, value = words.pop(0).partition("=")
            env[key] = value
        if not words or words[0] in ("set", "cd", "bash") or words[0].startswith("PY="):
            continue
        if words[0] == ".venv/bin/autopar":
            res = CliRunner().invoke(app, _small([w for w in words[1:] if w != "$@"]))
            assert res.exit_code == 0, (line, res.output)
        elif words[0] in (".venv/bin/ruff", ".venv/bin/mypy", ".venv/bin/mkdocs"):  # mypy: warm after test.sh
            tool = Path(sys.executable).parent / words[0].removeprefix(".venv/bin/")
            args = [tempfile.mkdtemp() if w == "$(mktemp -d)" else w for w in words[1:]]
            subprocess.run([str(tool), *args], check=True, cwd=ROOT, env=env)
        elif words[:3] != [".venv/bin/python", "-m", "pytest"]:
            raise AssertionError(f"{script.name}: command the README test does not know how to run: {line}")


COMMANDS = readme_commands()


def test_readme_has_the_commands() -> None:
    starts = {c[0] for c in COMMANDS}
    assert starts == {"bash", "autopar", "python"}, starts
    assert sum(c[0] == "autopar" for c in COMMANDS) >= 18


@pytest.mark.parametrize("words", COMMANDS, ids=[" ".join(c)[:60] for c in COMMANDS])
def test_readme_command_runs(words: list[str], workspace) -> None:
    cmd = " ".join(words)
    if words[0] == "bash":
        _run_script_commands(ROOT / words[1])
    elif words[0] == "python":
        if words[1] in SLOW_BENCHES and not os.environ.get("AUTOPAR_RUN_SLOW"):
            pytest.skip(f"{words[1]} takes {SLOW_BENCHES[words[1]]}: set AUTOPAR_RUN_SLOW=1")
        target = words[1:] if words[1] == "-m" else [str(ROOT / words[1]), *words[2:]]
        subprocess.run([sys.executable, *target], check=True, capture_output=True, cwd=ROOT)
    else:
        res = CliRunner().invoke(app, _small(words[1:]), env={"COLUMNS": "160"})
        if cmd in NEEDS_GPU and res.exit_code == 2:  # this host has no GPU: a clean refusal, no traceback
            assert res.output.startswith("error: ") and res.output.count("\n") == 1, (cmd, res.output)
            return
        assert res.exit_code == 0, (cmd, res.output)


def test_readme_python_api(workspace) -> None:
    (code,) = _blocks("python")
    code = code.replace("budget=300", f"budget={SMALL_BUDGET}")
    exec(compile(code, "README.md", "exec"), {"__name__": "readme"})  # noqa: S102 - our own README
    assert (workspace / "reports" / "run.html").exists()
