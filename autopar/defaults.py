"""Defaults shared by the CLI and the Python API (one source of truth for each).

The default problem is the README's: Llama-3.1-70B on 64 H100-SXM, sequence 8192, global batch 512.
"""

from __future__ import annotations

DEFAULT_MODEL = "Llama-3.1-70B"
DEFAULT_GPU = "H100-SXM"
DEFAULT_GPUS = 64
DEFAULT_SEQ_LEN = 8192
DEFAULT_GLOBAL_BATCH = 512
# Distinct strategies per search. 600 rather than 300 since the space gained schedules, CP variants, HSDP and
# uneven splits (default problem 38k -> 93k points): over seeds 0-6 the fastest point found at 300 was up to
# 17% below the exhaustive best (2 of 7 seeds >15%), at 600 within 4.3% for every seed, at ~0.8 s of search.
DEFAULT_BUDGET = 600
# How a search runs (autopar/search/hybrid.py): an exact sweep on arrays up to a million points, else NSGA-II
# over layouts (hardware, tp/pp/cp/ep) with every other knob solved exactly; with --storage, NSGA-II.
# Replaces plain NSGA-II as the default: at budget 600 its fastest point was 1.7-4.2% below the exhaustive
# best on the benchmark problems (hypervolume ratio 0.88-0.96 at budget 300).
DEFAULT_SAMPLER = "auto"
DEFAULT_WHATIF_BUDGET = 300  # per hardware option of a what-if (each option is a search of its own)
DEFAULT_SEED = 0
DEFAULT_OBJECTIVES = ("throughput", "headroom", "cost")
# Free memory a strategy must leave per GPU to count as fitting: a margin for the memory model's
# ~13% median error on the published runs that report memory (README, accuracy table: 12.9%).
DEFAULT_MIN_HEADROOM_GIB = 2.0
# How an HTML report loads plotly.js (autopar/reports/plotlyjs.py): inlined partial bundle, or the CDN.
PLOTLY_MODES = ("inline", "cdn")
