"""Defaults shared by the CLI and the Python API (one source of truth for each).

The default problem is the README's: Llama-3.1-70B on 64 H100-SXM, sequence 8192, global batch 512.
"""

from __future__ import annotations

DEFAULT_MODEL = "Llama-3.1-70B"
DEFAULT_GPU = "H100-SXM"
DEFAULT_GPUS = 64
DEFAULT_SEQ_LEN = 8192
DEFAULT_GLOBAL_BATCH = 512
DEFAULT_BUDGET = 300  # distinct strategies per search
DEFAULT_SEED = 0
DEFAULT_OBJECTIVES = ("throughput", "headroom", "cost")
# Free memory a strategy must leave per GPU to count as fitting: a margin for the memory model's
# ~13% median error on the published runs that report memory (README, accuracy table: 12.9%).
DEFAULT_MIN_HEADROOM_GIB = 2.0
