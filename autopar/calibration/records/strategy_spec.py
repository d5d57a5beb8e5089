"""The layout a run record describes: TP/PP (split from the model-parallel size when only that is known),
SP and recompute, activation offload, HSDP, Megatron's pipeline-split accounting and the schedule.

Empty cells stay unset where `estimate` completes them (vpp, micro_batch, recompute, etp, pp_schedule,
zero: perf/complete.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autopar.calibration.records.cells import bool_cell, cell, int_cell, positive_cell
from autopar.calibration.records.stack_columns import StackKnobs
from autopar.errors import DataError
from autopar.knobs import (
    RECOMPUTE_MODES,
    RECOMPUTE_MODULE_SETS,
)
from autopar.layouts import ACT_OFFLOAD_FRAMEWORKS, default_cp_comm
from autopar.perf.remat import FULL_REMAT_NAMES, REMAT_PREFIX
from autopar.specs import ClusterSpec, ModelSpec, Strategy, Workload


# Activation CPU offload a record states: optional column `cpu_offloading_num_layers` (Megatron-Core's
# TransformerConfig field).
def _act_offload(
    row: Mapping[str, Any], framework: str, pp: int, rec: str | None, assumed: list[str]
) -> tuple[int | None, tuple[str, ...]]:
    """(Strategy.activation_offload_layers, Workload.memory_savers) of a record: the stated count; else
    unset (completed, "act_offload" allowed) where the stack has it and the record does not rule it out
    (PP or recompute: layouts.offload_rules); else off."""
    n = int_cell(row, "cpu_offloading_num_layers")
    if n is not None:
        if n < 0:
            raise DataError(f"column 'cpu_offloading_num_layers' = {n} must be >= 0")
        return n, ()
    if framework in ACT_OFFLOAD_FRAMEWORKS and pp == 1 and rec in (None, "none"):
        return None, ("act_offload",)
    return 0, ()


def _tp_pp(
    row: Mapping[str, Any], cluster: ClusterSpec, cp: int, dp: int | None, assumed: list[str]
) -> tuple[int, int]:
    """TP and PP: the cells, else split from the model-parallel size num_gpus/(dp*cp) (TP within a node
    first), else 1."""
    tp, pp, n = positive_cell(row, "tp"), positive_cell(row, "pp"), cluster.num_gpus
    if tp is None and pp is None and dp is not None and n % (dp * cp) == 0:
        mp = n // (dp * cp)
        tp = min(mp, cluster.node_size)
        while mp % tp:
            tp //= 2
        pp = mp // tp
        assumed.append(f"tp={tp}, pp={pp} (only the model-parallel size {mp} is known)")
    if tp is None:
        assumed.append("tp=1")
    if pp is None:
        assumed.append("pp=1")
    return tp or 1, pp or 1


def _sp_recompute(
    row: Mapping[str, Any], tp: int, knobs: StackKnobs, assumed: list[str]
) -> tuple[bool, str | None]:
    """Sequence parallelism (the cell, else on with TP > 1) and the recompute mode: the `recompute` cell, else
    the `remat_policy` cell (MaxText's, perf/remat.py)."""
    sp = bool_cell(row, "sp")
    if sp is None:
        sp = tp > 1
        if tp > 1:
            assumed.append("sp=true (Megatron-Core/NeMo default with tp>1)")
    raw = row.get("recompute")
    # 'none' is a recompute mode (no recomputation), not a blank cell: a record that states it is not completed
    rec = "none" if isinstance(raw, str) and raw.strip().lower() == "none" else cell(row, "recompute")
    if rec is not None:
        rec = str(rec).lower()
        if rec not in RECOMPUTE_MODES:
            raise DataError(f"column 'recompute' = {rec!r}: expected one of {', '.join(RECOMPUTE_MODES)}")
    if rec is None and knobs.remat_policy is not None:  # MaxText: the policy is the recompute mode
        rec = "full" if knobs.remat_policy in FULL_REMAT_NAMES else REMAT_PREFIX + knobs.remat_policy
    if rec is None and (knobs.recompute_method is not None or knobs.recompute_num_layers is not None):
        rec = "full"  # a spread is of full recompute (stack_columns: the method needs full or empty)
    return sp, rec


def strategy_from_row(
    row: Mapping[str, Any],
    model: ModelSpec,
    cluster: ClusterSpec,
    workload: Workload,
    knobs: StackKnobs,
    assumed: list[str],
) -> tuple[Strategy, Workload]:
    """The run's layout (and the workload with the activation-offload memory savers it implies)."""
    cp = positive_cell(row, "cp") or 1
    dp = positive_cell(row, "dp")
    tp, pp = _tp_pp(row, cluster, cp, dp, assumed)
    vpp = positive_cell(row, "vpp")  # empty cells stay None: estimate completes them (perf/complete.py)
    sp, rec = _sp_recompute(row, tp, knobs, assumed)
    mb, gbs, n = positive_cell(row, "micro_batch"), workload.global_batch, cluster.num_gpus
    dp_derived = n // (tp * pp * cp) if n % (tp * pp * cp) == 0 else 0
    if dp is not None and dp_derived and dp != dp_derived:
        assumed.append(f"dp={dp_derived} = num_gpus/(tp*pp*cp) (column dp={dp} ignored)")
    if dp_derived and mb and gbs % (mb * dp_derived):
        raise DataError(f"global_batch={gbs} is not divisible by micro_batch*dp = {mb}*{dp_derived}")
    offload_layers, savers = _act_offload(row, workload.framework, pp, rec, assumed)
    if rec in RECOMPUTE_MODULE_SETS and rec != "selective":  # the preset's modules: its user lets the search
        savers = (*savers, "recompute_modules")  # choose among them too (layouts.recompute_values)
    if savers:
        workload = workload.model_copy(update={"memory_savers": savers})
    strategy = Strategy(
        optimizer_offload=1.0 if knobs.cpu_offload == "optimizer" else 0.0,
        activation_offload_layers=offload_layers,
        tp=tp,
        pp=pp,
        cp=cp,
        cp_comm=default_cp_comm(workload.framework, model),  # records state no variant: the stack's default
        ep=positive_cell(row, "ep") or 1,
        etp=positive_cell(row, "etp"),
        vpp=vpp,
        sp=sp,
        zero=int_cell(row, "zero"),
        micro_batch=mb,
        recompute=rec,
        pp_schedule=_schedule(vpp, pp, knobs.pp_schedule),
        dp=dp_derived,
        dp_shard=_hsdp_shard(row, dp_derived),
        **_account_options(model.layers, pp, vpp, assumed, workload.framework),
    )
    return strategy, workload


def _hsdp_shard(row: Mapping[str, Any], dp: int) -> int | None:
    """Strategy.dp_shard from the record's `dp_shard` column: HSDP (FSDP2 sharding over dp_shard ranks,
    replicated over dp / dp_shard; torchtitan data_parallel_shard_degree / its mesh's dp_shard), None when the
    states are sharded over all of dp. A shard group that does not divide dp, or HSDP without ZeRO-3, is an
    error naming the columns."""
    shard = positive_cell(row, "dp_shard")
    if shard is None or not dp or shard == dp:
        return None
    if dp % shard:
        raise DataError(f"columns 'dp_shard' = {shard} and dp = {dp}: the shard group must divide dp")
    zero = int_cell(row, "zero")
    if zero is not None and zero != 3:
        raise DataError(
            f"columns 'dp_shard' = {shard} and 'zero' = {zero}: HSDP shards with ZeRO-3 / FSDP only"
        )
    return shard


def _account_options(
    layers: int, pp: int, vpp: int | None, assumed: list[str], framework: str = "megatron"
) -> dict[str, bool]:
    """Megatron's --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split, implied
    when the layers alone do not split over the pp·vpp virtual stages but layers + 1 (embedding) or + 2
    (embedding and loss) do: Megatron-Core rejects any other uneven split without explicit first/last-stage
    layer counts (megatron/core/transformer/transformer_config.py), and Megatron-Bridge's Llama-3.1-405B
    recipe sets both (recipes/llama/llama3.py `llama31_405b_pretrain_config`): 126 + 2 = 128 layers over
    PP16·VP8 (1 per virtual stage) or PP16·VP4 (2 per virtual stage). Other stacks split their own way."""
    n = pp * (vpp or 1)
    if pp <= 1 or framework not in ("megatron", "megatron-legacy") or layers % n == 0:
        return {}
    extra = next((x for x in (1, 2) if (layers + x) % n == 0), 0)
    if not extra:
        return {}
    opts = {"pp_account_embedding": True, "pp_account_loss": extra == 2}
    named = " and ".join(k for k, v in opts.items() if v)
    assumed.append(f"{named} (layers {layers} + {extra} = {layers + extra} divisible by pp*vpp = {n})")
    return opts


def _schedule(vpp: int | None, pp: int, stated: str | None) -> str | None:
    """The pipeline schedule a record states (its `pp_schedule` column, e.g. the Zero Bubble paper's zb-2p in
    bench/data/memory_runs.csv), else interleaved for vpp > 1; None = unset (completed)."""
    if pp > 1 and stated is not None:
        return stated
    if vpp is not None and vpp > 1:
        return "interleaved"
    return "1f1b" if pp == 1 or vpp == 1 else None
