"""The per-stack capability table (layouts.STACKS) against the stacks' own vendored argument/config schemas,
and the three readers that must agree with it: estimate notes, the completion and the launch writers."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autopar.catalog import get_gpu, get_model
from autopar.errors import SpecError
from autopar.launch.schema import TT_MULTI_STAGE, TT_SINGLE_STAGE, VERSIONS, load_schema
from autopar.launch.settings import launch_settings
from autopar.layouts import MEMORY_SAVERS, STACKS, Level, check, strategy_stack_rules
from autopar.perf import estimate
from autopar.search.space import build_space
from autopar.specs import ClusterSpec, Strategy, Workload

MEGATRON = load_schema("megatron", VERSIONS["megatron"][0])["arguments"]
TORCHTITAN = load_schema("torchtitan", VERSIONS["torchtitan"][0])["sections"]["parallelism"]
DEEPSPEED = load_schema("deepspeed", VERSIONS["deepspeed"][0])["sections"]["zero_optimization"]


def test_megatron_entry_matches_its_arguments():
    stack = STACKS["megatron"]
    assert not [a for a in MEGATRON if "zero-bubble" in a or "dualpipe" in a or "zb-" in a]
    assert set(stack.schedules) == {"1f1b", "interleaved"}
    assert "--num-layers-per-virtual-pipeline-stage" in MEGATRON and "--use-distributed-optimizer" in MEGATRON
    sharding = set(MEGATRON["--data-parallel-sharding-strategy"]["choices"])
    assert {"optim_grads", "optim_grads_params"} <= sharding and stack.zero == (0, 1, 2, 3)
    assert "--cp-comm-type" in MEGATRON and "--hierarchical-context-parallel-sizes" in MEGATRON
    assert stack.hsdp and "--num-distributed-optimizer-instances" in MEGATRON
    dtypes = set(MEGATRON["--exp-avg-dtype"]["choices"])
    assert "bf16" in dtypes and stack.optimizer_states == ("bf16",)  # no 8-bit (bitsandbytes) states
    assert stack.optimizer_offload and "--optimizer-cpu-offload" in MEGATRON
    assert stack.act_offload and "--cpu-offloading-num-layers" in MEGATRON


def test_torchtitan_entry_matches_its_job_config():
    stack = STACKS["torchtitan"]
    assert stack.schedules["1f1b"] in TT_SINGLE_STAGE and stack.schedules["interleaved"] in TT_MULTI_STAGE
    rotate = set(TORCHTITAN["context_parallel_rotate_method"]["choices"])
    assert rotate == {"allgather", "alltoall"} and set(stack.cp_comm) == {"p2p", "allgather"}  # no Ulysses
    assert "data_parallel_replicate_degree" in TORCHTITAN and stack.hsdp
    assert stack.zero == (0, 3) and not stack.optimizer_states and not stack.act_offload


def test_deepspeed_entry_matches_its_zero_config():
    stack = STACKS["deepspeed"]
    assert "offload_optimizer" in DEEPSPEED["fields"] and stack.optimizer_offload
    assert stack.zero == (0, 1, 2, 3) and set(stack.schedules) == {"1f1b"} and not stack.hsdp


def _llama8b(framework: str):
    cl = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=8)
    return get_model("Llama-3.1-8B"), cl, Workload(seq_len=8192, global_batch=64, framework=framework)


@pytest.mark.parametrize(
    "framework, knobs, words",
    [
        ("torchtitan", {"zero": 1}, "zero=1: framework=torchtitan ships ZeRO stages (0, 3)"),
        ("deepspeed", {"tp": 2, "zero": 3, "dp_shard": 2}, "dp_shard=2: framework=deepspeed has no HSDP"),
        (
            "megatron-legacy",
            {"cp": 2, "zero": 1},
            "cp=2: framework=megatron-legacy has no context parallelism",
        ),
        ("megatron", {"pp": 2, "pp_schedule": "zb-h1", "zero": 1}, "pp_schedule=zb-h1: framework=megatron"),
    ],
)
def test_estimate_of_an_unshipped_knob_is_a_what_if_with_a_note(framework, knobs, words):
    m, cl, w = _llama8b(framework)
    s = Strategy(micro_batch=1, recompute="full", **knobs)
    e = estimate(m, cl, w, s)
    assert e.step_time_s > 0 and any(words in n for n in e.notes)
    shipped = estimate(m, cl, w, s.model_copy(update={"zero": STACKS[framework].zero[-1], "dp_shard": None}))
    assert not any("not shipped" in n and "zero=" in n for n in shipped.notes)


def test_completion_picks_zero_among_the_stack_stages():
    m, cl, w = _llama8b("torchtitan")
    e = estimate(m, cl, w, Strategy(micro_batch=1, recompute="full", zero=None))
    assert e.strategy.zero in (0, 3) and any(a.startswith("zero=") for a in e.assumed)
    assert strategy_stack_rules("torchtitan", e.strategy) == []


def test_launch_notes_read_the_same_table():
    m, cl, w = _llama8b("megatron")
    s = Strategy(
        tp=1, pp=2, pp_schedule="zb-h1", zero=1, micro_batch=1, recompute="full", optimizer_offload=1.0
    )
    ls = launch_settings(m, cl, w, s)
    meg = " ".join(ls.framework_notes["megatron"])
    assert (
        "pp_schedule=zb-h1: framework=megatron does not ship it" in meg and "run 1F1B instead of zb-h1" in meg
    )
    tt = " ".join(ls.framework_notes["torchtitan"])
    assert "framework=torchtitan has no optimizer CPU offload" in tt and "1F1B instead" in tt
    flat = Strategy(tp=1, pp=1, zero=2, micro_batch=1, recompute="full", optimizer_offload=1.0)
    cfg = json.loads(launch_settings(m, cl, w, flat).deepspeed)
    assert cfg["zero_optimization"]["offload_optimizer"] == {"device": "cpu", "pin_memory": True}


@settings(max_examples=25, deadline=None)
@given(
    framework=st.sampled_from(list(STACKS)),
    savers=st.sets(st.sampled_from(MEMORY_SAVERS)),
    gpus=st.sampled_from([4, 8, 16]),
    seed=st.integers(min_value=0, max_value=10**6),
)
def test_every_search_point_is_shipped_by_its_stack(framework, savers, gpus, seed):
    """Invariant: whatever the stack and savers, a sampled search point breaks no rule at SEARCH level and uses
    nothing its stack does not ship; activation offload only with pp 1 and recompute none."""
    model = get_model("Llama-3.1-8B").model_copy(update={"name": "small", "layers": 8})
    cl = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=gpus, gpus_per_node=8)
    w = Workload(seq_len=4096, global_batch=16, framework=framework, memory_savers=tuple(sorted(savers)))
    space = build_space(model, cl, w)
    rng = random.Random(seed)
    for _ in range(20):
        s = space.sample(rng).strategy
        assert strategy_stack_rules(framework, s) == [] and check(model, cl, w, s, level=Level.SEARCH) == []
        if s.activation_offload_layers:
            assert s.pp == 1 and s.recompute == "none" and "act_offload" in savers


def _space_axes(model_name: str, framework: str, gpus: int = 64):
    """(tp, pp, cp, ep, sp values) of every layout of a (model, stack) search space."""
    model = get_model(model_name)
    cl = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=gpus, gpus_per_node=8)
    w = Workload(seq_len=32768, global_batch=256, framework=framework)
    return [(lay.tp, lay.pp, lay.cp, lay.ep, lay.sp) for lay in build_space(model, cl, w).layouts]


def test_torchtitan_search_offers_no_cp_for_deepseek_v3():
    """torchtitan's deepseek_v3 uses flex attention and its CP runs SDPA only; Megatron's space has CP."""
    tt, meg = _space_axes("DeepSeek-V3", "torchtitan"), _space_axes("DeepSeek-V3", "megatron")
    assert tt and all(cp == 1 for _, _, cp, _, _ in tt)
    assert any(cp > 1 for _, _, cp, _, _ in meg)
    assert any(pp > 1 for _, pp, _, _, _ in tt)  # deepseek_v3 does pipeline


def test_torchtitan_search_offers_no_pp_for_qwen3():
    """torchtitan's qwen3 TrainSpec has no pipelining_fn; Llama-3 (also torchtitan) keeps its PP layouts."""
    for name in ("Qwen3-8B", "Qwen3-30B-A3B"):
        tt = _space_axes(name, "torchtitan", gpus=16)
        assert tt and all(pp == 1 for _, pp, _, _, _ in tt)
        assert any(cp > 1 for _, _, cp, _, _ in tt)  # qwen3 runs SDPA: CP stays
    assert any(pp > 1 for _, pp, _, _, _ in _space_axes("Llama-3.1-8B", "torchtitan", gpus=16))


@pytest.mark.parametrize("model_name", ["Llama-3.1-8B", "Qwen3-30B-A3B", "DeepSeek-V3"])
def test_deepspeed_search_offers_no_megatron_sp(model_name):
    ds = _space_axes(model_name, "deepspeed")
    assert ds and all(sp == (False,) for *_, sp in ds)
    assert any(True in sp for *_, sp in _space_axes(model_name, "megatron"))


@pytest.mark.parametrize(
    "model_name, knobs, words",
    [
        ("Qwen3-8B", {"pp": 2}, "pp=2: framework=torchtitan cannot run it for Qwen3-8B: torchtitan's qwen3"),
        ("DeepSeek-V3", {"cp": 2}, "cp=2: framework=torchtitan cannot run it for DeepSeek-V3"),
    ],
)
def test_family_limit_is_hard_for_a_hand_given_strategy(model_name, knobs, words):
    m = get_model(model_name)
    cl = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=16)
    s = Strategy(micro_batch=1, recompute="full", zero=3, **knobs)
    for fw, broken in (("torchtitan", True), ("megatron", False)):
        w = Workload(seq_len=8192, global_batch=64, framework=fw)
        hard = [v.message for v in check(m, cl, w, s, level=Level.HARD)]
        assert any(words in h for h in hard) is broken


def test_estimate_cli_exits_2_naming_the_family_rule():
    from typer.testing import CliRunner

    from autopar.cli import app

    args = ["estimate", "--framework", "torchtitan", "--model", "qwen3-8b", "--pp", "2", "--gpus", "16"]
    r = CliRunner().invoke(app, args)
    assert (
        r.exit_code == 2 and "pp=2: framework=torchtitan" in r.stderr and "qwen3/__init__.py:199" in r.stderr
    )
    assert len(r.stderr.strip().splitlines()) == 1


@settings(max_examples=15, deadline=None)
@given(
    model_name=st.sampled_from(["Llama-3.1-8B", "Qwen3-30B-A3B", "DeepSeek-V3"]),
    gpus=st.sampled_from([8, 16, 64]),
    seed=st.integers(min_value=0, max_value=10**6),
)
def test_every_deepspeed_search_point_gets_a_config_whose_batch_identity_holds(model_name, gpus, seed):
    """Invariant: the DeepSpeed search offers only what its JSON expresses (no PP, CP or EP: model code), and
    that JSON's train_batch_size = micro x accumulation x (GPUs / tp), the DP an mpu reports for AutoTP."""
    from autopar.launch.schema import check_deepspeed

    model = get_model(model_name)
    cl = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=gpus, gpus_per_node=8)
    w = Workload(seq_len=4096, global_batch=256, framework="deepspeed")
    s = build_space(model, cl, w).sample(random.Random(seed)).strategy
    ls = launch_settings(model, cl, w, s)
    assert ls.deepspeed is not None, ls.deepspeed_reason
    assert (s.pp, s.cp, s.ep, s.sp) == (1, 1, 1, False)
    cfg = json.loads(ls.deepspeed)
    dp = gpus // s.tp
    assert (
        cfg["train_batch_size"]
        == cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"] * dp
    )
    assert check_deepspeed(ls.deepspeed, VERSIONS["deepspeed"][0], gpus, model_parallel=s.tp) == []
    if s.tp > 1:
        assert f"get_data_parallel_world_size() returns {dp}" in ls.deepspeed_reason


@pytest.mark.parametrize("knobs", [{"pp": 2}, {"cp": 2, "cp_comm": "a2a"}])
def test_deepspeed_writer_refuses_through_the_search_rule(knobs):
    """The writer's refusal is the search's stack rule, word for word (one rule for both)."""
    m, cl, w = _llama8b("deepspeed")
    s = Strategy(micro_batch=1, recompute="full", zero=1, **knobs)
    ls = launch_settings(m, cl, w, s)
    rule = [v.message for v in strategy_stack_rules("deepspeed", s) if "model code" in v.message]
    assert ls.deepspeed is None and len(rule) == 1 and ls.deepspeed_reason.endswith(rule[0])
    assert "runs it only in model code" in ls.deepspeed_reason


@pytest.mark.parametrize(
    ("framework", "saver", "says"),
    [
        ("torchtitan", "act_offload", "the torchtitan stack has no activation CPU offload"),
        ("fsdp", "offload", "the fsdp stack ships no CPU offload of the optimizer"),
        ("megatron", "8bit_states", "the megatron stack ships no 8-bit optimizer states"),
        (
            "torchtitan",
            "recompute_modules",
            "no recompute module set applies to Mixtral-8x7B on the torchtitan",
        ),
    ],
)
def test_a_memory_saver_that_cannot_take_effect_is_an_error(framework, saver, says):
    """The standard: a flag that cannot take effect in a mode is an error (one line, exit 2), not ignored."""
    from typer.testing import CliRunner

    from autopar.cli import app

    args = ["optimize", "--model", "mixtral-8x7b", "--gpus", "16", "--framework", framework]
    res = CliRunner().invoke(app, [*args, "--memory-savers", saver, "--sampler", "nsga2", "--budget", "4"])
    assert res.exit_code == 2 and res.output.count("\n") == 1
    assert res.output.startswith(f"error: --memory-savers {saver} cannot take effect: {says}")


def test_memory_savers_that_take_effect_pass():
    from autopar.catalog import get_model
    from autopar.layouts import idle_saver
    from autopar.specs import Workload

    mix, llama = get_model("mixtral-8x7b"), get_model("llama-3.1-8b")
    w = Workload(seq_len=4096, global_batch=64, framework="megatron")
    assert [
        idle_saver(mix, w, s) for s in ("act_offload", "offload", "bf16_states", "recompute_modules")
    ] == [""] * 4
    assert idle_saver(llama, w, "recompute_modules")  # dense, no MLA: no module set applies


def test_mistyped_saver_and_transport_suggest_the_close_value():
    from autopar.problem import check_memory_savers, check_transport

    with pytest.raises(SpecError, match=r"'recompute_module'.*; did you mean recompute_modules\?$"):
        check_memory_savers("recompute_module")
    with pytest.raises(SpecError, match=r"did you mean infiniband\?$"):
        check_transport("infiniban")
    with pytest.raises(SpecError, match=r"expected one of infiniband, roce, efa$"):
        check_transport("xyz")  # nothing close: no hint
