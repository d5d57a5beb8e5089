"""The NSGA-II loop: memetic (Pareto local search), resumable, shared by any number of workers.

Budget = number of COMPLETE trials in the study: distinct strategies with an estimate (feasible
or not), counted over every worker sharing a stored study. NSGA-II samples on a private in-memory
study; a proposal that repeats a strategy already seen reuses its cached values there (so NSGA-II
ranks it) and is not stored again; a proposal that is not a valid layout is PRUNED (no objective
values). Both are followed by a not-yet-visited point (duplicate elimination), so the loop
always makes progress and, when the budget reaches the space size, it covers the whole space. The
stored side (batched or live writes, heartbeats, sync between workers) is autopar/search/shared.py.
"""

from __future__ import annotations

import contextlib
import functools
import random
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, cast

import numpy as np

from autopar.defaults import LOCAL_SEARCH_SHARE
from autopar.objectives import Objective
from autopar.search.evaluate import Evaluator, Outcome
from autopar.search.jsontypes import JSONDict, Key
from autopar.search.loops import (
    EXPLORE_FRACTION,
    Run,
    _front_neighbor,
    _unvisited,
    population_size,
)
from autopar.search.optuna_compat import GENERATION_KEY, keep_stock_keys
from autopar.search.pareto import FrontTracker
from autopar.search.progress import SearchProgress
from autopar.search.shared import BUDGET_ATTR, FLUSH_EVERY, REASON_ATTR, SharedStudy
from autopar.search.space import Point, Space
from autopar.search.storage import StorageSpec, storage_error

if TYPE_CHECKING:
    import optuna
    from optuna.distributions import BaseDistribution, CategoricalChoiceType, CategoricalDistribution
    from optuna.samplers import NSGAIISampler
    from optuna.trial import FrozenTrial, TrialState

# The reference (slower) path: moves enqueued into the private study and a stock NSGAIISampler, as
# a plain Optuna user would write it; tests/search/test_batched.py checks both paths agree exactly.
REFERENCE_PATH = False
CLAIM_MARGIN = 64  # server workers check claims on the last budget trials against the study
WAIT_S = 0.25  # pause while other workers hold the rest of the budget
# Longest wait, with no trial finishing, on trials other clients hold RUNNING at the end of the budget. An
# autopar trial takes milliseconds and a dead worker's trial goes stale after the heartbeat grace period
# (search/storage.py), so a trial still RUNNING, heartbeat alive, after this long belongs to a client that
# is not finishing it (any Optuna client can `ask` and never `tell`): the search stops and says so.
OTHERS_WAIT_S = 120.0


class _BatchSampler(Protocol):
    """What the loop calls on the private study's sampler (the NSGAIISampler subclass of _nsga2_sampler)."""

    def open_slots(self) -> int: ...
    def propose(self, study: optuna.Study, dists: dict[str, BaseDistribution]) -> Proposal: ...
    def count_complete(self, trial: FrozenTrial) -> None: ...


@dataclass
class _Loop:
    """Mutable state of one NSGA-II loop (seen strategies, front tracker, budget count)."""

    space: Space
    objectives: Sequence[Objective]
    local: optuna.Study  # the in-memory optuna.Study NSGA-II samples on
    shared: SharedStudy | None
    run: Run
    seen: dict[Key, tuple[list[float], dict[str, float]] | None] = field(default_factory=dict)
    tracker: FrontTracker = field(default_factory=FrontTracker)
    n_feas: int = 0
    complete: int = 0  # COMPLETE trials in the study (this process's only, without storage)
    synced: int = 0  # COMPLETE trials in the study at the last sync
    numbered: int = 0  # trial numbers handed out (NSGA-II proposals, local moves, absorbed trials)
    ready: dict[Key, Outcome] = field(default_factory=dict)  # outcomes evaluated ahead
    pdists: dict[str, BaseDistribution] = field(default_factory=dict)  # Optuna distributions of the knobs
    waiting: tuple[float, int] | None = None  # (since, COMPLETE count) while others hold the budget's end

    def note(self, key: Key, vals: list[float], cons: dict[str, float]) -> None:
        """Remember an evaluated strategy (and put it on the front tracker when feasible)."""
        self.seen[key] = (vals, cons)
        if all(c <= 0 for c in cons.values()):
            self.n_feas += 1
            self.tracker.add(key, [o.to_min(v) for o, v in zip(self.objectives, vals, strict=True)])

    def absorb(self, trials: Sequence[FrozenTrial]) -> None:
        """Finished trials of other workers (or earlier runs): seen, front, and NSGA-II's history."""
        from optuna.trial import TrialState

        for t in trials:
            pt = self.space.decode(t.params)
            if not isinstance(pt, Point) or pt.key in self.seen:
                continue
            if t.state == TrialState.COMPLETE and t.values is not None:
                self.note(pt.key, list(t.values), dict(t.constraints))
                self.local.add_trial(t)
                self.numbered += 1
                if hasattr(self.local.sampler, "count_complete"):
                    self.local.sampler.count_complete(t)
            elif t.state == TrialState.PRUNED and str(t.user_attrs.get(REASON_ATTR, "")).startswith("rule:"):
                self.seen[pt.key] = None

    def sync(self) -> None:
        """Exchange trials with the stored study and refresh the study-wide COMPLETE count."""
        if self.shared is not None:
            self.absorb(self.shared.sync())
            self.complete = self.synced = self.shared.last_counts.get("COMPLETE", 0)


def run_nsga2(
    space: Space,
    ev: Evaluator,
    objectives: Sequence[Objective],
    *,
    budget: int,
    seed: int,
    storage: StorageSpec,
    study_name: str | None,
    timeout: float | None,
    progress: bool,
    fp: str,
    local_search: float = LOCAL_SEARCH_SHARE,
    inputs: JSONDict | None = None,
    heartbeat_s: int | None = None,
    search: bool = True,
) -> Run:
    """NSGA-II with a duplicate cache, duplicate elimination and Pareto local search; resumable, shareable.

    After the exploration phase (EXPLORE_FRACTION of the budget) a share `local_search` of the trials
    are one-knob moves from the current front, least crowded members first; duplicates (and
    grids outside the space) are replaced the same way. local_search=0 gives plain NSGA-II with
    random replacement of duplicates. With a storage, the loop runs until the study holds `budget`
    COMPLETE trials (all workers together); search=False only reads what the study holds.
    """
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    directions = ["maximize" if o.maximize else "minimize" for o in objectives]
    local = optuna.create_study(
        sampler=_nsga2_sampler(space, seed, population_size(budget)), directions=directions
    )
    shared = None
    if storage is not None:
        name = study_name or f"autopar-{space.model.name}-{fp}"
        names = [o.name for o in objectives]
        shared = SharedStudy(
            storage, name, directions, names, fp, inputs, heartbeat_s, key=_strategy_key(space)
        )
    st = _Loop(space, objectives, local, shared, Run(study_name=shared.name if shared else None))
    try:
        if shared is not None and search:
            shared.study.set_user_attr(BUDGET_ATTR, budget)
        st.sync()
        if search:
            _search(st, ev, budget, seed, timeout, progress, local_search)
        if shared is not None:
            shared.close()
            st.sync()
            _rebuild_from_study(st, ev)
    except Exception as e:
        if shared is not None and _from_storage(e):  # e.g. the server went away mid-search
            raise storage_error(str(storage), e) from e
        raise
    finally:
        if shared is not None:
            with contextlib.suppress(Exception):  # already reporting the first failure
                shared.close()
    return st.run


def _strategy_key(space: Space) -> Callable[[JSONDict], Hashable]:
    """Two stored trials are the same strategy when their choices decode to one point (decoding repairs vpp,
    sp and micro-batch, so different choices can); choices that decode to no point compare as choices."""

    def key(params: JSONDict) -> Hashable:
        pt = space.decode(params)
        return pt.key if isinstance(pt, Point) else tuple(sorted(params.items()))

    return key


def _nsga2_sampler(space: Space, seed: int, population: int) -> NSGAIISampler:
    """Optuna's NSGA-II sampler minus two per-trial scans of the whole private study.

    1. NSGAIISampler derives its relative search space per trial as the intersection of the
       COMPLETE trials' distributions (sorted by name, deep-copied). In the private study every
       trial carries exactly `space.distributions()` (and with no COMPLETE trial yet, generation 0
       samples independently whatever the space), so the intersection is always that, in name order.
    2. It finds a new trial's generation by scanning every COMPLETE trial for the highest generation
       and how many trials it holds (full: the next one). The private study's trials become COMPLETE
       only through `tell` (after_trial sees them) or `add_trial` (absorbed from the stored study,
       counted by `_Loop.absorb`), so a running count per generation gives the same answer.
    Both keep the proposals identical (tests/search/test_batched.py) and make the cost per trial
    independent of the study's size.

    Only NSGAIISampler's public methods are overridden (issue 23); the one private name involved, the
    generation key, is search/optuna_compat.py's.
    """
    import optuna
    from optuna.distributions import CategoricalDistribution

    if REFERENCE_PATH:
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=population)

    # Optuna names the generation attr after the class: keep NSGAIISampler's names, so stored trials
    # (and studies shared with other versions or workers) carry the same system attrs.
    @keep_stock_keys
    class _KnownSpaceNSGAII(_KnownSpace, optuna.samplers.NSGAIISampler):
        pass

    sampler = _KnownSpaceNSGAII(seed=seed, population_size=population)
    sampler.fixed = {k: CategoricalDistribution(v) for k, v in sorted(space.distributions().items())}
    sampler.population, sampler.unit = population, {}
    sampler.generations, sampler.parents = {}, {}
    sampler.independent = np.random.RandomState(seed)
    return sampler


class _KnownSpace:
    """The methods `_nsga2_sampler` overrides on NSGAIISampler (mixed in before it, so `super()` is Optuna's)."""

    fixed: dict[str, BaseDistribution]  # the private study's distributions, in name order
    population: int
    unit: dict[int, tuple[np.ndarray, np.ndarray]]  # (low, high) bounds of an n-choice one-hot draw
    generations: dict[int, int]  # COMPLETE trials per NSGA-II generation
    parents: dict[int, list[FrozenTrial]]  # parent population per generation
    # The draws of NSGAIISampler's own RandomSampler(seed) (which it keeps private): the same
    # numpy RandomState, seeded alike; sample_independent below is the only one drawing from it.
    independent: np.random.RandomState

    def infer_relative_search_space(
        self, study: optuna.Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return dict(self.fixed)

    def count_complete(self, trial: FrozenTrial) -> None:
        gen = trial.system_attrs.get(GENERATION_KEY)
        if gen is not None and gen >= 0:
            self.generations[gen] = self.generations.get(gen, 0) + 1

    def after_trial(
        self, study: optuna.Study, trial: FrozenTrial, state: TrialState, values: Sequence[float] | None
    ) -> None:
        from optuna.trial import TrialState

        super().after_trial(study, trial, state, values)  # type: ignore[misc]  # NSGAIISampler's (mixin)
        if state == TrialState.COMPLETE:
            self.count_complete(trial)

    def get_trial_generation(self, study: optuna.Study, trial: FrozenTrial) -> int:
        gen = trial.system_attrs.get(GENERATION_KEY)
        if gen is not None:  # a proposal's stub carries it (propose)
            return int(gen)
        # A trial asked from the study (not done by this loop): Optuna's scan records the same
        # generation next_generation() gives, in the trial's system attrs.
        return int(super().get_trial_generation(study, trial))  # type: ignore[misc]  # NSGAIISampler's

    def get_population(self, study: optuna.Study, generation: int) -> list[FrozenTrial]:
        # Optuna filters a per-thread cache of the study's trials that only `ask` refreshes; this
        # study gains its trials through `add_trial`, so read them as they are now.
        from optuna.trial import TrialState

        done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        return [t for t in done if t.system_attrs.get(GENERATION_KEY) == generation]

    def reseed_rng(self) -> None:
        super().reseed_rng()  # type: ignore[misc]  # NSGAIISampler's (mixin)
        self.independent.seed()

    def sample_independent(
        self, study: optuna.Study, trial: FrozenTrial, name: str, dist: BaseDistribution
    ) -> CategoricalChoiceType:
        # RandomSampler's draw for a categorical (every knob is one), without building a
        # _SearchSpaceTransform per call: one uniform draw in [0, 1) per choice (the one-hot
        # columns' bounds), the largest wins. Same random numbers, same choice.
        cat = cast("CategoricalDistribution", dist)  # every knob is one (space.distributions)
        n = len(cat.choices)
        bounds = self.unit.get(n)
        if bounds is None:
            bounds = self.unit[n] = (np.zeros(n), np.ones(n))
        return cat.to_external_repr(self.independent.uniform(*bounds).argmax())

    def next_generation(self) -> int:
        top = max(self.generations, default=0)
        return top if self.generations.get(top, 0) < self.population else top + 1

    def open_slots(self) -> int:
        """Proposals that all join the generation the next one joins: the places left in it."""
        top = max(self.generations, default=0)
        return self.population - self.generations.get(top, 0) or self.population

    def get_parent_population(self, study: optuna.Study, generation: int) -> list[FrozenTrial]:
        # Optuna caches the parents' ids in the study's system attrs and rescans every trial per
        # proposal to find them again (in study order, while the first call returns them in
        # selection order); the trials never change once chosen, so keep that rescan's answer.
        hit = self.parents.get(generation)
        if hit is not None:
            return hit
        first: list[FrozenTrial] = super().get_parent_population(study, generation)  # type: ignore[misc]  # NSGAIISampler's
        self.parents[generation] = super().get_parent_population(study, generation)  # type: ignore[misc]
        return first

    def propose(self, study: optuna.Study, dists: dict[str, BaseDistribution]) -> Proposal:
        """One child, drawn exactly as `study.ask(dists)` would draw it (same sampler calls in the
        same order, so the same random numbers), without creating its trial: the trial is added
        with its outcome (`_tell`), when NSGA-II would have been told it. The stub carries the
        generation get_trial_generation would give (sample_relative's first call reads it)."""
        stub = _stub_trial({GENERATION_KEY: self.next_generation()})
        self.before_trial(study, stub)  # type: ignore[attr-defined]  # NSGAIISampler's
        space = self.infer_relative_search_space(study, stub)
        relative = self.sample_relative(study, stub, space)  # type: ignore[attr-defined]  # NSGAIISampler's
        params = {
            k: relative[k] if k in relative else self.sample_independent(study, stub, k, d)
            for k, d in dists.items()
        }
        return Proposal(params, stub.system_attrs[GENERATION_KEY])


@functools.cache
def _shared_categorical() -> type:
    """CategoricalDistribution for the private study's added trials: immutable in use, so the deep
    copy Optuna makes of every added trial shares it, and comparing it with itself is O(1). Never
    stored: the stored study gets plain CategoricalDistributions (`_complete`)."""
    from optuna.distributions import CategoricalDistribution

    class SharedCategorical(CategoricalDistribution):
        def __deepcopy__(self, memo: dict[int, object]) -> SharedCategorical:
            return self

        def __eq__(self, other: object) -> bool:
            return other is self or super().__eq__(other)

        __hash__ = CategoricalDistribution.__hash__

    return SharedCategorical


def _kept_as_is(frozen: FrozenTrial) -> FrozenTrial:
    """A copy of the trial that the in-memory storage keeps as it is: the storage deep-copies every added
    trial (so the caller's later edits cannot reach it) and numbers the copy; this copy is handed over
    and never touched again (the storage itself copies a trial before changing it)."""
    cls = _kept_class()
    kept = cls.__new__(cls)
    kept.__dict__.update(frozen.__dict__)
    return kept


@functools.cache
def _kept_class() -> type[FrozenTrial]:
    """FrozenTrial whose deep copy is itself (built on first use: this module does not import optuna)."""
    from optuna.trial import FrozenTrial

    class Kept(FrozenTrial):
        def __deepcopy__(self, memo: dict[int, object]) -> Kept:
            return self

        # Two stored trials are never equal (their ids differ), so identity answers what FrozenTrial's
        # field-by-field comparison would; NSGA-II's parent selection tests `trial in parents` a lot.
        def __eq__(self, other: object) -> bool:
            return self is other

        __hash__ = object.__hash__

    return Kept


@dataclass(frozen=True)
class Proposal:
    """An NSGA-II child not yet in the private study: its parameters and its generation."""

    params: JSONDict
    generation: int


def _stub_trial(system_attrs: JSONDict) -> FrozenTrial:
    """A RUNNING trial outside any study, for sampler calls that take a trial (they read its attrs)."""
    from optuna.trial import FrozenTrial, TrialState

    return FrozenTrial(
        number=-1, state=TrialState.RUNNING, value=None, datetime_start=None, datetime_complete=None,
        params={}, distributions={}, user_attrs={}, system_attrs=system_attrs, intermediate_values={},
        trial_id=-1,
    )  # fmt: skip


def _from_storage(e: BaseException) -> bool:
    """Whether an exception comes from the storage layer (database driver, SQLAlchemy, journal I/O)."""
    mod = type(e).__module__
    return isinstance(e, OSError) or mod.startswith(
        ("sqlalchemy", "psycopg", "optuna.storages", "optuna.exceptions")
    )


def _search(
    st: _Loop,
    ev: Evaluator,
    budget: int,
    seed: int,
    timeout: float | None,
    progress: bool,
    local_search: float,
) -> None:
    """The ask/evaluate/tell loop."""
    from optuna.distributions import CategoricalDistribution

    space, run, shared = st.space, st.run, st.shared
    odists = {k: CategoricalDistribution(v) for k, v in space.distributions().items()}
    shared_cls = _shared_categorical()
    st.pdists = {k: shared_cls(v) for k, v in space.distributions().items()}
    rng = random.Random(seed)
    move: Point | None = None  # the next proposal when it is a local-search (or replacement) move
    queue: deque[Proposal] = deque()  # NSGA-II children drawn ahead, handled in order
    t0 = time.perf_counter()
    every = max(1, budget // 100)
    with SearchProgress(budget, progress, "NSGA-II") as bar:
        while len(st.seen) < space.size:
            if timeout is not None and time.perf_counter() - t0 > timeout:
                run.timed_out = True
                break
            if st.complete >= budget:
                st.sync()
                if st.complete >= budget:
                    break
            if shared is not None and shared.live and not _room(st, budget, t0, timeout):
                if _waited_out(st):
                    break
                continue
            st.waiting = None
            trial, params, move = _next(st, ev, odists, budget, queue, move)
            novel = _handle(st, ev, trial, params, odists, budget)
            run.n_trials += 1
            share = local_search if st.complete >= EXPLORE_FRACTION * budget else 0.0
            if (not novel or rng.random() < share) and len(st.seen) < space.size:
                move = _move(st, rng, local_search)
            if progress and run.n_evaluated % every == 0:
                bar.update(min(st.complete, budget), st.n_feas, len(st.tracker))
            if shared is not None and (shared.due() or len(shared.buffer) >= _batch(budget - st.synced)):
                st.sync()


def _next(
    st: _Loop,
    ev: Evaluator,
    odists: dict[str, BaseDistribution],
    budget: int,
    queue: deque[Proposal],
    move: Point | None,
) -> tuple[optuna.Trial | Proposal | None, JSONDict, None]:
    """The next (trial, params) to handle: NSGA-II's next child, or the pending move (then consumed)."""
    if move is None and REFERENCE_PATH:  # NSGA-II proposes through study.ask, trial by trial
        trial = st.local.ask(odists)
        return trial, trial.params, None
    if move is None:  # NSGA-II proposes: a generation's children drawn together
        if not queue:
            queue.extend(_propose(st, ev, odists, budget))
        proposal = queue.popleft()
        return proposal, proposal.params, None
    if REFERENCE_PATH:
        st.local.enqueue_trial(st.space.encode(move))
        trial = st.local.ask(odists)
        return trial, trial.params, None
    return None, st.space.encode(move), None


def _move(st: _Loop, rng: random.Random, local_search: float) -> Point | None:
    """A local-search move: a one-knob neighbour of the front (when local search is on), else any unvisited point."""
    fresh = None
    if local_search > 0 and len(st.tracker):
        fresh = _front_neighbor(st.space, st.seen, st.tracker, rng)
    if fresh is None:
        fresh = _unvisited(st.space, st.seen, rng)
    return fresh


def _propose(st: _Loop, ev: Evaluator, odists: dict[str, BaseDistribution], budget: int) -> list[Proposal]:
    """NSGA-II's next children, as many as join the current generation together, with the new
    strategies among them evaluated in one call (one corrector prediction for all).

    Children of one generation depend only on the previous generations and the sampler's random
    numbers, never on their siblings' outcomes, so drawing them together and handling them in order
    gives what asking and telling them one by one gives (tests/search/test_batched.py). With a stored
    study another worker's trials can arrive between two proposals, so there it draws one at a time.
    At most the budget left is evaluated ahead; local moves taking some of it can leave up to one
    generation of evaluations unused when the budget ends (never a strategy evaluated twice)."""
    sampler = cast("_BatchSampler", st.local.sampler)
    n = 1 if st.shared is not None else sampler.open_slots()
    props = [sampler.propose(st.local, odists) for _ in range(n)]
    fresh: dict[Key, Point] = {}
    for p in props:
        pt = st.space.decode(p.params)
        if isinstance(pt, Point) and pt.key not in st.seen and len(fresh) < budget - st.complete:
            fresh.setdefault(pt.key, pt)
    st.ready = dict(zip(fresh, ev.evaluate_many(list(fresh.values())), strict=True))
    return props


def _batch(remaining: int) -> int:
    """Trials a file worker buffers before it syncs: 1/16 of the budget left as of its last sync (so
    even 16 workers' unseen trials cannot overshoot it), at most FLUSH_EVERY."""
    return max(1, min(FLUSH_EVERY, remaining // 16))


def _waited_out(st: _Loop) -> bool:
    """True once others have held the budget's last trials RUNNING for OTHERS_WAIT_S with none finishing."""
    now = time.perf_counter()
    if st.waiting is None or st.waiting[1] != st.complete:
        st.waiting = (now, st.complete)
        return False
    if now - st.waiting[0] < OTHERS_WAIT_S:
        return False
    st.run.waited_out = now - st.waiting[0]
    return True


def _room(st: _Loop, budget: int, t0: float, timeout: float | None) -> bool:
    """Server workers: is there budget left once the trials other workers are running finish?"""
    from optuna.trial import TrialState

    assert st.shared is not None
    if budget - st.complete > CLAIM_MARGIN:
        return True
    ts = st.shared.storage.get_all_trials(
        st.shared.study_id, deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING)
    )
    if len(ts) < budget:
        return True
    time.sleep(WAIT_S)  # others hold the rest of the budget: wait for them to finish (or go stale)
    st.sync()
    return False


def _handle(
    st: _Loop,
    ev: Evaluator,
    trial: optuna.Trial | Proposal | None,
    params: JSONDict,
    odists: dict[str, BaseDistribution],
    budget: int,
) -> bool:
    """Decode, evaluate and record one proposal; True when it added a COMPLETE trial.

    `trial` is the private study's trial of an NSGA-II proposal, told its outcome; None for a
    local-search move, which never enters the private study: enqueued there it would carry no
    NSGA-II generation, so it would never join a population nor change what NSGA-II samples (Optuna
    sets the generation in `sample_relative`, which a trial whose every parameter is fixed never
    calls). Skipping it saves the private study's per-trial cost and leaves every search unchanged
    (bench/fronts.py, tests/search/test_batched.py). Its stored copy is built directly.
    """
    from optuna.trial import TrialState

    space, run, shared = st.space, st.run, st.shared
    number, st.numbered = st.numbered, st.numbered + 1
    pt = space.decode(params)
    if isinstance(pt, str):  # not a layout of this space: no objective values
        _tell(st, trial, state=TrialState.PRUNED)
        ikey = tuple(sorted(params.items()))
        if ikey not in run.invalid:
            run.invalid[ikey] = (number, params, "rule: " + pt)
            if shared is not None:
                shared.add(_pruned(params, odists, "rule: " + pt))
        return False
    if pt.key in st.seen:
        run.n_duplicates += 1
        cached = st.seen[pt.key]
        if cached is None:
            _tell(st, trial, state=TrialState.PRUNED)
        else:
            _tell(st, trial, cached[0], cached[1])
        return False
    out = st.ready.pop(pt.key, None) or ev(pt)
    run.outcomes[pt.key], run.first_trial[pt.key], run.points[pt.key] = out, number, pt
    if not out.evaluated:  # broke a rule: PRUNED with the reason, never made-up values
        _tell(st, trial, state=TrialState.PRUNED)
        if shared is not None:
            _store(st, _pruned(params, odists, out.reason, _strategy_attrs(space, pt)), budget)
        st.seen[pt.key] = None
        return False
    vals = out.vector(st.objectives)
    frozen = _tell(st, trial, vals, out.constraints)
    if shared is not None:
        attrs = {**_strategy_attrs(space, pt), **_outcome_attrs(out)}
        stored = _complete(frozen, params, vals, out.constraints, odists, attrs)
        if not _store(st, stored, budget):
            return False
    st.note(pt.key, vals, out.constraints)
    st.complete += 1
    run.n_evaluated += 1
    return True


def _tell(
    st: _Loop,
    trial: optuna.Trial | Proposal | None,
    values: list[float] | None = None,
    constraints: dict[str, float] | None = None,
    state: TrialState | None = None,
) -> FrozenTrial | None:
    """Tell the private study an NSGA-II proposal's outcome (constraints first); None for a local move.
    A Proposal enters the study now, finished: the trial `ask` would have made, told the same."""
    if trial is None:
        return None
    if isinstance(trial, Proposal):
        return _add_finished(st, trial, values, constraints, state)
    for k, v in (constraints or {}).items():
        trial.set_constraint(k, v)
    if state is not None:
        return st.local.tell(trial, state=state)
    return st.local.tell(trial, values)


def _add_finished(
    st: _Loop,
    p: Proposal,
    values: list[float] | None,
    constraints: dict[str, float] | None,
    state: TrialState | None,
) -> FrozenTrial:
    """Add a drawn child to the private study with its outcome; count it in its generation."""
    from optuna.trial import TrialState, create_trial

    sampler = cast("_BatchSampler", st.local.sampler)
    frozen = create_trial(
        state=state or TrialState.COMPLETE,
        params=p.params,
        distributions=st.pdists,
        values=values if state is None else None,
        constraints=constraints or None,
        system_attrs={GENERATION_KEY: p.generation},
    )
    st.local.add_trial(_kept_as_is(frozen))
    if state is None:
        sampler.count_complete(frozen)
    return frozen


def _store(st: _Loop, trial: FrozenTrial, budget: int) -> bool:
    """Write a finished trial to the stored study; False when a server worker lost the claim to it."""
    shared = st.shared
    assert shared is not None
    if not shared.live:
        shared.add(trial)
        return True
    for attempt in range(LOST_RECORD_RETRIES + 1):
        try:
            tid = _claim(st, trial, budget)
            if tid is None:
                return False
            shared.finish(tid, trial.state, trial.values)
            return True
        except KeyError as e:  # Optuna's RDB storage: the trial's row is gone
            if not lost_record(e) or attempt == LOST_RECORD_RETRIES:
                raise
    return False  # pragma: no cover - the loop returns or raises


def lost_record(e: KeyError) -> bool:
    """Whether Optuna's RDB storage found no row for a trial this worker created: a server that crashed before
    its commit reached the disk (an immediate stop, an OOM kill, no synchronous commit) loses the newest rows.
    The trial is claimed again (its strategy is still this worker's evaluation), never dropped or doubled."""
    return "Record does not exist" in str(e)


# Times a trial whose RUNNING row a crashed server lost is claimed again before the error stands.
LOST_RECORD_RETRIES = 2


def _claim(st: _Loop, trial: FrozenTrial, budget: int) -> int | None:
    """Server workers: create the trial RUNNING unless another worker has its strategy or the budget
    is taken; None (nothing stored, or the trial PRUNED with why) when this worker must drop it.

    The strategy was evaluated just before (milliseconds, deterministic), so the trial is RUNNING only
    while its claim is checked; a worker killed then leaves it RUNNING without heartbeats, and
    `fail_stale_trials` (any worker, every second) turns it FAILED after the grace period."""
    from optuna.trial import TrialState

    shared = st.shared
    assert shared is not None
    key = st.space.decode(trial.params).key  # type: ignore[union-attr]  # the study space is set before trials are read
    st.absorb(shared.poll())  # the others' newest trials: skip what they finished meanwhile
    if key in st.seen or shared.running_same(trial.params) is not None:
        st.run.n_duplicates += 1
        return None
    tid = shared.start(trial)
    reason = ""
    st.absorb(shared.poll())  # a fresh look now that this trial is visible to the others
    first = shared.running_same(trial.params)
    if key in st.seen:
        reason = "duplicate: another worker finished the same strategy meanwhile"
    elif first is not None and first < shared.storage.get_trial_number_from_id(tid):
        reason = "duplicate: another worker started the same strategy first"
    elif budget - st.complete <= CLAIM_MARGIN:
        done, ahead = shared.running_ahead(tid)
        if done + ahead >= budget:
            reason = "budget reached by other workers"
    if not reason:
        return tid
    shared.finish(tid, TrialState.PRUNED, None, reason)
    return None


def _strategy_attrs(space: Space, pt: Point) -> JSONDict:
    """User attrs that name the strategy: label, hardware and every knob."""
    s = pt.strategy
    names = ("tp", "pp", "dp", "cp", "ep", "etp", "vpp", "sp", "zero", "micro_batch")
    knobs = {k: getattr(s, k) for k in names if hasattr(s, k)}
    attrs: JSONDict = {"strategy": s.label(), "knobs": {**knobs, "recompute": s.recompute}}
    if len(space.hardware) > 1:
        attrs["hardware"] = space.hardware[pt.hw].label()
    return attrs


def _outcome_attrs(out: Outcome) -> JSONDict:
    """User attrs with the estimate behind the objective values (memory, bottleneck, price, corrector)."""
    from autopar.units import GiB

    est = out.estimate
    assert est is not None
    attrs: JSONDict = {
        "memory_gib": round(est.peak_memory_bytes / GiB, 3),
        "headroom_gib": round(est.headroom_bytes / GiB, 3),
        "bottleneck": est.bottleneck,
        "usd_per_mtoken": out.values.get("cost"),
        "calibration_factor": est.calibration_factor,
    }
    need = out.constraints.get("memory_gib")
    if need is not None and est.fits:  # free GiB the memory margin asks of this strategy (search/margin.py)
        attrs["memory_margin_gib"] = round(need + est.headroom_bytes / GiB, 3)
    if out.reason:
        attrs[REASON_ATTR] = out.reason
    return attrs


def _pruned(
    params: JSONDict, odists: dict[str, BaseDistribution], reason: str, attrs: JSONDict | None = None
) -> FrozenTrial:
    """A PRUNED trial (no objective values) carrying why it was not evaluated."""
    from optuna.trial import TrialState, create_trial

    return create_trial(
        state=TrialState.PRUNED,
        params=params,
        distributions=odists,
        user_attrs={**(attrs or {}), REASON_ATTR: reason},
    )


def _complete(
    local: FrozenTrial | None,
    params: JSONDict,
    values: list[float],
    constraints: dict[str, float],
    odists: dict[str, BaseDistribution],
    attrs: JSONDict,
) -> FrozenTrial:
    """The stored copy of a finished trial: values, constraints, NSGA-II generation (of a private-study
    trial `local`; a local move, local=None, has none), attrs."""
    from optuna.trial import TrialState, create_trial

    if local is None:
        return create_trial(
            state=TrialState.COMPLETE,
            values=values,
            params=params,
            distributions=odists,
            user_attrs=attrs,
            constraints=constraints,
        )
    keep = {k: v for k, v in local.system_attrs.items() if k != "fixed_params"}
    return create_trial(
        state=TrialState.COMPLETE,
        values=local.values,
        params=local.params,
        distributions=odists,
        user_attrs=attrs,
        system_attrs=keep,
    )


def _rebuild_from_study(st: _Loop, ev: Evaluator) -> None:
    """Records of everything the stored study holds, numbered as in the study (any worker, any run)."""
    from optuna.trial import TrialState

    assert st.shared is not None
    run, space = st.run, st.space
    mine = dict(run.outcomes)
    run.outcomes, run.first_trial, run.points, run.invalid = {}, {}, {}, {}
    states: dict[str, int] = {}
    for t in st.shared.trials():
        states[t.state.name] = states.get(t.state.name, 0) + 1
        reason = str(t.user_attrs.get(REASON_ATTR, ""))
        if t.state == TrialState.PRUNED and not reason.startswith("rule:"):
            continue
        if t.state not in (TrialState.COMPLETE, TrialState.PRUNED):
            continue
        pt = space.decode(t.params)
        if isinstance(pt, str):
            run.invalid.setdefault(tuple(sorted(t.params.items())), (t.number, dict(t.params), "rule: " + pt))
            continue
        if pt.key not in run.outcomes:
            run.outcomes[pt.key] = mine.get(pt.key) or ev(pt)
            run.points[pt.key] = pt
        run.first_trial[pt.key] = min(run.first_trial.get(pt.key, t.number), t.number)
    run.states = states
