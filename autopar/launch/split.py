"""How the transformer layers are split over pipeline stages, in each framework's own terms.

autopar's estimate puts layers/(pp*vpp) layers on every virtual stage when that divides, else an
as-even-as-possible split. The frameworks need that split spelled out:

- Megatron-LM (megatron/training/arguments.py `validate_args` and TransformerConfig.__post_init__,
  core_v0.19.0): an even split needs layers % pp == 0 and (layers/pp) % vpp == 0; otherwise
  `--account-for-embedding-in-pipeline-split`/`--account-for-loss-in-pipeline-split` count the
  embedding and the loss as one layer each, or `--decoder-first/last-pipeline-num-layers` fix the
  outer stages (each a multiple of vpp) and the middle stages share the rest evenly (each a
  multiple of vpp). When none of those is balanced, `--pipeline-model-parallel-layout` lists every
  virtual stage ('E' embedding, 't' one layer, 'L' loss, stages split by '|', in virtual-stage order;
  megatron/core/transformer/pipeline_parallel_layer_layout.py).
- torchtitan (torchtitan/distributed/pipeline_parallel.py, v0.2.2): without explicit module lists,
  the stage count is ceil((layers + first_less + last_less) / layers_per_stage), where the
  `pipeline_parallel_first/last_stage_less_layers` weights default to 1 — so an interleaved config
  that only sets layers_per_stage = layers/(pp*vpp) gets more stages than pp*vpp and fails. autopar
  sets both weights to 0, or lists the modules of every stage (`module_fqns_per_model_part`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from autopar.perf.pipeline import stage_layers
from autopar.specs import Strategy


@dataclass(frozen=True)
class MegatronSplit:
    """Megatron-LM pipeline-split arguments and the resulting layers per pipeline rank."""

    args: tuple[str, ...]
    layers_per_rank: tuple[int, ...]
    how: str  # "even", "account", "first-last", "layout", "none"


def megatron_layout(layers: int, pp: int, vpp: int) -> str:
    """--pipeline-model-parallel-layout for the as-even-as-possible split over pp*vpp virtual stages."""
    stages = even_layers(layers, pp * vpp)
    parts = ["t" * n for n in stages]
    parts[0], parts[-1] = "E" + parts[0], parts[-1] + "L"
    return "|".join(parts)


def megatron_split(layers: int, pp: int, vpp: int) -> MegatronSplit | None:
    """The Megatron arguments that realise a balanced split (None when pp*vpp exceeds the layers)."""
    if pp * vpp > layers:
        return None
    split = _named_split(layers, pp, vpp)
    limit = vpp * -(-layers // (pp * vpp))  # no rank above the even split's largest
    if split is not None and max(split.layers_per_rank) <= limit:
        return split
    ranks = [sum(even_layers(layers, pp * vpp)[r::pp]) for r in range(pp)]
    layout = megatron_layout(layers, pp, vpp)  # quoted: '|' is a shell pipe
    return MegatronSplit((f"--pipeline-model-parallel-layout '{layout}'",), tuple(ranks), "layout")


def _named_split(layers: int, pp: int, vpp: int) -> MegatronSplit | None:
    """Even, account-for-embedding/loss or first/last-stage split, or None."""
    if pp == 1:
        return MegatronSplit((), (layers,), "none")
    if layers % pp == 0 and (layers // pp) % vpp == 0:
        args = (f"--num-layers-per-virtual-pipeline-stage {layers // (pp * vpp)}",) if vpp > 1 else ()
        return MegatronSplit(args, (layers // pp,) * pp, "even")
    vargs = (f"--num-virtual-stages-per-pipeline-rank {vpp}",) if vpp > 1 else ()
    for emb, loss in ((True, True), (True, False), (False, True)):
        total = layers + emb + loss
        if total % pp == 0 and (total // pp) % vpp == 0 and total // pp > 1:
            per = total // pp
            flags = (["--account-for-embedding-in-pipeline-split"] if emb else []) + (
                ["--account-for-loss-in-pipeline-split"] if loss else []
            )
            ranks = (per - emb,) + (per,) * (pp - 2) + (per - loss,)
            return MegatronSplit(tuple(flags) + vargs, ranks, "account")
    best = _first_last(layers, pp, vpp)
    if best is None:
        return None
    first, mid, last = best
    args = (f"--decoder-first-pipeline-num-layers {first}", f"--decoder-last-pipeline-num-layers {last}")
    return MegatronSplit(args + vargs, (first,) + (mid,) * (pp - 2) + (last,), "first-last")


def _first_last(layers: int, pp: int, vpp: int) -> tuple[int, int, int] | None:
    """(first, middle, last) layers per rank, each a positive multiple of vpp, most even first."""
    candidates: list[tuple[int, int, int, int, int]] = []
    mids = range(vpp, layers + 1, vpp) if pp > 2 else [0]
    for mid in mids:
        rest = layers - mid * (pp - 2)
        for first in range(vpp, rest - vpp + 1, vpp):
            last = rest - first
            if last % vpp == 0:
                candidates.append((max(first, mid, last), abs(first - last), first, mid, last))
    return min(candidates)[2:] if candidates else None


def even_layers(layers: int, stages: int) -> list[int]:
    """Layers per stage, as even as possible, the extra layers on the earliest stages."""
    base, extra = divmod(layers, stages)
    return [base + (i < extra) for i in range(stages)]


def torchtitan_split(
    layers: int, pp: int, vpp: int, counts: Sequence[int] | None = None
) -> dict[str, object]:
    """[parallelism] keys that make torchtitan build exactly pp*vpp stages with autopar's split: `counts` (the
    layers per stage of an uneven split, e.g. the label's first/last stages) or the most even one.

    torchtitan v0.2.2 pipeline_parallel.py takes an explicit split only as module_fqns_per_model_part (its
    *_stage_less_layers weigh the embedding and the output, not a layer count)."""
    if pp == 1:
        return {}
    stages = pp * vpp
    if counts is not None and (len(counts) != stages or sum(counts) != layers):
        raise ValueError(f"split {tuple(counts)} is not {stages} stages of {layers} layers")
    keys: dict[str, object] = {
        "pipeline_parallel_first_stage_less_layers": 0,
        "pipeline_parallel_last_stage_less_layers": 0,
    }
    if counts is None and layers % stages == 0:
        keys["pipeline_parallel_layers_per_stage"] = layers // stages
        return keys
    parts: list[list[str]] = []
    start = 0
    for i, n in enumerate(counts if counts is not None else even_layers(layers, stages)):
        mods = [f"layers.{j}" for j in range(start, start + n)]
        start += n
        if i == 0:
            mods = ["tok_embeddings", *mods]
        if i == stages - 1:
            mods = [*mods, "norm", "output"]
        parts.append(mods)
    return {"module_fqns_per_model_part": parts}


def torchtitan_stage_count(layers: int, pp: int, single_stage: bool, par: dict[str, object]) -> int:
    """Stages torchtitan v0.2.2 builds from [parallelism] (restated from pipeline_parallel.py)."""
    fqns = par.get("module_fqns_per_model_part")
    if fqns is not None:
        return len(fqns)  # type: ignore[arg-type]  # [parallelism] values: the TOML table the writer built, typed object
    lps = par.get("pipeline_parallel_layers_per_stage")
    first = int(par.get("pipeline_parallel_first_stage_less_layers", 1))  # type: ignore[call-overload]  # as above
    last = int(par.get("pipeline_parallel_last_stage_less_layers", 1))  # type: ignore[call-overload]  # as above
    if lps is None:
        return pp * (1 if single_stage else 2)
    return -(-(layers + first + last) // int(lps))  # type: ignore[call-overload]  # as above


def strategy_split(layers: int, s: Strategy) -> MegatronSplit | None:
    """The strategy's own uneven split when it sets one (Megatron's first/last-stage and account-for options,
    the search's balanced splits), else the balanced split megatron_split finds."""
    first, last = s.pp_first_layers, s.pp_last_layers
    if s.pp == 1 or (first is None and last is None and not (s.pp_account_embedding or s.pp_account_loss)):
        return megatron_split(layers, s.pp, s.vpp or 1)
    lay = stage_layers(
        layers,
        s.pp,
        first=first,
        last=last,
        account_embedding=s.pp_account_embedding,
        account_loss=s.pp_account_loss,
    )
    flags = [f"--decoder-first-pipeline-num-layers {first}"] * (first is not None)
    flags += [f"--decoder-last-pipeline-num-layers {last}"] * (last is not None)
    flags += ["--account-for-embedding-in-pipeline-split"] * s.pp_account_embedding
    flags += ["--account-for-loss-in-pipeline-split"] * s.pp_account_loss
    flags += [f"--num-virtual-stages-per-pipeline-rank {s.vpp}"] * bool(s.vpp and s.vpp > 1)
    ranks = (lay.first,) + (lay.middle,) * (s.pp - 2) + (lay.last,)
    return MegatronSplit(
        tuple(flags), ranks, "first-last" if first is not None or last is not None else "account"
    )
