"""The memory margin (search/margin.py, issue 21): a fit holds at the memory band's upper end plus --min-headroom."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autopar.calibration.apply.default import default_artifact_path
from autopar.catalog import get_gpu, get_model
from autopar.search import build_space, optimize
from autopar.search.evaluate import MEMORY_CONSTRAINT, Evaluator
from autopar.search.margin import MemoryMargin, band_margin, search_margin
from autopar.search.sweep import block_outcomes
from autopar.specs import ClusterSpec, Workload
from autopar.units import GiB

SMALL = (
    get_model("Llama-3.1-8B"),
    ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=8),
    Workload(seq_len=16384, global_batch=16, framework="torchtitan"),  # a stack the shipped band measured
)


def test_need_by_hand():
    # 60 GiB predicted of 79.2 usable, band x1.25, 2 GiB asked on top: 60 x 1.25 + 2 = 77 <= 79.2 -> fits by 2.2
    m = MemoryMargin(factor=1.25, extra_gib=2.0)
    assert m.need_gib(79.2 - 60.0, 60.0) == pytest.approx(-2.2)
    assert m.required_free_gib(60.0) == pytest.approx(17.0)
    # 62 GiB: 77.5 + 2 = 79.5 > 79.2 -> short by 0.3
    assert m.need_gib(79.2 - 62.0, 62.0) == pytest.approx(0.3)
    # no band: exactly the old constraint, min headroom - headroom
    assert MemoryMargin(extra_gib=2.0).need_gib(1.2, 78.0) == 2.0 - 1.2


def test_default_band_is_the_shipped_calibrations_upper_end():
    doc = json.loads(default_artifact_path().read_text())
    hi, coverage = doc["memory"]["band"][1], doc["memory"]["coverage"]
    m = band_margin(None, 0.0)
    assert m.factor == pytest.approx(math.exp(hi)) and m.factor > 1.0
    assert m.coverage == pytest.approx((1 + coverage) / 2)  # two-sided 80% band -> one-sided 90% upper end
    assert "torchtitan_bench" in m.source and f"x{m.factor:.3f}" in m.describe()
    assert search_margin(None, 3.0, use_band=False) == MemoryMargin(extra_gib=3.0)


def test_invalid_margin_is_refused():
    with pytest.raises(ValueError):
        MemoryMargin(factor=0.9)
    with pytest.raises(ValueError):
        MemoryMargin(extra_gib=math.nan)


@settings(max_examples=200, deadline=None)
@given(
    peak=st.floats(0.1, 500.0),
    usable=st.floats(1.0, 300.0),
    f1=st.floats(1.0, 2.0),
    df=st.floats(0.0, 1.0),
    e1=st.floats(0.0, 20.0),
    de=st.floats(0.0, 20.0),
)
def test_a_wider_band_or_more_headroom_never_admits_more(peak, usable, f1, df, e1, de):
    narrow, wide = MemoryMargin(factor=f1, extra_gib=e1), MemoryMargin(factor=f1 + df, extra_gib=e1 + de)
    head = usable - peak
    assert wide.need_gib(head, peak) >= narrow.need_gib(head, peak)
    # and arrays give the floats' answers (the sweep's path)
    arr = wide.need_gib(np.array([head, head]), np.array([peak, peak]))
    assert arr[0] == wide.need_gib(head, peak)


def _feasible(margin: MemoryMargin) -> set:
    space = build_space(*SMALL)
    ev = Evaluator(SMALL[0], space.hardware, prices=[1.0], memory_margin=margin, space_points=True)
    return {p.key for p in space if ev(p).feasible}


def test_wider_band_admits_a_subset_of_the_strategies():
    base = _feasible(MemoryMargin())
    band = _feasible(MemoryMargin(factor=1.15))
    wider = _feasible(MemoryMargin(factor=1.3, extra_gib=1.0))
    assert wider <= band <= base
    assert len(wider) < len(band) < len(base)  # the margin bites on this problem


def test_constraint_value_and_sweep_agree_with_the_scalar_evaluator():
    space = build_space(*SMALL)
    margin = MemoryMargin(factor=1.2, extra_gib=1.0)
    ev = Evaluator(SMALL[0], space.hardware, prices=[1.0], memory_margin=margin, space_points=True)
    block = next(iter(space.column_blocks(4096)))
    values, feasible = block_outcomes(space, ev, block)
    for i in range(0, len(feasible), max(1, len(feasible) // 40)):
        out = ev(space.point(block.start + i))
        e = out.estimate
        want = 1.0 - e.headroom_bytes / GiB + 0.2 * e.peak_memory_bytes / GiB  # peak x 1.2 + 1 - usable
        if e.fits:
            assert out.constraints[MEMORY_CONSTRAINT] == pytest.approx(want)
            assert out.feasible == (want <= 0)
        assert bool(feasible[i]) == out.feasible
        assert values[MEMORY_CONSTRAINT][i] == pytest.approx(want, abs=1e-6)


def test_optimize_uses_the_band_and_says_so():
    res = optimize(*SMALL, sampler="exhaustive", objectives=("throughput", "headroom"))
    plain = optimize(*SMALL, sampler="exhaustive", objectives=("throughput", "headroom"), memory_band=False)
    f = band_margin(None, 0.0).factor
    assert res.notes[0].startswith(f"memory margin: a strategy fits at peak memory x{f:.3f}")
    assert plain.notes[0] == (
        "memory margin: a strategy fits at point estimate of peak memory (no margin); "
        "free memory beyond it is also an objective"
    )
    feas = {t.strategy.label() for t in res.trials if t.feasible}
    assert feas <= {t.strategy.label() for t in plain.trials if t.feasible}
    for t in res.trials:
        if t.feasible:  # every admitted strategy fits at the band's upper end
            assert t.estimate.peak_memory_bytes * f <= t.estimate.capacity_bytes * (1 + 1e-12)
    assert res.inputs["memory_band_factor"] == pytest.approx(f)


def test_nsga2_trials_carry_the_native_constraint_and_name_the_margin(tmp_path):
    import optuna

    from autopar.search.storage import open_storage

    path = str(tmp_path / "s.log")
    optimize(*SMALL, sampler="nsga2", budget=30, seed=0, storage=path, study_name="m")
    study = optuna.load_study(study_name="m", storage=open_storage(path, create=False))
    done = [t for t in study.trials if t.state.name == "COMPLETE"]
    f = band_margin(None, 0.0).factor
    fitting = [t for t in done if "memory_margin_gib" in t.user_attrs]
    assert done and fitting
    for t in fitting:  # the margin asks (f - 1) x peak free; the constraint is what is short of it
        a = t.user_attrs
        assert a["memory_margin_gib"] == pytest.approx((f - 1) * a["memory_gib"], abs=2e-3)
        assert t.system_attrs["constraints:memory_gib"] == pytest.approx(
            a["memory_margin_gib"] - a["headroom_gib"], abs=2e-3
        )


def test_a_study_stored_before_the_band_is_rebuilt_without_it():
    from autopar.problem import SearchSettings
    from autopar.search.stored import _settings

    node = SearchSettings(min_headroom_gib=2.0).stored()["settings"]
    assert node["memory_band"] is True
    assert _settings(node, ["throughput", "headroom"], None, 2.0, None, "on_demand").memory_band is True
    old = {k: v for k, v in node.items() if k != "memory_band"}  # as written before issue 21
    rebuilt = _settings(old, ["throughput", "headroom"], None, 2.0, None, "on_demand")
    assert rebuilt.memory_band is False and rebuilt.min_headroom_gib == 2.0
    assert _settings(None, ["throughput", "headroom"], None, 2.0, None, "on_demand").memory_band is False


def test_a_stack_the_band_never_saw_keeps_the_fixed_margin():
    """The shipped band was fitted on torchtitan peaks only: a Megatron search keeps the fixed 2 GiB (plus
    what the user asks) and says why; a torchtitan search uses the band."""
    from autopar.calibration.apply import load_default_calibration
    from autopar.search.margin import FIXED_MARGIN_GIB

    assert load_default_calibration().meta.memory_stacks == ["torchtitan"]
    meg = band_margin(None, 1.0, "megatron")
    assert (meg.factor, meg.extra_gib) == (1.0, 1.0 + FIXED_MARGIN_GIB)
    assert "no measured peak of a megatron run" in meg.describe()
    assert band_margin(None, 1.0, "torchtitan") == band_margin(None, 1.0)
    m, c, w = SMALL
    res = optimize(m, c, w.model_copy(update={"framework": "megatron"}), sampler="exhaustive",
                   objectives=("throughput", "headroom"))  # fmt: skip
    assert "+ 2 GiB: no measured peak of a megatron run" in res.notes[0]
    for t in res.trials:
        if t.feasible:
            assert t.values["headroom"] >= FIXED_MARGIN_GIB - 1e-9
