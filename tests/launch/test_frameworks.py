"""The launch files of Pareto points, fed to the frameworks' own code (issue 25).

torchtitan 0.2.2 and DeepSpeed 0.19.5 are the `launch-check` extra (pyproject.toml; scripts/setup.sh test
installs it) on the test extra's CPU build of PyTorch; tests/frameworks.py runs their parsers and validators.
Megatron-LM's own parse_args + validate_args run in a Python 3.12 venv of their own (megatron-core 0.19.0,
scripts/megatron_venv.sh) on the same Pareto points' Megatron launches: tests/launch/test_megatron_parser.py. Outside CI a machine without the frameworks skips;
under CI=true the module fails instead.
"""

from __future__ import annotations

import importlib.util
import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autopar.catalog import get_gpu, get_model
from autopar.launch.settings import launch_settings
from autopar.launch.torchtitan import TORCHTITAN_MODELS
from autopar.reports.common import pareto_trials, trial_cluster, trial_workload
from autopar.search.study import optimize
from autopar.specs import ClusterSpec, Strategy, Workload

_MISSING = [m for m in ("torchtitan", "deepspeed") if importlib.util.find_spec(m) is None]
if _MISSING:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(
            f"{', '.join(_MISSING)} not installed (scripts/setup.sh test installs them)", pytrace=False
        )
    pytest.skip(
        f"{', '.join(_MISSING)} not installed (pip install -e '.[launch-check]')", allow_module_level=True
    )

from frameworks import (  # noqa: E402
    deepspeed_problems,
    fake_world,
    torchtitan_config,
    torchtitan_problems,
)

# (model, H100 GPUs, seq_len, global batch, precision, stack the search targets): dense 8B/70B, FP8,
# long context, two MoE models; each searched for the stack whose files it should produce.
PROBLEMS = [
    ("llama-3.1-8b", 64, 8192, 256, "bf16", "megatron"),
    ("llama-3.1-70b", 256, 8192, 512, "bf16", "torchtitan"),
    ("llama-3.1-70b", 128, 8192, 512, "fp8", "megatron"),
    ("llama-3.1-8b", 64, 131072, 64, "bf16", "torchtitan"),
    ("llama-3.1-8b", 32, 4096, 256, "bf16", "deepspeed"),
    ("llama-3.1-70b", 64, 4096, 256, "bf16", "deepspeed"),
    ("qwen3-30b-a3b", 64, 4096, 512, "bf16", "torchtitan"),
    ("deepseek-v3", 1024, 4096, 2048, "bf16", "megatron"),
]
BUDGET = 16  # complete trials per search: a front of 5-25 points per problem
THREE = "throughput,headroom,cost"  # the default objectives before free memory became a constraint


@pytest.fixture(scope="module")
def launches():
    """(problem, strategy label, GPUs, LaunchSettings) for every Pareto point of every problem."""
    out = []
    for name, n, seq, gbs, prec, stack in PROBLEMS:
        m = get_model(name)
        w = Workload(seq_len=seq, global_batch=gbs, precision=prec, framework=stack)
        # the three-objective front: free memory as an objective keeps the varied layouts these checks need
        r = optimize(
            m, ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=n), w, budget=BUDGET, seed=1, objectives=THREE
        )
        for t in pareto_trials(r):
            ls = launch_settings(m, trial_cluster(r, t), trial_workload(r, t), t.strategy)
            out.append((f"{name}/{n}/{stack}/{prec}", t.strategy.label(), n, ls))
    return out


def test_torchtitan_accepts_every_generated_toml(launches, tmp_path) -> None:
    rejected, checked = [], 0
    for problem, label, n, ls in launches:
        if ls.torchtitan is None:
            continue
        checked += 1
        problems = torchtitan_problems(ls.torchtitan, n, tmp_path)
        rejected += [f"{problem} {label}: {p}" for p in problems]
    assert rejected == []
    assert checked >= 40  # the torchtitan searches alone give most of these


def test_deepspeed_accepts_every_generated_config(launches) -> None:
    rejected, checked = [], 0
    for problem, label, n, ls in launches:
        if ls.deepspeed is None:
            continue
        checked += 1
        with fake_world(n):
            rejected += [f"{problem} {label}: {p}" for p in deepspeed_problems(ls.deepspeed, n)]
    assert rejected == []
    assert checked >= 10


def test_every_stack_search_point_has_its_file(launches) -> None:
    """A point the torchtitan/DeepSpeed search offers is one that stack's file expresses."""
    for problem, label, _, ls in launches:
        stack = problem.split("/")[2]
        if stack == "torchtitan":
            assert ls.torchtitan is not None, (problem, label, ls.torchtitan_reason)
        if stack == "deepspeed":
            assert ls.deepspeed is not None, (problem, label, ls.deepspeed_reason)


# --------------------------------------------------------------------------- the checkers can fail


def _ls(model: str, gpus: int, s: Strategy, **wl):
    w = Workload(**{"seq_len": 4096, "global_batch": 512, **wl})
    return launch_settings(get_model(model), ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=gpus), w, s)


def _shape_of_torchtitan_flavor(name: str, flavor: str) -> tuple:
    """(layers, hidden, heads, KV heads, vocab, experts, top-k) of torchtitan's own model args."""
    from torchtitan.protocols.train_spec import get_train_spec

    a = get_train_spec(name).model_args[flavor]
    moe = getattr(a, "moe_args", None) if getattr(a, "moe_enabled", True) else None
    experts, topk = (moe.num_experts, moe.top_k) if moe is not None else (0, 0)
    kv = getattr(a, "n_kv_heads", None) or a.n_heads  # MLA (DeepSeek) states no KV-head count: every head
    return (a.n_layers, a.dim, a.n_heads, kv, a.vocab_size, experts, topk)


@pytest.mark.parametrize("catalog_name", sorted(TORCHTITAN_MODELS))
def test_every_torchtitan_flavor_is_the_catalog_model(catalog_name: str) -> None:
    """The [model] name/flavor autopar writes for a catalog model is that architecture in torchtitan's own
    TrainSpec (a wrong mapping would launch another network)."""
    m = get_model(catalog_name)
    ours = (m.layers, m.hidden, m.heads, m.kv_heads or m.heads, m.vocab, m.experts, m.topk)
    assert _shape_of_torchtitan_flavor(*TORCHTITAN_MODELS[catalog_name]) == ours


def test_torchtitan_checker_rejects_what_torchtitan_rejects(tmp_path) -> None:
    toml = _ls(
        "llama-3.1-70b", 64, Strategy(tp=8, pp=4, vpp=2, sp=True, pp_schedule="interleaved")
    ).torchtitan
    assert torchtitan_problems(toml, 64, tmp_path) == []
    assert torchtitan_problems(toml, 128, tmp_path)[0].startswith("AssertionError: Invalid parallel dims")
    bad = toml.replace('flavor = "70B"', 'flavor = "71B"')
    assert torchtitan_problems(bad, 64, tmp_path) == ["KeyError: '71B'"]
    unknown = toml + "\n[training2]\nx = 1\n"
    assert "Invalid field names" in torchtitan_problems(unknown, 64, tmp_path)[0]
    typed = toml.replace("seq_len = 4096", 'seq_len = "4096"')
    assert any(p.startswith("training.seq_len = '4096'") for p in torchtitan_problems(typed, 64, tmp_path))
    fp8 = _ls("llama-3.1-8b", 8, Strategy(tp=2, sp=True), precision="fp8").torchtitan
    assert torchtitan_problems(fp8, 8, tmp_path) == []
    renamed = fp8.replace('converters = ["quantize.linear.float8"]', 'converters = ["float8"]')
    assert torchtitan_problems(renamed, 8, tmp_path) == ["model converter 'float8' is not registered"]
    # an explicit 5-stage split for pp=4 with 1F1B: torchtitan would build uneven stages per rank
    uneven = _ls("llama-3.1-70b", 64, Strategy(tp=8, pp=4, sp=True, pp_first_layers=17, pp_last_layers=21))
    assert 'module_fqns_per_model_part = [["tok_embeddings"' in uneven.torchtitan
    assert torchtitan_problems(uneven.torchtitan, 64, tmp_path) == []
    line = next(x for x in uneven.torchtitan.splitlines() if x.startswith("module_fqns_per_model_part"))
    five = line.replace('"layers.79", "norm", "output"]', '"layers.79"], ["norm", "output"]')
    problems = torchtitan_problems(uneven.torchtitan.replace(line, five), 64, tmp_path)
    assert "5 stages not divisible by pp=4" in problems
    # the defect the issue reported: torchtitan's default first/last-stage weights (1 each) make
    # ceil((80 + 2) / 10) = 9 stages, not a multiple of pp=4; pipeline_llm itself raises
    staged = toml.replace("pipeline_parallel_first_stage_less_layers = 0\n", "")
    staged = staged.replace("pipeline_parallel_last_stage_less_layers = 0\n", "")
    problems = torchtitan_problems(staged, 64, tmp_path)
    assert problems[0].startswith("pipeline_llm: Number of virtual stages (9) must be divisible by pipeline")


def test_torchtitan_family_limits_are_what_torchtitan_raises(tmp_path) -> None:
    """The writer refuses DeepSeek-V3 with CP and Qwen3 with PP; torchtitan itself rejects both TOMLs."""
    ds = _ls("deepseek-v3", 1024, Strategy(pp=16, ep=64, zero=1, cp=2))
    assert ds.torchtitan is None and "flex attention" in ds.torchtitan_reason
    cp1 = _ls("deepseek-v3", 512, Strategy(pp=16, ep=64, zero=1)).torchtitan
    forced = cp1.replace("context_parallel_degree = 1", "context_parallel_degree = 2")
    assert "Context Parallel only supports SDPA" in torchtitan_problems(forced, 1024, tmp_path)[0]
    qw = _ls("qwen3-30b-a3b", 64, Strategy(pp=2, ep=8, zero=1))
    assert qw.torchtitan is None and "pipelining_fn" in qw.torchtitan_reason
    pp1 = _ls("qwen3-30b-a3b", 32, Strategy(ep=8, zero=1)).torchtitan
    forced = pp1.replace("pipeline_parallel_degree = 1", "pipeline_parallel_degree = 2")
    assert torchtitan_problems(forced, 64, tmp_path) == ["qwen3 does not support pipelining"]
    # GPT-OSS: neither PP nor CP in torchtitan 0.2.2 (found by feeding its search's points to torchtitan)
    base = _ls("gpt-oss-120b", 32, Strategy(ep=8, zero=3)).torchtitan
    for knob, axis, raised in (
        ("pp", "pipeline", "gpt_oss does not support pipelining"),
        ("cp", "context", "NotImplementedError: CP support for gpt-oss"),
    ):
        oss = _ls("gpt-oss-120b", 64, Strategy(ep=8, zero=3, **{knob: 2}))
        assert oss.torchtitan is None and "framework=torchtitan cannot run it" in oss.torchtitan_reason
        forced = base.replace(f"{axis}_parallel_degree = 1", f"{axis}_parallel_degree = 2")
        assert torchtitan_problems(forced, 64, tmp_path)[0].startswith(raised)


def test_deepspeed_autotp_batch_needs_the_mpu() -> None:
    """DeepSpeed counts every GPU as data-parallel unless the mpu says GPUs/TP: 512 = 1 x 8 x 64, not x 128."""
    cfg = _ls("llama-3.1-8b", 128, Strategy(tp=2, zero=1), framework="deepspeed").deepspeed
    doc = json.loads(cfg)
    assert (doc["train_micro_batch_size_per_gpu"], doc["gradient_accumulation_steps"]) == (1, 8)
    with fake_world(128):
        assert deepspeed_problems(cfg, 128) == []
        doc["tensor_parallel"]["autotp_size"] = 1  # no mpu: DeepSpeed counts 128 data-parallel ranks
        assert "512 != 1 * 8 * 128" in deepspeed_problems(json.dumps(doc), 128)[0]
        doc["zero_optimization"]["stage3_typo"] = 1
        assert "stage3_typo" in deepspeed_problems(json.dumps(doc), 128)[0]


# --------------------------------------------------------------------------- complete, faithful files


def test_torchtitan_data_and_tokenizer_stop_the_run_until_set(tmp_path) -> None:
    """No silent c4_test / test tokenizer: torchtitan's own dataset and tokenizer loaders stop with what to
    set, and accept the values given on the command line; checkpoints every 500 steps like Megatron's."""
    from torchtitan.components.tokenizer import HuggingFaceTokenizer
    from torchtitan.hf_datasets.text_datasets import _validate_dataset

    ls = _ls("llama-3.1-8b", 8, Strategy(tp=2, sp=True))
    cfg = torchtitan_config(ls.torchtitan, tmp_path)
    with pytest.raises(ValueError, match=r"Dataset SET --training.dataset .* is not supported"):
        _validate_dataset(cfg.training.dataset, cfg.training.dataset_path)
    with pytest.raises(FileNotFoundError, match=r"Tokenizer path 'SET --model.hf_assets_path"):
        HuggingFaceTokenizer(cfg.model.hf_assets_path)
    set_cfg = torchtitan_config(
        ls.torchtitan, tmp_path, "--training.dataset", "c4", "--training.dataset_path", "/data/c4"
    )
    assert _validate_dataset(set_cfg.training.dataset, set_cfg.training.dataset_path)[0] == "/data/c4"
    assert (cfg.checkpoint.enable, cfg.checkpoint.folder, cfg.checkpoint.interval) == (
        True,
        "checkpoint",
        500,
    )
    args = " ".join(ls.megatron_args) + " " + ls.torchrun
    assert "--save-interval 500" in args and '--save "${CHECKPOINT_DIR:?' in args
    assert '--load "${CHECKPOINT_DIR:?' in args


@pytest.mark.parametrize(
    ("gpu", "recipe", "megatron", "converter", "torchtitan"),
    [
        # Transformer Engine recipe by Megatron's name (megatron/core/fp8_utils.py); torchao's by torchtitan's
        ("H100-SXM", "delayed", "delayed", "quantize.linear.float8", "tensorwise"),
        ("H100-SXM", "current", "tensorwise", "quantize.linear.float8", "tensorwise"),
        ("H100-SXM", "rowwise", "blockwise", "quantize.linear.float8", "rowwise"),
        ("B200", "mxfp8", "mxfp8", "quantize.linear.mx", "mxfp8_cublas"),
    ],
)
def test_fp8_recipe_the_estimate_assumed_reaches_both_files(
    tmp_path, gpu, recipe, megatron, converter, torchtitan
) -> None:
    m, s = get_model("llama-3.1-70b"), Strategy(tp=4, sp=True, zero=1)
    w = Workload(seq_len=4096, global_batch=512, precision="fp8", fp8_recipe=recipe, tp_comm_overlap=True)
    ls = launch_settings(m, ClusterSpec(gpu=get_gpu(gpu), num_gpus=64), w, s)
    assert f"--fp8-recipe {megatron}" in ls.megatron_args
    assert torchtitan_problems(ls.torchtitan, 64, tmp_path) == []
    cfg = torchtitan_config(ls.torchtitan, tmp_path)
    assert cfg.model.converters == [converter]
    section = cfg.quantize.linear.mx if converter.endswith(".mx") else cfg.quantize.linear.float8
    assert section.recipe_name == torchtitan
    # mxfp8 with TP: no torch.compile (MXLinearConverter asserts it), hence no async TP either
    assert cfg.compile.enable == (recipe != "mxfp8")
    assert cfg.parallelism.enable_async_tensor_parallel == (recipe != "mxfp8")


def test_unset_master_addr_stops_the_multinode_command(tmp_path) -> None:
    import subprocess

    ls = _ls("llama-3.1-8b", 16, Strategy(tp=2, sp=True))  # 2 nodes: a rendezvous host is needed
    assert "MASTER_ADDR" in ls.placeholders
    cmd = tmp_path / "run.sh"
    cmd.write_text("set -u\n" + ls.torchrun.replace("torchrun", "echo torchrun", 1) + "\n")
    env = {"PATH": "/usr/bin:/bin", "TRAIN_ITERS": "10", "LR": "1e-4", "MIN_LR": "1e-5", "WARMUP_ITERS": "1"}
    env |= {"DATA_PATH": "/d", "TOKENIZER": "/t", "CHECKPOINT_DIR": "/c"}
    res = subprocess.run(["bash", str(cmd)], capture_output=True, text=True, env=env)
    assert res.returncode != 0 and "set MASTER_ADDR: address of the first node" in res.stderr
    ok = subprocess.run(["bash", str(cmd)], capture_output=True, text=True, env={**env, "MASTER_ADDR": "n0"})
    assert ok.returncode == 0 and "--rdzv-endpoint n0:29500" in ok.stdout


def test_sbatch_torchtitan_alternative_parses_and_its_toml_is_written(tmp_path) -> None:
    """The sbatch script's commented torchtitan command: torchtitan's ConfigManager takes its flags with the
    TOML, and `launch --framework slurm --out` writes the TOML it names (none, and no command, without one)."""
    import shlex

    from typer.testing import CliRunner

    from autopar.cli import app

    ls = _ls("llama-3.1-8b", 16, Strategy(tp=2, sp=True))
    block = ls.slurm[ls.slurm.index("# srun torchrun") :]
    words = shlex.split(" ".join(x.lstrip("# ").rstrip("\\") for x in block.splitlines()))
    flags = words[words.index("--job.config_file") + 2 :]
    values = {
        "$TOKENIZER": "/t",
        "$CHECKPOINT_DIR": "/c",
        "$LR": "1e-4",
        "$WARMUP_ITERS": "5",
        "$TRAIN_ITERS": "9",
    }
    cfg = torchtitan_config(ls.torchtitan, tmp_path, *(values.get(w, w) for w in flags))
    assert (cfg.model.hf_assets_path, cfg.checkpoint.folder, cfg.optimizer.lr) == ("/t", "/c", 1e-4)
    base = ["launch", "--gpus", "16", "--tp", "2", "--framework", "slurm"]
    res = CliRunner().invoke(app, [*base, "--model", "llama-3.1-8b", "--out", str(tmp_path / "a")])
    assert res.exit_code == 0 and sorted(p.name for p in (tmp_path / "a").iterdir()) == [
        "autopar.sbatch",
        "autopar_torchtitan.toml",
    ]
    res = CliRunner().invoke(
        app, [*base, "--model", "mixtral-8x7b", "--ep", "2", "--out", str(tmp_path / "b")]
    )
    assert res.exit_code == 0 and [p.name for p in (tmp_path / "b").iterdir()] == ["autopar.sbatch"]
    assert "torchtitan" not in (tmp_path / "b" / "autopar.sbatch").read_text().split("set -euo")[1]


def _stack_spaces():
    """Search spaces of the torchtitan and DeepSpeed stacks with every knob they offer (FP8 recipes, savers)."""
    from autopar.search.space import build_space

    h100 = get_gpu("H100-SXM")
    out = []
    for name, n, stack, extra in (
        ("gpt-oss-120b", 64, "torchtitan", {"precision": "fp8", "fp8_recipe": "rowwise"}),
        ("deepseek-v3", 256, "torchtitan", {"tp_comm_overlap": True}),
        ("llama-3.1-8b", 64, "torchtitan", {"seq_len": 32768, "precision": "fp8", "tp_comm_overlap": True}),
        ("llama-3.1-70b", 64, "deepspeed", {"memory_savers": ("offload",)}),
    ):
        m = get_model(name)
        w = Workload(**{"seq_len": 4096, "global_batch": 256, "framework": stack, **extra})
        out.append((m, stack, build_space(m, ClusterSpec(gpu=h100, num_gpus=n), w)))
    return out


STACK_SPACES = _stack_spaces()


@settings(max_examples=20, deadline=None)
@given(which=st.integers(0, len(STACK_SPACES) - 1), seed=st.integers(0, 10**9))
def test_any_stack_search_point_is_accepted_by_its_framework(which, seed, tmp_path_factory) -> None:
    """Property: a point the torchtitan/DeepSpeed search may offer has a file that framework accepts."""
    m, stack, space = STACK_SPACES[which]
    pt = space.point(seed % space.size)
    hw = space.hardware[pt.hw]
    ls = launch_settings(m, hw.cluster, hw.workload, pt.strategy)
    if stack == "torchtitan":
        assert ls.torchtitan is not None, (pt.strategy.label(), ls.torchtitan_reason)
        assert torchtitan_problems(ls.torchtitan, hw.num_gpus, tmp_path_factory.mktemp("tt")) == []
    else:
        assert ls.deepspeed is not None, (pt.strategy.label(), ls.deepspeed_reason)
        with fake_world(hw.num_gpus):
            assert deepspeed_problems(ls.deepspeed, hw.num_gpus) == []


def test_torchtitan_runs_zb_v_under_its_own_name(tmp_path) -> None:
    """ZB-V (knobs.SCHEDULES) is written as torch's ZBVZeroBubble with two stages per rank, and torchtitan
    accepts it; a schedule torchtitan does not ship (ZB-2p) falls back to 1F1B with a note."""
    s = Strategy(tp=8, pp=4, vpp=2, sp=True, pp_schedule="zb-v")
    toml = _ls("llama-3.1-70b", 64, s).torchtitan
    assert 'pipeline_parallel_schedule = "ZBVZeroBubble"' in toml
    assert "pipeline_parallel_layers_per_stage = 10" in toml  # 80 layers / (4 ranks x 2 chunks)
    assert torchtitan_problems(toml, 64, tmp_path) == []
    ls = _ls("llama-3.1-70b", 64, Strategy(tp=8, pp=4, sp=True, pp_schedule="zb-2p"))
    assert 'pipeline_parallel_schedule = "1F1B"' in ls.torchtitan
    assert any("zb-2p" in n for n in ls.framework_notes["torchtitan"])


@pytest.mark.parametrize(("cp_comm", "rotate"), [("allgather", "allgather"), ("p2p", "alltoall")])
def test_torchtitan_runs_the_cp_rotate_method_the_estimate_priced(cp_comm, rotate, tmp_path) -> None:
    """perf/cp.py prices torchtitan's "allgather" as PyTorch's all-gather rotater and p2p as its all-to-all
    rotater; torchtitan's own config classes read back the method the TOML names, and accept the file."""
    s = Strategy(tp=2, sp=True, cp=4, cp_comm=cp_comm, zero=3)
    ls = _ls("llama-3.1-8b", 64, s, seq_len=65536, global_batch=16, framework="torchtitan")
    assert torchtitan_problems(ls.torchtitan, 64, tmp_path) == []
    cfg = torchtitan_config(ls.torchtitan, tmp_path)
    assert cfg.parallelism.context_parallel_rotate_method == rotate
    assert cfg.parallelism.context_parallel_degree == 4
