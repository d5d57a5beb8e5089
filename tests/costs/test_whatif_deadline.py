"""`whatif --deadline` sizing: the fewest GPUs that meet a deadline, checked against exhaustive enumeration
of every count and every strategy on a small problem; a looser deadline never needs more GPUs; price
provenance; the batch flags; CLI errors."""

from __future__ import annotations

import functools
import json
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from autopar.catalog import get_gpu, get_model
from autopar.catalog.pricefile import default_price_book
from autopar.catalog.prices import resolve_price
from autopar.cli import app
from autopar.costs.options import scaled_workload
from autopar.costs.sizing import (
    SizingOption,
    lower_bound_count,
    peak_tokens_per_gpu,
    run_sizing,
)
from autopar.costs.whatif import batch_cap_note, choose_trial
from autopar.errors import SpecError
from autopar.search import optimize
from autopar.search.result import TrialRecord
from autopar.specs import ClusterSpec, Strategy, Workload

MODEL = get_model("GPT-3-1.3B")
WL = Workload(seq_len=2048, global_batch=16)
HOST = 2  # GPUs per host: candidate counts 2, 4, ..., MAX
MAX = 10
TOKENS = 1e9
GPUS = ("H100-SXM", "B200", "A100-80GB")


@functools.cache
def exhaustive_time(gpu: str, count: int) -> float:
    """Seconds to train TOKENS at the fastest fitting strategy among EVERY strategy of this count (the
    exhaustive sampler); inf when nothing fits or no layout exists."""
    cluster = ClusterSpec(gpu=get_gpu(gpu), num_gpus=count, gpus_per_node=HOST)
    try:
        result = optimize(MODEL, cluster, WL, sampler="exhaustive", budget=300, min_headroom_gib=2.0)
    except SpecError:
        return float("inf")
    best = choose_trial(result)
    return float("inf") if best is None else TOKENS / best.values["throughput"]


@functools.cache
def _auto_search(gpu: str, count: int, gb: int):
    cluster = ClusterSpec(gpu=get_gpu(gpu), num_gpus=count, gpus_per_node=HOST)
    return optimize(MODEL, cluster, WL.model_copy(update={"global_batch": gb}), min_headroom_gib=2.0)


def cached_optimize(model, cluster, workload, **kw):
    """The default (auto) search, memoised per (GPU, count, batch) so property examples reuse it."""
    assert kw["sampler"] == "auto"
    return _auto_search(cluster.gpu.name, cluster.num_gpus, workload.global_batch)


def size(deadline_s: float, gpus=GPUS, **kw):
    opts = [SizingOption(g, HOST, "host") for g in gpus]
    args = dict(token_budget=TOKENS, deadline_s=deadline_s, max_gpus=MAX, gpus_per_node=HOST)
    args.update(kw)
    return run_sizing(MODEL, opts, WL, optimize_fn=cached_optimize, **args)


def expected_min_count(gpu: str, deadline_s: float) -> int | None:
    for n in range(HOST, MAX + 1, HOST):
        if exhaustive_time(gpu, n) <= deadline_s:
            return n
    return None


def test_throughput_is_not_monotone_in_the_count_here():
    # The reason sizing does not bisect: 10 H100s (PP5 x DP2; 16 sequences do not split over 10 ranks) train
    # slower than 8 (DP8).
    assert exhaustive_time("H100-SXM", 10) > exhaustive_time("H100-SXM", 8)


@pytest.mark.parametrize("gpu", GPUS)
def test_min_count_equals_exhaustive_enumeration(gpu):
    times = sorted({exhaustive_time(gpu, n) for n in range(HOST, MAX + 1, HOST)} - {float("inf")})
    for deadline in [t * (1 + 1e-9) for t in times] + [times[0] * 0.99]:  # each count's time, and too tight
        want = expected_min_count(gpu, deadline)
        row = size(deadline, gpus=(gpu,)).rows[0]
        got = row.answer.count if row.answer else None
        assert got == want, (gpu, deadline)
        if row.answer is not None:
            assert row.answer.time_to_train_s == pytest.approx(exhaustive_time(gpu, want), rel=1e-9)
            assert row.answer.total_cost_usd == pytest.approx(
                row.answer.time_to_train_s / 3600 * want * row.answer.usd_per_gpu_hour, rel=1e-9
            )
        else:
            assert "cannot meet" in row.reason


@pytest.mark.parametrize("gpu", GPUS)
def test_counts_below_the_peak_bound_cannot_meet_the_deadline(gpu):
    # The one shortcut, checked: no count under the 100%-MFU bound meets the deadline exhaustively.
    peak = peak_tokens_per_gpu(MODEL, WL, get_gpu(gpu), ["bf16"])
    for n in range(HOST, MAX + 1, HOST):
        t = exhaustive_time(gpu, n)
        assert t >= TOKENS / (n * peak)  # MFU <= 1
        bound = lower_bound_count(TOKENS, t, 1.0, peak)  # the deadline this count just meets
        assert n >= bound


@settings(max_examples=25, deadline=None)
@given(d1=st.floats(500, 40_000), d2=st.floats(500, 40_000))
def test_a_looser_deadline_never_needs_more_gpus(d1, d2):
    lo, hi = sorted((d1, d2))
    tight, loose = size(lo), size(hi)
    for a, b in zip(tight.rows, loose.rows, strict=True):
        n_tight = a.answer.count if a.answer else MAX + 1
        n_loose = b.answer.count if b.answer else MAX + 1
        assert n_loose <= n_tight
        if a.answer is None:
            assert "cannot meet" in a.reason


def test_infeasible_deadline_says_so_with_the_bound():
    row = size(1.0, gpus=("H100-SXM",)).rows[0]  # one second: over the peak bound at any count here
    assert row.answer is None and row.searched == []
    assert "even at 100% MFU it needs at least" in row.reason
    assert row.to_dict()["meets_deadline"] is False


def test_scaled_batch_grows_with_the_count():
    assert scaled_workload(WL, 8, 4096).global_batch == 16  # 8 x 4096 / 2048
    assert scaled_workload(WL, 3, 1000).global_batch == 1  # 3000 tokens: one whole sequence
    with pytest.raises(SpecError, match="less than one sequence"):
        scaled_workload(WL, 1, 1000)
    r = size(1e5, gpus=("H100-SXM",), batch_tokens_per_gpu=4096)
    assert r.rows[0].answer.global_batch == r.rows[0].answer.count * 4096 // 2048


def test_fixed_batch_cap_is_a_note():
    # 58 = 2 x 29 GPUs: no tp x pp x cp x dp layout with dp dividing 16 sequences (pp 29 > 24 layers) -> a note
    r = size(exhaustive_time("H100-SXM", 8) * (1 + 1e-9), gpus=("H100-SXM",))
    opt = SizingOption("H100-SXM", HOST, "host", counts=(58,))
    row = run_sizing(
        MODEL, [opt], WL, token_budget=TOKENS, deadline_s=1e9, gpus_per_node=HOST, optimize_fn=optimize
    ).rows[0]
    assert row.answer is None and "dp must divide" in row.searched[0].reason
    note = batch_cap_note(opt.label, row.searched, 16)
    assert (
        note.startswith("H100-SXM: the fixed global batch of 16 sequences limits scaling")
        and "58 GPUs" in note
    )
    # DP x micro-batch covering the whole batch (one micro-batch per rank) is the other cap; neither -> None
    a = r.rows[0].answer
    assert a is not None
    assert a.strategy.dp * a.strategy.micro_batch == 16  # 8 GPUs: DP8 x mb2 takes the whole batch
    assert "one micro-batch per step" in batch_cap_note("H100-SXM", r.rows[0].searched, 16)
    six = [o for o in r.rows[0].searched if o.count == 6]
    assert batch_cap_note("H100-SXM", six, 16) is None  # 6 GPUs: PP3 x DP2 x mb1 leaves room for DP
    with_batch = size(1e9, gpus=("H100-SXM",), batch_tokens_per_gpu=4096)
    assert not any("limits scaling" in n for n in with_batch.notes)  # the flag took effect: no cap note


def test_borrowed_prices_are_labelled():
    book = default_price_book()
    b300 = resolve_price(get_gpu("B300"), book, "on_demand")
    assert b300.borrowed_from == "B200" and b300.usd_per_gpu_hour == book.price("B200")
    assert b300.source.startswith("borrowed from B200")
    h100 = resolve_price(get_gpu("H100-SXM"), book, "on_demand")
    assert h100.borrowed_from == "" and h100.provenance == "built-in price book"
    assert resolve_price(get_gpu("H100-SXM"), book, override=1.0).source == "cluster override"


def test_every_price_taken_from_another_gpu_says_so(tmp_path):
    from autopar.catalog.loader import list_gpus
    from autopar.catalog.pricefile import load_price_book

    book = default_price_book()
    for gpu in list_gpus():
        r = resolve_price(gpu, book, "on_demand")
        own = book.resolve(gpu.name) == gpu.name
        assert (r.borrowed_from == "") == own, gpu.name
        assert own or r.source.startswith(f"borrowed from {r.borrowed_from} (no {gpu.name} price")
    # a user's own B300 price is not borrowed, and says which file it came from
    f = tmp_path / "p.csv"
    f.write_text("gpu,tier,usd_per_gpu_hour\nB300,on_demand,5.5\n")
    r = resolve_price(get_gpu("B300"), load_price_book(f), "on_demand")
    assert (r.usd_per_gpu_hour, r.borrowed_from, r.provenance) == (5.5, "", f"price file {f}")


def test_no_builtin_smaller_memory_sku_priced_above_its_larger_sibling():
    book = default_price_book()
    for tier in ("on_demand", "reserved", "spot"):
        assert book.price("A100-40GB", tier) <= book.price("A100-80GB", tier), tier


runner = CliRunner()


def test_cli_sizing_json_and_errors():
    base = ["whatif", "--model", "GPT-3-1.3B", "--tokens", "1B", "--seq-len", "2048", "--global-batch", "16"]
    res = runner.invoke(
        app,
        base + ["--deadline", "2h", "--option", "B300", "--gpus-per-node", "2", "--max-gpus", "4", "--json"],
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    row = doc["sizing"][0]
    assert doc["mode"] == "sizing" and row["gpu"] == "B300" and row["min_count"] in (2, 4)
    assert row["answer"]["price_borrowed_from"] == "B200"
    for args, field in [
        (["--option", "H100-SXM"], "option='H100-SXM'"),  # no count and no deadline
        (["--option", "H100-SXM:8", "--max-gpus", "8"], "max-gpus=8"),  # cannot take effect
        (["--deadline", "2x", "--option", "H100-SXM"], "deadline='2x'"),
        (["--option", "H100-SXM:8", "--batch-tokens-per-gpu", "4K"], "batch-tokens-per-gpu=4K"),
        (["--deadline", "2h", "--option", "H100-SXM:8", "--option", "B200", "--max-gpus", "0"], "max-gpus=0"),
        (["--deadline", "2h", "--option", "H100-SXM", "--max-spend", "1M"], "max-spend=1M"),
        (["--deadline", "2h", "--option", "NoSuchGPU"], "NoSuchGPU"),
    ]:
        res = runner.invoke(app, base + args)
        assert res.exit_code == 2, (args, res.output)
        assert field in res.stderr and len(res.stderr.strip().splitlines()) == 1


def _fake_search(mfu_over_peak: float):
    """A search stub: one fitting strategy at `mfu_over_peak` x the GPU's peak tokens/s per GPU."""
    peak = peak_tokens_per_gpu(MODEL, WL, get_gpu("H100-SXM"), ["bf16"])

    def fake(model, cluster, workload, **kw):
        tps = mfu_over_peak * peak * cluster.num_gpus
        est = SimpleNamespace(tokens_per_s=tps, headroom_bytes=5 * 2**30, mfu=mfu_over_peak)
        trial = TrialRecord(
            number=0,
            strategy=Strategy(tp=1, dp=cluster.num_gpus),
            num_gpus=cluster.num_gpus,
            gpu=cluster.gpu.name,
            precision="bf16",
            estimate=est,
            values={"throughput": tps},
            feasible=True,
            reason="",
        )
        return SimpleNamespace(trials=[trial], clusters=[cluster])

    return fake, peak


def test_counts_under_the_bound_are_skipped_and_an_estimate_above_peak_turns_the_skip_off():
    fake, peak = _fake_search(0.5)  # 50% MFU: count n trains n x 0.5 x peak tokens/s
    deadline = TOKENS / (8 * peak)  # the bound: 8 GPUs at 100% MFU; at 50% it takes 16
    opt = [SizingOption("H100-SXM", HOST, "host")]
    row = run_sizing(
        MODEL,
        opt,
        WL,
        token_budget=TOKENS,
        deadline_s=deadline,
        max_gpus=20,
        optimize_fn=fake,
        gpus_per_node=HOST,
    ).rows[0]
    assert row.lower_bound == 8
    assert [o.count for o in row.searched] == [8, 10, 12, 14, 16] and row.answer.count == 16
    fake, _ = _fake_search(3.0)  # an estimate claiming 300% MFU breaks the bound: every count is searched
    row = run_sizing(
        MODEL,
        opt,
        WL,
        token_budget=TOKENS,
        deadline_s=deadline,
        max_gpus=20,
        optimize_fn=fake,
        gpus_per_node=HOST,
    ).rows[0]
    assert [o.count for o in row.searched] == [2, 4] and row.answer.count == 4  # 4 x 3 >= 8
    assert "does not hold" in row.notes[0]


def test_whatif_takes_optimize_defaults():
    import inspect

    from autopar.cli.optimize import optimize_cmd
    from autopar.cli.whatif import _batch
    from autopar.cli.whatif import whatif as whatif_cmd
    from autopar.defaults import DEFAULT_GLOBAL_BATCH, DEFAULT_MODEL, DEFAULT_SEQ_LEN
    from autopar.problem import Problem

    w, o = inspect.signature(whatif_cmd).parameters, inspect.signature(optimize_cmd).parameters
    # --seq-len is read as text (8k suffixes, units.parse_seq_len); unstated it is the tree's 8192 (or the
    # --workload's: problem.py, workloads.py), the same option object in both commands
    assert w["seq_len"] is o["seq_len"] and o["seq_len"].default is None
    assert Problem().workload.seq_len == DEFAULT_SEQ_LEN == 8192
    assert _batch(None, None) == (DEFAULT_GLOBAL_BATCH, None) and o["global_batch"] is w["global_batch"]
    assert w["model"].default is o["model"].default is None  # optional: the tree's default (problem.py)

    assert Problem().model == DEFAULT_MODEL and Problem().workload.global_batch == DEFAULT_GLOBAL_BATCH == 512


def test_ranked_whatif_notes_the_batch_cap_too():
    from autopar.costs.whatif import run_whatif

    args = dict(token_budget=TOKENS, gpus_per_node=HOST, optimize_fn=cached_optimize, sensitivity=False)
    fixed = run_whatif(MODEL, ["H100-SXM:8"], WL, **args)
    o = fixed.options[0]
    assert o.strategy.dp * o.strategy.micro_batch == 16  # DP8 x mb2: the whole batch
    assert any(n.startswith("H100-SXM: the fixed global batch of 16") for n in fixed.notes)
    grown = run_whatif(MODEL, ["H100-SXM:8"], WL, batch_tokens_per_gpu=8192, **args)
    assert grown.options[0].global_batch == 32 and not any("limits scaling" in n for n in grown.notes)
    assert grown.to_dict()["global_batch"] is None and grown.to_dict()["batch_tokens_per_gpu"] == 8192
