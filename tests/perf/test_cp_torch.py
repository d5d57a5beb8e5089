"""PyTorch context_parallel (torchtitan) ring attention: hand-derived costs (perf/cp.py `_torch_ring`)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autopar.perf import cp
from autopar.perf.comm import Links

# One NVLink domain of 8, a slow NIC and no latency, so every number below follows from bytes / bandwidth.
LINKS = Links(node_size=8, scaleup_bw=100e9, scaleout_bw=10e9, scaleup_lat=0.0, scaleout_lat=0.0)


def _inputs(kv_rep: float = 16.0, torch_ring: bool = True, c: int = 2, full: bool = False) -> cp.CpInputs:
    return cp.CpInputs(
        c=c,
        t=8,
        tokens=1000.0,
        seq_len=2000 * c,
        kv_bytes_tok=4096.0,  # K and V, 8 KV heads x 128 x 2 B x 2
        q_bytes_tok=32768.0,
        out_elems_tok=2048.0,
        attn_fwd=1e-3,
        attn_bwd=2e-3,
        mla=False,
        full_recompute=full,
        kernel_overhead_s=0.0,
        hbm_bw=1e12,
        torch_ring=torch_ring,
        kv_rep=kv_rep,
    )


def test_torch_ring_hand_derived() -> None:
    """The all-gather rotater (torchtitan's default), cp=2 over tp=8: it crosses the 8-GPU domain, so every
    exchange is on the 10 GB/s NIC.

    K, V per rank with GQA repeated 16x: 16 * 4096 B * 1000 tokens / tp 8 = 8.192 MB.
    Forward all-gather of 2 x 8.192 MB over 2 ranks: (1/2) * 16.384 MB / 10 GB/s = 0.8192 ms, of which
    step 0's attention (1 ms / 2 = 0.5 ms) hides 0.5 ms -> 0.3192 ms exposed.
    Backward: the re-gather hides under one step's backward (2 ms / 2 = 1 ms); the fp32 dK, dV hop
    (2 x 8.192 MB = 16.384 MB) takes 1.6384 ms: the one sent after step 0 hides 1 ms under step 1's backward
    (0.6384 ms exposed), the one sent after the last step is awaited after the loop (1.6384 ms) -> 2.2768 ms.
    Compute adds (c - 1) x 18 B per dK/dV element (4.096 M bf16 elements) at 1 TB/s = 73.728 us.
    """
    x = _inputs()
    got = cp.cp_cost("allgather", x, LINKS)
    assert got.comm == pytest.approx(0.3192e-3 + 0.6384e-3 + 1.6384e-3, rel=1e-9)
    te = cp.cp_cost("p2p", _inputs(kv_rep=1.0, torch_ring=False), LINKS)
    assert te.comm == 0.0  # TE's ring: 0.512 MB per hop hides under every step
    assert got.compute - te.compute == pytest.approx(18.0 * 4.096e6 / 1e12, rel=1e-9)
    # Full recompute re-runs the forward and its all-gather.
    full = cp.cp_cost("allgather", _inputs(full=True), LINKS).comm
    assert full == pytest.approx(2 * 0.3192e-3 + 0.6384e-3 + 1.6384e-3)


def test_torch_permute_ring_hand_derived() -> None:
    """The all-to-all rotater (torchtitan's "alltoall", autopar's p2p), same inputs: the K, V hop (8.192 MB /
    10 GB/s = 0.8192 ms) hides 0.5 ms under step 0's forward -> 0.3192 ms; backward the K, V hop and the fp32
    dK, dV hop (1.6384 ms) share step 0's 1 ms backward -> 1.4576 ms, plus the last dK, dV hop after the loop
    (1.6384 ms) -> 3.096 ms. The loop's kernels and merges are the all-gather rotater's (same compute)."""
    got = cp.cp_cost("p2p", _inputs(), LINKS)
    assert got.comm == pytest.approx(0.3192e-3 + 1.4576e-3 + 1.6384e-3, rel=1e-9)
    assert got.compute == cp.cp_cost("allgather", _inputs(), LINKS).compute


def test_torch_allgather_is_not_transformer_engines() -> None:
    """torchtitan's "allgather" runs PyTorch's ring loop (c SDPA steps, fp32 merges, dK/dV round the ring):
    dearer than Transformer Engine's all-gather form (two query-chunk kernels, one reduce-scatter), which the
    search priced it as before issue 21's seventh session."""
    torch_ag = cp.cp_cost("allgather", _inputs(c=4), LINKS)
    te_ag = cp.cp_cost("allgather", _inputs(c=4, kv_rep=1.0, torch_ring=False), LINKS)
    assert torch_ag.comm + torch_ag.compute > te_ag.comm + te_ag.compute


def test_torchtitan_runs_allgather_unless_told() -> None:
    """torchtitan v0.2.2's job config defaults context_parallel_rotate_method to "allgather" (vendored
    schema), so a torchtitan run record that does not state its CP variant is read as that one."""
    import json

    from autopar.launch.schema import load_schema
    from autopar.layouts import default_cp_comm

    text = json.dumps(load_schema("torchtitan", "v0.2.2"))
    key = text.index('"context_parallel_rotate_method"')
    assert '"default": "allgather"' in text[key : key + 200]
    assert default_cp_comm("torchtitan") == "allgather"
    assert default_cp_comm("megatron") == "p2p"  # --cp-comm-type's default
    assert default_cp_comm("deepspeed") == "a2a"  # Ulysses, its only form
    assert default_cp_comm("megatron-legacy") == "p2p"  # no CP: no effect with cp=1


@settings(max_examples=60, deadline=None)
@given(st.floats(1.0, 32.0), st.floats(1.0, 32.0), st.sampled_from([2, 4, 8]), st.booleans())
def test_torch_ring_cost_grows_with_the_exchanged_kv(r1: float, r2: float, c: int, full: bool) -> None:
    lo, hi = sorted((r1, r2))
    for variant in ("p2p", "allgather"):
        a = cp.cp_cost(variant, _inputs(kv_rep=lo, c=c, full=full), LINKS)
        b = cp.cp_cost(variant, _inputs(kv_rep=hi, c=c, full=full), LINKS)
        assert 0.0 <= a.comm <= b.comm and 0.0 <= a.compute <= b.compute


def test_torch_kv_rep_gqa_and_mla() -> None:
    """Llama-3.1-405B (128 heads, 8 KV heads): tp 8 -> 16x; tp 16 (> KV heads) -> 8x. DeepSeek-V3 (128
    heads, qk 192, v 128; compressed KV 2 x (512 + 64) B/token): 2 x 128 x 320 / (8 x 1152) = 8.89 at tp 8."""
    from autopar.catalog import get_model
    from autopar.perf.estimate import _torch_kv_rep

    llama = get_model("llama3.1-405b")
    assert _torch_kv_rep(llama, 8, 4.0 * 8 * 128) == 16.0
    assert _torch_kv_rep(llama, 16, 4.0 * 16 * 128) == 8.0
    ds = get_model("deepseek-v3")
    assert _torch_kv_rep(ds, 8, 2.0 * (512 + 64)) == pytest.approx(2 * 128 * 320 / (8 * 1152))


def test_a_record_that_names_no_cp_variant_ran_its_stacks_default() -> None:
    """A torchtitan run record with CP and no stated variant is read as torchtitan's all-gather rotater, a
    Megatron one as --cp-comm-type's p2p (the record's own columns never name the variant)."""
    import csv

    from autopar.calibration.records.specs import row_to_specs
    from autopar.data import published_runs_path

    with open(published_runs_path(), newline="", encoding="utf-8") as f:
        rows = {r["id"]: r for r in csv.DictReader(f)}
    tt = row_to_specs(rows["TT24-T2-2"])  # torchtitan, Llama-3.1-8B, CP 2 (benchmarks md, Table 2)
    assert tt.strategy.cp == 2 and tt.strategy.cp_comm == "allgather"
    cp_megatron = next(
        r for r in rows.values() if r["framework"].lower().startswith("nemo") and r["cp"] not in ("", "1")
    )
    assert row_to_specs(cp_megatron).strategy.cp_comm == "p2p"


def _inputs_of(framework: str, model_name: str, variant: str = "allgather") -> cp.CpInputs:
    """The CpInputs an estimate of `framework` prices CP with (tp 1, cp 4, micro-batch 1, full recompute)."""
    import importlib
    from unittest import mock

    from autopar.catalog import get_gpu, get_model
    from autopar.perf.context import perf_context
    from autopar.specs import ClusterSpec, Strategy, Workload

    # the module: autopar.perf.estimate is also the name of the function autopar.perf exports
    est = importlib.import_module("autopar.perf.estimate")
    model = get_model(model_name)
    cluster = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=64)
    ctx = perf_context(model, cluster, Workload(seq_len=32768, global_batch=64, framework=framework))
    s = Strategy(tp=1, cp=4, cp_comm=variant, micro_batch=1, recompute="full").with_dp(64)
    seen: list[cp.CpInputs] = []
    real = cp.cp_cost

    def spy(variant: str, x: cp.CpInputs, links: Links) -> cp.CpCost:
        seen.append(x)
        return real(variant, x, links)

    with mock.patch.object(est.cp, "cp_cost", spy):
        est.cp_cost_of(ctx, 1, 4, 1, "full", variant, est.strategy_layer_costs(ctx, s, s.knobs()))
    return seen[0]


def test_fsdp_stack_runs_pytorchs_context_parallel() -> None:
    """The PyTorch-FSDP stack's CP is PyTorch's context_parallel (layouts.STACKS "fsdp"): rotate method
    "allgather" by default (PyTorch _ContextParallelOptions.rotate_method = ALL_GATHER; NeMo AutoModel's
    sharder passes "allgather"), priced as the ring loop (perf/cp.py `_torch_ring`), not Transformer Engine's
    all-gather form as before issue 21's eighth session. Hugging Face models hand SDPA the K/V heads as they are
    (enable_gqa without a mask: transformers `use_gqa_in_sdpa`), so the ring passes Llama-3.1-8B's 8 KV heads,
    where torchtitan repeats them to its 32 query heads first (`repeat_kv`)."""
    from autopar.layouts import default_cp_comm

    assert default_cp_comm("fsdp") == "allgather"
    x = _inputs_of("fsdp", "llama3.1-8b")
    assert x.torch_ring and x.kv_rep == 1.0
    assert _inputs_of("torchtitan", "llama3.1-8b").kv_rep == 4.0  # 32 query heads / 8 KV heads at tp 1


def test_fsdp_custom_moe_keeps_transformer_engines_ring() -> None:
    """NeMo AutoModel's custom MoE sets Transformer Engine's cp_comm_type='p2p' (layouts.FAMILY_LIMITS, te_cp):
    on the same stack a MoE model's CP is TE's ring, its default variant p2p."""
    from autopar.catalog import get_model
    from autopar.layouts import default_cp_comm, family_runs_te_cp

    moe = get_model("qwen3-30b-a3b")
    assert family_runs_te_cp("fsdp", moe) and not family_runs_te_cp("fsdp", get_model("llama3.1-8b"))
    assert default_cp_comm("fsdp", moe) == "p2p" and default_cp_comm("fsdp") == "allgather"
    x = _inputs_of("fsdp", "qwen3-30b-a3b", "p2p")
    assert not x.torch_ring and x.kv_rep == 1.0


def test_a_recipe_with_cp_takes_its_familys_variant() -> None:
    """A published recipe states no CP variant: it runs the stack's default, or its model family's where the
    family runs fewer (NeMo AutoModel's custom MoE: Transformer Engine's p2p only)."""
    from autopar.calibration.planning.recipes import Recipe
    from autopar.catalog import get_model

    r = Recipe(
        "R", "Qwen3-30B-A3B", "H100-SXM", 8, "bf16", 32768, 8, "fsdp", 1, 1, 2, 4, None, 1, None, "src"
    )
    assert r.strategy(get_model("qwen3-30b-a3b")).cp_comm == "p2p"
    assert r.strategy(get_model("llama3.1-8b")).cp_comm == "allgather" == r.strategy().cp_comm
