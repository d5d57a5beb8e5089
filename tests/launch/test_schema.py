"""Launch settings checked against the frameworks' own parsers/config classes (vendored schemas).

The schemas in autopar/data/launch_schemas/ were extracted by scripts/extract_launch_schemas.py
from NVIDIA/Megatron-LM core_v0.19.0, pytorch/torchtitan v0.2.2 and deepspeedai/DeepSpeed v0.19.5
(commits recorded in each file). The sweep validates every framework's output for every Pareto point
of three representative searches; the negative tests show each validator rejects the defects the
issue reported (torchtitan interleaved stage split, unknown keys, wrong types).
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import autopar as ap
from autopar.catalog import get_gpu, get_model
from autopar.cli.launch import DEFAULT_VERSIONS
from autopar.errors import InvalidStrategyError, SpecError
from autopar.launch.schema import (
    VERSIONS,
    check_deepspeed,
    check_megatron,
    check_torchtitan,
    load_schema,
)
from autopar.launch.settings import LaunchSettings, launch_settings, target_versions
from autopar.perf import validate_strategy
from autopar.reports.common import pareto_trials, trial_cluster, trial_workload
from autopar.search.study import optimize
from autopar.specs import ClusterSpec, Strategy, Workload


def validate_all(ls: LaunchSettings, num_gpus: int, layers: int, tp: int) -> list[str]:
    """Every problem any framework would raise for these settings (empty = all valid)."""
    v = ls.versions
    out = check_megatron(ls.megatron_args, v["megatron"], list(ls.placeholders))
    for block in ("MEGATRON_ARGS", "DATA_ARGS"):  # the SLURM script's argument arrays
        found = re.search(rf"{block}=\(\n(.*?)\n\)", ls.slurm, re.S)
        assert found is not None, block
        out += check_megatron(
            [x.strip() for x in found[1].splitlines()], v["megatron"], list(ls.placeholders)
        )
    if ls.torchtitan is not None:
        out += check_torchtitan(ls.torchtitan, v["torchtitan"], num_gpus, layers)
    if ls.deepspeed is not None:
        out += check_deepspeed(ls.deepspeed, v["deepspeed"], num_gpus, model_parallel=tp)
    return out


def test_schemas_record_repo_and_commit() -> None:
    expected = {
        ("megatron", "core_v0.19.0"): ("NVIDIA/Megatron-LM", "5be9626709af2722333bf54797c954c09edeada3"),
        ("torchtitan", "v0.2.2"): ("pytorch/torchtitan", "73a0e6979dd10b6b1904098eb3c8f62c18ab87ce"),
        ("deepspeed", "v0.19.5"): ("deepspeedai/DeepSpeed", "cf44300453eb0af79ed84ed8f1cb49d57478bd76"),
    }
    for (fw, ver), (repo, commit) in expected.items():
        s = load_schema(fw, ver)
        assert s["repo"] == repo and s["ref"] == ver
        assert s["commit"] == commit
    for fw, versions in VERSIONS.items():  # every supported release has its schema, with a full commit
        for v in versions:
            s = load_schema(fw, v)
            assert s["ref"] == v and re.fullmatch(r"[0-9a-f]{40}", s["commit"])
    # the CLI's help text names the same defaults as the registry
    assert ", ".join(f"{fw}={v[0]}" for fw, v in VERSIONS.items()) == DEFAULT_VERSIONS


def test_schema_contents_match_framework_sources() -> None:
    """Spot checks against the framework sources (values read off the tagged files)."""
    meg = load_schema("megatron", "core_v0.19.0")["arguments"]
    assert meg["--fp8-recipe"]["choices"] == ["tensorwise", "delayed", "mxfp8", "blockwise", "custom"]
    assert meg["--disable-bias-linear"] == {"action": "store_false", "dest": "add_bias_linear"}
    assert meg["--hidden-dropout"]["type"] == "float"  # TransformerConfig.hidden_dropout: float = 0.1
    tt = load_schema("torchtitan", "v0.2.2")
    assert tt["sections"]["parallelism"]["pipeline_parallel_first_stage_less_layers"]["default"] == 1
    assert "70B" in tt["models"]["llama3"] and "671B" in tt["models"]["deepseek_v3"]
    ds = load_schema("deepspeed", "v0.19.5")
    assert "autotp_size" in ds["sections"]["tensor_parallel"]["fields"] and ds["extra"] == "forbid"


def _ls(model: str, gpus: int, s: Strategy, gpu: str = "H100-SXM", **wl) -> tuple[LaunchSettings, int, int]:
    m = get_model(model)
    c = ClusterSpec(gpu=get_gpu(gpu), num_gpus=gpus)
    w = Workload(**{"seq_len": 4096, "global_batch": 512, **wl})
    return launch_settings(m, c, w, s), gpus, m.layers


def test_torchtitan_default_stage_weights_break_interleaving() -> None:
    """The reported defect: layers_per_stage = 80/(4*2) = 10 with torchtitan's default first/last-stage
    weights (1 each) makes ceil((80+2)/10) = 9 stages, not a multiple of pp=4; autopar sets them to 0."""
    s = Strategy(tp=8, pp=4, vpp=2, pp_schedule="interleaved", sp=True)
    ls, n, layers = _ls("llama-3.1-70b", 64, s)
    assert check_torchtitan(ls.torchtitan, "v0.2.2", n, layers) == []
    broken = ls.torchtitan.replace("pipeline_parallel_first_stage_less_layers = 0\n", "").replace(
        "pipeline_parallel_last_stage_less_layers = 0\n", ""
    )
    assert check_torchtitan(broken, "v0.2.2", n, layers) == [
        "9 pipeline stages do not fit pp=4 with schedule Interleaved1F1B"
    ]


def test_validators_reject_unknown_keys_and_bad_types() -> None:
    ls, n, layers = _ls("llama-3.1-8b", 8, Strategy(tp=2, sp=True))
    assert check_torchtitan(ls.torchtitan + "\n[parallelism2]\nx = 1\n", "v0.2.2", n, layers) == [
        "unknown torchtitan section [parallelism2]"
    ]
    bad = ls.torchtitan.replace("tensor_parallel_degree = 2", 'tensor_parallel_degree = "2"')
    assert any("does not fit int" in p for p in check_torchtitan(bad, "v0.2.2", n, layers))
    debug = ls.torchtitan.replace('flavor = "8B"', 'flavor = "debugmodel"')
    assert "[model] flavor is a debug model" in check_torchtitan(debug, "v0.2.2", n, layers)
    args = list(ls.megatron_args)
    assert check_megatron([*args, "--tensor-parallel-size 2"], "core_v0.19.0", list(ls.placeholders)) == [
        "unknown Megatron-LM argument --tensor-parallel-size"
    ]
    assert check_megatron([*args, "--fp8-recipe e5m2"], "core_v0.19.0", list(ls.placeholders)) == [
        "--fp8-recipe e5m2: not one of ['tensorwise', 'delayed', 'mxfp8', 'blockwise', 'custom']"
    ]
    assert any("not declared" in p for p in check_megatron(args, "core_v0.19.0", []))
    cfg = json.loads(ls.deepspeed)
    cfg["zero_optimization"]["stage3_typo"] = 1
    cfg["train_batch_size"] = 100
    probs = check_deepspeed(json.dumps(cfg), "v0.19.5", 8, model_parallel=2)
    assert "unknown key stage3_typo in zero_optimization (DeepSpeedZeroConfig)" in probs
    assert "train_batch_size 100 != micro 1 x accumulation 128 x data-parallel 4" in probs


def test_megatron_rules_reject_bad_splits() -> None:
    """validate_args: 80 layers do not split into pp=3; interleaving needs (layers/pp) % vpp == 0."""
    base = ["--num-layers 80", "--pipeline-model-parallel-size 3"]
    assert check_megatron(base, "core_v0.19.0") == [
        "80 layers (with embedding/loss accounted) do not split over pp=3 x vpp=None"
    ]
    lpv = ["--num-layers 80", "--pipeline-model-parallel-size 4", "--num-layers-per-virtual-pipeline-stage 3"]
    assert check_megatron(lpv, "core_v0.19.0") == [
        "80 layers do not split into pp=4 stages of 3-layer virtual stages"
    ]


def test_framework_version_choice() -> None:
    assert target_versions({"torchtitan": "v0.2.2"})["torchtitan"] == "v0.2.2"
    assert target_versions({"torchtitan": "v0.2.0"})["torchtitan"] == "v0.2.0"
    with pytest.raises(
        SpecError, match=r"framework_version='v0.1.0' for torchtitan: supported v0.2.2, v0.2.1"
    ):
        target_versions({"torchtitan": "v0.1.0"})
    with pytest.raises(SpecError, match="unknown framework 'jax'"):
        target_versions({"jax": "0.4"})


def test_token_budget_sets_train_iters() -> None:
    """1T tokens / (4096 x 512 tokens per step) = 476,837.2 -> 476,838 steps, no TRAIN_ITERS placeholder."""
    ls, n, layers = _ls("llama-3.1-8b", 8, Strategy(tp=2, sp=True), token_budget=1e12)
    assert "--train-iters 476838" in ls.megatron_args and "TRAIN_ITERS" not in ls.placeholders
    assert "steps = 476838\n" in ls.torchtitan
    assert "--training.steps" not in ls.slurm and "--optimizer.lr" in ls.slurm
    assert validate_all(ls, n, layers, 2) == []


# --------------------------------------------------------------------------- the sweep

SEARCHES = [
    # (model, gpu, gpus, seq, global batch): dense 70B on H100, an MoE on GB200, 405B on 1024 H100
    ("llama-3.1-70b", "H100-SXM", 64, 8192, 512),
    ("qwen3-235b-a22b", "GB200", 144, 4096, 1152),  # two NVL72 racks
    ("llama-3.1-405b", "H100-SXM", 1024, 8192, 1024),
]


NO_SPLIT = {
    "pp_first_layers": None,
    "pp_last_layers": None,
    "pp_account_embedding": False,
    "pp_account_loss": False,
}


def _pp16_variants(t, n: int) -> list[Strategy]:
    """405B with pp 16 (126 layers: uneven, account-for-embedding/loss): the point re-laid on 16 stages."""
    out = []
    for vpp in (1, 2, 3):
        s = t.strategy.model_copy(
            update={
                "pp": 16,
                "vpp": vpp,
                "dp": 0,
                "pp_schedule": "interleaved" if vpp > 1 else "1f1b",
                **NO_SPLIT,  # the launch writers pick Megatron's split for the new stage count
            }
        ).with_dp(n)
        if s.tp * s.cp * 16 * s.dp == n:
            out.append(s)
    return out


@pytest.mark.parametrize(("model", "gpu", "gpus", "seq", "gbs"), SEARCHES)
def test_sweep_every_pareto_point_valid_for_every_framework(model, gpu, gpus, seq, gbs) -> None:
    m = get_model(model)
    r = optimize(
        m, ap.ClusterSpec(gpu=get_gpu(gpu), num_gpus=gpus), Workload(seq_len=seq, global_batch=gbs), budget=80
    )
    front = pareto_trials(r)
    assert front
    checked = 0
    for t in front:
        c, w = trial_cluster(r, t), trial_workload(r, t)
        strategies = [t.strategy] + (_pp16_variants(t, gpus) if "405b" in model else [])
        for s in strategies:
            if s is not t.strategy and validate_strategy(m, c, w, s, strict=False):
                continue
            for k in range(3):  # every supported release of every framework (cycled together)
                vers = {fw: v[k % len(v)] for fw, v in VERSIONS.items()}
                ls = launch_settings(m, c, w, s, versions=vers)
                assert validate_all(ls, gpus, m.layers, s.tp) == [], (s.label(), vers)
                # all three models have a torchtitan flavor; only an expert TP torchtitan lacks or a model
                # family limit (Qwen3 has no pipelining) may refuse it
                refused = ls.torchtitan_reason or ""
                assert (
                    ls.torchtitan is not None
                    or "expert TP" in refused
                    or "qwen3 has no pipelining" in refused
                )
                assert (
                    ls.torchtitan is not None
                    or s.expert_tp not in (1, s.tp)
                    or (s.pp > 1 and "qwen3" in model)
                )
                checked += 1
    assert checked >= len(front)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(
    model=st.sampled_from(["llama-3.1-8b", "llama-3.1-405b", "deepseek-v3", "qwen3-30b-a3b", "gpt-3-175b"]),
    gpus=st.sampled_from([64, 128, 256]),
    tp=st.sampled_from([1, 2, 4, 8]),
    pp=st.sampled_from([1, 2, 3, 4, 8, 16]),
    vpp=st.sampled_from([1, 2, 3, 4]),
    cp=st.sampled_from([1, 2]),
    ep=st.sampled_from([1, 8, 16]),
    zero=st.integers(0, 3),
    mb=st.sampled_from([1, 2]),
    rc=st.sampled_from(["none", "selective", "full"]),
    fp8=st.booleans(),
)
def test_any_valid_strategy_gives_valid_configs(model, gpus, tp, pp, vpp, cp, ep, zero, mb, rc, fp8) -> None:
    """Property: every strategy the model's (relaxed) rules accept yields files every framework accepts,
    uneven pipeline splits included."""
    m = get_model(model)
    vpp = vpp if pp > 1 else 1
    s = Strategy(
        tp=tp,
        pp=pp,
        vpp=vpp,
        cp=cp,
        ep=ep if m.is_moe else 1,
        zero=zero,
        micro_batch=mb,
        recompute=rc,
        sp=tp > 1,
        pp_schedule="interleaved" if vpp > 1 else "1f1b",
    )
    c = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=gpus)
    w = Workload(seq_len=4096, global_batch=1024, precision="fp8" if fp8 else "bf16")
    assume(not validate_strategy(m, c, w, s, strict=False))
    try:
        ls = launch_settings(m, c, w, s)
    except InvalidStrategyError:
        assume(False)
    assert validate_all(ls, gpus, m.layers, s.tp) == [], s.label()


def test_generated_shell_is_valid_bash(tmp_path) -> None:
    """The SLURM script and the torchrun command parse as bash, and stop with the placeholder's message
    when a required value is unset."""
    import subprocess

    ls, _, _ = _ls("deepseek-v3", 1024, Strategy(pp=16, ep=64, zero=1))
    script = tmp_path / "job.sbatch"
    script.write_text(ls.slurm)
    subprocess.run(["bash", "-n", str(script)], check=True)
    cmd = tmp_path / "run.sh"
    cmd.write_text("set -u\nMASTER_ADDR=x\n" + ls.torchrun.replace("torchrun", "echo torchrun", 1) + "\n")
    subprocess.run(["bash", "-n", str(cmd)], check=True)
    res = subprocess.run(["bash", str(cmd)], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert res.returncode != 0 and "set TRAIN_ITERS: optimizer steps to train" in res.stderr
    ok = subprocess.run(
        ["bash", str(cmd)],
        capture_output=True,
        text=True,
        env={
            "PATH": "/usr/bin:/bin",
            "LR": "3e-4",
            "MIN_LR": "3e-5",
            "WARMUP_ITERS": "2000",
            "TRAIN_ITERS": "1000",
            "DATA_PATH": "/d/x_text_document",
            "TOKENIZER": "/t",
            "CHECKPOINT_DIR": "/c",
        },
    )
    assert ok.returncode == 0, ok.stderr
    assert "--moe-layer-freq ([0]*3+[1]*58)" in ok.stdout and "--lr 3e-4" in ok.stdout


def _knob_spaces():
    """Spaces offering every knob the search added (schedules, uneven splits, CP variants, HSDP, savers)."""
    from autopar.search.space import build_space

    h100 = get_gpu("H100-SXM")
    moe = get_model("deepseek-v3")
    odd = get_model("llama-3.1-8b").model_copy(update={"name": "Llama-3.1-8B-61", "layers": 61})
    return [
        (
            moe,
            build_space(moe, ClusterSpec(gpu=h100, num_gpus=256), Workload(seq_len=16384, global_batch=512)),
        ),
        (
            odd,
            build_space(
                odd,
                ClusterSpec(gpu=h100, num_gpus=64),
                Workload(
                    seq_len=16384, global_batch=128, memory_savers=("offload", "bf16_states", "8bit_states")
                ),
            ),
        ),
    ]


KNOB_SPACES = _knob_spaces()


@settings(max_examples=80, deadline=None)
@given(which=st.integers(0, 1), seed=st.integers(0, 10**9), k=st.integers(0, 2))
def test_space_points_with_new_knobs_give_valid_configs(which, seed, k) -> None:
    """Launch files for search points using schedules, uneven splits, CP variants, HSDP and memory savers
    pass every vendored framework schema (flags, values, world size, layer split)."""
    m, space = KNOB_SPACES[which]
    pt = space.point(seed % space.size)
    hw = space.hardware[pt.hw]
    vers = {fw: v[k % len(v)] for fw, v in VERSIONS.items()}
    ls = launch_settings(m, hw.cluster, hw.workload, pt.strategy, versions=vers)
    assert validate_all(ls, hw.num_gpus, m.layers, pt.strategy.tp) == [], pt.strategy.label()


def test_megatron_flags_for_new_knobs() -> None:
    m, space = KNOB_SPACES[1]
    hw = space.hardware[0]
    s = Strategy(
        tp=2, pp=2, cp=8, sp=True, zero=3, dp_shard=2, micro_batch=1, cp_comm="a2a+p2p", pp_schedule="zb-h1",
        pp_first_layers=31, pp_last_layers=30, optimizer_states="bf16", optimizer_offload=1.0,
    )  # fmt: skip
    ls = launch_settings(m, hw.cluster, hw.workload, s)
    args = " ".join(ls.megatron_args)
    for flag in (
        "--cp-comm-type a2a+p2p",
        "--hierarchical-context-parallel-sizes 4 2",  # a2a over 4 (tp 2 x 4 = one 8-GPU node), ring over 2
        "--decoder-first-pipeline-num-layers 31",
        "--decoder-last-pipeline-num-layers 30",
        "--num-distributed-optimizer-instances 1",
        "--exp-avg-dtype bf16",
        "--optimizer-offload-fraction 1",
    ):
        assert flag in args, flag
    assert validate_all(ls, hw.num_gpus, m.layers, s.tp) == []
    assert any("zb-h1" in n for n in ls.notes)  # not in Megatron-LM: said, and 1F1B arguments
