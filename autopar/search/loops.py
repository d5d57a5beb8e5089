"""Search loops: exhaustive enumeration (the oracle), and the pieces NSGA-II shares (Run, the
population size, the study fingerprint, front-neighbour and unvisited-point proposals).

The NSGA-II loop itself (memetic, resumable, shared by workers) is autopar/search/nsga2.py. NSGA-II
is made memetic: after an exploration phase, most trials are one-knob moves from the current front
(Pareto local search). A move is evaluated and recorded like any trial (front, stored study) but
never joins an NSGA-II population (Optuna gives a generation only to trials its sampler proposes;
this was already so when moves were enqueued into NSGA-II's study), so it feeds the search through
the front the next moves start from. On the benchmark problems this lifts the hypervolume ratio at
budget 300 from ~0.92 to ~0.98 (bench/search.py).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from autopar.objectives import Objective
from autopar.search.evaluate import Evaluator, Outcome
from autopar.search.jsontypes import JSONDict, Key
from autopar.search.margin import MemoryMargin
from autopar.search.pareto import FrontTracker
from autopar.search.progress import SearchProgress
from autopar.search.space import Point, Space
from autopar.specs import LORA_TARGETS, ClusterSpec, ModelSpec, Workload

EXPLORE_FRACTION = 0.2  # budget fraction explored by NSGA-II alone before local search starts


def population_size(budget: int) -> int:
    """NSGA-II population scaled to the budget: budget // 10 clamped to [20, 100]."""
    return int(min(100, max(20, budget // 10)))


@dataclass
class Run:
    """What a search loop produced (shared by the NSGA-II and exhaustive paths)."""

    outcomes: dict[Key, Outcome] = field(default_factory=dict)
    first_trial: dict[Key, int] = field(default_factory=dict)
    points: dict[Key, Point] = field(default_factory=dict)
    invalid: dict[Key, tuple[int, JSONDict, str]] = field(default_factory=dict)
    n_trials: int = 0  # proposals handled by this process (duplicates included)
    n_evaluated: int = 0  # COMPLETE trials this process added (distinct strategies with an estimate)
    n_duplicates: int = 0
    timed_out: bool = False
    waited_out: float | None = None  # seconds waited on trials other clients held RUNNING, when it gave up
    study_name: str | None = None
    states: dict[str, int] = field(default_factory=dict)  # stored study: trials per Optuna state
    sweep: JSONDict | None = None  # array sweep (search/sweep.py): totals; records are a sample


def fingerprint(
    space: Space,
    workload: Workload,
    objectives: Sequence[Objective],
    min_headroom_gib: float,
    max_cost: float | None,
    margin: MemoryMargin | None = None,
) -> str:
    """A short hash of everything that defines a study, so a stored study is never mixed with another."""
    blob = json.dumps(
        {
            "model": _model_blob(space.model),
            "hardware": [[_cluster_blob(h.cluster), h.precision] for h in space.hardware],
            "workload": _workload_blob(workload),
            "objectives": [o.name for o in objectives],
            "constraints": [min_headroom_gib, max_cost],
            # the memory band's factor only when there is one, so studies stored before it keep their hash
            **({"memory_band": margin.factor} if margin is not None and margin.factor != 1.0 else {}),
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


# ClusterSpec fields added after studies were first stored: left out of the fingerprint at their default, so
# a study stored before them still resumes (its cluster is the same one).
_LATER_CLUSTER_DEFAULTS = {"transport": "infiniband"}


# ModelSpec fields added after studies were first stored, left out at their defaults (as for clusters).
_LATER_MODEL_DEFAULTS: JSONDict = {"expert_bias": False, "glu_clamp": None}


def _model_blob(model: ModelSpec) -> JSONDict:
    """A model's fingerprint fields (the later fields at their defaults left out)."""
    blob = model.model_dump(mode="json")
    for k, default in _LATER_MODEL_DEFAULTS.items():
        if blob.get(k, default) == default:
            blob.pop(k, None)
    return blob


# Workload fields added after studies were first stored, left out at their defaults (as for clusters).
_LATER_WORKLOAD_DEFAULTS = {
    "grad_reduce_dtype": "fp32",
    "bf16_optimizer": False,
    "compiled_loss": False,
    "stack": "",
    "attention_kernel": "",
    "torch_compile": False,
    "reshard_after_forward": None,
    "master_weights": "fp32",
    "recompute_method": "uniform",
    "recompute_num_layers": 1,
    "lora_targets": list(LORA_TARGETS),  # as model_dump(mode="json") writes the tuple
    "lora_base": "bf16",
}


def _workload_blob(workload: Workload) -> JSONDict:
    """A workload's fingerprint fields (less precision and token budget, and the later fields at their
    defaults)."""
    blob = workload.model_dump(mode="json", exclude={"precision", "token_budget"})
    for k, default in _LATER_WORKLOAD_DEFAULTS.items():
        if blob.get(k, default) == default:
            blob.pop(k, None)
    return blob


def _cluster_blob(cluster: ClusterSpec) -> JSONDict:
    """A cluster's fingerprint fields (model_dump less the later fields at their defaults)."""
    d: JSONDict = cluster.model_dump(mode="json")
    for k, default in _LATER_CLUSTER_DEFAULTS.items():
        if k in d and d[k] == default:
            del d[k]
    return d


def run_exhaustive(
    space: Space, ev: Evaluator, objectives: Sequence[Objective], timeout: float | None, progress: bool
) -> Run:
    """Evaluate every point of the space (the oracle; no Optuna)."""
    run = Run()
    t0 = time.perf_counter()
    tracker, n_feas = FrontTracker(), 0
    chunk = 2048  # evaluated together so a calibration predicts once per chunk
    with SearchProgress(space.size, progress, "exhaustive") as bar:
        pts = iter(space)
        i = 0
        while True:
            batch = list(itertools.islice(pts, chunk))
            if not batch:
                break
            for pt, out in zip(batch, ev.evaluate_many(batch), strict=True):
                key = pt.key
                run.outcomes[key], run.first_trial[key], run.points[key] = out, i, pt
                run.n_trials += 1
                i += 1
                if out.feasible:
                    n_feas += 1
                    if progress:
                        tracker.add(
                            key,
                            [o.to_min(v) for o, v in zip(objectives, out.vector(objectives), strict=True)],
                        )
            bar.update(i, n_feas, len(tracker))
            if timeout is not None and time.perf_counter() - t0 > timeout:
                run.timed_out = True
                break
    run.n_evaluated = ev.n_estimates
    return run


def _front_neighbor(
    space: Space, seen: Mapping[Key, object], tracker: FrontTracker, rng: random.Random
) -> Point | None:
    """An unvisited one-knob (adjacent value) neighbour of a front member, least crowded members first."""
    front = list(tracker.keys)
    cd = tracker.crowding()
    order = sorted(range(len(front)), key=lambda i: (-cd[i], rng.random()))
    for i in order[:8]:
        nb = [q for q in space.neighbors(space.point_of_key(front[i]), adjacent=True) if q.key not in seen]
        if nb:
            return rng.choice(nb)
    return None


def _unvisited(space: Space, seen: Mapping[Key, object], rng: random.Random) -> Point | None:
    """A random point not seen yet: rejection sampling, then a scan when the space is nearly exhausted."""
    for _ in range(64):
        pt = space.sample(rng)
        if pt.key not in seen:
            return pt
    rest = [pt for pt in space if pt.key not in seen]
    return rng.choice(rest) if rest else None
