"""One strategy evaluated on one problem, shared by `autopar estimate` and `autopar compare`: the problem
(model, cluster, workload) from the command's options, the strategy from a label, and the estimate's
`--json` document."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from autopar.calibration.verdict import memory_verdict
from autopar.cli.cluster_opts import resolve_cluster
from autopar.cli.common import check_framework
from autopar.cli.workload_opts import workload_extras
from autopar.defaults import DEFAULT_GPU, DEFAULT_GPUS, tp_comm_overlap_default
from autopar.units import GiB, usd_per_mtoken

# The problem options of `estimate` and `compare` (with cluster_opts and workload_opts).
ModelOpt = Annotated[str, typer.Option(help="Catalog model name or path to a Hugging Face config.json")]
GpuOpt = Annotated[str | None, typer.Option(help=f"GPU type (see `autopar gpus`) \\[default: {DEFAULT_GPU}]")]
GpusOpt = Annotated[int | None, typer.Option(help=f"Number of GPUs \\[default: {DEFAULT_GPUS}]")]
GpusPerNodeOpt = Annotated[
    int | None, typer.Option(help="GPUs per host (server or tray) (default: the GPU's)")
]
InternodeOpt = Annotated[float | None, typer.Option(help="Inter-node GB/s per GPU per direction")]
SeqLenOpt = Annotated[int, typer.Option(help="Sequence length (tokens)")]
GlobalBatchOpt = Annotated[int, typer.Option(help="Global batch (sequences per step)")]
PrecisionOpt = Annotated[str, typer.Option(help="bf16 or fp8")]
AllowUnevenOpt = Annotated[bool, typer.Option(help="Accept layers not divisible by pp*vpp")]


def problem(flags: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    """(model, cluster, workload) from a command's problem options, read by name from `flags` (its locals())."""
    from autopar.catalog import get_gpu, get_model
    from autopar.specs import ClusterSpec, Workload

    m = get_model(flags["model"])
    choice = resolve_cluster(
        flags["cluster_name"],
        gpu=flags["gpu"],
        gpus=flags["gpus"],
        gpus_per_node=flags["gpus_per_node"],
        nvlink_domain=flags["nvlink_domain"],
        default_gpu=DEFAULT_GPU,
        default_gpus=DEFAULT_GPUS,
    )
    internode = flags["internode_gbps"] if flags["internode_gbps"] is not None else choice.internode_gbps
    cluster = ClusterSpec(
        gpu=get_gpu(choice.gpu),
        num_gpus=int(choice.gpus),
        gpus_per_node=choice.gpus_per_node,
        nvlink_domain=choice.nvlink_domain,
        internode_bw=internode * 1e9 if internode else None,
    )
    framework = check_framework(flags["framework"])
    workload = Workload(
        seq_len=flags["seq_len"],
        global_batch=flags["global_batch"],
        precision=flags["precision"],
        framework=framework,
        tp_comm_overlap=tp_comm_overlap_default(framework, flags["tp_comm_overlap"]),
        **workload_extras(m, [flags["precision"]], flags),
    )
    return m, cluster, workload


def label_strategy(label: str, moe: bool) -> Any:
    """The Strategy a `Strategy.label()` string names (autopar.launch.labels.parse_strategy_label). The label
    omits ETP when it equals TP, so an MoE label without an ETP token means etp = tp (a search point never
    leaves etp unset; unset would let the estimate pick another)."""
    from autopar.launch.labels import parse_strategy_label
    from autopar.layouts import Axis

    s = parse_strategy_label(label)
    return s.model_copy(update={Axis.ETP.value: s.tp}) if moe and s.etp is None else s


@dataclass(frozen=True)
class Evaluation:
    """One strategy's estimate: analytical and (when calibrated) corrected, with the memory verdict."""

    model: Any
    cluster: Any
    workload: Any
    strategy: Any  # unset knobs as the estimate completed them, dp filled
    analytical: Any
    est: Any  # = analytical without calibration
    calib: Any
    verdict: str
    mem_band: tuple[float, float] | None  # GiB, calibrated only
    price: tuple[float, str]  # USD per GPU-hour and its source

    @property
    def usd_per_mtoken(self) -> float:
        """USD per million trained tokens at `price` (autopar.units.usd_per_mtoken, as optimize's cost)."""
        return usd_per_mtoken(self.est.tokens_per_s, self.cluster.num_gpus, self.price[0])

    def doc(self) -> dict[str, Any]:
        """The `estimate --json` document (also one entry of `compare --json`)."""
        est, cluster, wl = self.est, self.cluster, self.workload
        return {
            "inputs": {
                "model": self.model.name,
                "gpu": cluster.gpu.name,
                "num_gpus": cluster.num_gpus,
                "gpus_per_node": cluster.host_size,
                "nvlink_domain": cluster.node_size,
                "seq_len": wl.seq_len,
                "global_batch": wl.global_batch,
                "precision": wl.precision,
                "framework": wl.framework,
            },
            "strategy": self.strategy.model_dump(),
            "label": self.strategy.label(),
            "estimate": est.summary(),
            "memory_gib": {k: v / GiB for k, v in est.memory.as_dict().items()},
            "time_s": est.time.as_dict(),
            "flops": {
                "model_flops_per_step": est.model_flops_per_step,
                "model_flops_per_step_full_attn": est.model_flops_per_step_full_attn,
                "hw_flops_per_step": est.hw_flops_per_step,
                "peak_flops_per_gpu": est.peak_flops,
            },
            "memory_verdict": self.verdict,
            "notes": list(est.notes),
            "assumed": list(est.assumed),
            "calibration": self._calibration_doc(),
            "cost": {
                "usd_per_gpu_hour": self.price[0],
                "price_source": self.price[1],
                "usd_per_mtoken": self.usd_per_mtoken,
            },
        }

    def _calibration_doc(self) -> dict[str, Any] | None:
        if self.calib is None:
            return None
        est, analytical = self.est, self.analytical
        return {
            **self.calib.info(),  # name, n_runs, sources
            "description": self.calib.describe(),
            "factor": est.calibration_factor,
            "analytical_tokens_per_s": analytical.tokens_per_s,
            "tokens_per_s_band": list(est.tokens_per_s_band or ()),
            "memory_factor": est.memory.total / analytical.memory.total,
            "analytical_mem_gib": analytical.memory.total / GiB,
            "mem_gib_band": list(self.mem_band or ()),
        }


def on_demand_price(cluster: Any, prices: Path | None = None) -> tuple[float, str]:
    """USD per GPU-hour on demand and its source, from the price book at `prices` or the built-in one (the
    price `optimize` uses for $/Mtoken by default)."""
    from autopar.costs import load_price_book
    from autopar.search.evaluate import resolve_price

    return resolve_price(cluster, load_price_book(prices) if prices is not None else None, "on_demand")


def evaluate(
    model: Any,
    cluster: Any,
    workload: Any,
    strategy: Any,
    calib: Any,
    strict: bool,
    price: tuple[float, str] | None = None,
) -> Evaluation:
    """Estimate one strategy (dp filled from the cluster), corrected by `calib` when given; $/Mtoken at
    `price` (default: on demand)."""
    from autopar.perf import estimate
    from autopar.search.evidence import widen_for_novelty

    s = strategy.with_dp(cluster.num_gpus)
    analytical = estimate(model, cluster, workload, s, strict=strict)
    s = analytical.strategy or s  # unset knobs as the estimate completed them
    est, mem_band = analytical, None
    if calib is not None:
        est = calib.apply(model, cluster, workload, s, analytical)
        est = widen_for_novelty(est, model, cluster, workload, s)  # band widens away from the data (issue 21)
        _, mlo, mhi = calib.memory_factor(model, cluster, workload, s, analytical)
        mem_band = (analytical.memory.total * mlo / GiB, analytical.memory.total * mhi / GiB)
    verdict = memory_verdict(
        est.memory.total / GiB, mem_band[0] if mem_band else None, est.capacity_bytes / GiB
    )
    price = price or on_demand_price(cluster)
    return Evaluation(model, cluster, workload, s, analytical, est, calib, verdict, mem_band, price)
