"""Megatron-Core's selective recompute modules as a recompute mode (knobs.RECOMPUTE_MODULE_SETS): the label
round trip, the activation bytes each module frees and the time and FLOPs it adds (hand-derived from the
layer's terms), the rules, the search's offer, the Megatron launch arguments against the vendored parser, and
the records' notes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autopar.calibration.ingest.log_config import log_config
from autopar.calibration.records.legacy_notes import notes_only_knobs
from autopar.catalog import get_gpu, get_model
from autopar.knobs import (
    RECOMPUTE_BY_FRUGALITY,
    RECOMPUTE_LEVELS,
    RECOMPUTE_MODES,
    RECOMPUTE_MODULE_SETS,
    format_label,
    parse_label,
    recompute_modules,
    recompute_of_modules,
)
from autopar.launch.schema import check_megatron
from autopar.launch.settings import launch_settings
from autopar.layouts import Level, check, recompute_values
from autopar.perf.context import perf_context
from autopar.perf.flops import hardware_flops_per_step
from autopar.perf.layers import (
    ACTIVATION_BYTES_PER_FFN,
    BF16_BYTES,
    FP8_BYTES,
    NORM_BYTES_PER_HIDDEN,
    layer_costs,
)
from autopar.perf.moe import routed_expert_costs, routed_load
from autopar.specs import ClusterSpec, Strategy, Workload

DSV3, GPT_OSS, LLAMA = get_model("DeepSeek-V3"), get_model("GPT-OSS-120B"), get_model("Llama-3.1-70B")
# GPT-OSS's shape without its eager clamp and expert biases (tests/perf/test_moe_eager_clamp_bias.py prices those)
OSS_SHAPE = GPT_OSS.model_copy(update={"expert_bias": False, "glu_clamp": None})
QWEN3 = get_model("Qwen3-30B-A3B")
B200 = ClusterSpec(gpu=get_gpu("B200"), num_gpus=256)
WL = Workload(seq_len=4096, global_batch=4096)
MODULE_MODES = tuple(m for m in RECOMPUTE_MODES if m.startswith("sel:"))


def _dsv3(rec: str, **kw) -> Strategy:
    base = dict(tp=1, pp=8, ep=32, etp=1, dp=32, zero=1, micro_batch=1, sp=False, pp_first_layers=5)
    return Strategy(**{**base, "pp_last_layers": 8, "recompute": rec, **kw})


# ---- registry and label ---------------------------------------------------------------------------------


@pytest.mark.parametrize("rec", RECOMPUTE_MODES)
def test_label_round_trip(rec):
    s = _dsv3(rec)
    assert parse_label(format_label(s)).get("recompute", "none") == rec


def test_registry_names_the_presets_module_lists():
    # Megatron-Bridge presets (bench/data/frontier_runs.csv notes): DeepSeek-V3 and GPT-OSS
    assert recompute_of_modules(["mla_up_proj"]) == "sel:mla_up_proj"
    assert recompute_of_modules(["mlp", "mla_up_proj"]) == "sel:mla_up_proj+mlp"
    assert recompute_of_modules(["moe_act", "layernorm"]) == "sel:layernorm+moe_act"
    assert recompute_of_modules(["core_attn"]) == "selective"  # Megatron's default list
    assert recompute_of_modules(["moe"]) == "sel:moe"  # the ModelZoo's and xtuner's MoE-layer recompute
    assert recompute_of_modules(["moe", "layernorm"]) == "sel:layernorm+moe"
    with pytest.raises(ValueError, match="does not model"):
        recompute_of_modules(["shared_experts"])
    with pytest.raises(ValueError, match="unknown Megatron module"):
        recompute_of_modules(["attention"])
    assert recompute_modules("none") == recompute_modules("full") == frozenset()
    # every mode but MaxText's remat policies (records only, never searched: perf/remat.py) is ranked
    searchable = {m for m in RECOMPUTE_MODES if not m.startswith("remat:")}
    assert set(RECOMPUTE_BY_FRUGALITY) == searchable and RECOMPUTE_BY_FRUGALITY[-1] == "full"
    assert set(RECOMPUTE_MODULE_SETS) == {"selective", *MODULE_MODES}


# ---- memory: the bytes each module frees, hand-derived -----------------------------------------------------


def _lc(model, rec, wl=WL, t=1, b=1, e=32, sp=False):
    return layer_costs(perf_context(model, B200, wl), t, 1, b, e, 1, sp, rec, False)


def test_mla_up_proj_frees_the_per_head_qkv():
    # DeepSeek-V3: 128 heads, qk_nope 128, qk_rope 64, v 128; Q and K of 192 per head and V of 128, in bf16
    none, up = _lc(DSV3, "none"), _lc(DSV3, "sel:mla_up_proj")
    per_tok = 2.0 * 128 * (192 * 2 + 128)
    assert none.act_moe - up.act_moe == pytest.approx(4096 * per_tok)
    assert none.act_dense - up.act_dense == pytest.approx(4096 * per_tok)


def test_mlp_frees_dense_mlp_internals_on_dense_layers_only():
    # SwiGLU: gate and up outputs (bf16) and the FC2 input (bf16 in BF16 runs) per ffn element; f = 18432
    none, mlp = _lc(DSV3, "none"), _lc(DSV3, "sel:mlp")
    assert none.act_dense - mlp.act_dense == pytest.approx(4096 * 3 * 2.0 * 18432)
    assert none.act_moe == mlp.act_moe  # Megatron: recompute_mlp only when not is_moe_layer


def test_layernorm_and_moe_act_free_the_norm_outputs_and_fc2_inputs():
    # GPT-OSS-120B on EP8, TP2 with SP: 2 norm outputs of h = 2880 (bf16, SP-sharded over 2); each of the topk 4
    # routed copies' FC2 input of f_e = 2880 (bf16), over tp 2 as the layer's other TP-region terms
    wl = WL.model_copy(update={"framework": "megatron"})
    none = _lc(OSS_SHAPE, "none", wl, t=2, e=8, sp=True)
    both = _lc(OSS_SHAPE, "sel:layernorm+moe_act", wl, t=2, e=8, sp=True)
    load = routed_load(wl.moe_imbalance, wl.moe_capacity_factor)
    norms = 2 * BF16_BYTES * 2880 / 2
    fc2 = 4 * load * BF16_BYTES * 2880 / 2
    assert none.act_moe - both.act_moe == pytest.approx(4096 * (norms + fc2))
    assert none.act_dense - both.act_dense == pytest.approx(4096 * norms)


def test_fp8_moe_act_frees_the_fp8_fc2_input():
    wl = WL.model_copy(update={"precision": "fp8", "fp8_recipe": "mxfp8"})
    none, act = _lc(OSS_SHAPE, "none", wl, e=8), _lc(OSS_SHAPE, "sel:moe_act", wl, e=8)
    load = routed_load(wl.moe_imbalance, wl.moe_capacity_factor)
    assert none.act_moe - act.act_moe == pytest.approx(4096 * 4 * load * FP8_BYTES * 2880)


def test_moe_module_frees_every_moe_internal():
    # Megatron's "moe" module is a normal checkpoint of MoELayer.forward: only the layer's input stays. On
    # Qwen3-30B-A3B (BF16, t = 1, no shared expert) that frees, per token, each of the top-8 routed copies' FC1
    # input (h = 2048), gate and up outputs (2 x f_e = 768) and FC2 input (f_e), all bf16, times the routing
    # load, and the router's fp32 scores and routing map (software.yaml moe_router_bytes_per_expert = 9 B for
    # each of the 128 experts, megatron)
    wl = WL.model_copy(update={"framework": "megatron"})
    none, moe = _lc(QWEN3, "none", wl, e=8), _lc(QWEN3, "sel:moe", wl, e=8)
    load = routed_load(wl.moe_imbalance, wl.moe_capacity_factor)
    per_copy = BF16_BYTES * (2048 + 2 * 768 + 768)
    assert none.act_moe - moe.act_moe == pytest.approx(4096 * (8 * load * per_copy + 9.0 * 128))
    assert none.act_dense == moe.act_dense  # no MoE layer, nothing re-run
    both = _lc(QWEN3, "sel:layernorm+moe", wl, e=8)
    norm = _lc(QWEN3, "sel:layernorm+moe_act", wl, e=8)
    act = _lc(QWEN3, "sel:moe_act", wl, e=8)
    # layernorm's share is the same whichever MoE module it is paired with
    assert moe.act_moe - both.act_moe == pytest.approx(act.act_moe - norm.act_moe)


def test_moe_module_recompute_reruns_the_moe_forward_and_its_all_to_alls():
    # CUDA graphs on: no CPU issue floor stretches the times, so the recompute is the MoE layer's forward as
    # perf/moe.py prices it (router, permutation, grouped GEMMs: routed_expert_costs) plus the SwiGLU activation's
    # elementwise traffic over the routed copies (no shared expert on Qwen3-30B-A3B)
    wl = WL.model_copy(update={"framework": "megatron", "cuda_graphs": True})
    ctx = perf_context(QWEN3, B200, wl)
    moe, none = _lc(QWEN3, "sel:moe", wl, e=8), _lc(QWEN3, "none", wl, e=8)
    mc = routed_expert_costs(ctx, 4096, 1, 8, 1, 3)
    load = routed_load(wl.moe_imbalance, wl.moe_capacity_factor)
    act = ctx.sw.elementwise_passes * 4096 * ACTIVATION_BYTES_PER_FFN[3] * 768 * 8 * load / ctx.hbm
    assert moe.moe_re == pytest.approx(mc.expert_fwd + mc.overhead_fwd + act)
    assert moe.dense_re == 0.0
    # dispatch and combine forward, backward and once more in the recompute: 3/2 of the no-recompute traffic
    assert moe.ep_layer == pytest.approx(1.5 * none.ep_layer) and none.ep_layer > 0


def test_moe_module_flops_are_the_moe_layers_forward():
    # Qwen3-30B-A3B: 48 MoE layers; per token 8 routed SwiGLU experts of 3 x 2048 x 768 weights and the
    # 2048 x 128 router, 2 FLOPs per weight
    tokens = 4096 * 4096
    extra = hardware_flops_per_step(QWEN3, 4096, 4096, "sel:moe") - hardware_flops_per_step(
        QWEN3, 4096, 4096, "none"
    )
    assert extra == pytest.approx(tokens * 48 * 2 * (8 * 3 * 2048 * 768 + 2048 * 128))


# ---- time and FLOPs ------------------------------------------------------------------------------------------


def test_layernorm_moe_act_recompute_time_is_their_elementwise_traffic():
    wl = WL.model_copy(update={"framework": "megatron"})
    ctx = perf_context(OSS_SHAPE, B200, wl)
    lc = _lc(OSS_SHAPE, "sel:layernorm+moe_act", wl, e=8)
    load = routed_load(wl.moe_imbalance, wl.moe_capacity_factor)
    bytes_tok = NORM_BYTES_PER_HIDDEN * 2880 + ACTIVATION_BYTES_PER_FFN[3] * 2880 * 4 * load
    assert lc.moe_re == pytest.approx(ctx.sw.elementwise_passes * 4096 * bytes_tok / ctx.hbm)
    assert lc.dense_re == pytest.approx(
        ctx.sw.elementwise_passes * 4096 * NORM_BYTES_PER_HIDDEN * 2880 / ctx.hbm
    )


def test_mla_up_proj_flops_are_the_up_projections():
    # per token per layer: q up 2·128·192·1536 and KV up 2·128·(128+128)·512, over 61 layers
    tokens = 4096 * 4096
    extra = hardware_flops_per_step(DSV3, 4096, 4096, "sel:mla_up_proj") - hardware_flops_per_step(
        DSV3, 4096, 4096, "none"
    )
    assert extra == pytest.approx(tokens * 61 * 2 * 128 * (192 * 1536 + 256 * 512))
    core = hardware_flops_per_step(DSV3, 4096, 4096, "selective") - hardware_flops_per_step(
        DSV3, 4096, 4096, "none"
    )
    # + mlp: the 3 dense layers' SwiGLU MLPs (3 weights of 7168 x 18432), 2 FLOPs per weight per token
    mlp = hardware_flops_per_step(DSV3, 4096, 4096, "sel:mla_up_proj+mlp") - extra
    none = hardware_flops_per_step(DSV3, 4096, 4096, "none")
    assert mlp - none == pytest.approx(tokens * 3 * 2 * 3 * 7168 * 18432)
    assert core == pytest.approx(tokens * 61 * 2 * 128 * (192 + 128) * 4096)  # full s x s count


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(MODULE_MODES), st.sampled_from([1, 2]), st.sampled_from([1, 2]))
def test_modules_sit_between_none_and_full(rec, t, b):
    model = DSV3 if "mla" in rec or rec == "sel:mlp" else GPT_OSS
    none, full, mod = (_lc(model, r, t=t, b=b, e=8, sp=t > 1) for r in ("none", "full", rec))
    for kind in ("act_dense", "act_moe"):
        assert getattr(full, kind) <= getattr(mod, kind) <= getattr(none, kind)
    assert 0.0 <= mod.moe_re <= full.moe_re and 0.0 <= mod.dense_re <= full.dense_re
    union = _lc(DSV3, "sel:layernorm+mla_up_proj+moe_act", t=t, b=b, e=8, sp=t > 1)
    part = _lc(DSV3, "sel:mla_up_proj", t=t, b=b, e=8, sp=t > 1)
    assert union.act_moe <= part.act_moe and union.moe_re >= part.moe_re  # more modules: less kept, more work


# ---- rules and the search's offer ----------------------------------------------------------------------------


def test_rules_follow_megatrons_checks():
    msgs = [v.message for v in check(LLAMA, B200, WL, Strategy(tp=8, recompute="sel:mla_up_proj"))]
    assert any("mla_up_proj needs multi-latent attention" in m for m in msgs)
    msgs = [v.message for v in check(LLAMA, B200, WL, Strategy(tp=8, recompute="sel:layernorm+moe"))]
    assert any("moe needs an MoE model" in m for m in msgs)  # it would re-run nothing
    fp8 = WL.model_copy(update={"precision": "fp8", "fp8_recipe": "delayed"})
    msgs = [v.message for v in check(GPT_OSS, B200, fp8, Strategy(ep=8, recompute="sel:moe_act"))]
    assert any("delayed scaling" in m for m in msgs)
    tt = WL.model_copy(update={"framework": "torchtitan"})
    bad = check(GPT_OSS, B200, tt, Strategy(ep=8, recompute="sel:layernorm+moe_act"), level=Level.SEARCH)
    assert any("--recompute-modules" in v.message for v in bad)


def test_search_offers_module_sets_on_megatron_with_the_saver_only():
    assert recompute_values(DSV3, WL) == RECOMPUTE_LEVELS  # opt-in: Workload.memory_savers
    wl = WL.model_copy(update={"memory_savers": ("recompute_modules",)})
    assert recompute_values(LLAMA, wl) == RECOMPUTE_LEVELS
    assert recompute_values(GPT_OSS, wl) == ("none", "selective", "sel:layernorm+moe_act", "full")
    dsv3 = (
        "none",
        "selective",
        "sel:layernorm+moe_act",
        "sel:mla_up_proj",
        "sel:layernorm+mla_up_proj+moe_act",
    )
    assert recompute_values(DSV3, wl) == (*dsv3, "full")
    for fw in ("torchtitan", "deepspeed", "megatron-legacy"):
        assert recompute_values(DSV3, wl.model_copy(update={"framework": fw})) == RECOMPUTE_LEVELS


def test_a_record_stating_modules_lets_the_search_choose_them():
    import csv
    from pathlib import Path

    from autopar.calibration.records.specs import row_to_specs

    path = Path(__file__).parents[2] / "bench" / "data" / "frontier_runs.csv"
    rows = {r["id"]: r for r in csv.DictReader(path.open())}
    sp = row_to_specs(rows["MBR-069"])  # DeepSeek-V3 GB200 preset: recompute_modules mla_up_proj
    assert sp.strategy.recompute == "sel:mla_up_proj"
    assert "recompute_modules" in sp.workload.memory_savers


# ---- launch -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rec", [m for m in MODULE_MODES])
def test_megatron_args_validate_against_the_vendored_parser(rec):
    # Qwen3, not GPT-OSS: the writer's --position-embedding-type yarn for GPT-OSS is not in the pinned parser
    model = DSV3 if "mla" in rec or rec == "sel:mlp" else QWEN3
    s = (
        _dsv3(rec)
        if model is DSV3
        else Strategy(tp=1, ep=8, etp=1, dp=256, zero=1, micro_batch=1, recompute=rec)
    )
    ls = launch_settings(model, B200, WL, s)
    named = [
        m
        for m in ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe")
        if m in recompute_modules(rec)
    ]
    assert "--recompute-granularity selective" in ls.megatron_args
    assert f"--recompute-modules {' '.join(named)}" in ls.megatron_args
    for version in ("core_v0.19.0", "core_v0.18.2", "core_v0.17.1"):
        assert check_megatron(ls.megatron_args, version, list(ls.placeholders)) == []
    assert ls.torchtitan is None and "--recompute-modules" in ls.torchtitan_reason


def test_schema_rule_rejects_unknown_modules_and_a_missing_granularity():
    probs = check_megatron(["--recompute-modules mla_up_proj attention"], "core_v0.19.0")
    assert any("attention: not one of" in p for p in probs)
    assert any("needs --recompute-granularity selective" in p for p in probs)


# ---- records --------------------------------------------------------------------------------------------------


def test_notes_state_the_presets_modules():
    """An older file's notes naming Megatron's recompute modules fill the empty `recompute` column
    (legacy_notes.py); a set autopar does not model, or none, fills nothing (completion decides)."""

    def rec(notes: str) -> str | None:
        return notes_only_knobs({"notes": notes}).get("recompute")

    assert rec("x; selective recompute_modules mla_up_proj+mlp; y") == "sel:mla_up_proj+mlp"
    assert rec("selective recompute_modules none stated") is None
    assert rec("distributed optimizer, sp, recompute, etp not stated") is None
    assert rec("selective recompute_modules shared_experts") is None
    assert rec("selective recompute_modules layernorm+moe") == "sel:layernorm+moe"
    assert "recompute" not in notes_only_knobs(
        {"notes": "selective recompute_modules mlp", "recompute": "full"}
    )


@pytest.mark.parametrize(
    ("modules", "rec"),
    [
        ("['mla_up_proj', 'mlp']", "sel:mla_up_proj+mlp"),
        ("['core_attn']", "selective"),
        ("['moe_act', 'layernorm']", "sel:layernorm+moe_act"),
        ("['moe']", "sel:moe"),
        ("['layernorm', 'moe']", "sel:layernorm+moe"),
        ("['shared_experts']", None),  # not modelled: left to completion
    ],
)
def test_megatron_log_dump_reads_the_recompute_modules(modules, rec):
    text = (
        "------------------------ arguments ------------------------\n"
        "  recompute_granularity ........................... selective\n"
        f"  recompute_modules ............................... {modules}\n"
        "-------------------- end of arguments ---------------------\n"
    )
    assert log_config(text, "megatron-log").get("recompute") == rec
