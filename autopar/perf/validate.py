"""Strategy validation: the public face of `autopar.layouts`, where every rule lives."""

from __future__ import annotations

from autopar.layouts import Level, check
from autopar.specs import ClusterSpec, ModelSpec, Strategy, Workload


def validate_strategy(
    model: ModelSpec,
    cluster: ClusterSpec,
    workload: Workload,
    strategy: Strategy,
    *,
    strict: bool = True,
    allow_cross_node_tp: bool = False,
) -> list[str]:
    """Return every violated rule as a readable sentence ([] = valid).

    strict=False is for logged runs, which real frameworks allow to bend the search's rules: uneven pipeline
    stages, KV heads replicated when tp > kv_heads, TP across nodes, interleaving with any micro-batch count,
    MoE without sequence parallelism (the STRICT rules of `autopar.layouts`).
    """
    level = Level.STRICT if strict else Level.HARD
    violations = check(
        model, cluster, workload, strategy, level=level, allow_cross_node_tp=allow_cross_node_tp
    )
    return [v.message for v in violations]
