"""One strategy evaluated on one problem: analytical estimate, the calibration's correction and 80% bands, the
memory verdict and $/Mtoken (`autopar estimate`, `compare`, `fix` and `autopar tune`'s candidates)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autopar.calibration.evaluation.verdict import memory_verdict
from autopar.costs.bands import inverse_band, with_band
from autopar.units import GiB, usd_per_mtoken


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
            "estimate": self._summary(),
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
                **self._cost_band(),
            },
        }

    def _summary(self) -> dict[str, Any]:
        """The estimate's figures; calibrated, the step time's 80% band beside it (its low end from the
        throughput band's high end: costs/bands.py)."""
        band = inverse_band(self.est, self.est.step_time_s)
        return with_band(self.est.summary(), "step_s", band) if band else self.est.summary()

    def _cost_band(self) -> dict[str, float]:
        """usd_per_mtoken_low/_high when calibrated (nothing uncalibrated)."""
        band = inverse_band(self.est, self.usd_per_mtoken)
        return {} if band is None else {"usd_per_mtoken_low": band[0], "usd_per_mtoken_high": band[1]}

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
        est = widen_for_novelty(
            est, model, cluster, workload, s, calib
        )  # widens away from the data (issue 21)
        _, mlo, mhi = calib.memory_factor(model, cluster, workload, s, analytical)
        mem_band = (analytical.memory.total * mlo / GiB, analytical.memory.total * mhi / GiB)
    verdict = memory_verdict(
        est.memory.total / GiB,
        mem_band[0] if mem_band else None,
        est.capacity_bytes / GiB,
        mem_band[1] if mem_band else None,
    )
    price = price or on_demand_price(cluster)
    return Evaluation(model, cluster, workload, s, analytical, est, calib, verdict, mem_band, price)
