"""RECIPE STYLE: whether a layout is one a published recipe would use, and the what-if's preference for one.

Published tuned recipes (autopar/data/recipes.csv: Megatron-Bridge presets, the NeMo / Megatron-Bridge
performance summaries, NeMo AutoModel and torchtitan benchmarks; calibration/planning/recipes.py) share one style:

- pipeline stages hold equal whole layers: PP divides the layer count, or, on a model no power of two
  divides (Llama 3.1 405B's 126 layers), a power-of-two PP divides the layers with the embedding and the
  loss counted as layers (Megatron's account-for-embedding/loss options: 128 units on PP8 or PP16); never
  explicit first/last stage sizes, and never an odd depth such as PP27 with the loss counted as a layer;
- PP at most RECIPE_MAX_PP (every recipe's PP is a power of two; the dense presets stop at 16, and only one
  MoE benchmark on H800 goes to 32);
- TP inside one NVLink domain (8 on an HGX host; GB200 NVL72 recipes use TP8 across trays of 4).

Within the search's near-tie tolerance (search/recommend.py NEAR_TIE_FRACTION: no measurement ranks points
that close) the what-if and the sizing prefer such a layout over a marginally faster unusual one; an answer
that is still unusual is flagged "verify", with the reason, so it is measured before it is bought.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from autopar.search.recommend import NEAR_TIE_FRACTION

RECIPE_MAX_PP = 16
VERIFY_HINT = "measure it (autopar tune)"


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _split_gap(layers: int, s: Any) -> str:
    """Why the pipeline split is not divisor-style ('' when it is)."""
    pp = s.pp or 1
    if pp <= 1:
        return ""
    if s.pp_first_layers is not None or s.pp_last_layers is not None:
        return f"PP{pp} with first/last stage sizes: published recipes split the layers evenly"
    accounted = int(bool(s.pp_account_embedding)) + int(bool(s.pp_account_loss))
    if accounted == 0:
        return "" if layers % pp == 0 else f"PP{pp} does not divide the {layers} layers"
    if _power_of_two(pp) and (layers + accounted) % pp == 0 and layers % pp:
        return ""  # Megatron-Bridge's 405B style: 126 layers + embedding + loss on PP8/PP16
    what = " and ".join(
        w for w, on in (("embedding", s.pp_account_embedding), ("loss", s.pp_account_loss)) if on
    )
    return f"PP{pp} with the {what} counted as a layer: not a divisor-style split published recipes use"


def recipe_style_gaps(model: Any, cluster: Any, strategy: Any) -> tuple[str, ...]:
    """Why `strategy` on `cluster` is not a layout a published recipe would use (module doc); () when it is."""
    s = strategy
    gaps = []
    tp, pp, domain = s.tp or 1, s.pp or 1, int(cluster.node_size)
    if tp > domain:
        gaps.append(f"TP{tp} spans NVLink domains of {domain} GPUs: published recipes keep TP inside one")
    if pp > RECIPE_MAX_PP:
        gaps.append(f"PP{pp}: deeper than published recipes go (PP ≤ {RECIPE_MAX_PP})")
    split = _split_gap(model.layers, s)
    if split:
        gaps.append(split)
    return tuple(gaps)


def verify_text(gaps: Sequence[str]) -> str:
    """'verify: PP27 with the loss counted as a layer: ...; measure it (autopar tune)' ('' for no gaps)."""
    return f"verify: {'; '.join(gaps)}; {VERIFY_HINT}" if gaps else ""


def prefer_recipe_style(
    fastest: Any,
    candidates: Sequence[Any],
    speed: Callable[[Any], float],
    gaps: Callable[[Any], tuple[str, ...]],
    min_speed: float | None = None,
) -> Any:
    """Among `candidates` within NEAR_TIE_FRACTION of `fastest`'s speed, a recipe-style one (the fastest of
    them, `candidates` order on equal speed); `fastest` itself when it is recipe-style or none is. With
    `min_speed` (a deadline's throughput) met by `fastest`, only candidates meeting it are preferred."""
    if not gaps(fastest):
        return fastest
    top = speed(fastest)
    floor = (1 - NEAR_TIE_FRACTION) * top
    if min_speed is not None and top >= min_speed:
        floor = max(floor, min_speed)
    near = [c for c in candidates if speed(c) >= floor and c is not fastest]
    usual = [c for c in near if not gaps(c)]
    return max(usual, key=speed) if usual else fastest
