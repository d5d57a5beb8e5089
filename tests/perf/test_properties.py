"""Property tests (hypothesis) of the analytical model's invariants."""

from __future__ import annotations

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from autopar.catalog import get_gpu, get_model
from autopar.perf import estimate, validate_strategy
from autopar.specs import ClusterSpec, Strategy, Workload

MODELS = ["Llama-3.1-8B", "Llama-3.1-70B", "GPT-3-175B-Megatron", "Mixtral-8x7B", "Qwen3-30B-A3B"]
GPUS = ["A100-80GB", "H100-SXM", "H200", "B200"]
FRAMEWORKS = ["megatron", "megatron-legacy", "torchtitan", "fsdp", "deepspeed"]
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])


@st.composite
def problems(draw):
    """A model, a cluster, a workload and a strategy that passes validation."""
    model = get_model(draw(st.sampled_from(MODELS)))
    gpu = get_gpu(draw(st.sampled_from(GPUS)))
    n = draw(st.sampled_from([8, 16, 32, 64, 128]))
    cluster = ClusterSpec(gpu=gpu, num_gpus=n)
    w = Workload(
        seq_len=draw(st.sampled_from([2048, 4096, 8192])),
        global_batch=draw(st.sampled_from([128, 256])),
        precision=draw(st.sampled_from(["bf16", "fp8"])) if gpu.fp8_flops else "bf16",
        framework=draw(st.sampled_from(FRAMEWORKS)),
    )
    tp = draw(st.sampled_from([1, 2, 4, 8]))
    pp = draw(st.sampled_from([1, 2, 4]))
    ep = draw(st.sampled_from([1, 2, 4, 8])) if model.is_moe else 1
    s = Strategy(
        tp=tp,
        pp=pp,
        ep=ep,
        etp=tp if model.is_moe else None,  # explicit: unset knobs would be completed per strategy
        sp=tp > 1,
        zero=draw(st.integers(0, 3)),
        micro_batch=draw(st.sampled_from([1, 2])),
        recompute=draw(st.sampled_from(["none", "selective", "full"])),
    ).with_dp(n)
    assume(not validate_strategy(model, cluster, w, s))
    return model, cluster, w, s


def _valid(model, cluster, w, s) -> bool:
    return not validate_strategy(model, cluster, w, s)


def _doubled(cluster: ClusterSpec) -> ClusterSpec:
    """The same cluster with twice the GPUs, so a model-parallel degree can double at the same dp."""
    return cluster.model_copy(update={"num_gpus": cluster.num_gpus * 2})


@SETTINGS
@given(problems())
def test_more_tp_never_raises_weight_memory(p):
    # At the same data-parallel degree (ZeRO-3 shards over dp, so dp must not shrink).
    model, cluster, w, s = p
    big_cluster = _doubled(cluster)
    bigger = s.model_copy(update={"tp": s.tp * 2, "sp": True, "etp": s.tp * 2 if model.is_moe else None})
    assume(s.tp * 2 <= 8 and _valid(model, big_cluster, w, bigger))
    assert (
        estimate(model, big_cluster, w, bigger).memory.weights
        <= estimate(model, cluster, w, s).memory.weights + 1e-6
    )


@SETTINGS
@given(problems())
def test_more_pp_never_raises_weight_memory(p):
    model, cluster, w, s = p
    big_cluster = _doubled(cluster)
    bigger = s.model_copy(update={"pp": s.pp * 2})
    assume(_valid(model, big_cluster, w, bigger))
    assert (
        estimate(model, big_cluster, w, bigger).memory.weights
        <= estimate(model, cluster, w, s).memory.weights + 1e-6
    )


@SETTINGS
@given(problems(), st.integers(0, 3))
def test_higher_zero_stage_never_raises_weight_memory(p, z):
    model, cluster, w, s = p
    lo, hi = sorted((s.zero, z))
    e_lo = estimate(model, cluster, w, s.model_copy(update={"zero": lo}))
    e_hi = estimate(model, cluster, w, s.model_copy(update={"zero": hi}))
    assert e_hi.memory.weights <= e_lo.memory.weights + 1e-6
    states = lambda e: e.memory.weights + e.memory.grads + e.memory.optimizer  # noqa: E731
    assert states(e_hi) <= states(e_lo) + 1e-6


@SETTINGS
@given(problems())
def test_recompute_never_raises_activation_memory_nor_lowers_step_time(p):
    model, cluster, w, s = p
    ests = {
        r: estimate(model, cluster, w, s.model_copy(update={"recompute": r}))
        for r in ("none", "selective", "full")
    }
    for r in ("selective", "full"):
        assert ests[r].memory.activations <= ests["none"].memory.activations + 1e-6
        assert ests[r].step_time_s >= ests["none"].step_time_s - 1e-12
    assert ests["full"].step_time_s >= ests["selective"].step_time_s - 1e-12


@SETTINGS
@given(problems())
def test_bubble_zero_without_pipeline_and_breakdowns_add_up(p):
    model, cluster, w, s = p
    e = estimate(model, cluster, w, s)
    if s.pp == 1:
        assert e.time.bubble == 0.0 and e.time.pp_comm == 0.0
    assert e.step_time_s == e.time.total
    assert abs(e.memory.total - sum(v for k, v in e.memory.as_dict().items() if k != "total")) < 1.0
    assert e.tokens_per_s * e.step_time_s == __import__("pytest").approx(w.global_batch * w.seq_len, rel=1e-9)
    assert 0 < e.mfu < 1 and e.hfu >= e.mfu - 1e-12
    assert e.fits == (e.headroom_bytes >= 0)


@SETTINGS
@given(problems())
def test_estimate_is_deterministic(p):
    model, cluster, w, s = p
    assert estimate(model, cluster, w, s) == estimate(model, cluster, w, s)
