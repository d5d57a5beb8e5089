"""Core specification types (pydantic v2, frozen): model, GPU, cluster, workload, strategy.

All quantities are SI inside: bytes, seconds, FLOP, FLOP/s, bytes/s (per GPU, per direction).
"""

from __future__ import annotations

from typing import Annotated, Literal, NamedTuple, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

# The knob domains and the completable knobs are declared in the registry (autopar/knobs.py); re-exported here.
from autopar.defaults import grad_reduce_dtype_default, tp_comm_overlap_default
from autopar.errors import close_hint
from autopar.knobs import COMPLETABLE_KNOBS as COMPLETABLE_KNOBS
from autopar.knobs import (
    MASTER_WEIGHTS,
    OPTIMIZERS,
    UNPROFILED_STACKS,
    Framework,
    MasterWeights,
    Optimizer,
    format_label,
)
from autopar.knobs import CpComm as CpComm
from autopar.knobs import OptimizerStates as OptimizerStates
from autopar.knobs import Recompute as Recompute
from autopar.knobs import Schedule as Schedule
from autopar.text import escape_char, unsafe_chars

# Default routed-token load of the busiest EP rank relative to the mean (Workload.moe_imbalance).
# Training recipes budget expert capacity factors of 1.0-1.25 for peak/mean expert load (Switch
# Transformer, Fedus et al. 2021 §2.2; GShard, Lepikhin et al. 2020 §2.2). An EP rank averages E/ep
# experts, so its peak/mean is below a single expert's: 1.1 is the stated default. Benchmarks that
# force-balance routing (Megatron --moe-router-force-load-balancing, as the NeMo/Megatron-Bridge
# performance summaries state) are 1.0.
MOE_IMBALANCE_DEFAULT = 1.1
# Upper bounds on sizes, far beyond any real model or job (2^24 ≈ 16.8M tokens, units, experts; 65,536 layers):
# a larger cell is a data error, and unbounded integers stall divisor enumeration or overflow float maths.
MAX_SIZE = 2**24
MAX_LAYERS = 2**16
# Transformer Engine's default FP8 recipe (`DelayedScaling`), what Megatron-LM uses unless told otherwise;
# NeMo's performance scripts default to it too (NVIDIA/NeMo scripts/performance/README.md: --fp8_recipe
# 'ds' per-tensor delayed scaling (default), 'cs' current scaling, 'mxfp8' 32-value blocks).
DEFAULT_FP8_RECIPE: Literal["delayed"] = "delayed"
# LoRA adapter rank when a LoRA run does not state it: Megatron-Bridge LoRA(dim=32) on linear_qkv, linear_proj,
# linear_fc1, linear_fc2 (NVIDIA-NeMo/Megatron-Bridge src/megatron/bridge/peft/lora.py, commit 067f987).
LORA_DIM_DEFAULT = 32


def _printable_name(value: str) -> str:
    """A name is written into scripts, terminals and reports: no control or format characters."""
    bad = unsafe_chars(value)
    if bad:
        shown = ", ".join(escape_char(ch) for ch in bad)
        raise ValueError(f"name must be printable text (it holds the control character(s) {shown})")
    if not value.strip():
        raise ValueError("name must not be empty")
    return value


Name = Annotated[str, Field(max_length=200), AfterValidator(_printable_name)]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class MlaDims(NamedTuple):
    """Multi-head latent attention's dimensions (DeepSeek-V2/V3), ModelSpec.mla."""

    q_lora_rank: int  # 0 = queries not compressed
    kv_lora_rank: int
    qk_nope: int  # per-head query/key dimension without RoPE
    qk_rope: int  # the shared RoPE key's dimension
    v: int  # per-head value dimension


class ModelSpec(_Frozen):
    """A decoder-only transformer: dense or MoE, MHA/GQA/MQA or MLA, SwiGLU or GeLU."""

    name: Name
    layers: int = Field(gt=0, le=MAX_LAYERS)
    hidden: int = Field(gt=0, le=MAX_SIZE)
    heads: int = Field(gt=0, le=MAX_SIZE)
    kv_heads: int | None = Field(default=None, gt=0, description="GQA key/value heads; None = heads (MHA)")
    head_dim: int | None = Field(default=None, gt=0, description="None = hidden // heads")
    ffn_hidden: int = Field(gt=0, le=MAX_SIZE, description="dense MLP inner size")
    vocab: int = Field(gt=0, le=MAX_SIZE)
    tied_embeddings: bool = False
    activation: Literal["swiglu", "gelu"] = "swiglu"
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    qkv_bias: bool = False
    dropout: bool = Field(default=False, description="hidden/attention dropout (GPT-era Megatron configs)")
    # MoE
    experts: int = Field(default=0, ge=0, le=MAX_SIZE, description="routed experts; 0 = dense model")
    topk: int = Field(default=0, ge=0, le=MAX_SIZE)
    shared_experts: int = Field(default=0, ge=0)
    moe_ffn_hidden: int | None = Field(default=None, gt=0)
    shared_ffn_hidden: int | None = Field(default=None, gt=0, description="None = moe_ffn_hidden")
    dense_layers: int = Field(default=0, ge=0, description="leading dense layers before the MoE layers")
    expert_bias: bool = Field(
        default=False, description="routed experts' linear layers have biases (GPT-OSS)"
    )
    glu_clamp: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description="routed experts' GLU inputs clamped to +-this limit (GPT-OSS swiglu_limit)",
    )
    # MLA (DeepSeek-V2/V3)
    q_lora_rank: int | None = Field(default=None, gt=0)
    kv_lora_rank: int | None = Field(default=None, gt=0)
    qk_nope_head_dim: int | None = Field(default=None, gt=0)
    qk_rope_head_dim: int | None = Field(default=None, gt=0)
    v_head_dim: int | None = Field(default=None, gt=0)
    # local attention (GPT-OSS alternates sliding-window and full layers)
    sliding_window: int | None = Field(default=None, gt=0)
    sliding_window_fraction: float = Field(default=0.0, ge=0.0, le=1.0)
    # positions and attention details the launch settings spell out (HF config.json field names in
    # parentheses): rope_theta, rope_scaling.rope_type/factor, qk-norm (Qwen3), soft-capping (Gemma-2)
    position_embedding: Literal["rope", "learned", "alibi"] = "rope"
    rope_theta: float = Field(
        default=10000.0, gt=0, allow_inf_nan=False, description="RoPE base frequency (rope_theta)"
    )
    rope_scaling: Literal["llama3", "yarn", "linear"] | None = None
    rope_scaling_factor: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    qk_norm: bool = Field(default=False, description="RMSNorm on queries and keys per head (Qwen3, Gemma-3)")
    softcapping: bool = Field(default=False, description="attention/final-logit soft-capping (Gemma-2)")
    norm_eps: float | None = Field(
        default=None,
        gt=0,
        lt=1,
        description="RMSNorm/LayerNorm epsilon (rms_norm_eps); None = the stack's default",
    )
    # MoE router (HF DeepSeek/Qwen/Mixtral config names in parentheses); only the launch writers read them
    router_score: Literal["softmax", "sigmoid"] = Field(default="softmax", description="(scoring_func)")
    router_norm_topk: bool = Field(default=True, description="top-k weights renormalised (norm_topk_prob)")
    router_expert_bias: bool = Field(
        default=False, description="aux-loss-free expert bias (topk_method noaux_tc)"
    )
    router_groups: int | None = Field(default=None, gt=0, description="expert groups (n_group)")
    router_group_topk: int | None = Field(
        default=None, gt=0, description="groups kept per token (topk_group)"
    )
    router_scaling: float | None = Field(default=None, gt=0, description="routed_scaling_factor")
    aux_loss_coeff: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="load-balancing loss weight (aux_loss_alpha, router_aux_loss_coef)",
    )
    aux_loss_per_sequence: bool = Field(default=False, description="sequence-wise balancing loss (seq_aux)")
    source: str = ""
    aliases: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        k = self.kv_heads or self.heads
        if self.heads % k:
            raise ValueError(f"heads={self.heads} is not a multiple of kv_heads={k}")
        if self.experts:
            if not (0 < self.topk <= self.experts):
                raise ValueError(f"topk={self.topk} must be in 1..experts={self.experts} for an MoE model")
            if self.moe_ffn_hidden is None:
                raise ValueError("moe_ffn_hidden is required when experts > 0")
            if self.dense_layers >= self.layers:
                raise ValueError(f"dense_layers={self.dense_layers} must be < layers={self.layers}")
        if self.is_mla and None in (
            self.kv_lora_rank,
            self.qk_nope_head_dim,
            self.qk_rope_head_dim,
            self.v_head_dim,
        ):
            raise ValueError("MLA needs kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim and v_head_dim")
        return self

    @property
    def kv(self) -> int:
        """Number of key/value heads (MHA when unset)."""
        return self.kv_heads or self.heads

    @property
    def dh(self) -> int:
        """Attention head dimension."""
        return self.head_dim or self.hidden // self.heads

    @property
    def mla(self) -> MlaDims:
        """The MLA dimensions, as ints (the validator requires them on an MLA model); ValueError otherwise."""
        dims = (self.kv_lora_rank, self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim)
        rkv, dn, dr, dv = dims
        if rkv is None or dn is None or dr is None or dv is None:
            raise ValueError(f"{self.name} is not an MLA model")
        return MlaDims(self.q_lora_rank or 0, rkv, dn, dr, dv)

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts."""
        return self.layers - self.dense_layers if self.is_moe else 0

    @property
    def shared_ffn(self) -> int:
        return self.shared_ffn_hidden or self.moe_ffn_hidden or 0


class GPUSpec(_Frozen):
    """One accelerator type: memory, dense peaks, bandwidths and default packaging."""

    name: Name
    aliases: tuple[str, ...] = ()
    vendor: Literal["nvidia", "amd", "intel", "google", "huawei", "other"] = "nvidia"
    family: str = Field(
        description="efficiency family, e.g. ampere, hopper, blackwell, cdna3, cdna4, davinci"
    )
    memory_bytes: float = Field(gt=0, description="HBM capacity in bytes as sold (GB = 1e9)")
    bf16_flops: float = Field(gt=0, description="dense BF16 peak, FLOP/s")
    fp8_flops: float | None = Field(default=None, gt=0, description="dense FP8 peak, FLOP/s; None = no FP8")
    hbm_bw: float = Field(gt=0, description="HBM bandwidth, bytes/s")
    scaleup_bw: float = Field(gt=0, description="NVLink/xGMI bandwidth per GPU per direction, bytes/s")
    scaleup_domain: int = Field(
        default=8, gt=0, description="GPUs sharing one NVLink fabric by default (GB200 NVL72: 72)"
    )
    host_size: int | None = Field(
        default=None, gt=0, description="GPUs per host (server/tray); None = scaleup_domain"
    )
    scaleout_bw: float = Field(
        gt=0, description="default inter-node NIC bandwidth per GPU per direction, bytes/s"
    )
    host_memory_bytes: float | None = Field(
        default=None,
        gt=0,
        description="CPU memory per GPU, bytes, where the part fixes it (Grace superchips); None = unknown",
    )
    exp_rate: float | None = Field(
        default=None,
        gt=0,
        description="special-function-unit exponentials per second (softmax ex2); None = unpublished, no bound",
    )
    tdp_watts: float | None = None
    price_usd_per_hour: float | None = Field(default=None, ge=0, description="flat default on-demand price")
    source: str = ""

    def peak_flops(self, precision: str) -> float:
        """Dense peak FLOP/s for a GEMM precision (fp8 falls back to bf16 where there is none)."""
        if precision == "fp8" and self.fp8_flops:
            return self.fp8_flops
        return self.bf16_flops


# Scale-out NIC transports (ClusterSpec.transport): InfiniBand and RoCE run GPU-initiated RDMA (IBGDA),
# AWS EFA does not (libfabric; NCCL through aws-ofi-nccl, NVSHMEM through its libfabric proxy transport).
TRANSPORTS = ("infiniband", "roce", "efa")
Transport = Literal["infiniband", "roce", "efa"]


class ClusterSpec(_Frozen):
    """A homogeneous cluster: GPU type, count, host size, NVLink domain size and NIC bandwidth.

    The host (`gpus_per_node`: a server or a GB200 tray) and the NVLink domain (`nvlink_domain`: the GPUs
    that share one NVLink fabric; a whole NVL72 rack) are separate. The domain defaults to the GPU's
    catalog domain when that fabric spans several hosts (GB200/GB300 NVL72), else to the host. The GPU
    count must be a whole number of hosts, not of domains (the last domain may be partial).
    """

    gpu: GPUSpec
    num_gpus: int = Field(gt=0)
    gpus_per_node: int | None = Field(default=None, gt=0, description="GPUs per host; None = the GPU's host")
    nvlink_domain: int | None = Field(
        default=None, gt=0, description="GPUs per NVLink domain; None = the GPU's default (see class doc)"
    )
    internode_bw: float | None = Field(default=None, gt=0, description="bytes/s per GPU per direction")
    price_usd_per_gpu_hour: float | None = Field(default=None, ge=0)
    transport: Transport = Field(
        default="infiniband",
        description="scale-out NIC transport: infiniband, roce or efa (AWS Elastic Fabric Adapter); sets "
        "how a flex (DeepEP/HybridEP) dispatcher reaches the NICs (perf/moe.py flex_rdma_bandwidth)",
    )

    @model_validator(mode="after")
    def _check(self) -> ClusterSpec:
        h, d = self.host_size, self.node_size
        if self.num_gpus > h and self.num_gpus % h:
            raise ValueError(f"num_gpus={self.num_gpus} is not a multiple of gpus_per_node={h}")
        if d % h and h % d:
            raise ValueError(f"nvlink_domain={d} must be a multiple or a divisor of gpus_per_node={h}")
        return self

    @property
    def host_size(self) -> int:
        """GPUs per host (server, or GB200 compute tray)."""
        return self.gpus_per_node or self.gpu.host_size or self.gpu.scaleup_domain

    @property
    def node_size(self) -> int:
        """GPUs per NVLink domain (what every collective's placement is judged against)."""
        if self.nvlink_domain:
            return self.nvlink_domain
        g = self.gpu
        if g.host_size and g.scaleup_domain > g.host_size:  # rack-scale fabric spanning hosts
            return g.scaleup_domain
        return self.gpus_per_node or g.scaleup_domain

    @property
    def domain_size(self) -> int:
        """Alias of node_size: GPUs per NVLink domain."""
        return self.node_size

    @property
    def nic_bw(self) -> float:
        """Inter-node bandwidth per GPU per direction (bytes/s)."""
        return self.internode_bw or self.gpu.scaleout_bw

    @property
    def nodes(self) -> int:
        """Hosts (servers or trays) the job occupies."""
        return max(1, -(-self.num_gpus // self.host_size))

    @property
    def domains(self) -> int:
        """NVLink domains the job touches (the last may be partial)."""
        return max(1, -(-self.num_gpus // self.node_size))


MemorySaver = Literal["offload", "bf16_states", "8bit_states", "act_offload", "recompute_modules"]
# Main-gradient buffer / data-parallel reduction dtypes (Workload.grad_reduce_dtype; bytes: perf/memory.py)
GradReduceDtype = Literal["fp32", "bf16"]
GRAD_REDUCE_DTYPES: tuple[str, ...] = get_args(GradReduceDtype)
# What a step trains (Workload.finetune; its costs: perf/finetune.py)
FinetuneMode = Literal["full", "lora"]
FINETUNE_MODES: tuple[str, ...] = get_args(FinetuneMode)
# How LoRA's frozen base weights are stored (Workload.lora_base; bytes and stacks: perf/finetune.py): bf16, or
# NF4 4-bit with double-quantised scales (QLoRA, Dettmers et al. 2023)
LoraBase = Literal["bf16", "nf4"]
LORA_BASES: tuple[str, ...] = get_args(LoraBase)
# The linear layers LoRA can wrap, by Megatron-Core's module names (torchtune: q/k/v_proj, output_proj, w1/w3, w2)
LoraTarget = Literal["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]
LORA_TARGETS: tuple[LoraTarget, ...] = get_args(LoraTarget)


class Workload(_Frozen):
    """What is trained: sequence length, global batch, precision, optimizer, token budget."""

    seq_len: int = Field(gt=0, le=MAX_SIZE)
    # Upper bound: far above any published run (thousands of sequences) and small enough that the
    # search's divisor enumeration of the batch stays instant (a 30-digit batch hung it).
    global_batch: int = Field(gt=0, le=MAX_SIZE, description="sequences per optimizer step")
    precision: Literal["bf16", "fp8"] = "bf16"
    optimizer: Optimizer = Field(
        default="adam",
        description="training optimizer (knobs.OPTIMIZER_KINDS): adam (fp32 m, v), adam_bf16_states, adam_8bit, "
        "sgd (momentum), adafactor (factored second moment, no momentum), lion (one momentum), came (momentum, "
        "factored second moment and confidence)",
    )
    master_weights: MasterWeights = Field(
        default="fp32",
        description="the optimizer's master copy of the weights: fp32 (4 B a parameter), fp16 (2 B: Megatron "
        "--use-precision-aware-optimizer --main-params-dtype fp16) or bf16 (none: the bf16 model weights are "
        "updated in place, pure-bf16 training)",
    )
    token_budget: float | None = Field(default=None, gt=0, description="tokens to train, for time/cost")
    tp_comm_overlap: bool = Field(
        default=False,
        description="overlap TP collectives with GEMMs (Megatron --tp-comm-overlap, torchtitan "
        "async TP); needs sequence parallelism; unstated: the stack's recipe default "
        "(defaults.tp_comm_overlap_default: on for megatron)",
    )
    framework: Framework = Field(
        default="megatron",
        description="software stack: sets kernel fusion, attention kernel, recompute semantics",
    )
    stack: str = Field(
        default="",
        description="the stack's own name when autopar has no kernel profile for it (knobs.UNPROFILED_STACKS: "
        "framework is then the surrogate profile and the calibration adds the unprofiled-stack prior); '' = "
        "framework is the stack",
    )
    memory_savers: tuple[MemorySaver, ...] = Field(
        default=(),
        description="memory-saving options the search may choose: CPU optimizer offload, bf16 or 8-bit "
        "optimizer states, activation CPU offload (act_offload: completion may set an unset "
        "Strategy.activation_offload_layers), Megatron's selective recompute modules (recompute_modules: "
        "layouts.SEARCH_RECOMPUTE_MODULE_SETS); an explicit strategy may always use them",
    )
    # --- FP8 recipe and MoE routing (moe engineer, issue 11: perf/fp8.py, perf/moe.py) ---
    fp8_recipe: Literal["delayed", "current", "rowwise", "mxfp8"] = Field(
        default=DEFAULT_FP8_RECIPE,
        description="FP8 scaling recipe when precision=fp8: delayed/current tensor-wise (Transformer "
        "Engine; delayed is its default), rowwise (torchao), mxfp8 (Blackwell block scaling)",
    )
    moe_imbalance: float = Field(
        default=MOE_IMBALANCE_DEFAULT,
        ge=1.0,
        description="routed tokens on the busiest EP rank / the mean (MOE_IMBALANCE_DEFAULT above); "
        "1.0 = perfectly balanced (e.g. Megatron --moe-router-force-load-balancing benchmarks)",
    )
    moe_capacity_factor: float | None = Field(
        default=None,
        gt=0,
        description="expert capacity factor (token dropping, padded to capacity); None = dropless",
    )
    moe_dispatcher: Literal["alltoall", "flex"] = Field(
        default="alltoall",
        description="MoE token dispatcher: alltoall (Megatron --moe-token-dispatcher-type alltoall: one copy "
        "per routed expert) or flex (DeepEP/HybridEP: one copy per destination rank, hierarchical across "
        "NVLink domains)",
    )
    cuda_graphs: bool = Field(
        default=False,
        description="capture layers in CUDA graphs (Megatron --cuda-graph-impl): removes the CPU issue floor",
    )
    bf16_optimizer: bool = Field(
        default=False,
        description="DeepSpeed's BF16_Optimizer (bf16 with its own ZeRO-1): after every micro-batch's backward "
        "it adds the bf16 gradients, cast to fp32, into fp32 copies (only with framework deepspeed)",
    )
    compiled_loss: bool = Field(
        default=False,
        description="torchtitan compiles the cross-entropy with torch.compile (--training.compile from torchtitan "
        "commit bbb1b616, 2025-04-02; compile.components 'loss' later): inductor fuses the fp32 upcast, "
        "log-softmax and gradient, so the loss keeps the bf16 logits and writes a bf16 gradient "
        "(perf/layers.py COMPILED_LOSS_BYTES_PER_LOGIT) instead of eager's fp32 copies (only with framework "
        "torchtitan)",
    )
    grad_reduce_dtype: GradReduceDtype = Field(
        default="fp32",
        description="dtype of the main-gradient buffer and of its data-parallel reduce-scatter/all-reduce "
        "outside ZeRO-3 (Megatron-Core DistributedDataParallelConfig.grad_reduce_in_fp32; bf16 = Megatron "
        "--grad-reduce-in-bf16, NeMo grad_sync_dtype: bf16 / plugins.grad_reduce_in_fp32=False). Unstated: the "
        "stack's recipe default (defaults.grad_reduce_dtype_default: bf16 for megatron, as Megatron-Bridge's "
        "performance configs run; fp32 elsewhere). Megatron-FSDP's ZeRO-3 reduce-scatter moves this buffer too; "
        "the other ZeRO-3/FSDP stacks reduce in their own dtype (software.yaml zero3_reduces_main_grads, "
        "zero3_grad_bytes)",
    )
    moe_ep_overlap: bool = Field(
        default=False,
        description="overlap dispatch/combine with another micro-batch's compute (Megatron "
        "--overlap-moe-expert-parallel-comm with --delay-wgrad-compute)",
    )
    finetune: FinetuneMode = Field(
        default="full",
        description="full: every weight trained (pre-training, SFT); lora: base weights frozen, low-rank "
        "adapters trained (no base weight gradients, optimizer states or weight-gradient GEMMs)",
    )
    lora_dim: int = Field(default=LORA_DIM_DEFAULT, gt=0, description="LoRA adapter rank (finetune=lora)")
    lora_targets: tuple[LoraTarget, ...] = Field(
        default=LORA_TARGETS,
        min_length=1,
        description="the linear layers LoRA wraps (finetune=lora); default all four, as Megatron-Bridge's LoRA",
    )
    lora_base: LoraBase = Field(
        default="bf16",
        description="how the frozen base weights are stored (finetune=lora): bf16, or nf4 (QLoRA: 4-bit NF4 "
        "with double-quantised scales, dequantised to bf16 for each GEMM)",
    )
    # --- what the stack did that changes memory (issue 44; a run record's stack columns) ---
    attention_kernel: Literal["", "flash", "cudnn", "unfused"] = Field(
        default="",
        description="attention kernel: flash (FlashAttention, SDPA's flash backend), cudnn (cuDNN fused "
        "attention: Transformer Engine, SDPA's cuDNN backend) or unfused (the s x s scores materialised and "
        "kept for the backward); '' = the stack's (software.yaml flash_attention / fused_attention)",
    )
    torch_compile: bool = Field(
        default=False,
        description="the model's blocks compiled with torch.compile (torchtitan --compile.enable): inductor "
        "fuses the elementwise chains and its partitioner keeps fewer of their outputs (perf/layers.py)",
    )
    recompute_method: Literal["uniform", "block", "every_nth"] = Field(
        default="uniform",
        description="how full recompute is spread over a rank's layers (perf/remat.py Spread): uniform (Megatron "
        "--recompute-method uniform: chunks of recompute_num_layers checkpointed as one), block (the first "
        "recompute_num_layers layers of each model chunk), every_nth (torchtitan's per-layer AC: every "
        "recompute_num_layers-th block); only with recompute full",
    )
    recompute_num_layers: int = Field(default=1, ge=1, le=MAX_SIZE, description="N of recompute_method")
    reshard_after_forward: bool | None = Field(
        default=None,
        description="FSDP/ZeRO-3: free the gathered parameters after each block's forward (True) or keep them "
        "until its backward (False: every block's unsharded parameters held through the forward); None = the "
        "stack's default (torchtitan reshard_after_forward_policy 'default': re-shard without PP, keep with PP)",
    )

    @model_validator(mode="before")
    @classmethod
    def _optimizer_names(cls, data: object) -> object:
        """An unknown optimizer or master-weights precision: one line naming the choices, close ones suggested."""
        if isinstance(data, dict):
            for key, names in (("optimizer", OPTIMIZERS), ("master_weights", MASTER_WEIGHTS)):
                if key in data and data[key] not in names:
                    hint = close_hint(str(data[key]), names)
                    raise ValueError(f"{key}={data[key]!r}: expected one of {', '.join(names)}{hint}")
        return data

    @model_validator(mode="before")
    @classmethod
    def _stack_defaults(cls, data: object) -> object:
        """An unstated (or None) tp_comm_overlap / grad_reduce_dtype takes the stack's recipe default, as the
        CLI does."""
        if not isinstance(data, dict):
            return data
        stack = str(data.get("framework", "megatron"))
        if data.get("stack"):  # an unprofiled stack: no recipe default of the surrogate's applies
            stack = str(data["stack"])
            if stack not in UNPROFILED_STACKS:
                raise ValueError(f"stack={stack!r}: expected one of {', '.join(UNPROFILED_STACKS)} or ''")
        if data.get("torch_compile") and stack in ("megatron", "megatron-legacy"):
            raise ValueError(
                f"torch_compile=true: framework {stack} does not compile its model with torch.compile (its "
                "fused kernels are Transformer Engine's); the flag is for torchtitan, fsdp and deepspeed"
            )
        if data.get("tp_comm_overlap") is None:
            data = {**data, "tp_comm_overlap": tp_comm_overlap_default(stack)}
        if data.get("grad_reduce_dtype") is None:
            data = {**data, "grad_reduce_dtype": grad_reduce_dtype_default(stack)}
        return data

    @property
    def tokens_per_step(self) -> int:
        return self.seq_len * self.global_batch


class Knobs(NamedTuple):
    """A complete strategy's completable knobs without their unset case (Strategy.knobs; etp: expert_tp)."""

    vpp: int
    micro_batch: int
    recompute: Recompute
    pp_schedule: Schedule
    zero: int


class Strategy(_Frozen):
    """A parallelism strategy. dp=0 means 'derive from the cluster' (num_gpus / (tp*pp*cp)).

    None in a completable knob (COMPLETABLE_KNOBS) means "unset": `estimate` fills it with the best feasible
    value and says so in Estimate.assumed. etp defaults to unset (completed for MoE models, unused for dense).
    """

    tp: int = Field(default=1, gt=0)
    pp: int = Field(default=1, gt=0)
    dp: int = Field(default=0, ge=0)
    cp: int = Field(default=1, gt=0)
    ep: int = Field(default=1, gt=0)
    etp: int | None = Field(default=None, gt=0, description="expert TP; None = unset (completed)")
    vpp: int | None = Field(default=1, gt=0, description="virtual stages per pipeline rank")
    sp: bool = False
    zero: int | None = Field(
        default=1, ge=0, le=3, description="0 DDP, 1 dist-optimizer/ZeRO-1, 2 ZeRO-2, 3 FSDP"
    )
    micro_batch: int | None = Field(default=1, gt=0)
    recompute: Recompute | None = "none"
    pp_schedule: Schedule | None = "1f1b"
    dp_shard: int | None = Field(
        default=None,
        gt=0,
        description="HSDP: ZeRO-3 shard degree over dp (replicate dp/dp_shard); None = all",
    )
    cp_comm: CpComm = "p2p"
    pp_first_layers: int | None = Field(default=None, ge=0, description="--decoder-first-pipeline-num-layers")
    pp_last_layers: int | None = Field(default=None, ge=0, description="--decoder-last-pipeline-num-layers")
    pp_account_embedding: bool = Field(default=False, description="--account-for-embedding-in-pipeline-split")
    pp_account_loss: bool = Field(default=False, description="--account-for-loss-in-pipeline-split")
    optimizer_offload: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="share of optimizer states on the CPU (--optimizer-offload-fraction)",
    )
    optimizer_states: OptimizerStates | None = Field(
        default=None, description="optimizer-state precision; None = as Workload.optimizer"
    )
    activation_offload_layers: int | None = Field(
        default=0,
        ge=0,
        le=MAX_LAYERS,
        description="layers whose activations go to CPU memory (Megatron --cpu-offloading-num-layers, "
        "perf/act_offload.py); 0 = off, None = unset (completed)",
    )

    def unset_knobs(self, moe: bool) -> tuple[str, ...]:
        """Completable knobs left unset (etp only matters for MoE models)."""
        return tuple(k for k in COMPLETABLE_KNOBS if getattr(self, k) is None and (k != "etp" or moe))

    def knobs(self) -> Knobs:
        """The completable knobs of a complete strategy (what the performance model and the layout rules
        read); ValueError naming the unset ones otherwise (`autopar.perf.estimate` completes them first)."""
        vpp, mb, rec, sched, zero = self.vpp, self.micro_batch, self.recompute, self.pp_schedule, self.zero
        if vpp is None or mb is None or rec is None or sched is None or zero is None:
            unset = [k for k in Knobs._fields if getattr(self, k) is None]
            raise ValueError(f"strategy {self.label()} has unset knobs: {', '.join(unset)}")
        return Knobs(vpp, mb, rec, sched, zero)

    def with_dp(self, num_gpus: int) -> Strategy:
        """Return a copy with dp filled from the world size (if unset)."""
        if self.dp:
            return self
        denom = self.tp * self.pp * self.cp
        return self.model_copy(update={"dp": max(1, num_gpus // denom)})

    @property
    def expert_tp(self) -> int:
        return self.etp or self.tp

    def label(self) -> str:
        """A compact label, e.g. 'TP4+SP PP2v2 CP2 EP8 ETP1 DP8/Z1 mb1 sel-AC'.

        An unset dp (0, derived from the cluster) is omitted ('TP2 PP2 Z1 mb1'); ETP is shown only
        when the expert TP differs from TP. Knobs at their defaults are omitted; otherwise: the schedule
        after PP unless implied ('PP16-dualpipe', 'PP4-zb-h1'; 'v2' means interleaved), the pipeline split
        ('first3', 'last2', 'emb-split', 'loss-split'), the CP variant ('CP4-a2a', 'CP4-allgather'), HSDP
        ('HSDP8'), optimizer states and offload ('bf16-states', 'offload', 'offload0.5'). 'AO20' = activations of 20
        layers offloaded to the CPU. An unset micro-batch or recompute (None) shows nothing.
        The tokens are declared in autopar/knobs.py (LABEL_TOKENS); autopar.launch.labels.parse_strategy_label
        reads it back.
        """
        return format_label(self)
