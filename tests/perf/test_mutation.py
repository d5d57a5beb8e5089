"""Mutation check: nudge a core formula of the estimator by a small factor and a golden check must fail.

Each check asserts a number derived by hand from a published formula (never from autopar's own code); each
mutation wraps one core formula so it returns `factor` x its value, in every autopar module that holds a
reference to it (memoised results are cleared first). A mutation no check notices means the suite could
not tell that formula from a wrong one. If a target is renamed, update MUTATIONS (the test says which).
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Callable

import pytest

from autopar.catalog import get_gpu, get_model
from autopar.perf import comm, count_params, estimate, model_flops_per_step
from autopar.perf.estimate import activation_bytes_per_layer
from autopar.specs import ClusterSpec, ModelSpec, Strategy, Workload


def _gpt(h: int, L: int, a: int, V: int = 51200) -> ModelSpec:
    """A Megatron GPT: MHA, GeLU MLP with f = 4h, LayerNorm, tied embeddings, dropout (pre-FlashAttention)."""
    return ModelSpec(
        name=f"gpt-{h}",
        layers=L,
        hidden=h,
        heads=a,
        ffn_hidden=4 * h,
        vocab=V,
        activation="gelu",
        norm="layernorm",
        tied_embeddings=True,
        dropout=True,
    )


def check_llama3_70b_params() -> None:
    # Llama 3 70B (h 8192, L 80, a 64, k 8, f 28672, V 128256), counted by hand: per layer
    # 8192*128*(128+16) attention + 3*8192*28672 MLP + 2*8192 norms; x80 + 2*128256*8192 + 8192 = 70,553,706,496.
    m = ModelSpec(name="l70", layers=80, hidden=8192, heads=64, kv_heads=8, ffn_hidden=28672, vocab=128256)
    assert count_params(m).total == 70_553_706_496


def check_gpt3_model_flops() -> None:
    # Narayanan et al. 2021 eq. (3) without recompute (Korthikanti 2022 appendix): 72·B·s·L·h²·(1 + s/6h + V/12hL).
    B, s, L, h, V = 1536, 2048, 96, 12288, 51200
    expected = 72 * B * s * L * h * h * (1 + s / (6 * h) + V / (12 * h * L))
    got = model_flops_per_step(_gpt(h, L, 96), s, B, causal=False)
    assert got == pytest.approx(expected, rel=1e-9)


def check_estimator_model_flops() -> None:
    # The estimator's own figure (MFU numerator) is the same closed form, 8B-class GPT on 8 GPUs.
    B, s, L, h, V = 16, 2048, 24, 4096, 51200
    m = _gpt(h, L, 32, V)
    e = estimate(
        m, ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=8), Workload(seq_len=s, global_batch=B), Strategy()
    )
    expected = 72 * B * s * L * h * h * (1 + s / (6 * h) + V / (12 * h * L))
    assert e.model_flops_per_step_full_attn == pytest.approx(expected, rel=1e-9)


def check_ring_collectives() -> None:
    # Ring all-reduce moves 2(n-1)/n·S per rank, reduce-scatter (n-1)/n·S (Patarasuk & Yuan 2009; nccl-tests
    # PERFORMANCE.md busbw). Latency 0 isolates the bandwidth term: inside one NVLink domain and one per node.
    links = comm.Links(node_size=8, scaleup_bw=400e9, scaleout_bw=50e9, scaleup_lat=0.0, scaleout_lat=0.0)
    S = 1e9
    assert comm.all_reduce(S, 8, 1, links) == pytest.approx(2 * 7 / 8 * S / 400e9, rel=1e-12)
    assert comm.reduce_scatter(S, 8, 1, links) == pytest.approx(7 / 8 * S / 400e9, rel=1e-12)
    assert comm.all_reduce(S, 4, 8, links) == pytest.approx(2 * 3 / 4 * S / 50e9, rel=1e-12)


def check_korthikanti_activations() -> None:
    # Korthikanti et al. 2022 (arXiv 2205.05198) Table 2, 16-bit: sbh(34 + 5as/h) per layer, no parallelism;
    # sbh(10 + 24/t + 5as/ht) with TP t; 34sbh/t with selective recompute and SP.
    s, b, h, a, t = 2048, 1, 12288, 96, 8
    m = _gpt(h, 96, a)
    w = Workload(seq_len=s, global_batch=8, framework="megatron-legacy")
    cases = {
        (1, False, "none"): s * b * h * (34 + 5 * a * s / h),
        (t, False, "none"): s * b * h * (10 + 24 / t + 5 * a * s / (h * t)),
        (t, True, "selective"): 34 * s * b * h / t,
    }
    for (tp, sp, rc), want in cases.items():
        cl = ClusterSpec(gpu=get_gpu("A100-80GB"), num_gpus=tp)
        got = activation_bytes_per_layer(m, cl, w, Strategy(tp=tp, sp=sp, recompute=rc, micro_batch=b))
        assert got == pytest.approx(want, rel=1e-9)


def check_megatron_state_bytes() -> None:
    # Megatron-LM distributed optimizer docs: bf16 weights + fp32 grads + Adam = 2 + 4 + 12 = 18 B/param
    # without sharding; Llama-3.1-8B has 8,030,261,248 parameters (model card: 8.03B).
    m = get_model("Llama-3.1-8B")
    e = estimate(
        m,
        ClusterSpec(gpu=get_gpu("H200"), num_gpus=8),
        Workload(seq_len=1024, global_batch=8, grad_reduce_dtype="fp32"),
        Strategy(zero=0),
    )
    assert (e.memory.weights + e.memory.grads + e.memory.optimizer) == pytest.approx(
        18 * 8_030_261_248, rel=1e-9
    )


CHECKS: list[Callable[[], None]] = [
    check_llama3_70b_params,
    check_gpt3_model_flops,
    check_estimator_model_flops,
    check_ring_collectives,
    check_korthikanti_activations,
    check_megatron_state_bytes,
]


def _scaled(fn: Callable, factor: float) -> Callable:
    @functools.wraps(fn)
    def mutated(*args, **kwargs):
        out = fn(*args, **kwargs)
        if isinstance(out, tuple):
            return tuple(x * factor for x in out)
        if dataclasses.is_dataclass(out):  # activation bytes of a LayerCosts
            acts = [f.name for f in dataclasses.fields(out) if f.name.startswith("act_")]
            return dataclasses.replace(out, **{k: getattr(out, k) * factor for k in acts})
        return out * factor

    return mutated


# (what it is, module, function, factor): small enough to look plausible, big enough to matter
MUTATIONS = [
    ("parameter count: MLP weights", "autopar.perf.params", "mlp_params", 1.01),
    ("parameter count: attention weights", "autopar.perf.params", "attention_params", 1.01),
    ("forward FLOPs: attention projections", "autopar.perf.flops", "attn_proj_flops_per_layer", 1.02),
    ("forward FLOPs: core attention (s² term)", "autopar.perf.flops", "attn_core_flops_per_layer", 1.02),
    ("ring collective time", "autopar.perf.comm", "_ring", 1.05),
    ("activation bytes per layer", "autopar.perf.layers", "layer_costs", 1.02),
]


def _clear_perf_caches() -> None:
    for name, mod in list(sys.modules.items()):
        if name.startswith("autopar.perf"):
            for obj in vars(mod).values():
                if callable(getattr(obj, "cache_clear", None)):
                    obj.cache_clear()


def _failing_checks() -> list[str]:
    failed = []
    for check in CHECKS:
        try:
            check()
        except AssertionError:
            failed.append(check.__name__)
    return failed


def test_checks_pass_on_the_real_model():
    _clear_perf_caches()
    assert _failing_checks() == []


@pytest.mark.parametrize("what,module,name,factor", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_mutation_is_caught(monkeypatch, what, module, name, factor):
    mod = sys.modules.get(module) or __import__(module, fromlist=["_"])
    original = getattr(mod, name, None)
    if original is None:
        pytest.fail(f"mutation target {module}.{name} ({what}) is gone: point MUTATIONS at its new home")
    mutated = _scaled(original, factor)
    for mod_name, m in list(sys.modules.items()):  # every `from x import name` binding too
        if mod_name.startswith("autopar"):
            for attr, val in list(vars(m).items()):
                if val is original:
                    monkeypatch.setattr(m, attr, mutated)
    _clear_perf_caches()
    try:
        assert _failing_checks(), f"{what} x{factor} went unnoticed by every golden check"
    finally:
        monkeypatch.undo()
        _clear_perf_caches()
