"""The Megatron-LM command lines autopar prints, fed to Megatron-LM's own parse_args + validate_args.

Megatron-Core >= 0.17 needs Python 3.12, so Megatron runs in its own venv (.venv-megatron, made by
scripts/megatron_venv.sh: megatron-core 0.19.0, autopar's default target core_v0.19.0, whose wheel ships
megatron/training/arguments.py) and tests/megatron_check.py runs there, on every launch at once (one start of
Megatron, ~7 s). Each launch is the `torchrun` command `autopar launch --framework megatron` prints
(LaunchSettings.torchrun), run by bash with the placeholders set and a stand-in torchrun that records its
words and environment: Megatron gets the words after pretrain_gpt.py, the variables the command sets, and
WORLD_SIZE = --nnodes x --nproc-per-node. Outside CI a machine without .venv-megatron skips; under CI=true
the module fails instead.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
from pathlib import Path

import pytest

from autopar.catalog import get_gpu, get_model, list_models
from autopar.errors import InvalidStrategyError
from autopar.launch.settings import launch_settings
from autopar.perf import validate_strategy
from autopar.reports.common import pareto_trials, trial_cluster, trial_workload
from autopar.search.space import build_space
from autopar.search.study import optimize
from autopar.specs import ClusterSpec, Strategy, Workload

ROOT = Path(__file__).resolve().parents[2]
MEGATRON_PYTHON = ROOT / ".venv-megatron" / "bin" / "python"
CHECK = Path(__file__).resolve().parents[1] / "megatron_check.py"

if not MEGATRON_PYTHON.exists():
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(".venv-megatron missing (scripts/test.sh runs scripts/megatron_venv.sh)", pytrace=False)
    pytest.skip(".venv-megatron missing (bash scripts/megatron_venv.sh makes it)", allow_module_level=True)

# What the user sets for the placeholders (any values Megatron takes: it checks no path here).
PLACEHOLDER_VALUES = {
    "TRAIN_ITERS": "1000",
    "LR": "3e-4",
    "MIN_LR": "3e-5",
    "WARMUP_ITERS": "100",
    "DATA_PATH": "/data/c4_text_document",
    "TOKENIZER": "/models/tokenizer",
    "CHECKPOINT_DIR": "/checkpoints",
    "MASTER_ADDR": "node0",
}
# Stands in for torchrun: its words and its environment, NUL-separated.
FAKE_TORCHRUN = '#!/bin/bash\nprintf \'%s\\0\' "$@" >"$CAPTURE/argv"\nenv -0 >"$CAPTURE/env"\n'
# compute capability (major, minor) Megatron is told the GPU has (tests/megatron_check.py)
CAPABILITY = {"H100-SXM": (9, 0), "B200": (10, 0)}


def megatron_problems(items: list[dict]) -> list[list[str]]:
    """Megatron's problems with each {"argv", "world_size", "env", "capability"} (tests/megatron_check.py)."""
    res = subprocess.run(
        [str(MEGATRON_PYTHON), str(CHECK)],
        input=json.dumps(items),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout)
    assert len(out) == len(items)
    return out


def launch_item(ls, gpu: str, tmp: Path) -> dict:
    """What Megatron sees of the printed torchrun command: run by bash with a stand-in torchrun."""
    (tmp / "torchrun").write_text(FAKE_TORCHRUN)
    (tmp / "torchrun").chmod(0o755)
    base = {"PATH": f"{tmp}:/usr/bin:/bin", "CAPTURE": str(tmp), **PLACEHOLDER_VALUES}
    res = subprocess.run(["bash", "-c", "set -eu\n" + ls.torchrun], env=base, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    words = (tmp / "argv").read_bytes().decode().split("\0")[:-1]
    seen = dict(kv.split("=", 1) for kv in (tmp / "env").read_bytes().decode().split("\0")[:-1])
    start = words.index("pretrain_gpt.py")
    opts, argv = words[:start], words[start + 1 :]
    nodes = int(opts[opts.index("--nnodes") + 1]) if "--nnodes" in opts else 1
    world = nodes * int(opts[opts.index("--nproc-per-node") + 1])
    env = {k: v for k, v in seen.items() if k not in base and k not in ("PWD", "SHLVL", "_")}
    return {"argv": argv, "world_size": world, "env": env, "capability": CAPABILITY[gpu]}


def _problem(model: str, gpus: int, gpu: str = "H100-SXM", **wl):
    w = Workload(**{"seq_len": 4096, "global_batch": 512, **wl})
    return get_model(model), ClusterSpec(gpu=get_gpu(gpu), num_gpus=gpus), w


def _ls(model: str, gpus: int, s: Strategy, gpu: str = "H100-SXM", **wl):
    return launch_settings(*_problem(model, gpus, gpu, **wl), s)


# --------------------------------------------------------------------------- the launches

# id -> (model, GPUs, GPU, strategy, workload): each knob autopar writes a Megatron flag for, at least once.
EXPLICIT = {
    "dense-tp-sp": ("llama-3.1-8b", 8, "H100-SXM", Strategy(tp=2, sp=True), {}),
    "ddp": ("llama-3.1-8b", 8, "H100-SXM", Strategy(zero=0), {}),
    "zero2-fsdp": ("llama-3.1-8b", 16, "H100-SXM", Strategy(tp=2, sp=True, zero=2), {}),
    "zero3-fsdp-bf16-grads": (
        "llama-3.1-70b",
        64,
        "H100-SXM",
        Strategy(tp=4, sp=True, zero=3),
        {"grad_reduce_dtype": "bf16"},
    ),
    "hsdp": ("llama-3.1-70b", 64, "H100-SXM", Strategy(tp=2, sp=True, zero=3, dp_shard=8), {}),
    "pp-interleaved": (
        "llama-3.1-70b",
        64,
        "H100-SXM",
        Strategy(tp=8, pp=4, vpp=2, sp=True, pp_schedule="interleaved"),
        {},
    ),
    "pp-first-last": (
        "llama-3.1-70b",
        64,
        "H100-SXM",
        Strategy(tp=8, pp=4, sp=True, pp_first_layers=17, pp_last_layers=21),
        {},
    ),
    "pp-account-emb-loss": (
        "llama-3.1-405b",
        256,
        "H100-SXM",
        Strategy(tp=8, pp=4, sp=True, pp_account_embedding=True, pp_account_loss=True),
        {},
    ),
    "pp-account-loss": (
        "llama-3.1-8b",
        48,
        "H100-SXM",
        Strategy(tp=2, pp=3, sp=True, pp_account_loss=True),
        {},
    ),
    "pp-uneven-auto-split": ("llama-3.1-8b", 48, "H100-SXM", Strategy(tp=2, pp=3, sp=True), {}),
    "pp-uneven-first-last-vpp": (
        "llama-3.1-70b",
        48,
        "H100-SXM",
        Strategy(tp=8, pp=3, vpp=2, sp=True, pp_schedule="interleaved"),
        {},
    ),
    "pp-layout-vpp": (
        "deepseek-v3",
        256,
        "H100-SXM",
        Strategy(pp=4, vpp=2, ep=64, pp_schedule="interleaved"),
        {},
    ),
    "pp-zb-v-fallback": (
        "llama-3.1-70b",
        64,
        "H100-SXM",
        Strategy(tp=8, pp=4, vpp=2, sp=True, pp_schedule="zb-v"),
        {},
    ),
    "multinode-tp-overlap-budget": (
        "llama-3.1-70b",
        128,
        "H100-SXM",
        Strategy(tp=8, pp=2, sp=True),
        {"tp_comm_overlap": True, "token_budget": 1e9},
    ),
    "recompute-selective": ("llama-3.1-8b", 8, "H100-SXM", Strategy(recompute="selective"), {}),
    "recompute-full": ("llama-3.1-70b", 64, "H100-SXM", Strategy(tp=8, pp=2, sp=True, recompute="full"), {}),
    "recompute-mlp": ("llama-3.1-8b", 8, "H100-SXM", Strategy(tp=2, sp=True, recompute="sel:mlp"), {}),
    "optimizer-bf16-states": ("llama-3.1-8b", 8, "H100-SXM", Strategy(optimizer_states="bf16"), {}),
    "optimizer-offload": (
        "llama-3.1-70b",
        64,
        "H100-SXM",
        Strategy(tp=8, sp=True, optimizer_offload=1.0),
        {},
    ),
    "optimizer-offload-half": ("llama-3.1-8b", 8, "H100-SXM", Strategy(optimizer_offload=0.5), {}),
    "activation-offload": (
        "llama-3.1-70b",
        64,
        "H100-SXM",
        Strategy(tp=8, sp=True, activation_offload_layers=10),
        {},
    ),
    "fp8-delayed": ("llama-3.1-70b", 64, "H100-SXM", Strategy(tp=4, sp=True), {"precision": "fp8"}),
    "fp8-current": (
        "llama-3.1-70b",
        64,
        "H100-SXM",
        Strategy(tp=4, sp=True),
        {"precision": "fp8", "fp8_recipe": "current"},
    ),
    "fp8-rowwise": (
        "llama-3.1-70b",
        64,
        "H100-SXM",
        Strategy(tp=4, sp=True),
        {"precision": "fp8", "fp8_recipe": "rowwise"},
    ),
    "fp8-mxfp8-b200": (
        "llama-3.1-70b",
        64,
        "B200",
        Strategy(tp=4, sp=True),
        {"precision": "fp8", "fp8_recipe": "mxfp8"},
    ),
    "moe-mixtral-ep": ("mixtral-8x7b", 64, "H100-SXM", Strategy(tp=2, sp=True, ep=8, pp=2), {}),
    "moe-qwen3-etp1": ("qwen3-30b-a3b", 64, "H100-SXM", Strategy(tp=2, sp=True, ep=8, etp=1), {}),
    "moe-recompute-moe-act": (
        "qwen3-30b-a3b",
        32,
        "H100-SXM",
        Strategy(ep=8, recompute="sel:layernorm+moe_act"),
        {},
    ),
    "moe-flex-dispatcher": (
        "qwen3-30b-a3b",
        64,
        "H100-SXM",
        Strategy(ep=16, zero=1),
        {"moe_dispatcher": "flex"},
    ),
    "moe-ep-overlap": (
        "deepseek-v3",
        256,
        "H100-SXM",
        Strategy(pp=4, vpp=2, ep=64, pp_schedule="interleaved", pp_first_layers=14, pp_last_layers=15),
        {"moe_ep_overlap": True},
    ),
    "mla-deepseek-pp-ep": (
        "deepseek-v3",
        1024,
        "H100-SXM",
        Strategy(pp=16, ep=64, zero=1, pp_first_layers=2, pp_last_layers=3),
        {},
    ),
    "mla-recompute-up-proj": (
        "deepseek-v3",
        1024,
        "H100-SXM",
        Strategy(pp=16, ep=64, recompute="sel:mla_up_proj"),
        {},
    ),
    "gpt-oss-fp8": ("gpt-oss-120b", 64, "H100-SXM", Strategy(ep=8, zero=1), {"precision": "fp8"}),
}
EXPLICIT.update(
    {
        f"cp-{comm}": (
            "llama-3.1-8b",
            64,
            "H100-SXM",
            Strategy(tp=2, sp=True, cp=4, cp_comm=comm),
            {"seq_len": 65536, "global_batch": 16},
        )
        for comm in ("p2p", "a2a", "allgather", "a2a+p2p")
    }
)

# (model, H100 GPUs, seq_len, global batch, precision): the Megatron searches of tests/launch/test_frameworks.py
# the three-objective front (free memory an objective, the default before issue 46): varied layouts to check
THREE = "throughput,headroom,cost"
SEARCHES = [
    ("llama-3.1-8b", 64, 8192, 256, "bf16"),
    ("llama-3.1-70b", 128, 8192, 512, "fp8"),
    ("deepseek-v3", 1024, 4096, 2048, "bf16"),
]
# Megatron search spaces with every knob on offer (memory savers, FP8 recipes, dispatchers), sampled
SPACES = [
    ("deepseek-v3", 256, "H100-SXM", {"moe_dispatcher": "flex", "moe_ep_overlap": True, "precision": "fp8"}),
    ("qwen3-30b-a3b", 64, "H100-SXM", {"tp_comm_overlap": True, "grad_reduce_dtype": "bf16"}),
    ("llama-3.1-70b", 64, "B200", {"precision": "fp8", "fp8_recipe": "mxfp8"}),
    ("llama-3.1-8b", 32, "H100-SXM", {"seq_len": 32768, "global_batch": 64}),
]
SAVERS = ("offload", "bf16_states", "act_offload", "recompute_modules")
SAMPLES = 20  # points per space


def _launches(tmp: Path) -> dict[str, dict]:
    """id -> checker item, for the explicit strategies, every catalog model, search fronts and space samples."""
    out = {}
    for key, (model, n, gpu, s, wl) in EXPLICIT.items():
        out[key] = launch_item(_ls(model, n, s, gpu, **wl), gpu, tmp)
    for m in list_models():  # every architecture's flags (norm, positions, attention, MoE/MLA)
        s = Strategy(ep=8 if m.experts and m.experts % 8 == 0 else 1, zero=1)
        out[f"model:{m.name}"] = launch_item(_ls(m.name, 64, s), "H100-SXM", tmp)
    for name, n, seq, gbs, prec in SEARCHES:
        m = get_model(name)
        w = Workload(seq_len=seq, global_batch=gbs, precision=prec, framework="megatron")
        r = optimize(
            m, ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=n), w, budget=16, seed=1, objectives=THREE
        )
        for t in pareto_trials(r):
            ls = launch_settings(m, trial_cluster(r, t), trial_workload(r, t), t.strategy)
            out[f"search:{name}/{n}/{prec} {t.strategy.label()}"] = launch_item(ls, "H100-SXM", tmp)
    for name, n, gpu, extra in SPACES:
        m = get_model(name)
        w = Workload(**{"seq_len": 4096, "global_batch": 512, "memory_savers": SAVERS, **extra})
        space = build_space(m, ClusterSpec(gpu=get_gpu(gpu), num_gpus=n), w)
        for i in random.Random(0).sample(range(space.size), min(SAMPLES, space.size)):
            pt = space.point(i)
            hw = space.hardware[pt.hw]
            ls = launch_settings(m, hw.cluster, hw.workload, pt.strategy)
            out[f"space:{name}/{n}/{gpu} {pt.strategy.label()}"] = launch_item(ls, gpu, tmp)
    out |= _tune_launches(tmp)
    return out


def _tune_launches(tmp: Path) -> dict[str, dict]:
    """`autopar tune --runner slurm`'s short runs (--train-iters, --log-interval 1) of a searched problem."""
    from autopar.tune.candidates import from_search
    from autopar.tune.runners.base import Job
    from autopar.tune.runners.slurm import short_run_settings

    m = get_model("llama-3.1-8b")
    w = Workload(seq_len=8192, global_batch=256, framework="megatron")
    r = optimize(m, ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=32), w, budget=16, seed=1, objectives=THREE)
    out = {}
    for c in from_search(r, None, pool=6):
        ls = short_run_settings(Job(1, c, tmp / "run", 30, 10, None))
        out[f"tune:{c.label}"] = launch_item(ls, "H100-SXM", tmp)
    return out


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory) -> dict[str, tuple[dict, list[str]]]:
    """id -> (checker item, Megatron's problems), all checked by one Megatron process."""
    tmp = tmp_path_factory.mktemp("torchrun")
    items = _launches(tmp) | _rejects(tmp)
    problems = megatron_problems(list(items.values()))
    return {k: (v, p) for (k, v), p in zip(items.items(), problems, strict=True)}


# --------------------------------------------------------------------------- Megatron accepts them


@pytest.mark.parametrize("key", sorted(EXPLICIT))
def test_megatron_accepts_the_strategy(verdicts, key: str) -> None:
    model, n, gpu, s, wl = EXPLICIT[key]
    # a strategy autopar's own rules allow (uneven stages: what `autopar launch --allow-uneven` prints)
    assert validate_strategy(*_problem(model, n, gpu, **wl), s, strict=False) == []
    assert verdicts[key][1] == []


def test_megatron_accepts_every_catalog_model(verdicts) -> None:
    rejected = {k: p for k, (_, p) in verdicts.items() if k.startswith("model:") and p}
    assert rejected == {}
    assert sum(k.startswith("model:") for k in verdicts) == len(list_models())


def test_megatron_accepts_every_search_point(verdicts) -> None:
    """Pareto fronts of the Megatron searches and samples of Megatron search spaces with every knob offered."""
    rejected = {k: p for k, (_, p) in verdicts.items() if k.startswith(("search:", "space:")) and p}
    assert rejected == {}
    assert sum(k.startswith("search:") for k in verdicts) >= 40
    assert sum(k.startswith("space:") for k in verdicts) >= 40


def test_megatron_accepts_the_tune_short_runs(verdicts) -> None:
    tune = {k: v for k, v in verdicts.items() if k.startswith("tune:")}
    assert len(tune) >= 2
    for item, problems in tune.values():
        assert problems == []
        argv = item["argv"]
        assert argv[argv.index("--train-iters") + 1] == "30" and argv[argv.index("--log-interval") + 1] == "1"


def test_the_launches_use_what_they_check(verdicts) -> None:
    """The sweep reaches the flags it means to: virtual stages, CP, FP8, recompute, FSDP, MoE, offload."""
    words = {w for k, (item, _) in verdicts.items() if not k.startswith("reject:") for w in item["argv"]}
    for flag in (
        "--num-virtual-stages-per-pipeline-rank",
        "--decoder-first-pipeline-num-layers",
        "--context-parallel-size",
        "--hierarchical-context-parallel-sizes",
        "--fp8-recipe",
        "--recompute-granularity",
        "--recompute-modules",
        "--use-distributed-optimizer",
        "--use-megatron-fsdp",
        "--num-distributed-optimizer-instances",
        "--expert-model-parallel-size",
        "--moe-flex-dispatcher-backend",
        "--overlap-moe-expert-parallel-comm",
        "--optimizer-cpu-offload",
        "--cpu-offloading-num-layers",
        "--tp-comm-overlap",
        "--multi-latent-attention",
    ):
        assert flag in words, flag
    assert verdicts["multinode-tp-overlap-budget"][0]["world_size"] == 128  # 16 nodes x 8
    assert verdicts["dense-tp-sp"][0]["env"] == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}


# --------------------------------------------------------------------------- the check can fail


# 32 layers + embedding + loss = 34 on pp=4: autopar's own rule refuses the strategy (layouts.py
# _megatron_split_rules; launch_settings too), and Megatron refuses the flags added to the even PP4 launch.
ACCOUNTED = Strategy(tp=2, pp=4, sp=True, pp_account_embedding=True, pp_account_loss=True)
ACCOUNT_FLAGS = ["--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"]


def _rejects(tmp: Path) -> dict[str, dict]:
    """Launches Megatron must refuse, checked with the others (one Megatron start)."""
    interleaved = Strategy(tp=8, pp=4, vpp=2, sp=True, pp_schedule="interleaved")
    good = launch_item(_ls("llama-3.1-70b", 64, interleaved), "H100-SXM", tmp)
    even = launch_item(_ls("llama-3.1-8b", 32, Strategy(tp=2, pp=4, sp=True)), "H100-SXM", tmp)
    argv = good["argv"]
    layers = argv.index("--num-layers") + 1
    return {
        "reject:good": good,
        "reject:78-layers": {**good, "argv": [*argv[:layers], "78", *argv[layers + 1 :]]},  # on pp=4 x vpp=2
        "reject:world-60": {**good, "world_size": 60},  # not a multiple of TP x PP = 32
        "reject:no-env": {**good, "env": {}},  # TP on Hopper without CUDA_DEVICE_MAX_CONNECTIONS=1
        "reject:unknown-flag": {**good, "argv": [*argv, "--no-such-flag"]},
        "reject:accounted": {**even, "argv": [*even["argv"], *ACCOUNT_FLAGS]},
    }


def test_megatron_rejects_what_it_should(verdicts) -> None:
    """Megatron's validate_args refuses a pipeline split, a world size and a missing environment variable;
    its parser refuses an unknown flag: the checker reports each, with the Megatron line that raised it."""
    res = {k.removeprefix("reject:"): p for k, (_, p) in verdicts.items() if k.startswith("reject:")}
    assert res["good"] == []
    assert res["78-layers"] == [
        "validate_args: AssertionError: number of layers of the model must be divisible pipeline model "
        "parallel size (megatron/training/arguments.py:934)"
    ]
    assert res["world-60"][0].startswith("validate_args: AssertionError: world size (60) is not divisible")
    assert "CUDA_DEVICE_MAX_CONNECTIONS to 1" in res["no-env"][0]
    assert res["unknown-flag"] == [
        "parse_args: pretrain_gpt.py: error: unrecognized arguments: --no-such-flag"
    ]
    assert "(34) not divisible by pp=4" in validate_strategy(*_problem("llama-3.1-8b", 32), ACCOUNTED)[0]
    with pytest.raises(InvalidStrategyError, match=r"\(34\) not divisible"):
        _ls("llama-3.1-8b", 32, ACCOUNTED)
    assert res["accounted"] == [
        "validate_args: AssertionError: Number of layers should be divisible by the pipeline-model-parallel "
        "size (megatron/training/arguments.py:963)"
    ]
