"""Megatron-LM arguments for a model, workload and strategy.

Every flag is checked in tests against the argument schema extracted from NVIDIA/Megatron-LM
megatron/training/arguments.py at the targeted tag (autopar/data/launch_schemas/, see
autopar.launch.schema): `_add_network_size_args`, `_add_training_args`,
`_add_learning_rate_args`, `_add_distributed_args`, `_add_mixed_precision_args`, `_add_moe_args`,
`_add_mla_args` and the groups generated from TransformerConfig/ModelParallelConfig.
Megatron-FSDP flags: docs/user-guide/features/megatron_fsdp.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from autopar.knobs import MEGATRON_RECOMPUTE_MODULES, recompute_modules
from autopar.launch.optimizer import megatron_optimizer_args, megatron_optimizer_why
from autopar.launch.split import strategy_split
from autopar.layouts import (
    STACKS,
    ep_overlap_applies,
    ep_overlap_note,
    flex_backend,
    optimizer_saver_rules,
    stack_notes,
)
from autopar.perf.cp import hierarchical_sizes
from autopar.perf.pipeline import SCHEDULES
from autopar.specs import ClusterSpec, ModelSpec, Strategy, Workload

# Steps between checkpoints in every launch file: torchtitan's own default (job_config.py Checkpoint.interval),
# so Megatron-LM (--save-interval, no default) and torchtitan save on the same steps.
CHECKPOINT_INTERVAL = 500

# Values the user must choose: name -> what it is. A token budget fixes TRAIN_ITERS.
PLACEHOLDERS = {
    "TRAIN_ITERS": "optimizer steps to train (tokens / (seq_len x global batch))",
    "LR": "peak learning rate",
    "MIN_LR": "final learning rate of the cosine decay",
    "WARMUP_ITERS": "linear warm-up steps",
    "DATA_PATH": "dataset prefix written by Megatron tools/preprocess_data.py (path/to/name_text_document)",
    "TOKENIZER": "Hugging Face tokenizer folder or name",
    "CHECKPOINT_DIR": f"folder for checkpoints (saved every {CHECKPOINT_INTERVAL} steps, the latest loaded on restart)",
    "MASTER_ADDR": "address of the first node (the rendezvous host)",
}


# Workload.fp8_recipe (the recipe the estimate assumed) -> Megatron-LM core_v0.19.0 --fp8-recipe
# (megatron/core/enums.py Fp8Recipe; megatron/core/fp8_utils.py builds Transformer Engine's DelayedScaling for
# delayed, Float8CurrentScaling for tensorwise, MXFP8BlockScaling for mxfp8, Float8BlockScaling for blockwise).
# Megatron has no per-row recipe: rowwise runs as blockwise (1x128 / 128x128 scales), the nearest finer scaling.
MEGATRON_FP8_RECIPE = {
    "delayed": "delayed",
    "current": "tensorwise",
    "rowwise": "blockwise",
    "mxfp8": "mxfp8",
}


def placeholder(name: str) -> str:
    """A shell word that stops with a message when the variable is unset."""
    return f'"${{{name}:?set {name}: {PLACEHOLDERS[name]}}}"'


MEGATRON_ENTRYPOINT = "pretrain_gpt.py"
# the data and checkpoint arguments every Megatron launch needs
DATA_PLACEHOLDERS = ("DATA_PATH", "TOKENIZER", "CHECKPOINT_DIR")
DATA_ARGS = [
    f"--data-path {placeholder('DATA_PATH')}",
    "--split 99,1,0",
    "--tokenizer-type HuggingFaceTokenizer",
    f"--tokenizer-model {placeholder('TOKENIZER')}",
    f"--save {placeholder('CHECKPOINT_DIR')}",
    f"--load {placeholder('CHECKPOINT_DIR')}",
    f"--save-interval {CHECKPOINT_INTERVAL}",
]


@dataclass(frozen=True)
class MegatronArgs:
    args: list[str]
    notes: list[str]
    placeholders: dict[str, str]


def _positions(model: ModelSpec) -> tuple[list[str], list[str]]:
    """Position-embedding flags (RoPE base and scaling, learned, none) and notes."""
    if model.position_embedding == "learned":
        return ["--position-embedding-type learned_absolute"], []
    if model.position_embedding == "alibi":
        return ["--position-embedding-type none"], [
            f"{model.name} uses ALiBi, which Megatron-LM does not implement; the arguments train "
            "without position embeddings"
        ]
    kind = "yarn" if model.rope_scaling == "yarn" and not model.is_mla else "rope"
    a = [f"--position-embedding-type {kind}", f"--rotary-base {round(model.rope_theta)}"]
    if model.rope_scaling == "llama3":
        a += ["--use-rope-scaling", f"--rope-scaling-factor {model.rope_scaling_factor or 8.0}"]
    elif model.rope_scaling == "yarn":
        if model.is_mla:
            a.append("--rope-type yarn")
        a.append(f"--rotary-scaling-factor {model.rope_scaling_factor or 1.0}")
    return a, []


def _network(model: ModelSpec, workload: Workload) -> tuple[list[str], list[str]]:
    """Architecture arguments (network size, attention, positions, dropout)."""
    a = [
        f"--num-layers {model.layers}",
        f"--hidden-size {model.hidden}",
        f"--ffn-hidden-size {model.ffn_hidden}",
        f"--num-attention-heads {model.heads}",
    ]
    if model.kv != model.heads and not model.is_mla:
        a += ["--group-query-attention", f"--num-query-groups {model.kv}"]
    if model.head_dim and model.head_dim != model.hidden // model.heads and not model.is_mla:
        a.append(f"--kv-channels {model.head_dim}")
    a += [f"--seq-length {workload.seq_len}", f"--max-position-embeddings {workload.seq_len}"]
    pos, notes = _positions(model)
    a += pos
    a.append("--normalization RMSNorm" if model.norm == "rmsnorm" else "--normalization LayerNorm")
    if model.activation == "swiglu":
        a.append("--swiglu")
    if not model.tied_embeddings:
        a.append("--untie-embeddings-and-output-weights")
    a.append("--disable-bias-linear")
    if model.qkv_bias:
        a.append("--add-qkv-bias")
    if model.qk_norm:
        a.append("--qk-layernorm")
    if model.norm_eps is not None:
        a.append(f"--norm-epsilon {model.norm_eps:g}")  # Megatron's default is 1e-5
    if not model.dropout:  # Megatron defaults both to 0.1 (TransformerConfig)
        a += ["--hidden-dropout 0", "--attention-dropout 0"]
    if model.sliding_window and model.sliding_window_fraction > 0:
        notes.append(
            f"{model.name} uses a {model.sliding_window}-token sliding window on "
            f"{model.sliding_window_fraction:.0%} of layers; set --window-size / --window-attn-skip-freq"
        )
    if model.softcapping:
        notes.append(f"{model.name} soft-caps attention/output logits, which Megatron-LM GPT models do not")
    return a, notes


def _experts(model: ModelSpec) -> list[str]:
    """MoE and MLA arguments."""
    a: list[str] = []
    if model.is_mla:
        a.append("--multi-latent-attention")
        if model.q_lora_rank:
            a.append(f"--q-lora-rank {model.q_lora_rank}")
        a += [
            f"--kv-lora-rank {model.kv_lora_rank}",
            f"--qk-head-dim {model.qk_nope_head_dim}",
            f"--qk-pos-emb-head-dim {model.qk_rope_head_dim}",
            f"--v-head-dim {model.v_head_dim}",
        ]
    if model.is_moe:
        a += [
            f"--num-experts {model.experts}",
            f"--moe-router-topk {model.topk}",
            f"--moe-ffn-hidden-size {model.moe_ffn_hidden}",
        ]
        if model.shared_experts:
            a.append(f"--moe-shared-expert-intermediate-size {model.shared_experts * model.shared_ffn}")
        if model.dense_layers:
            a.append(f"--moe-layer-freq '([0]*{model.dense_layers}+[1]*{model.moe_layers})'")
        a += _router(model)
        a.append("--moe-grouped-gemm")
    return a


# Workload.moe_dispatcher -> Megatron-LM --moe-token-dispatcher-type (core_v0.17.1 to core_v0.19.0). The flex
# dispatcher's backend: layouts.flex_backend (HybridEP across hosts and where DeepEP's TP x EP > 1 check would
# refuse the layout, DeepEP otherwise; Megatron-Bridge scripts/performance/configs/*_workload_base_configs.py).
_DISPATCHER_ARG = {"alltoall": "alltoall", "flex": "flex"}


def _moe_dispatch(cluster: ClusterSpec, workload: Workload, s: Strategy, notes: list[str]) -> list[str]:
    """The token dispatcher the estimate priced, and the EP all-to-all overlap where Megatron-Core accepts it
    (layouts.ep_overlap_applies; where it does not, a note says the layout runs without it)."""
    a = [f"--moe-token-dispatcher-type {_DISPATCHER_ARG[workload.moe_dispatcher]}"]
    if workload.moe_dispatcher == "flex":
        a.append(f"--moe-flex-dispatcher-backend {flex_backend(cluster, s.expert_tp, s.ep)}")
    k = s.knobs()
    args = ("megatron", workload.moe_ep_overlap, s.ep, s.pp, k.vpp, k.recompute)
    if ep_overlap_applies(*args):
        a.append("--overlap-moe-expert-parallel-comm")
    elif note := ep_overlap_note(*args):
        notes.append(note)
    return a


# Load-balancing loss weight when the model config gives none: Megatron's default (0.0) would train without
# balancing; 1e-2 is the Switch Transformer's alpha (Fedus et al. 2021, section 2.2).
DEFAULT_AUX_LOSS_COEFF = 1e-2


def _router(model: ModelSpec) -> list[str]:
    """Router arguments from the model config (megatron/training/arguments.py _add_moe_args)."""
    a = [f"--moe-router-score-function {model.router_score}"]
    if model.router_score == "softmax" and not model.router_norm_topk:
        a.append("--moe-router-pre-softmax")  # softmax over all experts, top-k weights not renormalised
    if model.router_expert_bias:
        a.append("--moe-router-enable-expert-bias")
    if model.router_groups and model.router_group_topk:
        a += [
            f"--moe-router-num-groups {model.router_groups}",
            f"--moe-router-group-topk {model.router_group_topk}",
        ]
    if model.router_scaling is not None:
        a.append(f"--moe-router-topk-scaling-factor {model.router_scaling:g}")
    coeff = DEFAULT_AUX_LOSS_COEFF if model.aux_loss_coeff is None else model.aux_loss_coeff
    kind = "seq_aux_loss" if model.aux_loss_per_sequence else "aux_loss"
    a += [f"--moe-router-load-balancing-type {kind}", f"--moe-aux-loss-coeff {coeff:g}"]
    return a


def _context_parallel(cluster: ClusterSpec, s: Strategy) -> list[str]:
    """CP size and variant (--cp-comm-type; hierarchical sizes for a2a+p2p, as perf/cp.py splits them)."""
    a = [f"--context-parallel-size {s.cp}", f"--cp-comm-type {s.cp_comm}"]
    if s.cp_comm == "a2a+p2p":
        inner, outer = hierarchical_sizes(s.cp, s.tp, cluster.node_size)
        a.append(f"--hierarchical-context-parallel-sizes {inner} {outer}")
    return a


def _hsdp_and_savers(s: Strategy, notes: list[str]) -> list[str]:
    """HSDP (Megatron-FSDP with replicated outer DP), optimizer-state precision and CPU offload."""
    a: list[str] = []
    if s.dp_shard and s.zero == 3:
        a += [
            f"--num-distributed-optimizer-instances {s.dp // s.dp_shard}",
            "--outer-dp-sharding-strategy no_shard",
        ]
    # both savers run through the precision-aware optimizer (validate_args asserts it for the offload; the
    # distributed optimizer it needs: layouts.optimizer_saver_rules)
    if s.optimizer_states == "bf16" or s.optimizer_offload:
        a.append("--use-precision-aware-optimizer")
    if s.optimizer_states == "bf16":
        a += ["--exp-avg-dtype bf16", "--exp-avg-sq-dtype bf16"]
    elif s.optimizer_states == "8bit":
        notes.append("8-bit optimizer states (bitsandbytes): Megatron-LM's nearest is "
                     "--use-precision-aware-optimizer --exp-avg-dtype fp8 --exp-avg-sq-dtype fp8")  # fmt: skip
    if s.optimizer_offload:
        a += ["--optimizer-cpu-offload", f"--optimizer-offload-fraction {s.optimizer_offload:g}"]
    zero = s.zero if s.zero is not None else 0
    notes += [
        v.message for v in optimizer_saver_rules("megatron", zero, s.optimizer_states, s.optimizer_offload)
    ]
    return a


def _parallel(
    model: ModelSpec, cluster: ClusterSpec, workload: Workload, s: Strategy
) -> tuple[list[str], list[str]]:
    """Parallel sizes, pipeline split, data-parallel sharding and recompute."""
    a = [f"--tensor-model-parallel-size {s.tp}", f"--pipeline-model-parallel-size {s.pp}"]
    notes: list[str] = []
    split = strategy_split(model.layers, s)
    if split is None:  # callers check the split first; kept for direct use
        notes.append(f"no Megatron-LM pipeline split puts {model.layers} layers on pp={s.pp} x vpp={s.vpp}")
    else:
        a += list(split.args)
        if split.how in ("account", "first-last", "layout"):
            notes.append(
                f"uneven pipeline split, layers per rank: {', '.join(map(str, split.layers_per_rank))}"
            )
    notes += stack_notes("megatron", s)  # the capability table (layouts.STACKS) the search also reads
    if s.pp > 1 and s.pp_schedule not in STACKS["megatron"].schedules:
        notes.append(
            f"these arguments run 1F1B instead of {s.pp_schedule} ({SCHEDULES[s.pp_schedule].source})"
        )
    if s.cp > 1:
        a += _context_parallel(cluster, s)
    if model.is_moe:
        a += [f"--expert-model-parallel-size {s.ep}", f"--expert-tensor-parallel-size {s.expert_tp}"]
        a += _moe_dispatch(cluster, workload, s, notes)
    if s.sp and s.tp > 1:
        a.append("--sequence-parallel")
        if workload.tp_comm_overlap:
            a.append("--tp-comm-overlap")  # Transformer Engine userbuffers; needs --sequence-parallel
    if workload.grad_reduce_dtype == "bf16":
        a.append("--grad-reduce-in-bf16")  # bf16 main-gradient buffer and DP reduction
    if s.zero == 1:
        a += ["--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather"]
    elif s.zero in (2, 3):
        strat = {2: "optim_grads", 3: "optim_grads_params"}[s.zero]
        a += [
            "--use-megatron-fsdp",
            f"--data-parallel-sharding-strategy {strat}",
            "--ckpt-format fsdp_dtensor",
            # Megatron-FSDP keeps its own main-gradient dtype: since Megatron-Core 0.17 (b969f76) 'auto', the
            # compute dtype (bf16), whatever --grad-reduce-in-bf16 says; name the dtype the estimate priced
            # (fp32 unless the workload reduces in bf16), as its README recommends fp32 for accuracy at scale.
            f"--megatron-fsdp-main-grads-dtype {workload.grad_reduce_dtype}",
        ]
        a += ["--overlap-grad-reduce", "--overlap-param-gather"]
    else:
        a.append("--overlap-grad-reduce")
    a += _hsdp_and_savers(s, notes)
    if s.recompute == "selective":
        a.append("--recompute-granularity selective")
    elif mods := recompute_modules(s.recompute):  # TransformerConfig.recompute_modules, Megatron's order
        named = " ".join(m for m in MEGATRON_RECOMPUTE_MODULES if m in mods)
        a += ["--recompute-granularity selective", f"--recompute-modules {named}"]
    elif s.recompute == "full":
        a += ["--recompute-granularity full", "--recompute-method uniform", "--recompute-num-layers 1"]
    if s.activation_offload_layers:
        # validate_args turns cpu_offloading on when this is > 0 (there is no separate --cpu-offloading
        # flag in the vendored schema); activations only (TransformerConfig.cpu_offloading_weights = False)
        a.append(f"--cpu-offloading-num-layers {s.activation_offload_layers}")
    return a, notes


def _training(
    workload: Workload, cluster: ClusterSpec, s: Strategy, notes: list[str]
) -> tuple[list[str], dict[str, str]]:
    """Batch, length, learning-rate schedule and precision; placeholders for what the user sets."""
    used = {k: v for k, v in PLACEHOLDERS.items() if k in ("TRAIN_ITERS", "LR", "MIN_LR", "WARMUP_ITERS")}
    if workload.token_budget:
        iters = -(-int(workload.token_budget) // workload.tokens_per_step)
        train = f"--train-iters {iters}"
        used.pop("TRAIN_ITERS")
    else:
        train = f"--train-iters {placeholder('TRAIN_ITERS')}"
    a = [
        f"--micro-batch-size {s.micro_batch}",
        f"--global-batch-size {workload.global_batch}",
        train,
        f"--lr {placeholder('LR')}",
        f"--min-lr {placeholder('MIN_LR')}",
        "--lr-decay-style cosine",
        f"--lr-warmup-iters {placeholder('WARMUP_ITERS')}",
        "--bf16",
    ]
    if workload.precision == "fp8":
        recipe = MEGATRON_FP8_RECIPE[workload.fp8_recipe]
        a += ["--fp8-format hybrid", f"--fp8-recipe {recipe}"]
        if workload.fp8_recipe == "rowwise":
            notes.append("Megatron-LM has no row-wise FP8 recipe: --fp8-recipe blockwise is the nearest")
    return a, used


def megatron_args(model: ModelSpec, cluster: ClusterSpec, workload: Workload, s: Strategy) -> MegatronArgs:
    """All Megatron-LM arguments for the strategy, the notes, and the placeholders they use."""
    net, notes = _network(model, workload)
    par, pnotes = _parallel(model, cluster, workload, s)
    if why := megatron_optimizer_why(workload, s):
        pnotes.append(why)
    else:  # --optimizer, --main-params-dtype (the precision-aware optimizer may be on already)
        par += [x for x in megatron_optimizer_args(workload) if x not in par]
    train, used = _training(workload, cluster, s, pnotes)
    return MegatronArgs(net + _experts(model) + par + train, notes + pnotes, used)


def megatron_env(model: ModelSpec, s: Strategy) -> dict[str, str]:
    """Environment Megatron's validate_args requires or its guides recommend."""
    env: dict[str, str] = {}
    if (s.tp > 1 or s.cp > 1) and s.zero < 2:
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"  # asserted for TP/CP before Blackwell (validate_args)
    if model.is_moe:
        env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"  # MoE README recommendation
    return env
