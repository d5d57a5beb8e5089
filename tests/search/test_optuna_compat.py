"""The Optuna internals autopar relies on (search/optuna_compat.py) still exist and behave as relied on.

Each test names one item; an Optuna upgrade that changes it fails here, by name, instead of making a
search or a stored study silently different (issue 23). The last tests check that search/nsga2.py's
NSGAIISampler subclass, which overrides only public methods, draws what a stock NSGAIISampler draws.
"""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from autopar.search import nsga2
from autopar.search.optuna_compat import (
    GENERATION_KEY,
    PARENT_CACHE_KEY_PREFIX,
    RDB_LOGGER,
    STALE_TRIAL_IDS_HOOK,
    keep_stock_keys,
    running_without_heartbeat,
    stale_trial_ids_extended,
    trial_id,
)

optuna.logging.set_verbosity(optuna.logging.WARNING)
KNOBS = {"a": [1, 2, 3, 4], "b": ["x", "y", "z"], "c": [True, False]}


def test_written_for_optuna_5():
    """pyproject bounds optuna to <6: a major upgrade must come with a re-check of this module."""
    assert optuna.__version__.split(".")[0] == "5"


def test_generation_keys_are_nsga2s_stored_names():
    stock = optuna.samplers.NSGAIISampler
    assert stock._get_generation_key() == GENERATION_KEY
    assert stock._get_parent_cache_key_prefix() == PARENT_CACHE_KEY_PREFIX

    class Renamed(stock):  # Optuna renames the keys after a subclass ...
        pass

    assert Renamed._get_generation_key() == "Renamed:generation"

    @keep_stock_keys
    class Kept(stock):  # ... unless they are kept
        pass

    assert Kept._get_generation_key() == GENERATION_KEY
    assert Kept._get_parent_cache_key_prefix() == PARENT_CACHE_KEY_PREFIX


def test_stock_sampler_records_the_generation_under_the_key():
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(
        storage=storage, sampler=optuna.samplers.NSGAIISampler(seed=0, population_size=2)
    )
    dists = {k: CategoricalDistribution(v) for k, v in KNOBS.items()}
    for _ in range(5):  # two full generations (0, 1), then the first trial of generation 2
        t = study.ask(dists)
        study.tell(t, float(t.params["a"]))
    assert [t.system_attrs[GENERATION_KEY] for t in study.trials] == [0, 0, 1, 1, 2]
    # the parents of generations 1 and 2 are cached in the study under the prefix, by trial id
    attrs = storage.get_study_system_attrs(storage.get_study_id_from_name(study.study_name))
    cached = {k: v for k, v in attrs.items() if k.startswith(PARENT_CACHE_KEY_PREFIX)}
    assert sorted(cached) == [PARENT_CACHE_KEY_PREFIX + "1", PARENT_CACHE_KEY_PREFIX + "2"]


def test_trial_id_is_the_storage_id():
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage)
    study.add_trial(create_trial(value=1.0))
    study.add_trial(create_trial(value=2.0))
    sid = storage.get_study_id_from_name(study.study_name)
    for t in study.trials:
        assert trial_id(t) == storage.get_trial_id_from_study_id_trial_number(sid, t.number)
    assert storage.get_trial(trial_id(study.trials[1])).value == 2.0


def _rdb(tmp_path, cls=optuna.storages.RDBStorage):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # heartbeat_interval is flagged experimental
        return cls(f"sqlite:///{tmp_path / 'db.sqlite3'}", heartbeat_interval=60, grace_period=120)


def test_running_without_heartbeat_lists_only_silent_running_trials(tmp_path):
    storage = _rdb(tmp_path)
    study = optuna.create_study(storage=storage)
    sid = storage.get_study_id_from_name(study.study_name)
    silent = storage.create_new_trial(sid)
    beating = storage.create_new_trial(sid)
    storage.record_heartbeat(beating)
    done = storage.create_new_trial(sid)
    storage.set_trial_state_values(done, TrialState.COMPLETE, [1.0])
    rows = running_without_heartbeat(storage, sid)
    assert [tid for tid, _ in rows] == [silent]
    assert rows[0][1] == storage.get_trial(silent).datetime_start


def test_extended_stale_trials_are_failed_by_optunas_stale_check(tmp_path):
    extra: list[int] = []
    cls = stale_trial_ids_extended(optuna.storages.RDBStorage, lambda storage, study_id: list(extra))
    storage = _rdb(tmp_path, cls)
    study = optuna.create_study(storage=storage)
    sid = storage.get_study_id_from_name(study.study_name)
    kept, failed = storage.create_new_trial(sid), storage.create_new_trial(sid)
    extra.append(failed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fail_stale_trials is flagged experimental
        optuna.storages.fail_stale_trials(study)
    assert storage.get_trial(failed).state == TrialState.FAIL
    assert storage.get_trial(kept).state == TrialState.RUNNING
    assert STALE_TRIAL_IDS_HOOK in vars(cls)  # the method overridden is the one named for the retry wrapper


def test_rdb_logger_name_is_the_rdb_storage_modules():
    import optuna.storages._rdb.storage as rdb

    assert rdb._logger.name == RDB_LOGGER


def _ask_tell(sampler, n: int) -> list[tuple[dict, int]]:
    """n trials asked and told (a made-up objective); each trial's params and generation."""
    study = optuna.create_study(sampler=sampler, directions=["minimize", "maximize"])
    dists = {k: CategoricalDistribution(v) for k, v in KNOBS.items()}
    for _ in range(n):
        t = study.ask(dists)
        p = t.params
        study.tell(t, [p["a"] * (2 if p["c"] else 1), "xyz".index(p["b"]) - p["a"]])
    return [(t.params, t.system_attrs[GENERATION_KEY]) for t in study.trials]


@pytest.mark.parametrize("seed", [0, 5])
def test_known_space_sampler_draws_what_the_stock_sampler_draws(monkeypatch, seed):
    """Asked trial by trial (the generation then comes from Optuna's own scan, the population from the
    study as it is now, independent draws from a RandomState seeded as NSGAIISampler's own)."""
    space = SimpleNamespace(distributions=lambda: KNOBS)
    fast = _ask_tell(nsga2._nsga2_sampler(space, seed, 4), 30)
    stock = _ask_tell(optuna.samplers.NSGAIISampler(seed=seed, population_size=4), 30)
    assert max(g for _, g in stock) >= 5  # several generations bred from parents
    assert fast == stock
