"""Core specification types (pydantic v2, frozen): model, GPU, cluster, workload, strategy.

All quantities are SI inside: bytes, seconds, FLOP, FLOP/s, bytes/s (per GPU, per direction).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ModelSpec(_Frozen):
    """A decoder-only transformer: dense or MoE, MHA/GQA/MQA or MLA, SwiGLU or GeLU."""

    name: str
    layers: int = Field(gt=0)
    hidden: int = Field(gt=0)
    heads: int = Field(gt=0)
    kv_heads: int | None = Field(default=None, gt=0, description="GQA key/value heads; None = heads (MHA)")
    head_dim: int | None = Field(default=None, gt=0, description="None = hidden // heads")
    ffn_hidden: int = Field(gt=0, description="dense MLP inner size")
    vocab: int = Field(gt=0)
    tied_embeddings: bool = False
    activation: Literal["swiglu", "gelu"] = "swiglu"
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    qkv_bias: bool = False
    dropout: bool = Field(default=False, description="hidden/attention dropout (GPT-era Megatron configs)")
    # MoE
    experts: int = Field(default=0, ge=0, description="routed experts; 0 = dense model")
    topk: int = Field(default=0, ge=0)
    shared_experts: int = Field(default=0, ge=0)
    moe_ffn_hidden: int | None = Field(default=None, gt=0)
    shared_ffn_hidden: int | None = Field(default=None, gt=0, description="None = moe_ffn_hidden")
    dense_layers: int = Field(default=0, ge=0, description="leading dense layers before the MoE layers")
    # MLA (DeepSeek-V2/V3)
    q_lora_rank: int | None = Field(default=None, gt=0)
    kv_lora_rank: int | None = Field(default=None, gt=0)
    qk_nope_head_dim: int | None = Field(default=None, gt=0)
    qk_rope_head_dim: int | None = Field(default=None, gt=0)
    v_head_dim: int | None = Field(default=None, gt=0)
    # local attention (GPT-OSS alternates sliding-window and full layers)
    sliding_window: int | None = Field(default=None, gt=0)
    sliding_window_fraction: float = Field(default=0.0, ge=0.0, le=1.0)
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

    name: str
    aliases: tuple[str, ...] = ()
    vendor: Literal["nvidia", "amd", "intel", "google", "other"] = "nvidia"
    family: str = Field(description="efficiency family, e.g. ampere, hopper, blackwell, cdna3")
    memory_bytes: float = Field(gt=0, description="HBM capacity in bytes as sold (GB = 1e9)")
    bf16_flops: float = Field(gt=0, description="dense BF16 peak, FLOP/s")
    fp8_flops: float | None = Field(default=None, gt=0, description="dense FP8 peak, FLOP/s; None = no FP8")
    hbm_bw: float = Field(gt=0, description="HBM bandwidth, bytes/s")
    scaleup_bw: float = Field(gt=0, description="NVLink/xGMI bandwidth per GPU per direction, bytes/s")
    scaleup_domain: int = Field(default=8, gt=0, description="GPUs per NVLink domain (node)")
    scaleout_bw: float = Field(
        gt=0, description="default inter-node NIC bandwidth per GPU per direction, bytes/s"
    )
    tdp_watts: float | None = None
    price_usd_per_hour: float | None = Field(default=None, ge=0, description="flat default on-demand price")
    source: str = ""

    def peak_flops(self, precision: str) -> float:
        """Dense peak FLOP/s for a GEMM precision (fp8 falls back to bf16 where there is none)."""
        if precision == "fp8" and self.fp8_flops:
            return self.fp8_flops
        return self.bf16_flops


class ClusterSpec(_Frozen):
    """A homogeneous cluster: GPU type, count, node (NVLink domain) size and NIC bandwidth."""

    gpu: GPUSpec
    num_gpus: int = Field(gt=0)
    gpus_per_node: int | None = Field(default=None, gt=0, description="None = the GPU's scale-up domain")
    internode_bw: float | None = Field(default=None, gt=0, description="bytes/s per GPU per direction")
    price_usd_per_gpu_hour: float | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _check(self) -> ClusterSpec:
        g = self.node_size
        if self.num_gpus > g and self.num_gpus % g:
            raise ValueError(f"num_gpus={self.num_gpus} is not a multiple of gpus_per_node={g}")
        return self

    @property
    def node_size(self) -> int:
        """GPUs per NVLink domain."""
        return self.gpus_per_node or self.gpu.scaleup_domain

    @property
    def nic_bw(self) -> float:
        """Inter-node bandwidth per GPU per direction (bytes/s)."""
        return self.internode_bw or self.gpu.scaleout_bw

    @property
    def nodes(self) -> int:
        return max(1, -(-self.num_gpus // self.node_size))


class Workload(_Frozen):
    """What is trained: sequence length, global batch, precision, optimizer, token budget."""

    seq_len: int = Field(gt=0)
    # Upper bound: far above any published run (thousands of sequences) and small enough that the
    # search's divisor enumeration of the batch stays instant (a 30-digit batch hung it).
    global_batch: int = Field(gt=0, le=2**24, description="sequences per optimizer step")
    precision: Literal["bf16", "fp8"] = "bf16"
    optimizer: Literal["adam", "adam_bf16_states", "sgd"] = "adam"
    token_budget: float | None = Field(default=None, gt=0, description="tokens to train, for time/cost")
    tp_comm_overlap: bool = Field(
        default=False,
        description="overlap TP collectives with GEMMs (Megatron --tp-comm-overlap, torchtitan "
        "async TP); needs sequence parallelism",
    )
    framework: Literal["megatron", "megatron-legacy", "torchtitan", "fsdp", "deepspeed"] = Field(
        default="megatron",
        description="software stack: sets kernel fusion, attention kernel, recompute semantics",
    )

    @property
    def tokens_per_step(self) -> int:
        return self.seq_len * self.global_batch


Recompute = Literal["none", "selective", "full"]
Schedule = Literal["1f1b", "interleaved"]


class Strategy(_Frozen):
    """A parallelism strategy. dp=0 means 'derive from the cluster' (num_gpus / (tp*pp*cp))."""

    tp: int = Field(default=1, gt=0)
    pp: int = Field(default=1, gt=0)
    dp: int = Field(default=0, ge=0)
    cp: int = Field(default=1, gt=0)
    ep: int = Field(default=1, gt=0)
    etp: int | None = Field(default=None, gt=0, description="expert TP; None = tp")
    vpp: int = Field(default=1, gt=0, description="virtual stages per pipeline rank")
    sp: bool = False
    zero: int = Field(default=1, ge=0, le=3, description="0 DDP, 1 dist-optimizer/ZeRO-1, 2 ZeRO-2, 3 FSDP")
    micro_batch: int = Field(default=1, gt=0)
    recompute: Recompute = "none"
    pp_schedule: Schedule = "1f1b"

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
        """A compact human-readable label, e.g. 'TP4 PP2 DP8 mb1 sel'."""
        parts = [f"TP{self.tp}"]
        if self.sp and self.tp > 1:
            parts[-1] += "+SP"
        if self.pp > 1:
            parts.append(f"PP{self.pp}" + (f"v{self.vpp}" if self.vpp > 1 else ""))
        if self.cp > 1:
            parts.append(f"CP{self.cp}")
        if self.ep > 1:
            parts.append(f"EP{self.ep}")
        parts.append(f"DP{self.dp}" + (f"/Z{self.zero}" if self.zero else ""))
        parts.append(f"mb{self.micro_batch}")
        if self.recompute != "none":
            parts.append({"selective": "sel-AC", "full": "full-AC"}[self.recompute])
        return " ".join(parts)
