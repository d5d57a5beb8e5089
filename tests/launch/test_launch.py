"""Launch settings: exact Megatron-LM args, torchtitan TOML, DeepSpeed JSON and SLURM for known strategies.

Expected strings are written by hand from the frameworks' argument definitions (see the citations in
autopar/launch/settings.py), not produced by the code under test.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from autopar.catalog import get_gpu, get_model
from autopar.cli import app
from autopar.errors import InvalidStrategyError, SpecError
from autopar.launch.labels import parse_strategy_label
from autopar.launch.schema import check_megatron, check_torchtitan
from autopar.launch.settings import launch_settings
from autopar.specs import ClusterSpec, GPUSpec, ModelSpec, Strategy, Workload

H100 = GPUSpec(
    name="H100-SXM",
    family="hopper",
    memory_bytes=80e9,
    bf16_flops=989e12,
    fp8_flops=1979e12,
    hbm_bw=3.35e12,
    scaleup_bw=450e9,
    scaleup_domain=8,
    scaleout_bw=50e9,
)
LLAMA70B = ModelSpec(
    name="Llama-3-70B",
    layers=80,
    hidden=8192,
    heads=64,
    kv_heads=8,
    ffn_hidden=28672,
    vocab=128256,
    rope_theta=500000,  # Meta-Llama-3-70B config.json
)
LLAMA8B = ModelSpec(
    name="Llama-3-8B", layers=32, hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336, vocab=128256
)
MIXTRAL = ModelSpec(
    name="Mixtral-8x7B",
    layers=32,
    hidden=4096,
    heads=32,
    kv_heads=8,
    ffn_hidden=14336,
    vocab=32000,
    experts=8,
    topk=2,
    moe_ffn_hidden=14336,
)

QWEN3_MOE = ModelSpec(
    name="Qwen3-30B-A3B",
    layers=48,
    hidden=2048,
    heads=32,
    kv_heads=4,
    head_dim=128,
    ffn_hidden=6144,
    vocab=151936,
    experts=128,
    topk=8,
    moe_ffn_hidden=768,
    qk_norm=True,
)


def test_megatron_args_llama70b_interleaved() -> None:
    """TP4+SP, PP2 with 2 virtual stages (80/(2*2) = 20 layers each), distributed optimizer, selective AC."""
    s = Strategy(
        tp=4, pp=2, vpp=2, pp_schedule="interleaved", sp=True, zero=1, micro_batch=1, recompute="selective"
    )
    ls = launch_settings(
        LLAMA70B, ClusterSpec(gpu=H100, num_gpus=64), Workload(seq_len=8192, global_batch=128), s
    )
    expected = [
        "--num-layers 80",
        "--hidden-size 8192",
        "--ffn-hidden-size 28672",
        "--num-attention-heads 64",
        "--group-query-attention",
        "--num-query-groups 8",
        "--seq-length 8192",
        "--max-position-embeddings 8192",
        "--position-embedding-type rope",
        "--rotary-base 500000",
        "--normalization RMSNorm",
        "--swiglu",
        "--untie-embeddings-and-output-weights",
        "--disable-bias-linear",
        "--hidden-dropout 0",  # Megatron's default is 0.1; Llama has no dropout
        "--attention-dropout 0",
        "--tensor-model-parallel-size 4",
        "--pipeline-model-parallel-size 2",
        "--num-layers-per-virtual-pipeline-stage 20",
        "--sequence-parallel",
        "--tp-comm-overlap",  # the megatron stack's recipe default (defaults.TP_COMM_OVERLAP_BY_STACK)
        "--grad-reduce-in-bf16",  # the megatron stack's recipe default (defaults.GRAD_REDUCE_DTYPE_BY_STACK)
        "--use-distributed-optimizer",
        "--overlap-grad-reduce",
        "--overlap-param-gather",
        "--recompute-granularity selective",
        "--micro-batch-size 1",
        "--global-batch-size 128",
        '--train-iters "${TRAIN_ITERS:?set TRAIN_ITERS: optimizer steps to train (tokens / (seq_len x global batch))}"',
        '--lr "${LR:?set LR: peak learning rate}"',
        '--min-lr "${MIN_LR:?set MIN_LR: final learning rate of the cosine decay}"',
        "--lr-decay-style cosine",
        '--lr-warmup-iters "${WARMUP_ITERS:?set WARMUP_ITERS: linear warm-up steps}"',
        "--bf16",
    ]
    assert list(ls.megatron_args) == expected
    assert set(ls.placeholders) == {
        *("TRAIN_ITERS", "LR", "MIN_LR", "WARMUP_ITERS", "DATA_PATH", "TOKENIZER", "CHECKPOINT_DIR"),
        "MASTER_ADDR",  # 8 nodes: torchrun's rendezvous host
    }
    assert ls.versions == {"megatron": "core_v0.19.0", "torchtitan": "v0.2.2", "deepspeed": "v0.19.5"}
    assert ls.megatron == " \\\n".join(expected)
    assert ls.env == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}  # TP>1 before Blackwell (validate_args)
    assert ls.nodes == 8 and ls.gpus_per_node == 8
    assert ls.torchrun.startswith(
        "CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun \\\n--nnodes 8 \\\n--nproc-per-node 8 \\\n--rdzv-id autopar"
        ' \\\n--rdzv-backend c10d \\\n--rdzv-endpoint "${MASTER_ADDR:?set MASTER_ADDR: address of the first node (the rendezvous host)}'
        ':29500" \\\npretrain_gpt.py \\\n--num-layers 80'
    )
    # DeepSpeed has no pipeline engine config for a plain model: None with the reason.
    assert ls.deepspeed is None and "pp=2" in ls.deepspeed_reason


def test_torchtitan_toml_llama70b() -> None:
    """PP>1: local batch = 128/8 = 16 sequences per DP rank, split in micro-batches of 1."""
    s = Strategy(
        tp=4, pp=2, vpp=2, pp_schedule="interleaved", sp=True, zero=3, micro_batch=1, recompute="full"
    )
    ls = launch_settings(
        LLAMA70B,
        ClusterSpec(gpu=H100, num_gpus=64),
        Workload(seq_len=8192, global_batch=128, tp_comm_overlap=False),
        s,
    )
    header = "Llama-3-70B on 64 x H100-SXM, TP4+SP PP2v2 DP8/Z3 mb1 full-AC, bf16"
    expected = f"""# torchtitan job config generated by autopar: {header}
# Targets torchtitan v0.2.2: pytorch/torchtitan v0.2.2 (commit 73a0e6979dd1),
# torchtitan/config/job_config.py. Set on the command line (no default is assumed):
#   --optimizer.lr LR --lr_scheduler.warmup_steps N --training.steps N
#   --training.dataset NAME --training.dataset_path PATH --model.hf_assets_path TOKENIZER_DIR

[job]
description = "{header}"

[model]
name = "llama3"
flavor = "70B"
hf_assets_path = "SET --model.hf_assets_path (your Hugging Face tokenizer folder)"

[lr_scheduler]
decay_type = "cosine"

[training]
local_batch_size = 16
global_batch_size = 128
seq_len = 8192
mixed_precision_param = "bfloat16"
dataset = "SET --training.dataset (a torchtitan.hf_datasets name) and --training.dataset_path"

[parallelism]
data_parallel_replicate_degree = 1
data_parallel_shard_degree = 8
fsdp_reshard_after_forward = "default"
tensor_parallel_degree = 4
pipeline_parallel_degree = 2
context_parallel_degree = 1
pipeline_parallel_schedule = "Interleaved1F1B"
pipeline_parallel_microbatch_size = 1
pipeline_parallel_first_stage_less_layers = 0
pipeline_parallel_last_stage_less_layers = 0
pipeline_parallel_layers_per_stage = 20

[checkpoint]
enable = true
folder = "checkpoint"
interval = 500

[activation_checkpoint]
mode = "full"
"""
    assert ls.torchtitan == expected
    # Megatron side of the same strategy: ZeRO-3 = Megatron-FSDP, full recompute flags.
    args = ls.megatron_args
    assert "--use-megatron-fsdp" in args and "--data-parallel-sharding-strategy optim_grads_params" in args
    assert "--ckpt-format fsdp_dtensor" in args
    i = args.index("--recompute-granularity full")
    assert args[i : i + 3] == (
        "--recompute-granularity full",
        "--recompute-method uniform",
        "--recompute-num-layers 1",
    )
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in ls.env  # FSDP wants it unset (megatron_fsdp.md)


def test_deepspeed_json_pure_data_parallel() -> None:
    """8 GPUs, ZeRO-3, micro-batch 2, global batch 64: 64 = 2 x GAS x 8 -> GAS = 4 (config-json.md)."""
    s = Strategy(zero=3, micro_batch=2)
    ls = launch_settings(
        LLAMA8B, ClusterSpec(gpu=H100, num_gpus=8), Workload(seq_len=4096, global_batch=64), s
    )
    assert json.loads(ls.deepspeed) == {
        "train_batch_size": 64,
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 4,
        "bf16": {"enabled": True},
        "zero_optimization": {"stage": 3, "overlap_comm": True, "contiguous_gradients": True},
        "gradient_clipping": 1.0,
    }
    assert ls.deepspeed_reason.startswith("set the optimizer and LR schedule")  # no made-up LR in the JSON
    # Single node: torchrun --standalone, no rendezvous endpoint.
    assert ls.torchrun.startswith("torchrun \\\n--standalone --nproc-per-node 8 \\\npretrain_gpt.py")
    # torchtitan without PP: local batch = micro-batch, accumulation = 64 / (2 x 8) = 4 steps.
    assert "local_batch_size = 2\n" in ls.torchtitan and "global_batch_size = 64\n" in ls.torchtitan


def test_deepspeed_autotp_and_zero1() -> None:
    """TP2 on 8 GPUs -> dp 4; 32 = 1 x GAS x 4 -> GAS 8; AutoTP size 2."""
    s = Strategy(tp=2, zero=1)
    ls = launch_settings(
        LLAMA8B, ClusterSpec(gpu=H100, num_gpus=8), Workload(seq_len=4096, global_batch=32), s
    )
    cfg = json.loads(ls.deepspeed)
    assert cfg["gradient_accumulation_steps"] == 8
    assert cfg["tensor_parallel"] == {"autotp_size": 2}
    assert cfg["zero_optimization"] == {"stage": 1}
    assert "sequence parallelism" in ls.deepspeed_reason


def test_slurm_script_for_node_count() -> None:
    s = Strategy(tp=8, pp=4, zero=1)
    ls = launch_settings(
        LLAMA70B, ClusterSpec(gpu=H100, num_gpus=256), Workload(seq_len=4096, global_batch=512), s
    )
    lines = ls.slurm.splitlines()
    assert lines[0] == "#!/bin/bash"
    assert "#SBATCH --nodes=32" in lines and "#SBATCH --gpus-per-node=8" in lines
    assert "#SBATCH --ntasks-per-node=1" in lines
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in lines
    assert "  --tensor-model-parallel-size 8" in lines and "  --pipeline-model-parallel-size 4" in lines
    assert '  pretrain_gpt.py "${MEGATRON_ARGS[@]}" "${DATA_ARGS[@]}"' in lines
    assert "  --nproc-per-node 8 \\" in lines


def test_moe_and_fp8() -> None:
    """Mixtral with EP4, FP8: MoE arguments, alltoall dispatcher, expandable segments, fp8 hybrid."""
    s = Strategy(tp=2, ep=4, zero=1)
    w = Workload(seq_len=4096, global_batch=64, precision="fp8")
    ls = launch_settings(MIXTRAL, ClusterSpec(gpu=H100, num_gpus=16), w, s)
    a = ls.megatron_args
    for arg in (
        "--num-experts 8",
        "--moe-router-topk 2",
        "--moe-ffn-hidden-size 14336",
        "--expert-model-parallel-size 4",
        "--expert-tensor-parallel-size 2",
        "--moe-token-dispatcher-type alltoall",
        "--fp8-format hybrid",
        "--bf16",
    ):
        assert arg in a
    assert ls.env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    # torchtitan has no Mixtral model: no TOML, and the reason names the models it has
    assert ls.torchtitan is None and "no built-in model matching Mixtral-8x7B" in ls.torchtitan_reason
    q = launch_settings(QWEN3_MOE, ClusterSpec(gpu=H100, num_gpus=16), w, s)
    assert 'converters = ["quantize.linear.float8"]' in q.torchtitan
    assert '[quantize.linear.float8]\nrecipe_name = "tensorwise"' in q.torchtitan
    assert "expert_parallel_degree = 4\nexpert_tensor_parallel_degree = 2\n" in q.torchtitan
    # the estimate's default recipe (Workload.fp8_recipe = delayed): Transformer Engine's DelayedScaling in
    # Megatron-LM; torchao has no delayed scaling, so torchtitan runs tensorwise and says so
    assert "--fp8-recipe delayed" in a
    assert any("no delayed FP8 scaling" in n for n in q.framework_notes["torchtitan"])
    assert ls.deepspeed is None and "ep=4" in ls.deepspeed_reason


def test_uneven_virtual_stages_account_for_embedding_and_loss() -> None:
    """30 layers over pp=4 x vpp=2: (30 + embedding + loss) / 4 = 8 per rank, 4 per virtual stage, so
    Megatron's account-for-embedding/loss options split it; torchtitan gets explicit module lists."""
    m = LLAMA8B.model_copy(update={"layers": 30})
    s = Strategy(pp=4, vpp=2, pp_schedule="interleaved")
    ls = launch_settings(m, ClusterSpec(gpu=H100, num_gpus=8), Workload(seq_len=2048, global_batch=16), s)
    a = ls.megatron_args
    assert "--account-for-embedding-in-pipeline-split" in a and "--account-for-loss-in-pipeline-split" in a
    assert "--num-virtual-stages-per-pipeline-rank 2" in a
    assert any("layers per rank: 7, 8, 8, 7" in n for n in ls.notes)
    parts = tomllib.loads(ls.torchtitan)["parallelism"]["module_fqns_per_model_part"]
    assert [len([x for x in p if x.startswith("layers.")]) for p in parts] == [4, 4, 4, 4, 4, 4, 3, 3]
    assert parts[0][0] == "tok_embeddings" and parts[-1][-2:] == ["norm", "output"]


def test_deepseek_v3_pp16_first_last_stages() -> None:
    """DeepSeek-V3 (61 layers) on pp 16: 61 = 2 + 14 x 4 + 3, the most even split Megatron accepts."""
    m = get_model("deepseek-v3")
    s = Strategy(pp=16, ep=64, zero=1)
    c = ClusterSpec(gpu=get_gpu("H800"), num_gpus=1024)
    ls = launch_settings(m, c, Workload(seq_len=4096, global_batch=1024, precision="fp8"), s)
    a = ls.megatron_args
    assert "--decoder-first-pipeline-num-layers 2" in a and "--decoder-last-pipeline-num-layers 3" in a
    assert "--moe-layer-freq '([0]*3+[1]*58)'" in a and "--rope-type yarn" in a
    assert check_megatron(a, "core_v0.19.0", list(ls.placeholders)) == []
    assert check_torchtitan(ls.torchtitan, "v0.2.2", 1024, 61) == []


@pytest.mark.parametrize(
    ("strategy", "batch", "needle"),
    [
        (Strategy(tp=4), 101, "global_batch=101"),  # dp = 8/4 = 2 does not divide 101
        (Strategy(tp=3), 48, "does not divide num_gpus"),
        (Strategy(vpp=2), 48, "needs pp > 1"),
    ],
)
def test_invalid_strategies_raise(strategy: Strategy, batch: int, needle: str) -> None:
    with pytest.raises(InvalidStrategyError, match=needle):
        launch_settings(
            LLAMA8B, ClusterSpec(gpu=H100, num_gpus=8), Workload(seq_len=2048, global_batch=batch), strategy
        )


@given(
    tp=st.sampled_from([1, 2, 4, 8]),
    pp=st.sampled_from([1, 2, 4]),
    vpp=st.sampled_from([1, 2, 3]),
    cp=st.sampled_from([1, 2]),
    ep=st.sampled_from([1, 4]),
    dp=st.integers(1, 64),
    zero=st.integers(0, 3),
    mb=st.integers(1, 8),
    rc=st.sampled_from(["none", "selective", "full"]),
    sp=st.booleans(),
)
def test_label_round_trip(tp, pp, vpp, cp, ep, dp, zero, mb, rc, sp) -> None:
    """parse_strategy_label inverts Strategy.label() for every strategy the label can describe."""
    vpp = vpp if pp > 1 else 1
    s = Strategy(
        tp=tp,
        pp=pp,
        vpp=vpp,
        cp=cp,
        ep=ep,
        dp=dp,
        zero=zero,
        micro_batch=mb,
        recompute=rc,
        sp=sp and tp > 1,
        pp_schedule="interleaved" if vpp > 1 else "1f1b",
    )
    assert parse_strategy_label(s.label()) == s


def test_label_parse_rejects_garbage() -> None:
    with pytest.raises(SpecError, match="token 'XX9'"):
        parse_strategy_label("TP2 XX9")


runner = CliRunner()


def test_cli_launch_megatron_from_label(tmp_path) -> None:
    """`autopar launch --strategy LABEL` with the catalog's Llama-3-70B, files written to --out."""
    res = runner.invoke(
        app,
        [
            "launch",
            "--model",
            "llama-3-70b",
            "--gpu",
            "H100-SXM",
            "--gpus",
            "64",
            "--seq-len",
            "8192",
            "--global-batch",
            "128",
            "--strategy",
            "TP4+SP PP2v2 DP8/Z1 mb1 sel-AC",
            "--framework",
            "all",
            "--out",
            str(tmp_path),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "--num-layers-per-virtual-pipeline-stage 20" in res.output
    assert (
        (tmp_path / "autopar.sbatch")
        .read_text()
        .startswith("#!/bin/bash\n#SBATCH --job-name=autopar-llama-3-70b")
    )
    assert (
        'pipeline_parallel_schedule = "Interleaved1F1B"' in (tmp_path / "autopar_torchtitan.toml").read_text()
    )
    assert not (tmp_path / "ds_config.json").exists()  # PP: DeepSpeed not expressible


def test_cli_launch_json_and_knobs() -> None:
    res = runner.invoke(
        app,
        [
            "launch",
            "--model",
            "llama-3-70b",
            "--gpu",
            "H100-SXM",
            "--gpus",
            "16",
            "--seq-len",
            "4096",
            "--global-batch",
            "64",
            "--tp",
            "8",
            "--zero",
            "3",
            "--framework",
            "deepspeed",
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert d["strategy"]["dp"] == 2 and d["strategy"]["sp"] is True
    assert d["deepspeed"]["gradient_accumulation_steps"] == 32  # 64 / (1 x 2); an object, not a string
    assert (
        d["versions"]["deepspeed"] == "v0.19.5"
        and "deepspeedai/DeepSpeed v0.19.5" in d["sources"]["deepspeed"]
    )


@pytest.mark.parametrize(
    "args",
    [
        ["--framework", "jax"],
        ["--recompute", "some"],
        ["--global-batch", "101", "--tp", "8"],
        ["--strategy", "TP2 banana"],
    ],
)
def test_cli_launch_bad_input_exits_2(args: list[str]) -> None:
    base = {
        "--model": "llama-3-70b",
        "--gpu": "H100-SXM",
        "--gpus": "16",
        "--seq-len": "4096",
        "--global-batch": "64",
    }
    for k, v in zip(args[::2], args[1::2], strict=True):
        base[k] = v
    res = runner.invoke(app, ["launch", *[x for kv in base.items() for x in kv]])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output


@pytest.mark.parametrize(
    "first, last, want",
    [
        (2, 3, [2] + [4] * 14 + [3]),  # 61 layers: 2 + 14 x 4 + 3 (Megatron's first/last-stage split)
        (3, 2, [3] + [4] * 14 + [2]),
    ],
)
def test_torchtitan_toml_keeps_the_labels_uneven_split(first, last, want):
    """DeepSeek-V3 "PP16 first2 last3": torchtitan gets module_fqns_per_model_part with those stage sizes,
    not its own most-even 4 x 13, 3, 3, 3."""
    m = get_model("DeepSeek-V3")
    cl = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=256, gpus_per_node=8)
    w = Workload(seq_len=4096, global_batch=1024, framework="torchtitan")
    label = f"TP1 PP16 first{first} last{last} EP8 Z3 mb1 full-AC"
    s = parse_strategy_label(label)
    ls = launch_settings(m, cl, w, s)
    parts = tomllib.loads(ls.torchtitan)["parallelism"]["module_fqns_per_model_part"]
    assert [sum(p.startswith("layers.") for p in part) for part in parts] == want
    flat = [x for part in parts for x in part]
    assert flat == ["tok_embeddings", *(f"layers.{i}" for i in range(61)), "norm", "output"]
    assert check_torchtitan(ls.torchtitan, "v0.2.2", 256, 61) == []


HF_DIR = Path(__file__).parents[1] / "data" / "hf"

# Router arguments each HF config implies, read off the JSON by hand (scoring_func, topk_method noaux_tc,
# n_group/topk_group, routed_scaling_factor, aux_loss_alpha/router_aux_loss_coef with seq_aux, rms_norm_eps).
ROUTER_ARGS = {
    "deepseek-v3.json": [
        "--moe-router-score-function sigmoid",
        "--moe-router-enable-expert-bias",
        "--moe-router-num-groups 8",
        "--moe-router-group-topk 4",
        "--moe-router-topk-scaling-factor 2.5",
        "--moe-router-load-balancing-type seq_aux_loss",
        "--moe-aux-loss-coeff 0.001",
        "--norm-epsilon 1e-06",
    ],
    "qwen3-30b-a3b.json": [
        "--moe-router-score-function softmax",
        "--moe-router-load-balancing-type aux_loss",
        "--moe-aux-loss-coeff 0.001",
        "--norm-epsilon 1e-06",
        "--qk-layernorm",
    ],
    "qwen3-235b-a22b.json": [
        "--moe-router-score-function softmax",
        "--moe-aux-loss-coeff 0.001",
        "--qk-layernorm",
    ],
    "deepseek-v2.json": [
        "--moe-router-pre-softmax",
        "--moe-router-group-topk 3",
        "--moe-router-topk-scaling-factor 16",
    ],
    "mixtral-8x7b-v0.1.json": ["--moe-aux-loss-coeff 0.02", "--norm-epsilon 1e-05"],
}


@pytest.mark.parametrize("fixture", sorted(ROUTER_ARGS))
def test_megatron_router_settings_come_from_the_model_config(fixture):
    cfg = json.loads((HF_DIR / fixture).read_text())
    m = get_model(str(HF_DIR / fixture))
    ls = launch_settings(
        m, ClusterSpec(gpu=H100, num_gpus=64), Workload(seq_len=4096, global_batch=64), Strategy()
    )
    a = ls.megatron_args
    assert all(x in a for x in ROUTER_ARGS[fixture]), [x for x in ROUTER_ARGS[fixture] if x not in a]
    assert check_megatron(a, "core_v0.19.0", list(ls.placeholders)) == []
    sigmoid = cfg.get("scoring_func") == "sigmoid"
    assert ("--moe-router-enable-expert-bias" in a) is sigmoid and ("--qk-layernorm" in a) is (
        "qwen3" in fixture
    )
    assert not any(x.startswith("--moe-aux-loss-coeff 0") and x.split()[1] in ("0", "0.0") for x in a)


@pytest.mark.parametrize(
    "key, value",
    [
        ("scoring_func", "relu"),
        ("aux_loss_alpha", "0.001"),
        ("routed_scaling_factor", -1),
        ("n_group", 8.5),
        ("rms_norm_eps", True),
        ("seq_aux", "yes"),
    ],
)
def test_wrong_router_field_types_are_one_line_errors(key, value):
    from autopar.catalog.hf import model_from_hf_config

    cfg = json.loads((HF_DIR / "deepseek-v3.json").read_text()) | {key: value}
    with pytest.raises(SpecError) as e:
        model_from_hf_config(cfg)
    assert f"'{key}'" in str(e.value) and "\n" not in str(e.value)


def test_router_fields_read_from_the_hf_configs():
    """Field by field against the fixtures' own values."""
    from autopar.catalog.hf import model_from_hf_config

    v3 = model_from_hf_config(json.loads((HF_DIR / "deepseek-v3.json").read_text()))
    assert (v3.router_score, v3.router_expert_bias, v3.router_groups, v3.router_group_topk) == (
        "sigmoid",
        True,
        8,
        4,
    )
    assert (v3.router_scaling, v3.aux_loss_coeff, v3.aux_loss_per_sequence, v3.norm_eps) == (
        2.5,
        0.001,
        True,
        1e-6,
    )
    assert v3.router_norm_topk is True
    q = model_from_hf_config(json.loads((HF_DIR / "qwen3-30b-a3b.json").read_text()))
    assert (q.router_score, q.router_norm_topk, q.router_expert_bias, q.router_groups) == (
        "softmax",
        True,
        False,
        None,
    )
    assert (q.aux_loss_coeff, q.aux_loss_per_sequence, q.norm_eps, q.qk_norm) == (0.001, False, 1e-6, True)
    dense = model_from_hf_config(json.loads((HF_DIR / "qwen3-8b.json").read_text()))
    assert dense.norm_eps == 1e-6 and dense.aux_loss_coeff is None


def test_cli_fp8_recipe_reaches_the_files_and_is_checked_against_the_gpu() -> None:
    """--fp8-recipe current is Transformer Engine's Float8CurrentScaling: Megatron's 'tensorwise'; mxfp8 needs
    Blackwell (refused on the default H100 like the estimate refuses it); without --precision fp8 it is an error."""
    run = CliRunner().invoke
    base = ["launch", "--framework", "megatron", "--tp", "2"]
    res = run(app, [*base, "--precision", "fp8", "--fp8-recipe", "current"])
    assert res.exit_code == 0 and "--fp8-recipe tensorwise" in res.stdout
    res = run(app, [*base, "--precision", "fp8", "--gpu", "B200", "--fp8-recipe", "mxfp8"])
    assert res.exit_code == 0 and "--fp8-recipe mxfp8" in res.stdout
    res = run(app, [*base, "--precision", "fp8", "--fp8-recipe", "mxfp8"])
    assert res.exit_code == 2 and res.stderr.strip().splitlines() == [
        "error: fp8_recipe='mxfp8' needs a Blackwell GPU (block-scaled FP8), not hopper"
    ]
    res = run(app, [*base, "--fp8-recipe", "rowwise"])
    assert res.exit_code == 2 and "--fp8-recipe rowwise needs --precision fp8" in res.stderr


def test_launch_settings_refuses_an_account_for_split_megatron_refuses():
    """32 layers + embedding + loss = 34 units do not divide over pp=4: Megatron's validate_args asserts
    (megatron/training/arguments.py, core_v0.19.0 line 963; tests/launch/test_megatron_parser.py runs it), and
    launch_settings now says so instead of writing the flags."""
    from autopar.errors import InvalidStrategyError
    from autopar.launch.settings import launch_settings

    s = Strategy(tp=2, pp=4, sp=True, pp_account_embedding=True, pp_account_loss=True)
    cluster = ClusterSpec(gpu=get_gpu("h100"), num_gpus=32)
    with pytest.raises(InvalidStrategyError, match=r"\(34\) not divisible by pp=4"):
        launch_settings(get_model("llama-3.1-8b"), cluster, Workload(seq_len=8192, global_batch=256), s)
