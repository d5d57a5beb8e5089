"""Objective registry: values, directions, parsing of --objectives."""

from __future__ import annotations

import math

import pytest

from autopar.catalog import get_gpu
from autopar.errors import AutoparError, UnknownNameError
from autopar.objectives import REGISTRY, all_values, get_objective, parse_objectives, usd_per_mtoken
from autopar.perf.types import Estimate, MemoryBreakdown, TimeBreakdown
from autopar.specs import ClusterSpec

GiB = 2**30


def fake_estimate(
    tokens_per_s: float = 100_000.0, headroom_gib: float = 6.0, step: float = 4.0, mfu: float = 0.42
) -> Estimate:
    """A hand-made Estimate with known headline figures."""
    mem = MemoryBreakdown(10 * GiB, 5 * GiB, 20 * GiB, 30 * GiB, 1 * GiB, 1 * GiB, 2 * GiB)
    t = TimeBreakdown(3.0, 0.0, 0.5, 0.0, 0.0, 0.1, 0.2, 0.2, 0.0)
    cap = mem.total + headroom_gib * GiB
    return Estimate(
        mem,
        t,
        step,
        tokens_per_s,
        tokens_per_s / 64,
        1e18,
        1.1e18,
        1.1e18,
        400.0,
        400.0,
        mfu,
        mfu * 0.9,
        mfu,
        989e12,
        cap,
        cap - mem.total,
        headroom_gib > 0,
        "compute",
    )


def test_usd_per_mtoken_by_hand():
    # 64 GPUs x $2/h = $128/h = $0.035556/s; at 100,000 tokens/s -> 3.5556e-7 $/token -> $0.35556/Mtoken.
    assert usd_per_mtoken(100_000.0, 64, 2.0) == pytest.approx(128 / 3600 / 100_000 * 1e6)
    assert usd_per_mtoken(100_000.0, 64, 2.0) == pytest.approx(0.355556, rel=1e-5)
    assert math.isinf(usd_per_mtoken(0.0, 8, 2.0))


def test_registry_values_and_directions():
    cluster = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=64)
    e = fake_estimate()
    v = all_values(e, cluster, 2.0)
    assert v["throughput"] == 100_000.0
    assert v["headroom"] == pytest.approx(6.0)
    assert v["cost"] == pytest.approx(0.355556, rel=1e-5)
    assert v["step_time"] == 4.0
    assert v["mfu"] == pytest.approx(42.0)
    dirs = {n: o.info.direction for n, o in REGISTRY.items()}
    assert dirs == {
        "throughput": "maximize",
        "headroom": "maximize",
        "cost": "minimize",
        "step_time": "minimize",
        "mfu": "maximize",
    }
    # to_min negates maximised objectives only.
    assert get_objective("throughput").to_min(5.0) == -5.0
    assert get_objective("cost").to_min(5.0) == 5.0


def test_parse_objectives():
    assert [o.name for o in parse_objectives(None)] == ["throughput", "cost"]  # free memory: a constraint
    assert [o.name for o in parse_objectives("cost, mfu")] == ["cost", "mfu"]
    assert [o.name for o in parse_objectives(["Throughput", "step-time"])] == ["throughput", "step_time"]
    with pytest.raises(AutoparError, match="pick 2 to 4"):
        parse_objectives("throughput")
    with pytest.raises(AutoparError, match="pick 2 to 4"):
        parse_objectives("throughput,headroom,cost,mfu,step_time")
    with pytest.raises(AutoparError, match="once"):
        parse_objectives("cost,cost")
    with pytest.raises(UnknownNameError, match="throughput"):
        parse_objectives("througput,cost")
