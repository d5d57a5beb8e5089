"""Search constraints (`optimize --fix KNOB=VALUE --forbid KNOB[=VALUE]`): a filter on the space built once."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from autopar.catalog import get_gpu, get_model
from autopar.cli import app
from autopar.constraints import parse_constraints
from autopar.search.evaluate import Evaluator
from autopar.search.space import build_space
from autopar.search.study import optimize
from autopar.specs import ClusterSpec, Workload

runner = CliRunner()
SMALL = (
    get_model("Llama-3.1-8B"),
    ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=8),
    Workload(seq_len=16384, global_batch=16),
)
MOE = [
    "--model",
    "Mixtral-8x7B",
    "--gpus",
    "64",
    "--seq-len",
    "16384",
    "--global-batch",
    "64",
    "--no-calibration",
]


def _pareto(args: list[str]) -> list[dict]:
    r = runner.invoke(app, ["optimize", *MOE, "--budget", "40", "--json", *args])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)["pareto"]


def test_fix_tp_and_forbid_cp_reach_every_pareto_row():
    assert any(row["tp"] != 8 for row in _pareto([])) and any(
        row["cp"] > 1 for row in _pareto([])
    )  # not vacuous
    rows = _pareto(["--fix", "tp=8"])
    assert rows and all(row["tp"] == 8 and row["label"].startswith("TP8") for row in rows)
    rows = _pareto(["--forbid", "cp"])
    assert rows and all(row["cp"] == 1 and " CP" not in row["label"] for row in rows)
    rows = _pareto(["--fix", "tp=8", "--fix", "pp=2", "--forbid", "cp", "--forbid", "hsdp"])
    assert rows and all((r["tp"], r["pp"], r["cp"]) == (8, 2, 1) and "HSDP" not in r["label"] for r in rows)


def _hand_filtered(keep) -> list:
    return [p for p in build_space(*SMALL) if keep(p.strategy)]


@pytest.mark.parametrize(
    ("fix", "forbid", "keep"),
    [
        (["tp=2"], ["cp"], lambda s: s.tp == 2 and s.cp == 1),
        (
            [],
            ["cp_comm=allgather", "hsdp"],
            lambda s: (s.cp == 1 or s.cp_comm != "allgather") and s.dp_shard is None,
        ),
        (
            ["recompute=selective", "mb=1"],
            ["vpp", "sp"],
            lambda s: (s.recompute, s.micro_batch, s.vpp, s.sp) == ("selective", 1, 1, False),
        ),
    ],
)
def test_filtered_space_is_the_space_filtered_by_hand(fix, forbid, keep):
    space = build_space(*SMALL, constraints=parse_constraints(fix, forbid))
    want = _hand_filtered(keep)
    assert 0 < len(want) < build_space(*SMALL).size
    assert space.size == len(want) and [p.key for p in space] == [p.key for p in want]
    for i in range(0, space.size, max(1, space.size // 50)):  # decode of an encoded point stays in the filter
        assert space.decode(space.encode(space.point(i))) == space.point(i)


def _front(vectors: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Non-dominated (max, max) vectors, by definition."""
    return sorted({v for v in vectors if not any(w[0] >= v[0] and w[1] >= v[1] and w != v for w in vectors)})


def test_exact_front_of_the_filter_equals_the_hand_filtered_front():
    objectives = ("throughput", "headroom")
    cons = parse_constraints(["tp=2"], ["cp"])
    res = optimize(
        *SMALL,
        objectives=objectives,
        sampler="exhaustive",
        budget=10,
        min_headroom_gib=0.0,
        constraints=cons,
        memory_band=False,
    )
    got = sorted((r["throughput"], r["headroom"]) for r in res.pareto_rows if not r["near_tie"])
    ev = Evaluator(SMALL[0], build_space(*SMALL).hardware, prices=[1.0], min_headroom_gib=0.0)
    outs = [ev(p) for p in _hand_filtered(lambda s: s.tp == 2 and s.cp == 1)]
    want = _front([(o.values["throughput"], o.values["headroom"]) for o in outs if o.feasible])
    assert len(got) == len(want) > 1
    assert all(
        math.isclose(a, c, rel_tol=1e-9) and math.isclose(b, d, rel_tol=1e-9, abs_tol=1e-9)
        for (a, b), (c, d) in zip(got, want, strict=True)
    )


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--fix", "tp=3"], ["--fix tp=3", "not in the search space", "offered: 1, 2, 4, 8"]),
        (["--fix", "tq=8"], ["unknown knob 'tq'", "did you mean tp"]),
        (["--forbid", "cp_comm=allgathr"], ["'allgathr'", "did you mean allgather"]),
        (["--forbid", "zero"], ["--forbid zero", "give a value"]),
        (["--fix", "hsdp=2"], ["can only be forbidden"]),
        (["--fix", "tp=8", "--fix", "pp=8", "--fix", "cp=8"], ["no parallel layout", "--fix cp=8"]),
        (["--fix", "sp=maybe"], ["'maybe' is not a valid sp value"]),
    ],
)
def test_bad_constraints_are_one_line_errors(args, words):
    r = runner.invoke(app, ["optimize", *MOE, "--budget", "10", *args])
    err = r.stderr.strip()
    assert r.exit_code == 2 and "\n" not in err and all(w in err for w in words), err
