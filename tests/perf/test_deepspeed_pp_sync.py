"""DeepSpeed's pipeline engine runs the data-parallel sync after the pipeline flush (software.yaml
pp_syncs_after_flush).

deepspeed/runtime/pipe/engine.py `PipelineEngine.__init__` turns the engine's backward all-reduce off ("We
schedule the all-reduces, so disable it in super().backward()"), and deepspeed/runtime/pipe/schedule.py
`TrainSchedule.steps` issues ReduceTiedGrads, ReduceGrads and OptimizerStep only after the last step of the
schedule, so with PP > 1 no gradient bucket and no ZeRO-1 parameter gather hides under a backward or a
forward: every second of the DP collectives is exposed. Without PP the engine's own backward hooks overlap
as before. No other stack's schedule does this.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np
import pytest

from autopar.catalog import get_gpu, get_model
from autopar.perf import fsdp
from autopar.perf.context import perf_context
from autopar.perf.estimate import StageTime, ddp_dp_time, estimate, sync_windows
from autopar.perf.memory import StageParams
from autopar.perf.software import FRAMEWORKS, software_for
from autopar.specs import ClusterSpec, Strategy, Workload

MODEL = get_model("BLOOM-176B")
CLUSTER = ClusterSpec(gpu=get_gpu("A100-80GB"), num_gpus=384, gpus_per_node=8)
WORKLOAD = Workload(seq_len=2048, global_batch=2048, framework="deepspeed")
STAGE = StageTime(comp=0.9, re=0.0, tp=0.0, cp=0.0, ep=0.0, fwd=0.3, n_layers=6)
PARAMS = StageParams(1.2e9, 0.0, 1e8)
GROUPS = fsdp.dp_groups(4, 1, 8, 1, 1, None)


def _overlapping(ctx):
    """The same context with a schedule that overlaps the sync (the flag off)."""
    twin = copy.copy(ctx)
    twin.sw = replace(ctx.sw, pp_syncs_after_flush=False)
    return twin


def test_only_deepspeed_syncs_after_the_flush():
    assert [fw for fw in FRAMEWORKS if software_for(fw).pp_syncs_after_flush] == ["deepspeed"]


def test_windows_close_with_pp_only():
    ctx = perf_context(MODEL, CLUSTER, WORKLOAD)
    assert sync_windows(ctx, STAGE, 1) == pytest.approx((0.6, 0.3))
    assert sync_windows(ctx, STAGE, 12) == (0.0, 0.0)
    bwd, fwd = sync_windows(ctx, STAGE, np.array([1, 2, 12]))
    assert bwd.tolist() == pytest.approx([0.6, 0.0, 0.0]) and fwd.tolist() == pytest.approx([0.3, 0.0, 0.0])


@pytest.mark.parametrize("zero", [0, 1])
def test_pp_exposes_every_dp_second(zero):
    """With PP the exposed time is the whole collective time the overlapping schedule would split into exposed
    and hidden; without PP both schedules agree."""
    ctx = perf_context(MODEL, CLUSTER, WORKLOAD)
    twin = _overlapping(ctx)
    for p in (2, 12):
        flushed, hidden = (
            ddp_dp_time(ctx, zero, GROUPS, PARAMS, STAGE, 32, p),
            ddp_dp_time(twin, zero, GROUPS, PARAMS, STAGE, 32, p),
        )
        assert hidden.overlapped > 0  # the twin hides some of it, so the check below can fail
        assert flushed.overlapped == 0.0
        assert flushed.exposed == pytest.approx(hidden.exposed + hidden.overlapped, rel=1e-12)
    same, twin_same = (
        ddp_dp_time(ctx, zero, GROUPS, PARAMS, STAGE, 32, 1),
        ddp_dp_time(twin, zero, GROUPS, PARAMS, STAGE, 32, 1),
    )
    assert (same.exposed, same.overlapped) == (twin_same.exposed, twin_same.overlapped)


def test_estimate_charges_the_sync_after_the_flush():
    """BLOOM-176B's layout (TP4 PP12 DP8, ZeRO-1): DeepSpeed exposes more DP time than Megatron, whose
    schedule overlaps the same collectives (same bytes: both reduce fp32 gradients)."""
    s = Strategy(tp=4, pp=12, dp=8, micro_batch=2, recompute="full", zero=1)
    ds = estimate(MODEL, CLUSTER, WORKLOAD, s, check=False).time.dp_comm
    mg = estimate(MODEL, CLUSTER, WORKLOAD.model_copy(update={"framework": "megatron"}), s, check=False)
    assert ds > mg.time.dp_comm
