"""Attention softmax exponentials on the special-function units (issue 11): catalog exp_rate and the paced
attention time (perf/layers.py `paced_time`). Expected numbers are derived by hand in the comments."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autopar.catalog import get_gpu, get_model
from autopar.perf.context import PerfContext
from autopar.perf.layers import layer_costs, paced_time
from autopar.specs import ClusterSpec, GPUSpec, Workload

# Published SFU exponential rates per GPU (see gpus.yaml header): FlashAttention-3 (Shah et al. 2024 §3.1)
# "3.9 TFLOPS of special functions" on H100 SXM5; NVIDIA "Inside Blackwell Ultra" Table 2: Blackwell
# 5 TeraExponentials/s, Blackwell Ultra 10.7.
PUBLISHED = {"H100": 3.9e12, "H800": 3.9e12, "H200": 3.9e12, "B200": 5e12, "GB200": 5e12}
PUBLISHED |= {"B300": 10.7e12, "GB300": 10.7e12}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_catalog_exp_rate_is_the_published_figure(name):
    assert get_gpu(name).exp_rate == pytest.approx(PUBLISHED[name])


@pytest.mark.parametrize("name", ["A100", "H100-PCIe", "MI300X"])
def test_unpublished_exp_rate_is_unset(name):
    assert get_gpu(name).exp_rate is None


def test_blackwell_ultra_doubles_the_exponentials():
    # NVIDIA: Blackwell Ultra "doubles SFU throughput" over Blackwell: 10.7 / 5 = 2.14.
    assert get_gpu("GB300").exp_rate / get_gpu("GB200").exp_rate == pytest.approx(2.14)


def test_hopper_exponentials_take_half_the_matmul_time_at_head_dim_128():
    # FA3 §3.1: at head dim 128 there are 512x more matmul FLOPs than exponentials, so on H100 "exponential
    # can take 50% of the cycle time compared to matmul": 512 / 989e12 = 5.177e-13 s vs 1 / 3.9e12 =
    # 2.564e-13 s per score (49.5%): the tensor cores pace, the bound does not bind.
    mma, exp = 512 / 989e12, 1 / 3.9e12
    assert exp / mma == pytest.approx(0.4953, abs=1e-4)
    assert paced_time(mma, 1.0, 3.9e12) == mma


def test_b200_is_co_limited_and_small_heads_are_exponential_bound():
    # FA4: B200 forward is co-limited by MMA and exponentials. Per score at head dim 128: 512 / 2.25e15 =
    # 2.276e-13 s of MMA vs 1 / 5e12 = 2.0e-13 s of exp (ratio 0.88, MMA still paces); at head dim 64 the
    # MMA halves to 1.138e-13 s and the exponentials (2.0e-13 s) pace.
    assert paced_time(512 / 2.25e15, 1.0, 5e12) == pytest.approx(2.276e-13, rel=1e-3)
    assert paced_time(256 / 2.25e15, 1.0, 5e12) == pytest.approx(2.0e-13)
    assert paced_time(256 / 2.25e15, 1.0, None) == pytest.approx(1.138e-13, rel=1e-3)


def _attention(gpu: GPUSpec, head_dim: int = 64, seq: int = 8192) -> tuple[float, float]:
    """Core-attention forward/backward of one layer (tp 1, cp 1, micro-batch 1) of a Llama-3-8B variant."""
    heads = 4096 // head_dim
    model = get_model("Llama-3-8B").model_copy(update={"heads": heads, "kv_heads": 8, "head_dim": head_dim})
    ctx = PerfContext(model, ClusterSpec(gpu=gpu, num_gpus=8), Workload(seq_len=seq, global_batch=8))
    lc = layer_costs(ctx, 1, 1, 1, 1, 1, False, "none", False)
    return lc.attn_fwd, lc.attn_bwd


def test_gb300_attention_faster_than_gb200_at_head_dim_64():
    # 64 heads x 64 dims, seq 8192, causal: 64 * 4096 * 8192 = 2^31 scores per layer; 2 * 128 FLOPs per score
    # = 5.498e11 FLOPs. Shape scale (8192/8704) * (64/80) / (128/144) = 0.8471, so the MMA takes
    # 5.498e11 / (2.5e15 * 0.8471) = 2.596e-4 s. Exponentials: 2^31 / 5e12 = 4.295e-4 s on GB200 (pace),
    # 2^31 / 10.7e12 = 2.007e-4 s on GB300 (MMA paces). Megatron fused attention on Blackwell: forward
    # efficiency 0.55, backward 0.45, plus 5 us kernel overhead. Backward: 2.5 x 2.596e-4 = 6.490e-4 s of MMA
    # against one recomputed exp per score (4.295e-4 s): MMA paces on both.
    f200, b200 = _attention(get_gpu("GB200"))
    f300, b300 = _attention(get_gpu("GB300"))
    assert f200 == pytest.approx(4.295e-4 / 0.55 + 5e-6, rel=1e-3)
    assert f300 == pytest.approx(2.596e-4 / 0.55 + 5e-6, rel=1e-3)
    assert b200 == pytest.approx(b300) == pytest.approx(6.490e-4 / 0.45 + 5e-6, rel=1e-3)


@pytest.mark.parametrize("name", ["H100", "H200", "GB200", "GB300"])
def test_head_dim_128_is_unchanged_by_the_bound(name):
    # At head dim 128 the tensor cores pace on Hopper (49.5%) and on Blackwell (GB200: 2.0e-13 s of exp vs
    # 512 / (2.5e15 * scale) >= 2.05e-13 s of MMA per score): the published rates change nothing.
    gpu = get_gpu(name)
    assert _attention(gpu, 128) == _attention(gpu.model_copy(update={"exp_rate": None}), 128)


@settings(max_examples=30, deadline=None)
@given(
    st.floats(1e11, 1e14),
    st.floats(1.0, 10.0),
    st.sampled_from([32, 64, 128]),
    st.sampled_from([1024, 4096, 16384]),
)
def test_a_faster_sfu_never_slows_attention(rate, factor, head_dim, seq):
    base = get_gpu("GB200")
    slow = _attention(base.model_copy(update={"exp_rate": rate}), head_dim, seq)
    fast = _attention(base.model_copy(update={"exp_rate": rate * factor}), head_dim, seq)
    unbounded = _attention(base.model_copy(update={"exp_rate": None}), head_dim, seq)
    for s, f, u in zip(slow, fast, unbounded, strict=True):
        assert u <= f * (1 + 1e-12) and f <= s * (1 + 1e-12)
