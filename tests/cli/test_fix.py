"""`autopar fix`: the README's OOM example returns a minimal change that the estimator says fits, --gpus NEW keeps
the layout where it stays valid, the --json document, and one-line errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from docs_pages import docs_text
from typer.testing import CliRunner

from autopar import estimate
from autopar.catalog import get_gpu, get_model
from autopar.cli import app
from autopar.defaults import DEFAULT_MIN_HEADROOM_GIB
from autopar.launch.labels import parse_strategy_label
from autopar.perf.vector_columns import columns_of
from autopar.search.margin import band_margin
from autopar.search.neighbourhood import distance, distances
from autopar.search.space import build_space
from autopar.specs import ClusterSpec, Workload
from autopar.units import GiB

runner = CliRunner()
README = docs_text()  # the README and docs/ pages
PROBLEM = ["--model", "llama-3.1-8b", "--seq-len", "32768", "--global-batch", "64"]
OOM_LABEL = "TP2+SP DP8/Z1 mb1"  # DP=8 on 16 GPUs (TP2), OOM at 32k: the README's example


def _fix(*args: str) -> dict:
    res = runner.invoke(app, ["fix", *PROBLEM, *args, "--json", "--no-calibration"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def _problem(gpus: int = 16):
    wl = Workload(
        seq_len=32768, global_batch=64, tp_comm_overlap=True
    )  # Megatron's default overlap, as the CLI
    return get_model("llama-3.1-8b"), ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=gpus), wl


def _fits(model, cluster, wl, s) -> bool:
    """Fits with the memory margin fix uses by default: peak x the band's upper end + min headroom <= usable."""
    e = estimate(model, cluster, wl, s.with_dp(cluster.num_gpus))
    need = band_margin(None, DEFAULT_MIN_HEADROOM_GIB, wl.framework).need_gib(
        e.headroom_bytes / GiB, e.peak_memory_bytes / GiB
    )
    return need <= 0


def test_readme_shows_the_oom_example() -> None:
    cmd = f'autopar fix {" ".join(PROBLEM[:2])} --gpus 16 {" ".join(PROBLEM[2:])} --strategy "{OOM_LABEL}"'
    assert cmd in README
    assert "OOM at 32k: cp 1→2-allgather" in README


def test_readme_oom_example_is_minimal_and_fits() -> None:
    """Brute force over the same space: no valid strategy at a smaller distance fits, every answer fits by
    `autopar.estimate` (called here, not through fix), and the first answer is the fastest at its distance."""
    doc = _fix("--gpus", "16", "--strategy", OOM_LABEL, "--top", "3")
    assert doc["goal"] == "fit" and doc["current"]["memory_verdict"] == "oom"
    model, cluster, wl = _problem()
    current = parse_strategy_label(OOM_LABEL)
    assert not _fits(model, cluster, wl, current)
    d = doc["distance"]
    assert d == 1 and [c["label"] for c in doc["candidates"]][0] == "TP2+SP CP2-allgather DP4/Z1 mb1"
    ref = columns_of([current])
    # every point of the space within d (distances on arrays: tests/search/test_neighbourhood.py checks them)
    near = [
        lay.strategy(int(j))
        for lay in build_space(model, cluster, wl).layouts
        for j in np.flatnonzero(distances(lay.columns(), ref) <= d)
    ]
    assert not any(_fits(model, cluster, wl, s) for s in near if distance(s, current) < d)
    at_d = [s for s in near if distance(s, current) == d and _fits(model, cluster, wl, s)]
    best = max(estimate(model, cluster, wl, s).tokens_per_s for s in at_d)
    for c in doc["candidates"]:
        s = parse_strategy_label(c["label"])
        assert distance(s, current) == d and _fits(model, cluster, wl, s)
        assert c["headroom_gib"] == pytest.approx(estimate(model, cluster, wl, s).headroom_bytes / GiB)
    assert doc["candidates"][0]["tokens_per_s"] == pytest.approx(best)
    assert doc["searched"]["meeting_goal_by_distance"][str(d)] == len(at_d)


def test_gpus_keeps_the_layout_where_it_stays_valid() -> None:
    """16 -> 32 GPUs: the layout with DP doubled is valid and fits, so it is the answer (no knob changed)."""
    doc = _fix("--strategy", "TP2+SP CP4-a2a DP2/Z1 mb1", "--gpus", "32", "--top", "1")
    assert (
        doc["goal"] == "gpus" and doc["inputs"]["current_num_gpus"] == 16 and doc["inputs"]["num_gpus"] == 32
    )
    (c,) = doc["candidates"]
    assert (doc["distance"], c["label"], c["changes"]) == (0, "TP2+SP CP4-a2a DP4/Z1 mb1", [])
    assert "(DP 2→4, grad-accum 32→16)" in c["explanation"]


def test_gpus_changes_knobs_where_the_layout_is_not_valid() -> None:
    """16 -> 48 GPUs: DP12 does not divide the global batch of 64, so some knob must change; every answer is
    valid on 48 GPUs and fits."""
    from autopar.perf import validate_strategy

    doc = _fix("--strategy", "TP2+SP CP2-a2a DP4/Z1 mb1", "--gpus", "48", "--top", "2")
    model, cluster, wl = _problem(48)
    assert doc["distance"] >= 1
    for c in doc["candidates"]:
        s = parse_strategy_label(c["label"])
        assert validate_strategy(model, cluster, wl, s) == [] and _fits(model, cluster, wl, s)
        assert len(c["changes"]) == doc["distance"] == c["distance"]


def test_json_fields() -> None:
    doc = _fix("--strategy", "TP1 DP16/Z1 mb1", "--forbid", "cp", "--top", "2")
    assert set(doc) >= {
        "inputs",
        "goal",
        "min_headroom_gib",
        "max_changes",
        "current",
        "distance",
        "candidates",
    }
    assert set(doc) >= {"further", "searched"}
    cur = doc["current"]
    for row in [cur, *doc["candidates"], doc["further"]]:
        assert 0 < row["mfu"] < 1  # one MFU unit: a fraction
        assert row["tokens_per_s_per_gpu"] == pytest.approx(row["tokens_per_s"] / row["num_gpus"])
        assert row["headroom_gib"] == pytest.approx(row["capacity_gib"] - row["peak_memory_gib"])
    for row in [*doc["candidates"], doc["further"]]:
        want = 100 * (row["tokens_per_s_per_gpu"] / cur["tokens_per_s_per_gpu"] - 1)
        assert row["tokens_per_s_per_gpu_delta_pct"] == pytest.approx(want)
        assert all(c["knob"] not in ("cp",) for c in row["changes"])  # --forbid cp
    further = doc["further"]
    assert further["distance"] == doc["distance"] + 1
    gain = 100 * (further["tokens_per_s"] / doc["candidates"][0]["tokens_per_s"] - 1)
    assert further["tokens_per_s_gain_pct"] == pytest.approx(gain) and gain >= 10
    assert [(c["knob"], c["from"], c["to"]) for c in further["changes"]] == [
        ("tp", "1", "4"),
        ("sp", "off", "on"),
    ]


def test_text_output_states_the_verdict_first() -> None:
    res = runner.invoke(app, ["fix", *PROBLEM, "--strategy", OOM_LABEL, "--top", "1"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    first = res.output.splitlines()[0]
    assert (
        first.startswith(f"current: {OOM_LABEL} on 16x H100-SXM") and ": oom, 106.4 GiB of 79.2 GiB" in first
    )
    assert (
        "1. OOM at 32k: cp 1→2-allgather (DP 8→4, grad-accum 8→16); keeps TP2; predicted 64.4 GiB of 79.2 GiB"
        in res.output
    )


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["--strategy", "TP2 XX mb1"], 2, "token 'XX' not understood"),
        (["--strategy", "TP2 PP3 DP8/Z1 mb1", "--gpus", "48"], 2, "is not valid on 48x H100-SXM"),
        (["--strategy", "TP3 DP5/Z1 mb1"], 2, "runs on 15 GPUs"),
        (["--strategy", OOM_LABEL, "--goal", "fitt"], 2, "did you mean fit?"),
        (["--strategy", "TP2+SP CP4-a2a DP2/Z1 mb1", "--goal", "fit"], 2, "already fits"),
        (["--strategy", "TP1 CP8-a2a DP2/Z1 mb1", "--goal", "gpus"], 2, "give --gpus NEW"),
        (["--strategy", "TP1 CP8 Z1 mb1", "--gpus", "16", "--goal", "gpus"], 2, "names no DP"),
        (["--strategy", "TP1 CP8-a2a DP2/Z1 mb1", "--goal", "faster", "--gpus", "32"], 2, "use --goal gpus"),
        (["--strategy", OOM_LABEL, "--allow", "precison"], 2, "did you mean precision?"),
        (["--strategy", "TP1 DP8/Z1 mb1", "--gpu", "A100-SXM-80GB", "--allow", "precision"], 2, "no FP8"),
        (["--strategy", "TP1 CP4-allgather DP4/Z2 mb1", "--goal", "faster"], 1, "is faster and fits"),
        (["--strategy", OOM_LABEL, "--max-changes", "0"], 1, "none of the 1 valid strategy within 0 changes"),
    ],
)
def test_errors_are_one_line(args: list[str], code: int, says: str) -> None:
    res = runner.invoke(app, ["fix", *PROBLEM, *args, "--no-calibration"], env={"COLUMNS": "1000"})
    assert res.exit_code == code, res.output
    assert says in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "Traceback" not in res.output
