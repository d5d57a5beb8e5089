"""Completion of unset knobs for a layout the rules reject, estimated unchecked (perf/complete.py)."""

from __future__ import annotations

import itertools

import pytest

from autopar.catalog import get_gpu, get_model
from autopar.errors import InvalidStrategyError
from autopar.perf import estimate
from autopar.specs import ClusterSpec, Strategy, Workload


def test_unchecked_completion_keeps_the_fastest_fitting_candidate():
    # DeepSeek-V3's 61 layers over PP2 x VP8 break the even-split rule (Megatron-Bridge runs it with a custom
    # --pipeline-model-parallel-layout); with check=False the unset recompute and ZeRO stage must still be
    # completed as documented: the candidate that fits and is fastest, not the most frugal one.
    m = get_model("DeepSeek-V3")
    cl = ClusterSpec(gpu=get_gpu("GB300"), num_gpus=256)
    w = Workload(seq_len=4096, global_batch=4096, precision="fp8", framework="megatron")
    s = Strategy(
        tp=1, pp=2, vpp=8, pp_schedule="interleaved", ep=32, etp=1, micro_batch=1, recompute=None, zero=None
    )
    with pytest.raises(InvalidStrategyError):
        estimate(m, cl, w, s)
    by_hand = []
    for rec, zero in itertools.product(("none", "selective", "full"), (0, 1, 2, 3)):
        e = estimate(m, cl, w, s.model_copy(update={"recompute": rec, "zero": zero}), check=False)
        if e.fits:
            by_hand.append(e.tokens_per_s)
    done = estimate(m, cl, w, s, check=False)
    assert done.fits
    assert done.tokens_per_s == pytest.approx(max(by_hand), rel=1e-12)
    assert done.strategy is not None and done.strategy.recompute != "full"
