"""Every use of Optuna internals in autopar, in one place (issue 23); written against Optuna 5.0.0.

pyproject.toml bounds optuna to >=5,<6. Each name below stands for something Optuna 5.0.0 offers no
public API for; tests/search/test_optuna_compat.py checks each against the installed Optuna (that it exists and
does what is relied on), so an upgrade that changes one fails there, by name, instead of making searches
silently differ. Everything else the search does with Optuna goes through its public API: `create_study`,
`add_trial`, `create_trial`, storage methods, and NSGAIISampler's public methods (overridden by
search/nsga2.py's subclass, the extension point Optuna documents for samplers).

This module does not import optuna at import time (`autopar --help` stays fast).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from datetime import datetime

    from optuna.storages import RDBStorage
    from optuna.trial import FrozenTrial

# The system attr in which NSGAIISampler records each trial's generation, and the prefix of the study
# system attrs in which it caches each generation's parents. They are a stored format: every stored
# NSGA-II trial carries the generation, and a resumed or shared study counts generations from it
# (studies stored by earlier autopar versions included). Optuna derives both from the sampler's class
# name (BaseGASampler.__init_subclass__) and reads them through private classmethods
# (`_get_generation_key`, `_get_parent_cache_key_prefix`), so a subclass would otherwise rename them.
GENERATION_KEY = "NSGAIISampler:generation"
PARENT_CACHE_KEY_PREFIX = "NSGAIISampler:parent:"

# Logger of Optuna's RDB storage module (its `_logger`, named after the private module path), whose
# multi-line "Caught an error from sqlalchemy" warning search/storage.py filters out.
RDB_LOGGER = "optuna.storages._rdb.storage"

# The RDBStorage method (BaseHeartbeat's, private) through which `optuna.storages.fail_stale_trials`
# asks which trials are stale: extended by `stale_trial_ids_extended`, and wrapped with the public
# methods by search/storage.py's reconnect-retry.
STALE_TRIAL_IDS_HOOK = "_get_stale_trial_ids"


def keep_stock_keys(cls: type) -> type:
    """Make a subclass of NSGAIISampler record generations and parent caches under NSGAIISampler's
    own names (GENERATION_KEY, PARENT_CACHE_KEY_PREFIX): the class attributes its private
    classmethods read, which `__init_subclass__` sets from the subclass's name."""
    cls._GENERATION_KEY = GENERATION_KEY  # type: ignore[attr-defined]  # cls: an NSGAIISampler subclass
    cls._PARENT_CACHE_KEY_PREFIX = PARENT_CACHE_KEY_PREFIX  # type: ignore[attr-defined]  # as above
    return cls


def trial_id(trial: FrozenTrial) -> int:
    """The storage id of a stored FrozenTrial. Optuna's storage API (BaseStorage) is public and keyed
    by trial id, but FrozenTrial keeps the id only as `_trial_id` (no public accessor)."""
    return int(trial._trial_id)


def stale_trial_ids_extended(base: type, extra: Callable[[RDBStorage, int], list[int]]) -> type:
    """A subclass of `base` (an RDBStorage) whose stale trials, which `optuna.storages.fail_stale_trials`
    turns FAILED, also include `extra(storage, study_id)`. Optuna asks the storage for them through
    BaseHeartbeat's private `_get_stale_trial_ids`, the only hook for which trials count as stale."""

    class Extended(base):
        def _get_stale_trial_ids(self, study_id: int) -> list[int]:
            stale = list(super()._get_stale_trial_ids(study_id))
            return stale + [t for t in extra(self, study_id) if t not in stale]

    return Extended


def running_without_heartbeat(storage: RDBStorage, study_id: int) -> list[tuple[int, datetime | None]]:
    """(trial id, datetime_start) of the study's RUNNING trials that never recorded a heartbeat, read
    from an RDBStorage's tables: Optuna's stale check skips such trials and no public API lists the
    heartbeat table (its models and session helper live in the private `optuna.storages._rdb`)."""
    from optuna.storages._rdb import models
    from optuna.storages._rdb.storage import _create_scoped_session
    from optuna.trial import TrialState

    trial, beat = models.TrialModel, models.TrialHeartbeatModel
    with _create_scoped_session(storage.scoped_session) as session:
        rows = (
            session.query(trial)
            .outerjoin(beat, beat.trial_id == trial.trial_id)
            .filter(trial.study_id == study_id, trial.state == TrialState.RUNNING)
            .filter(beat.trial_id.is_(None))
            .all()
        )
        return [(t.trial_id, t.datetime_start) for t in rows]
