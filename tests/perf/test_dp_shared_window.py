"""Dense and expert gradient buckets share one overlap window and one NIC (fsdp.ddp_time, shared_window)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autopar.perf import fsdp

SECONDS_PER_BYTE = 1e-9  # a toy link: 1 GB/s for every collective kind, group size and stride
# dense group of 8 ranks, expert-DP group of 4: Megatron's bucket is max(40M, 1M·dp) = 40M parameters
GROUPS = fsdp.DpGroups(n_shard=8, shard_stride=1, n_rep=1, rep_stride=8, n_edp=4, edp_stride=2)


def _toy(kind: int, nbytes: fsdp.Num, size: fsdp.Num, stride: fsdp.Num) -> fsdp.Num:
    return nbytes * SECONDS_PER_BYTE


def _ddp(zero: int, ne: float, ex: float, bwd: float, fwd: float) -> fsdp.DpTime:
    return fsdp.ddp_time(zero, ne, ex, GROUPS, None, "megatron", bwd, fwd, _toy)  # type: ignore[arg-type]


def test_dense_and_expert_reductions_exceed_the_window_together_not_alone():
    # 160M dense and 160M expert parameters: 4 buckets of 40M each, fp32 gradients → 0.16 s a bucket,
    # 0.64 s a buffer. Backward window 0.7 s: either buffer alone hides all but its last bucket (0.16 s).
    alone = _ddp(0, 160e6, 0.0, 0.7, 1.0)
    assert alone.exposed == pytest.approx(0.16)
    assert _ddp(0, 0.0, 160e6, 0.7, 1.0).exposed == pytest.approx(0.16)
    # Together 1.28 s of all-reduce on one NIC in one 0.7 s window: max(0.16 + 0.16, 1.28 − 0.7) = 0.58 s
    # exposed (two windows, as before, gave 0.32 s), and never more hidden than the window.
    both = _ddp(0, 160e6, 160e6, 0.7, 1.0)
    assert both.exposed == pytest.approx(0.58)
    assert both.overlapped == pytest.approx(0.70)


def test_zero1_reduce_scatters_share_backward_and_gathers_share_forward():
    # ZeRO-1: reduce-scatter at 4 B a parameter under the backward (0.64 s a buffer, window 0.7 s), the
    # bf16 parameter all-gather at 2 B under the forward (0.32 s a buffer, 0.08 s a bucket, window 0.5 s).
    t = _ddp(1, 160e6, 160e6, 0.7, 0.5)
    reduce_exposed = max(0.32, 1.28 - 0.7)  # 0.58
    gather_exposed = max(0.16, 0.64 - 0.5)  # 0.16: last buckets (0.08 + 0.08) bind
    assert t.exposed == pytest.approx(reduce_exposed + gather_exposed)
    assert t.overlapped == pytest.approx((1.28 - reduce_exposed) + (0.64 - gather_exposed))


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from([0, 1, 2]),
    st.floats(0, 1e9),
    st.floats(0, 1e9),
    st.floats(0, 5),
    st.floats(0, 5),
)
def test_shared_window_bounds(zero, ne, ex, bwd, fwd):
    both = _ddp(zero, ne, ex, bwd, fwd)
    dense, expert = _ddp(zero, ne, 0.0, bwd, fwd), _ddp(zero, 0.0, ex, bwd, fwd)
    # nothing is lost: the same collectives, only split differently between exposed and hidden
    assert both.exposed + both.overlapped == pytest.approx(
        dense.exposed + dense.overlapped + expert.exposed + expert.overlapped, rel=1e-9, abs=1e-12
    )
    # sharing a window never hides more than either window holds, nor more than the two apart did
    assert both.overlapped <= bwd + fwd + 1e-9
    assert both.exposed >= dense.exposed + expert.exposed - 1e-9


def test_arrays_match_floats():
    ne, ex = np.array([160e6, 0.0, 80e6]), np.array([160e6, 160e6, 0.0])
    zero, bwd, fwd = np.array([0, 1, 2]), np.array([0.7, 0.7, 0.1]), np.array([1.0, 0.5, 0.2])
    arr = fsdp.ddp_time(zero, ne, ex, GROUPS, None, "megatron", bwd, fwd, _toy)  # type: ignore[arg-type]
    for i in range(3):
        one = _ddp(int(zero[i]), ne[i], ex[i], bwd[i], fwd[i])
        assert arr.exposed[i] == pytest.approx(one.exposed, rel=1e-12)
        assert arr.overlapped[i] == pytest.approx(one.overlapped, rel=1e-12)
