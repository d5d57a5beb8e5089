"""One strategy evaluated on one problem, shared by `autopar estimate`, `compare` and `fix`: the strategy from
a label (the problem comes from autopar.cli.options.single_problem); the estimate and its `--json` document are
autopar.costs.evaluation's (also used by `autopar tune`)."""

from __future__ import annotations

from typing import Any

from autopar.costs.evaluation import Evaluation, evaluate, on_demand_price

__all__ = ["Evaluation", "evaluate", "label_strategy", "on_demand_price"]


def label_strategy(label: str, moe: bool) -> Any:
    """The Strategy a `Strategy.label()` string names (autopar.launch.labels.parse_strategy_label). The label
    omits ETP when it equals TP, so an MoE label without an ETP token means etp = tp (a search point never
    leaves etp unset; unset would let the estimate pick another)."""
    from autopar.launch.labels import parse_strategy_label
    from autopar.layouts import Axis

    s = parse_strategy_label(label)
    return s.model_copy(update={Axis.ETP.value: s.tp}) if moe and s.etp is None else s
