"""`autopar compare`: labels side by side; every figure equals what `estimate` prints for that label."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autopar.cli import app
from autopar.cli.compare import BEST_MARK
from autopar.reports.comparison import best_columns

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


# --------------------------------------------------------------------------- --out FILE.html

LLAMA_OOM = "TP1 DP64/Z1 mb1"  # 70B without model parallelism: faster on paper, ~590 GiB per GPU
LLAMA_A, LLAMA_B = "TP8+SP PP4 DP2/Z1 mb1", "TP4+SP PP4v5 DP4/Z1 mb1 full-AC"


def _card(page: str, objective: str) -> str:
    m = re.search(rf'id="best-{objective}">(.*?)</div>', page)
    assert m, objective
    return html.unescape(m.group(1))


def _best_row_cells(page: str, row: str) -> list[int]:
    """Columns (0-based, labels only) marked best in the table row named `row`."""
    tr = re.search(rf"<tr><td[^>]*>{re.escape(html.escape(row))}</td>(.*?)</tr>", page)
    assert tr, row
    return [i for i, td in enumerate(re.findall(r"<td[^>]*>.*?</td>", tr.group(1))) if 'class="best"' in td]


def test_html_answer_and_best_marks_from_the_json(tmp_path: Path):
    labels = [LLAMA_OOM, LLAMA_A, LLAMA_B]
    docs = _json(["compare", *labels, "--json", "--no-calibration"])
    out = tmp_path / "cmp.html"
    r = runner.invoke(app, ["compare", *labels, "--no-calibration", "--out", str(out), "--plotly", "cdn"])
    assert r.exit_code == 0, r.output
    assert f"report: {out.resolve()}" in r.stdout.replace("\n", "")
    page = out.read_text()
    for label in labels:
        assert html.escape(label) in page
    tps = [d["estimate"]["tokens_per_s"] for d in docs]
    mem = [d["estimate"]["mem_gib"] for d in docs]
    usd = [d["cost"]["usd_per_mtoken"] for d in docs]
    fits = [i for i, d in enumerate(docs) if d["memory_verdict"] != "oom"]
    assert docs[0]["memory_verdict"] == "oom" and tps[0] == max(tps)  # the case this test is about
    fastest = max(fits, key=lambda i: tps[i])
    assert _card(page, "throughput") == labels[fastest]  # the OOM label is not the answer
    assert _card(page, "cost") == labels[min(fits, key=lambda i: usd[i])]
    assert _card(page, "memory") == labels[mem.index(min(mem))]
    # the table marks the best of every row over all labels, as the terminal table does
    assert _best_row_cells(page, "tokens/s (cluster)") == [tps.index(max(tps))]
    assert _best_row_cells(page, "peak memory (GiB)") == [mem.index(min(mem))]
    assert _best_row_cells(page, "$/Mtoken") == [usd.index(min(usd))]
    assert 'id="fig-step-split"' in page and "cdn.plot.ly" in page


def test_split_chart_stacks_to_the_step_time():
    docs = _json(["compare", LLAMA_A, LLAMA_B, "--json", "--no-calibration"])
    from autopar.cli.evaluation import evaluate, label_strategy
    from autopar.cli.options import single_problem as problem
    from autopar.reports.compare_html import split_figure
    from autopar.reports.comparison import STEP_SPLIT, comparison_info

    flags = {
        "model": "Llama-3.1-70B", "gpu": None, "gpus": None, "gpus_per_node": None, "nvlink_domain": None,
        "cluster_name": None, "internode_gbps": None, "framework": "megatron", "seq_len": 8192,
        "global_batch": 512, "precision": "bf16", "tp_comm_overlap": None, "fp8_recipe": None,
        "moe_imbalance": None, "moe_capacity_factor": None, "moe_dispatcher": None,
        "moe_ep_overlap": False, "cuda_graphs": False,
    }  # fmt: skip
    m, c, w = problem(flags)
    evs = [evaluate(m, c, w, label_strategy(x, False), None, strict=True) for x in (LLAMA_A, LLAMA_B)]
    fig = split_figure(comparison_info(evs, "t"))
    assert fig.layout.barmode == "stack"
    for i, d in enumerate(docs):
        assert abs(sum(t.y[i] for t in fig.data) - d["estimate"]["step_s"]) < 1e-9
    parts = {name for f, name in STEP_SPLIT if any(d["time_s"][f] for d in docs)}
    assert {t.name for t in fig.data} == {p.strip() for p in parts}  # every non-zero part, no other


@pytest.mark.parametrize("target", ["dir", "/dev/null"])
def test_out_that_is_not_a_regular_file_is_one_line(tmp_path: Path, target: str):
    out = tmp_path if target == "dir" else Path(target)
    r = runner.invoke(app, ["compare", LLAMA_A, "--no-calibration", "--out", str(out)])
    err = r.stderr.strip()
    assert r.exit_code == 2 and "\n" not in err and str(out) in err and "Traceback" not in r.output


def test_plotly_mode_needs_out():
    r = runner.invoke(app, ["compare", LLAMA_A, "--plotly", "cdn"])
    assert r.exit_code == 2 and "--out" in r.stderr
