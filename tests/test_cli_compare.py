"""`autopar compare`: labels side by side; every figure equals what `estimate` prints for that label."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from autopar.cli import app
from autopar.cli.compare import BEST_MARK, best_columns

runner = CliRunner()

PROBLEM = ["--model", "Mixtral-8x7B", "--gpus", "64", "--seq-len", "16384", "--global-batch", "64"]
SLOW = "TP2+SP PP2v2 CP2-a2a EP8 DP8/Z1 mb1 sel-AC"
FAST = "TP4+SP PP2 CP2 EP8 ETP1 DP4/Z1 mb1 sel-AC"


def _json(args: list[str]):
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_compare_json_is_estimate_json_per_label():
    both = _json(["compare", *PROBLEM, SLOW, FAST, "--json", "--no-calibration"])
    assert [d["label"] for d in both] == [SLOW, FAST]
    for label, doc in zip((SLOW, FAST), both, strict=True):
        assert doc == _json(["estimate", *PROBLEM, "--strategy", label, "--json", "--no-calibration"])


def test_cost_and_step_split_by_hand():
    for doc in _json(["compare", *PROBLEM, SLOW, FAST, "--json", "--no-calibration"]):
        cost, est = doc["cost"], doc["estimate"]
        # $/Mtoken = 64 GPUs x price per GPU-hour / 3600 s / (tokens/s) x 1e6
        assert (
            abs(cost["usd_per_mtoken"] - 64 * cost["usd_per_gpu_hour"] / 3600 / est["tokens_per_s"] * 1e6)
            < 1e-9
        )
        t = doc["time_s"]
        parts = ("compute", "tp_comm", "cp_comm", "ep_comm", "dp_comm", "pp_comm", "bubble", "optimizer")
        assert abs(sum(t[k] for k in parts) + t["act_offload"] - est["step_s"]) < 1e-9


def _cells(out: str, row: str) -> list[str]:
    line = next(ln for ln in out.splitlines() if ln.startswith("│") and ln.strip("│ ").startswith(row + " "))
    return [c.strip() for c in line.strip("│").split("│")][1:]


def test_table_marks_the_faster_strategy_with_the_estimate_figures():
    fast = _json(["estimate", *PROBLEM, "--strategy", FAST, "--json", "--no-calibration"])["estimate"]
    slow = _json(["estimate", *PROBLEM, "--strategy", SLOW, "--json", "--no-calibration"])["estimate"]
    assert fast["tokens_per_s"] > slow["tokens_per_s"]  # the pair this test is about
    r = runner.invoke(app, ["compare", *PROBLEM, SLOW, FAST, "--no-calibration"], env={"COLUMNS": "250"})
    assert r.exit_code == 0, r.output
    assert _cells(r.stdout, "tokens/s (cluster)") == [
        f"{slow['tokens_per_s']:,.0f}",
        f"{fast['tokens_per_s']:,.0f}" + BEST_MARK,
    ]
    assert _cells(r.stdout, "step time (s)") == [f"{slow['step_s']:.3f}", f"{fast['step_s']:.3f}" + BEST_MARK]
    lower_mem = 0 if slow["mem_gib"] < fast["mem_gib"] else 1
    assert _cells(r.stdout, "peak memory (GiB)")[lower_mem].endswith(BEST_MARK)
    assert _cells(r.stdout, "activation offload (s)") == ["0.000", "0.000"]  # equal everywhere: none marked


def test_calibrated_tokens_row_shows_the_band():
    doc = _json(["estimate", *PROBLEM, "--strategy", FAST, "--json"])
    lo, hi = doc["calibration"]["tokens_per_s_band"]
    r = runner.invoke(app, ["compare", *PROBLEM, FAST, SLOW], env={"COLUMNS": "250"})
    cell = _cells(r.stdout, "tokens/s (cluster; 80% band)")[0]
    assert cell == f"{doc['estimate']['tokens_per_s']:,.0f} ({lo:,.0f}-{hi:,.0f}){BEST_MARK}"


def test_best_columns_by_hand():
    assert best_columns([1.0, 3.0, 2.0], ["1", "3", "2"], True) == {1}
    assert best_columns([1.0, 3.0, 2.0], ["1", "3", "2"], False) == {0}
    assert best_columns([0.0091, 0.0089, 0.5], ["0.009", "0.009", "0.500"], False) == {0, 1}  # tie as shown
    assert best_columns([0.0091, 0.0089], ["0.009", "0.009"], False) == set()  # nothing to choose


def test_invalid_label_names_the_label_and_token():
    r = runner.invoke(app, ["compare", "TP8 mb1", "TP4 PQ2 mb1"])
    err = r.stderr.strip()
    assert r.exit_code == 2 and "\n" not in err and "label 2 'TP4 PQ2 mb1'" in err and "'PQ2'" in err
