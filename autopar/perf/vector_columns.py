"""A block of strategies as columns (one numpy array per knob), for the vectorized estimator (perf/vector.py).

Why: the search evaluates whole spaces; building one pydantic Strategy per point costs more than the model
arithmetic. A `StrategyColumns` holds the same knobs as arrays. Categorical knobs are small integer codes
(indices into RECOMPUTE_CODES etc.); optional knobs use a sentinel for None ("unset"): 0 for etp, vpp,
micro_batch, dp_shard; -1 for zero, recompute, pp_schedule, pp_first/last_layers, optimizer_states,
activation_offload_layers. `columns_of` converts Strategy objects; `strategy_at` converts one row back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np

from autopar import knobs
from autopar.layouts import Axis
from autopar.specs import Strategy

# The codes are the registry's domains in their declared order (autopar/knobs.py).
RECOMPUTE_CODES: tuple[str, ...] = knobs.RECOMPUTE_MODES
SCHEDULE_CODES: tuple[str, ...] = knobs.SCHEDULE_NAMES
CP_COMM_CODES: tuple[str, ...] = knobs.CP_COMM_NAMES
STATES_CODES: tuple[str, ...] = knobs.OPTIMIZER_STATES

# Knob name -> (sentinel for None or None when the knob is never None, codes for categorical knobs).
_INT_KNOBS: dict[str, int | None] = {
    Axis.TP: None, Axis.PP: None, Axis.DP: None, Axis.CP: None, Axis.EP: None, Axis.ETP: 0, Axis.VPP: 0,
    "zero": -1, "dp_shard": 0, "micro_batch": 0, "pp_first_layers": -1, "pp_last_layers": -1,
    "activation_offload_layers": -1,
}  # fmt: skip
_CODED_KNOBS: dict[str, tuple[str, ...]] = {
    "recompute": RECOMPUTE_CODES,
    "pp_schedule": SCHEDULE_CODES,
    "cp_comm": CP_COMM_CODES,
    "optimizer_states": STATES_CODES,
}
_BOOL_KNOBS = ("sp", "pp_account_embedding", "pp_account_loss")


@dataclass(frozen=True)
class StrategyColumns:
    """Knob values of n strategies, one int64 (bool, float64) array of length n per knob."""

    tp: np.ndarray
    pp: np.ndarray
    dp: np.ndarray  # 0 = derive from the cluster (as Strategy.dp)
    cp: np.ndarray
    ep: np.ndarray
    etp: np.ndarray  # 0 = None (dense: expert TP = tp; MoE: unset)
    vpp: np.ndarray  # 0 = unset
    sp: np.ndarray  # bool
    zero: np.ndarray  # -1 = unset
    dp_shard: np.ndarray  # 0 = None (shard over all dp)
    micro_batch: np.ndarray  # 0 = unset
    recompute: np.ndarray  # code into RECOMPUTE_CODES, -1 = unset
    pp_schedule: np.ndarray  # code into SCHEDULE_CODES, -1 = unset
    cp_comm: np.ndarray  # code into CP_COMM_CODES
    pp_first_layers: np.ndarray  # -1 = None
    pp_last_layers: np.ndarray  # -1 = None
    pp_account_embedding: np.ndarray  # bool
    pp_account_loss: np.ndarray  # bool
    optimizer_states: np.ndarray  # code into STATES_CODES, -1 = None (as Workload.optimizer)
    optimizer_offload: np.ndarray  # float64
    activation_offload_layers: np.ndarray  # -1 = unset

    def __len__(self) -> int:
        return len(self.tp)

    def take(self, rows: np.ndarray) -> StrategyColumns:
        """The sub-block of the given rows (an index or boolean array)."""
        return StrategyColumns(**{f.name: getattr(self, f.name)[rows] for f in fields(self)})

    def strategy_at(self, i: int) -> Strategy:
        """Row i as a Strategy (for the scalar fallback and for tests)."""
        knobs: dict[str, object] = {}
        for name, none in _INT_KNOBS.items():
            v = int(getattr(self, name)[i])
            knobs[str(name)] = None if none is not None and v == none else v
        for name, codes in _CODED_KNOBS.items():
            v = int(getattr(self, name)[i])
            knobs[name] = None if v < 0 else codes[v]
        for name in _BOOL_KNOBS:
            knobs[name] = bool(getattr(self, name)[i])
        knobs["optimizer_offload"] = float(self.optimizer_offload[i])
        return Strategy.model_construct(**knobs)

    @staticmethod
    def concat(blocks: Sequence[StrategyColumns]) -> StrategyColumns:
        """The blocks one after the other."""
        names = [f.name for f in fields(StrategyColumns)]
        return StrategyColumns(**{n: np.concatenate([getattr(b, n) for b in blocks]) for n in names})


def columns_of(strategies: Sequence[Strategy]) -> StrategyColumns:
    """The columns of a sequence of Strategy objects (unset knobs become their sentinels)."""
    cols: dict[str, np.ndarray] = {}
    for name, none in _INT_KNOBS.items():
        vals = [getattr(s, name) for s in strategies]
        cols[str(name)] = np.array([none if v is None else v for v in vals], dtype=np.int64)
    for name, codes in _CODED_KNOBS.items():
        idx = {c: i for i, c in enumerate(codes)}
        cols[name] = np.array(
            [-1 if (v := getattr(s, name)) is None else idx[v] for s in strategies], np.int64
        )
    for name in _BOOL_KNOBS:
        cols[name] = np.array([bool(getattr(s, name)) for s in strategies], dtype=bool)
    cols["optimizer_offload"] = np.array([float(s.optimizer_offload) for s in strategies], dtype=np.float64)
    return StrategyColumns(**cols)
