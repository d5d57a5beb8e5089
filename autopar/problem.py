"""The problem config tree: one definition of a training problem and how it is searched.

`Problem` = model + `ClusterConfig` + `WorkloadConfig` + `SearchSettings`. It is what every CLI command builds
from its options (`autopar.cli.options`), what the Python API takes (`Problem(...).build()`, or
`optimize(model, clusters, workload, settings)`), what a stored study keeps (`SearchSettings` beside the built
specs) and what a future service would accept as JSON. Every default lives here, once: the named values and
their reasons are in `autopar.defaults`, read nowhere else.

The tree holds what a user says (names, counts, "the stack's default"); `build()` resolves it against the
catalogs into the specs the model computes with (`ModelSpec`, `ClusterSpec`, `Workload`). Errors name the
option and the value on one line (`SpecError`/`AutoparError`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from autopar import knobs
from autopar.catalog.prices import TIERS
from autopar.cliinput import UNSET, CliInput, OneForm
from autopar.constraints import Constraint
from autopar.defaults import (
    DEFAULT_BUDGET,
    DEFAULT_FRAMEWORK,
    DEFAULT_GLOBAL_BATCH,
    DEFAULT_GPU,
    DEFAULT_GPUS,
    DEFAULT_MEMORY_BAND,
    DEFAULT_MIN_HEADROOM_GIB,
    DEFAULT_MODEL,
    DEFAULT_OBJECTIVES,
    DEFAULT_PRECISION,
    DEFAULT_SAMPLER,
    DEFAULT_SEED,
    DEFAULT_SEQ_LEN,
    DEFAULT_TIER,
    LOCAL_SEARCH_SHARE,
    tp_comm_overlap_default,
)
from autopar.errors import AutoparError, SpecError, close_hint
from autopar.layouts import EP_OVERLAP_STACKS
from autopar.parse import check_positive_finite, check_seed, parse_count, parse_gib
from autopar.specs import (
    FINETUNE_MODES,
    GRAD_REDUCE_DTYPES,
    LORA_BASES,
    LORA_TARGETS,
    ClusterSpec,
    ModelSpec,
    Workload,
)
from autopar.units import expand_count_suffixes, parse_seq_len
from autopar.workloads import with_profile

FRAMEWORKS = knobs.FRAMEWORKS  # the software stacks (the knob registry, autopar/knobs.py)
STACK_NAMES = knobs.STACK_NAMES  # what --framework accepts: FRAMEWORKS and knobs.UNPROFILED_STACKS
SURROGATE_PROFILE = knobs.SURROGATE_PROFILE
SAMPLERS = ("auto", "nsga2", "exhaustive", "hybrid")  # auto: search/hybrid.py choose_method


# The largest scale-out bandwidth per GPU accepted: 10x the fastest NIC sold per GPU today (ConnectX-8, 800 Gb/s =
# 100 GB/s per direction); beyond it the figure is a unit slip (Gb/s, or a node's total).
MAX_INTERNODE_GBPS = 1000.0
HEADROOM_TEXT = f"{DEFAULT_MIN_HEADROOM_GIB:g}GiB"  # --min-headroom's default, as typed


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)


@dataclass(frozen=True)
class ClusterChoice:
    """The cluster inputs after resolving a shorthand: GPU name(s), count(s), host and domain size."""

    gpu: str
    gpus: str
    gpus_per_node: int | None
    nvlink_domain: int | None
    internode_gbps: float | None = None  # set by --cluster detect (the NICs found); None: the GPU's default
    transport: str | None = None  # scale-out transport (specs.TRANSPORTS); None: InfiniBand


_GPU_ONE = (
    "GPU type (see `autopar gpus`) or a YAML/JSON file of GPU fields (README: custom GPU) "
    f"[default: {DEFAULT_GPU}]"
)
_GPUS_ONE = f"Number of GPUs, e.g. 64 or 16K (= 16,384) [default: {DEFAULT_GPUS}]"


def gpu_count_text(value: str | int) -> str:
    """A GPU count or count list/range as typed ('1k..4k') with its size suffixes spelt out ('1024..4096')."""
    return expand_count_suffixes(str(value))


# `--cluster detect...` reads this host (autopar.cli.topology); the CLI passes it in, the tree does no I/O.
Detector = Callable[[str], ClusterChoice | None]


class ClusterConfig(_Config):
    """The GPUs: a system shorthand, or the GPU type(s), count(s), host and NVLink domain size."""

    system: Annotated[str | None, CliInput(flag="--cluster", param="cluster_name")] = Field(
        default=None,
        description="System shorthand NAME:COUNT, e.g. gb200-nvl72:4 (4 racks = 288 GPUs) or dgx-h100:32 (32 "
        "nodes); sets the GPU, the count, GPUs per host and the NVLink domain (`autopar clusters`). "
        "detect:COUNT = COUNT hosts like this one (`autopar topology`); detect@DIR:COUNT reads a folder "
        "recorded with `autopar topology --save DIR` (also: $AUTOPAR_TOPOLOGY_DIR).",
    )
    gpu: Annotated[str | None, CliInput(one=OneForm(_GPU_ONE))] = Field(
        default=None,
        description="GPU type(s) or YAML/JSON GPU file(s), comma list makes it a search dimension "
        f"[default: {DEFAULT_GPU}].",
    )
    gpus: Annotated[str | None, CliInput(read=gpu_count_text, one=OneForm(_GPUS_ONE, "GPU count"))] = Field(
        default=None,
        description="GPU count: N, N,M,..., LOW..HIGH (powers of two) or LOW..HIGH:STEP; 1K = 1,024 "
        f"[default: {DEFAULT_GPUS}].",
    )
    gpus_per_node: Annotated[int | None, CliInput(count="GPU count")] = Field(
        default=None, description="GPUs per host (server or tray) [default: GPU's]."
    )
    nvlink_domain: Annotated[int | None, CliInput(count="GPU count")] = Field(
        default=None,
        description="GPUs sharing one NVLink fabric (GB200 NVL72 = 72, NVL36 = 36; DGX H100 = 8) [default: the "
        "GPU's]. The GPU count need not be a multiple of it.",
    )
    internode_gbps: Annotated[float | None, CliInput()] = Field(
        default=None, description="NIC GB/s per GPU per direction [default: GPU's]."
    )
    transport: Annotated[str | None, CliInput()] = Field(
        default=None,
        description="Scale-out NIC transport: infiniband, roce or efa (AWS Elastic Fabric Adapter); sets how a "
        "flex (DeepEP/HybridEP) MoE dispatcher reaches the NICs [default: the --cluster system's, else "
        "infiniband].",
    )

    def choice(self, detect: Detector | None = None) -> ClusterChoice:
        """Merge the shorthand with the explicit fields; a field the shorthand already sets is an error."""
        bw = self.internode_gbps
        if bw is not None and not (math.isfinite(bw) and 0 < bw <= MAX_INTERNODE_GBPS):
            raise SpecError(  # 0 read as "unset" and gave the GPU's default
                f"--internode-gbps={bw}: must be a positive GB/s per GPU per direction, at most {MAX_INTERNODE_GBPS:g}"
            )
        transport = check_transport(self.transport)
        if self.system is None:
            gpus = self.gpus if self.gpus is not None else str(DEFAULT_GPUS)
            gpu = self.gpu if self.gpu is not None else DEFAULT_GPU
            return ClusterChoice(
                gpu, str(gpus), self.gpus_per_node, self.nvlink_domain, self.internode_gbps, transport
            )
        flags = (("--gpu", self.gpu), ("--gpus", self.gpus), ("--gpus-per-node", self.gpus_per_node))
        given = [f for f, v in (*flags, ("--nvlink-domain", self.nvlink_domain)) if v is not None]
        if given:
            raise SpecError(
                f"--cluster {self.system} already sets the GPU, count, host and NVLink domain; "
                f"drop {', '.join(given)}"
            )
        found = detect(self.system) if detect is not None else None
        if found is None:
            from autopar.catalog.clusters import parse_cluster

            shape = parse_cluster(self.system)
            found = ClusterChoice(
                shape.gpu,
                str(shape.num_gpus),
                shape.gpus_per_node,
                shape.nvlink_domain,
                transport=shape.transport,
            )
        if self.internode_gbps is not None:
            found = replace(found, internode_gbps=self.internode_gbps)
        if transport is not None:
            found = replace(found, transport=transport)
        return found

    def build(self, detect: Detector | None = None) -> tuple[list[ClusterSpec], list[str]]:
        """A ClusterSpec per GPU type x count (a search dimension); counts that are not host multiples are
        skipped, each with a note."""
        from autopar.parse import parse_gpu_counts, parse_list

        c = self.choice(detect)
        return build_clusters(
            parse_list(c.gpu, "gpu"),
            parse_gpu_counts(c.gpus, node_size=10**9),
            c.gpus_per_node,
            c.internode_gbps,
            c.nvlink_domain,
            fabric=_fabric_fields(c),
        )

    def build_one(self, detect: Detector | None = None) -> ClusterSpec:
        """The one cluster of a single estimate (one GPU type, one count)."""
        from autopar.catalog import get_gpu

        c = self.choice(detect)
        try:
            n = int(c.gpus)
        except ValueError:
            raise SpecError(f"gpus={c.gpus!r}: expected one GPU count here") from None
        return ClusterSpec(
            gpu=get_gpu(c.gpu),
            num_gpus=n,
            gpus_per_node=c.gpus_per_node,
            nvlink_domain=c.nvlink_domain,
            internode_bw=c.internode_gbps * 1e9 if c.internode_gbps else None,
            **_fabric_fields(c),
        )


def _fabric_fields(c: ClusterChoice) -> dict[str, Any]:
    """The ClusterSpec transport a choice states (absent: the spec's default, InfiniBand)."""
    return {} if c.transport is None else {"transport": c.transport}


def check_transport(name: str | None) -> str | None:
    """Validate a --transport value (one-line error naming the allowed values); None stays None."""
    from autopar.specs import TRANSPORTS

    if name is None:
        return None
    t = name.strip().lower()
    if t not in TRANSPORTS:
        raise SpecError(
            f"transport={name!r}: expected one of {', '.join(TRANSPORTS)}{close_hint(name, TRANSPORTS)}"
        )
    return t


def build_clusters(
    gpus: list[str],
    counts: list[int],
    gpus_per_node: int | None,
    internode_gbps: float | None,
    nvlink_domain: int | None = None,
    fabric: dict[str, Any] | None = None,
) -> tuple[list[ClusterSpec], list[str]]:
    """ClusterSpecs for every GPU type x count; counts that are not host multiples are skipped (noted)."""
    from autopar.catalog import get_gpu

    out, skipped = [], []
    for name in gpus:
        g = get_gpu(name)
        node = gpus_per_node or g.host_size or g.scaleup_domain
        for n in counts:
            if n > node and n % node:
                skipped.append(f"{n}x {g.name}: not a multiple of {node} GPUs per node, skipped")
                continue
            bw = internode_gbps * 1e9 if internode_gbps else None
            out.append(
                ClusterSpec(
                    gpu=g,
                    num_gpus=n,
                    gpus_per_node=gpus_per_node,
                    nvlink_domain=nvlink_domain,
                    internode_bw=bw,
                    **(fabric or {}),
                )
            )
    if not out:
        raise AutoparError("gpus: no GPU count fits a whole number of nodes (" + "; ".join(skipped) + ")")
    return out, skipped


def check_lora_targets(names: Sequence[str] | str) -> tuple[str, ...]:
    """Validate LoRA target modules, a comma list or a sequence (one-line error naming the allowed values)."""
    items = names.split(",") if isinstance(names, str) else names
    out = tuple(dict.fromkeys(x.strip() for x in items if x.strip()))
    bad = [x for x in out if x not in LORA_TARGETS]
    if bad or not out:
        name = bad[0] if bad else ""
        raise SpecError(
            f"--lora-targets {name!r}: expected a comma list of {', '.join(LORA_TARGETS)}"
            + close_hint(name, LORA_TARGETS)
        )
    return out


def check_memory_savers(names: Sequence[str] | str) -> tuple[str, ...]:
    """Validate memory savers, a comma list or a sequence (one-line error naming the allowed values)."""
    from autopar.layouts import MEMORY_SAVERS

    items = names.split(",") if isinstance(names, str) else names
    out = tuple(dict.fromkeys(x.strip() for x in items if x.strip()))
    bad = [x for x in out if x not in MEMORY_SAVERS]
    if bad:
        raise SpecError(
            f"memory_savers={bad[0]!r}: expected a comma list of {', '.join(MEMORY_SAVERS)}"
            + close_hint(bad[0], MEMORY_SAVERS)
        )
    return out


class WorkloadConfig(_Config):
    """What is trained and on which software stack."""

    workload: Annotated[str | None, CliInput()] = Field(
        default=None,
        description="What kind of run: pretrain or finetune (LoRA, 4096-token packed sequences, global batch "
        "8, as Megatron-Bridge's fine-tuning recipes); it fills in what the other options leave unstated "
        "(`autopar profile` lists each workload's defaults; rlhf and serve are not planned yet) "
        "[default: pretrain].",
    )
    seq_len: Annotated[int, CliInput(read=parse_seq_len, type=str, default=UNSET)] = Field(
        default=DEFAULT_SEQ_LEN,
        description=f"Sequence length in tokens: 8192, or 8k (binary: 8,192) [default: {DEFAULT_SEQ_LEN}; "
        "4096 with --workload finetune].",
    )
    global_batch: Annotated[int, CliInput(count="batch size in sequences", default=UNSET)] = Field(
        default=DEFAULT_GLOBAL_BATCH,
        description=f"Global batch (sequences per step; 2K = 2,048) [default: {DEFAULT_GLOBAL_BATCH}; 8 with "
        "--workload finetune].",
    )

    @model_validator(mode="before")
    @classmethod
    def _profile(cls, data: Any) -> Any:
        """A stated workload fills in its defaults where the input is silent (autopar/workloads.py)."""
        return with_profile(data) if isinstance(data, dict) else data

    precision: Annotated[str, CliInput(one=OneForm("GEMM precision: bf16 or fp8."))] = Field(
        default=DEFAULT_PRECISION, description="bf16, fp8 or bf16,fp8 (a search dimension)."
    )
    framework: Annotated[str, CliInput()] = Field(
        default=DEFAULT_FRAMEWORK,
        description="Software stack: megatron, megatron-legacy, torchtitan, fsdp or deepspeed (sets kernel "
        "fusion, attention kernel, recompute semantics); a stack autopar has no profile for (other, maxtext, "
        "jax, internevo, colossalai, nanotron, paddle, mindspore, vescale) is estimated with Megatron's "
        "mechanics and the unprofiled-stack prior (a slower centre, a wider band); other is the sober prior "
        "for any stack.",
    )
    # None = the stack's default (defaults.tp_comm_overlap_default, the one resolution of it).
    tp_comm_overlap: Annotated[
        bool | None, CliInput(flag="--tp-comm-overlap/--no-tp-comm-overlap", show_default=False)
    ] = Field(
        default=None,
        description="Overlap TP collectives with GEMMs (Megatron --tp-comm-overlap, torchtitan async TP); "
        "needs sequence parallelism. Default: on for megatron, as its published recipes run it; off for the "
        "other stacks.",
    )
    tokens: Annotated[float | None, CliInput(read=parse_count, type=str | None)] = Field(
        default=None, description="Token budget, e.g. 1T (for time/cost to train)."
    )
    memory_savers: Annotated[tuple[str, ...], CliInput(read=check_memory_savers, type=str)] = Field(
        default=(),
        description="Memory savers the search may choose, comma list of offload (CPU optimizer offload), "
        "bf16_states, 8bit_states (optimizer-state precision), act_offload (activation CPU offload, Megatron, "
        "pp=1), recompute_modules (Megatron's selective recompute modules); only those the --framework ships "
        "are offered; empty = none.",
    )
    fp8_recipe: Annotated[str | None, CliInput()] = Field(
        default=None,
        description="FP8 scaling recipe with --precision fp8: delayed (Transformer Engine default), current, "
        "rowwise (torchao) or mxfp8 (Blackwell) [default: delayed].",
    )
    moe_imbalance: Annotated[float | None, CliInput(minimum=1.0)] = Field(
        default=None,
        description="Routed tokens on the busiest EP rank / the mean (MoE models) [default: 1.1; 1.0 = "
        "force-balanced routing].",
    )
    moe_capacity_factor: Annotated[float | None, CliInput(minimum=0.01)] = Field(
        default=None,
        description="Expert capacity factor: tokens beyond it are dropped (MoE models) [default: dropless].",
    )
    moe_dispatcher: Annotated[str | None, CliInput()] = Field(
        default=None,
        description="MoE token dispatcher: alltoall (one copy per routed expert) or flex (DeepEP/HybridEP: one "
        "copy per destination rank, hierarchical across NVLink domains) [default: alltoall].",
    )
    moe_ep_overlap: Annotated[bool, CliInput()] = Field(
        default=False,
        description="Dispatch/combine overlap another micro-batch's compute (Megatron "
        "--overlap-moe-expert-parallel-comm).",
    )
    cuda_graphs: Annotated[bool, CliInput()] = Field(
        default=False,
        description="Layers run as CUDA graphs (no CPU launch floor; Megatron --cuda-graph-impl).",
    )
    grad_reduce_dtype: Annotated[str | None, CliInput()] = Field(
        default=None,
        description="Main-gradient buffer and data-parallel reduction dtype outside ZeRO-3: fp32 or bf16 "
        "(Megatron --grad-reduce-in-bf16) [default: the stack's recipes: bf16 for megatron, as "
        "Megatron-Bridge's performance configs run; fp32 elsewhere].",
    )
    optimizer: Annotated[str | None, CliInput()] = Field(
        default=None,
        description="Training optimizer: adam (fp32 m, v: 12 B a parameter with the fp32 master), "
        "adam_bf16_states (8), adam_8bit (6), sgd (momentum: 8), adafactor (factored second moment, no "
        "momentum: 4), lion (one momentum: 8) or came (momentum + factored statistics: 8) [default: adam].",
    )
    master_weights: Annotated[str | None, CliInput()] = Field(
        default=None,
        description="The optimizer's master copy of the weights: fp32 (4 B a parameter), fp16 (2 B; Megatron "
        "--main-params-dtype fp16) or bf16 (none: the bf16 weights are updated in place) [default: fp32].",
    )
    finetune: Annotated[str | None, CliInput()] = Field(
        default=None,
        description="What a step trains: full (every weight: pre-training, SFT) or lora (base weights frozen, "
        "rank-r adapters on linear_qkv, linear_proj, linear_fc1 and linear_fc2 of every layer, as "
        "Megatron-Bridge's LoRA: no base-weight gradients, optimizer states or weight-gradient GEMMs) "
        "[default: full].",
    )
    lora_rank: Annotated[int | None, CliInput()] = Field(
        default=None, description="LoRA adapter rank, with --finetune lora [default: 32, Megatron-Bridge's]."
    )
    lora_targets: Annotated[tuple[str, ...] | None, CliInput(type=str | None, read=check_lora_targets)] = (
        Field(
            default=None,
            description="The linear layers LoRA wraps, with --finetune lora: a comma list of linear_qkv, linear_proj, "
            "linear_fc1, linear_fc2 (Megatron-Core's names; torchtune's q/k/v_proj, output_proj, w1/w3, w2) "
            "[default: all four, as Megatron-Bridge's LoRA].",
        )
    )
    lora_base: Annotated[str | None, CliInput()] = Field(
        default=None,
        description="How the frozen base weights are stored, with --finetune lora: bf16, or nf4 (QLoRA: 4-bit "
        "NormalFloat with double-quantised scales, 4.127 bits a weight, dequantised for each GEMM; torchtune and "
        "Hugging Face PEFT on --framework fsdp, dense models) [default: bf16].",
    )

    def precisions(self) -> list[str]:
        """The precision(s) searched, first = the workload's."""
        from autopar.parse import parse_list

        return parse_list(self.precision, "precision")

    def overlap(self, stack: str | None = None) -> bool:
        """The TP comm overlap a run on `stack` (default: this framework) uses: stated, else the stack's."""
        return tp_comm_overlap_default(stack or self.framework, self.tp_comm_overlap)

    def build(self, model: ModelSpec, stack: str | None = None) -> Workload:
        """The Workload spec (validated); a field that cannot take effect on `model` is an error."""
        fields = stack_fields(self.framework)
        if "stack" in fields and self.memory_savers:
            raise SpecError(
                f"--memory-savers {','.join(self.memory_savers)}: autopar does not know what --framework "
                f"{self.framework} ships (no kernel profile); drop the flag or name a profiled stack"
            )
        precs = self.precisions()
        wl = Workload(
            seq_len=self.seq_len,
            global_batch=self.global_batch,
            precision=precs[0],
            token_budget=self.tokens,
            **fields,
            tp_comm_overlap=self.overlap(stack),
            memory_savers=check_memory_savers(self.memory_savers),
            **self._extras(model, precs),
        )
        return check_savers_take_effect(model, wl)

    def _finetune(self, model: ModelSpec) -> dict[str, Any]:
        """finetune / lora_dim / lora_targets / lora_base of the Workload; a LoRA setting without LoRA, or NF4
        where no stack ships it, cannot take effect: an error."""
        out: dict[str, Any] = {}
        if self.finetune is not None:
            if self.finetune not in FINETUNE_MODES:
                qlora = " (QLoRA: --finetune lora --lora-base nf4)" if "q" in self.finetune.lower() else ""
                raise SpecError(
                    f"--finetune {self.finetune}: expected one of {', '.join(FINETUNE_MODES)}"
                    f"{close_hint(self.finetune, FINETUNE_MODES)}{qlora}"
                )
            out["finetune"] = self.finetune
        lora = {
            "--lora-rank": self.lora_rank,
            "--lora-targets": self.lora_targets,
            "--lora-base": self.lora_base,
        }
        for flag, value in lora.items():
            if value is not None and self.finetune != "lora":
                shown = ",".join(value) if isinstance(value, tuple) else value
                raise SpecError(f"{flag} {shown}: takes effect with --finetune lora only")
        if self.lora_rank is not None:
            if self.lora_rank <= 0:
                raise SpecError(f"--lora-rank {self.lora_rank}: must be a positive whole number")
            out["lora_dim"] = self.lora_rank
        if self.lora_targets is not None:
            out["lora_targets"] = check_lora_targets(self.lora_targets)
        if self.lora_base is not None:
            out["lora_base"] = self._lora_base(model)
        return out

    def _lora_base(self, model: ModelSpec) -> str:
        """A --lora-base value that can take effect here (one-line errors otherwise)."""
        from autopar.perf.finetune import NF4_STACKS

        base = str(self.lora_base)
        if base not in LORA_BASES:
            raise SpecError(
                f"--lora-base {base}: expected one of {', '.join(LORA_BASES)}{close_hint(base, LORA_BASES)}"
            )
        if base == "nf4" and self.framework not in NF4_STACKS:
            raise SpecError(
                f"--lora-base nf4 takes effect on --framework {', '.join(NF4_STACKS)} (torchtune's QLoRA, Hugging "
                f"Face PEFT + bitsandbytes); {self.framework} has no NF4 base weights"
            )
        if base == "nf4" and model.is_moe:
            raise SpecError(f"--lora-base nf4: QLoRA of MoE models is not modelled; {model.name} is MoE")
        return base

    def _extras(self, model: ModelSpec, precisions: list[str]) -> dict[str, Any]:
        """The FP8/MoE/CUDA-graph fields that were stated; one that cannot take effect is an error."""
        out: dict[str, Any] = {"cuda_graphs": True} if self.cuda_graphs else {}
        out.update(self._finetune(model))
        if self.grad_reduce_dtype is not None:
            if self.grad_reduce_dtype not in GRAD_REDUCE_DTYPES:
                raise SpecError(
                    f"--grad-reduce-dtype {self.grad_reduce_dtype}: expected one of {', '.join(GRAD_REDUCE_DTYPES)}"
                )
            out["grad_reduce_dtype"] = self.grad_reduce_dtype
        for flag, key, names in (
            ("--optimizer", "optimizer", knobs.OPTIMIZERS),
            ("--master-weights", "master_weights", knobs.MASTER_WEIGHTS),
        ):
            if (value := getattr(self, key)) is not None:
                if value not in names:
                    raise SpecError(
                        f"{flag} {value}: expected one of {', '.join(names)}{close_hint(value, names)}"
                    )
                out[key] = value
        if self.fp8_recipe is not None:
            if "fp8" not in precisions:
                raise SpecError(
                    f"--fp8-recipe {self.fp8_recipe} needs --precision fp8 (got {','.join(precisions)})"
                )
            out["fp8_recipe"] = self.fp8_recipe
        for flag, field in (
            ("--moe-imbalance", "moe_imbalance"),
            ("--moe-capacity-factor", "moe_capacity_factor"),
            ("--moe-dispatcher", "moe_dispatcher"),
            ("--moe-ep-overlap", "moe_ep_overlap"),
        ):
            value = getattr(self, field) or None if field == "moe_ep_overlap" else getattr(self, field)
            if value is None:
                continue
            if not model.is_moe:
                raise SpecError(f"{flag} applies to MoE models; {model.name} is dense")
            if field == "moe_ep_overlap" and self.framework not in EP_OVERLAP_STACKS:
                raise SpecError(
                    f"{flag} applies to --framework {', '.join(EP_OVERLAP_STACKS)} (Megatron-Core "
                    f"--overlap-moe-expert-parallel-comm); {self.framework} has no dispatch/combine overlap"
                )
            out[field] = value
        return out


def check_framework(name: str) -> str:
    """Validate a --framework value (one-line error naming the allowed values, close matches suggested):
    a profiled stack (knobs.FRAMEWORKS) or an unprofiled one (knobs.UNPROFILED_STACKS)."""
    if name not in STACK_NAMES:
        hint = close_hint(name, STACK_NAMES)
        raise SpecError(f"framework={name!r}: expected one of {', '.join(STACK_NAMES)}{hint}")
    return name


def stack_fields(name: str) -> dict[str, str]:
    """Workload framework (and stack, for an unprofiled one: the surrogate profile) of a --framework value."""
    name = check_framework(name)
    return {"framework": name} if name in FRAMEWORKS else {"framework": SURROGATE_PROFILE, "stack": name}


def check_savers_take_effect(model: ModelSpec, workload: Workload) -> Workload:
    """The workload, or a one-line SpecError for a memory saver that cannot take effect (layouts.idle_saver)."""
    from autopar.layouts import idle_saver

    for saver in workload.memory_savers:
        if why := idle_saver(model, workload, saver):
            raise SpecError(f"--memory-savers {saver} cannot take effect: {why}")
    return workload


class SearchSettings(_Config):
    """How a search runs: what it optimizes, how long, what counts as fitting, where it is stored."""

    budget: Annotated[int, CliInput(count="number of trials", decimal=True)] = Field(
        default=DEFAULT_BUDGET, description="Distinct strategies to evaluate (2k = 2,000)."
    )
    objectives: Annotated[tuple[str, ...] | str, CliInput(type=str)] = Field(
        default=DEFAULT_OBJECTIVES, description="2-4 of throughput,headroom,cost,step_time,mfu."
    )
    seed: Annotated[int, CliInput(read=check_seed)] = Field(
        default=DEFAULT_SEED, description="Random seed (same seed + inputs = same answer)."
    )
    sampler: Annotated[str, CliInput()] = Field(
        default=DEFAULT_SAMPLER,
        description="auto (exact sweep up to 1M points, else NSGA-II over layouts with exact inner knobs; "
        "nsga2 with --storage), nsga2, exhaustive or hybrid.",
    )
    timeout: Annotated[float | None, CliInput(read=partial(check_positive_finite, field="timeout"))] = Field(
        default=None, description="Stop after this many seconds."
    )
    min_headroom_gib: Annotated[
        float,
        CliInput(
            flag="--min-headroom", param="min_headroom", read=parse_gib, type=str, default=HEADROOM_TEXT
        ),
    ] = Field(
        default=DEFAULT_MIN_HEADROOM_GIB,
        description="Free memory per GPU a strategy must leave on top of the memory margin, e.g. 4GiB (the "
        "margin: the memory band's upper end on a stack whose peaks it measured and for top-k > 2 MoE on "
        "megatron, else 2 GiB).",
    )
    memory_band: Annotated[bool, CliInput(flag="--memory-band/--no-memory-band")] = Field(
        default=DEFAULT_MEMORY_BAND,
        description="A strategy fits only if the upper end of its peak-memory band (90% one-sided) does, on "
        "the stacks whose measured peaks the band was fitted on and for top-k > 2 MoE on megatron (others: "
        "2 GiB free); --no-memory-band: the point estimate plus --min-headroom.",
    )
    max_cost: Annotated[float | None, CliInput(read=partial(check_positive_finite, field="max_cost"))] = (
        Field(default=None, description="Constraint: max $ per million tokens.")
    )
    precisions: list[str] | None = Field(
        default=None, description="precisions searched (None: the workload's)"
    )
    tier: Annotated[str, CliInput()] = Field(
        default=DEFAULT_TIER, description=f"Price tier: {', '.join(TIERS)}."
    )
    storage: Annotated[Any, CliInput(type=str | None)] = Field(
        default=None,
        description="Keep the study: a journal file path (fast, no server), sqlite:///study.db, or "
        "postgresql://user:password@host/db for workers on several hosts. Re-running resumes.",
    )
    study_name: Annotated[str | None, CliInput()] = Field(
        default=None, description="Study name in --storage (resume/share)."
    )
    heartbeat_s: Annotated[int | None, CliInput(param="heartbeat")] = Field(
        default=None,
        description="Seconds between heartbeats of a database-server worker; a trial silent for 3x this is "
        "marked FAILED [default: 10].",
    )
    local_search: float = Field(default=LOCAL_SEARCH_SHARE, description="share of one-knob moves (0-1)")
    constraints: tuple[Constraint, ...] = Field(default=(), description="--fix/--forbid knob constraints")

    def check(self) -> None:
        """One-line errors for values no search can run with."""
        import math

        if self.sampler not in SAMPLERS:
            raise AutoparError(f"sampler={self.sampler!r}: allowed values are {', '.join(SAMPLERS)}")
        if not 0.0 <= self.local_search <= 1.0:
            raise AutoparError(f"local_search={self.local_search}: must be in [0, 1]")
        if self.budget < 1:
            raise AutoparError(f"budget={self.budget}: must be at least 1")
        if self.timeout is not None and self.timeout <= 0:
            raise AutoparError(f"timeout={self.timeout}: must be positive (seconds)")
        if self.max_cost is not None and not 0 < self.max_cost < math.inf:  # also rejects NaN
            raise AutoparError(f"max-cost={self.max_cost}: must be positive ($/Mtoken)")

    def stored(self) -> dict[str, Any]:
        """What a stored study keeps of the settings, to be rebuilt (`autopar study report`): the whole tree
        node under "settings" (without where it is stored and the --fix/--forbid filters, which the space's
        fingerprint holds) and, as studies written before the tree have them, its fields the report reads."""
        node = self.model_dump(mode="json", exclude={"storage", "study_name", "heartbeat_s", "constraints"})
        keep = ("precisions", "min_headroom_gib", "max_cost", "tier")
        return {**{k: node[k] for k in keep}, "settings": node}


def settings_with(settings: SearchSettings | None, fields: dict[str, Any]) -> SearchSettings:
    """`settings` (default: SearchSettings()) with `fields` on top, validated."""
    base = settings if settings is not None else SearchSettings()
    return SearchSettings.model_validate({**dict(base), **fields}) if fields else base


@dataclass(frozen=True)
class BuiltProblem:
    """A Problem resolved against the catalogs: the specs the model computes with."""

    model: ModelSpec
    clusters: list[ClusterSpec]
    workload: Workload
    settings: SearchSettings
    skipped: list[str]  # GPU counts dropped because they are not host multiples, one note each


class Problem(_Config):
    """One training problem and how to search it: the root of the config tree."""

    model: Annotated[str, CliInput(default=UNSET)] = Field(
        default=DEFAULT_MODEL,
        description=f"Model name/alias or path to a Hugging Face config.json [default: {DEFAULT_MODEL}].",
    )
    cluster: ClusterConfig = ClusterConfig()
    workload: WorkloadConfig = WorkloadConfig()
    search: SearchSettings = SearchSettings()

    def build_one(self, detect: Detector | None = None) -> tuple[ModelSpec, ClusterSpec, Workload]:
        """The specs of a single estimate: the model, one cluster, the workload in one precision."""
        from autopar.catalog import get_model

        m = get_model(self.model)
        cluster = self.cluster.build_one(detect)
        if len(self.workload.precisions()) > 1:
            raise SpecError(
                f"precision={self.workload.precision!r}: expected one precision (bf16 or fp8) here"
            )
        return m, cluster, self.workload.build(m)

    def build(self, detect: Detector | None = None) -> BuiltProblem:
        """The specs: model, clusters (GPU types x counts), workload; the search's precisions filled in."""
        from autopar.catalog import get_model

        m = get_model(self.model)
        clusters, skipped = self.cluster.build(detect)
        wl = self.workload.build(m)
        settings = self.search
        if settings.precisions is None:
            settings = settings.model_copy(update={"precisions": self.workload.precisions()})
        return BuiltProblem(m, clusters, wl, settings, skipped)
