"""CLI conventions: --json on every command (one stable document), shared CLI/API defaults, labels,
shell completion, tables that wrap instead of cutting, and `launch --out` reporting what it wrote."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from autopar.cli import app
from autopar.cli.app import _SafeConsole
from autopar.defaults import DEFAULT_MIN_HEADROOM_GIB
from autopar.specs import Strategy

runner = CliRunner()

COMMANDS = [
    ["optimize"],
    ["whatif"],
    ["estimate"],
    ["fix"],
    ["launch"],
    ["dryrun"],
    ["models"],
    ["gpus"],
    ["prices"],
    ["topology"],
    ["version"],
    ["calibrate", "ingest"],
    ["calibrate", "list"],
    ["calibrate", "export"],
    ["calibrate", "fit"],
    ["calibrate", "report"],
    ["calibrate", "plan"],
]


@pytest.mark.parametrize("cmd", COMMANDS, ids=" ".join)
def test_every_command_has_json(cmd) -> None:
    res = runner.invoke(app, [*cmd, "--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0 and "--json" in res.output


def test_version_json() -> None:
    res = runner.invoke(app, ["version", "--json"])
    d = json.loads(res.stdout)
    assert set(d) == {"autopar", "python", "libraries", "launch_targets"}
    assert d["launch_targets"] == {"megatron": "core_v0.19.0", "torchtitan": "v0.2.2", "deepspeed": "v0.19.5"}


def test_calibrate_list_json_when_empty(tmp_path) -> None:
    res = runner.invoke(app, ["calibrate", "list", "--json", "--store", str(tmp_path / "runs.db")])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == {"store": str(tmp_path / "runs.db"), "count": 0, "runs": []}


def test_api_and_cli_share_min_headroom_default() -> None:
    # The defaults live once, in the config tree (autopar/problem.py, whatif_types.WhatIfSettings): the Python
    # API (optimize / run_whatif build their settings from it) and the CLI options (autopar/cli/options.py) read it.
    from autopar.cli.options import OPTIONS
    from autopar.costs.whatif_types import WhatIfSettings
    from autopar.defaults import DEFAULT_BUDGET, DEFAULT_OBJECTIVES, DEFAULT_SEED, DEFAULT_WHATIF_BUDGET
    from autopar.problem import SearchSettings

    search, whatif = SearchSettings(), WhatIfSettings()
    assert search.min_headroom_gib == whatif.min_headroom_gib == DEFAULT_MIN_HEADROOM_GIB
    assert (search.budget, search.seed) == (DEFAULT_BUDGET, DEFAULT_SEED)
    assert whatif.budget == DEFAULT_WHATIF_BUDGET == OPTIONS["budget:whatif"].default
    assert OPTIONS["budget"].default == DEFAULT_BUDGET and OPTIONS["seed"].default == DEFAULT_SEED
    assert tuple(search.objectives) == DEFAULT_OBJECTIVES == tuple(OPTIONS["objectives"].default.split(","))
    res = runner.invoke(app, ["optimize", "--help"], env={"COLUMNS": "200"})
    assert f"{DEFAULT_MIN_HEADROOM_GIB:g}GiB" in res.output


def test_label_omits_unset_dp() -> None:
    assert Strategy(tp=2, pp=2).label() == "TP2 PP2 Z1 mb1"
    assert Strategy(tp=2, pp=2, dp=4).label() == "TP2 PP2 DP4/Z1 mb1"
    assert Strategy(tp=2, pp=2, zero=0).label() == "TP2 PP2 mb1"


def test_shell_completion_script() -> None:
    p = subprocess.run(
        [sys.executable, "-m", "autopar", "--show-completion", "bash"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0 and "COMPREPLY" in p.stdout


def test_tables_wrap_instead_of_cutting() -> None:
    """At 60 columns a long cell folds onto more lines; nothing is replaced by an ellipsis."""
    import io

    from rich.table import Table

    buf = io.StringIO()
    c = _SafeConsole(file=buf, width=60)
    t = Table("strategy", "bottleneck")
    t.add_row("TP8+SP PP16v4 CP8 EP64 DP128/Z1 mb1 sel-AC " * 2, "communication-bound-pipeline")
    c.print(t)
    out = buf.getvalue()
    assert "…" not in out and max(len(line) for line in out.splitlines()) <= 60
    assert "".join(line.strip("│ ") for line in out.splitlines()).count("DP128/Z1") == 2


def test_launch_out_reports_only_written_files(tmp_path) -> None:
    res = runner.invoke(
        app,
        ["launch", "--strategy", "TP4+SP PP2v2 DP8/Z1 mb1 sel-AC", "--out", str(tmp_path), "--json"],
    )
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "autopar.sbatch",
        "autopar_torchtitan.toml",
        "megatron_args.sh",
    ]
    assert sorted(d["written"]) == sorted(str(p) for p in tmp_path.iterdir())
    assert "ds_config.json not written: not expressible as a DeepSpeed config: pp=2" in res.stderr


def test_launch_notes_and_version_follow_the_chosen_framework() -> None:
    """--framework slurm takes a bare Megatron release; only that framework's notes are printed."""
    args = ["launch", "--strategy", "TP4+SP PP2v2 DP8/Z1 mb1", "--json"]
    res = runner.invoke(app, [*args, "--framework", "slurm", "--framework-version", "core_v0.19.0"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["notes"] == []  # the ZeRO-1 note is torchtitan's
    res = runner.invoke(app, [*args, "--framework", "torchtitan"])
    assert any("no ZeRO-1" in n for n in json.loads(res.stdout)["notes"])
    res = runner.invoke(app, [*args, "--framework-version", "megatron=core_v0.18.0"])
    assert res.exit_code == 2 and "supported core_v0.19.0" in res.output


def test_launch_deepspeed_stdout_is_the_json_file() -> None:
    """`autopar launch --framework deepspeed > ds_config.json` gives a loadable file (target on stderr)."""
    res = runner.invoke(
        app, ["launch", "--gpus", "8", "--model", "llama-3.1-8b", "--tp", "2", "--framework", "deepspeed"]
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["tensor_parallel"] == {"autotp_size": 2}
    assert "DeepSpeed v0.19.5 (config JSON): deepspeedai/DeepSpeed v0.19.5" in res.stderr
