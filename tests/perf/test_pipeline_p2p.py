"""Pipeline p2p stays on the critical path under Megatron's interleaved schedule (perf/pipeline.py
`pipeline_time`): every activation and gradient send of every micro-batch and model chunk is charged, the
stack's overlap_p2p_comm notwithstanding, because 1F1B keeps no slack between stages."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autopar.catalog import get_gpu, get_model
from autopar.perf import estimate
from autopar.perf.context import perf_context
from autopar.perf.pipeline import pipeline_time
from autopar.specs import ClusterSpec, Strategy, Workload


def _llama2_13b_nemo():
    """NeMo's LLAMA2-13B pre-training recipe (performance summary 24.07/24.12): 16 H100, TP1 PP4 VP10 DP4,
    micro-batch 1, global batch 128, sequence 4096, FP8."""
    model = get_model("llama2-13b")
    cluster = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=16)
    w = Workload(seq_len=4096, global_batch=128, precision="fp8", framework="megatron")
    s = Strategy(tp=1, pp=4, vpp=10, pp_schedule="interleaved", micro_batch=1, zero=1, recompute="none")
    return model, cluster, w, s


def test_interleaved_p2p_is_every_send_hand_derived():
    model, cluster, w, s = _llama2_13b_nemo()
    links = perf_context(model, cluster, w).links
    # DP4 x TP1 = 4 ranks per stage, 8 per host: stages 1->2 and 3->0 cross hosts, so the chain runs at NIC rate.
    m, v = 128 // (1 * 4), 10  # micro-batches per pipeline, model chunks per rank
    send = links.scaleout_lat + 4096 * 5120 * 2 / links.scaleout_bw  # one bf16 [s, b, h] activation
    e = estimate(model, cluster, w, s)
    assert e.time.pp_comm == pytest.approx(2 * m * v * send, rel=1e-9)
    assert 0.5 < e.time.pp_comm < 0.8  # ~1 ms per 42 MB send, 640 sends


@settings(max_examples=60, deadline=None)
@given(
    st.integers(2, 16),
    st.integers(1, 64),
    st.integers(2, 12),
    st.floats(1e-3, 1.0),
    st.floats(1e-5, 1e-2),
)
def test_interleaved_p2p_scales_with_chunks_not_with_compute(p, m, v, stage, send):
    """The p2p term counts 2·m·v sends whatever the stage's compute: a longer pass hides none of it."""
    _, p2p = pipeline_time("interleaved", p, m, v, stage, send)
    _, p2p_long = pipeline_time("interleaved", p, m, v, 10 * stage, send)
    assert p2p == pytest.approx(2 * m * v * send) == pytest.approx(p2p_long)
