"""The fast NSGA-II path equals the reference path, trial for trial (issue 15).

The fast path keeps local-search moves out of the private Optuna study and tells NSGAIISampler its
search space; the reference path (nsga2.REFERENCE_PATH) enqueues every move into the private study
and uses a stock NSGAIISampler, as a plain Optuna user would. Same seed, same inputs: the same
trials (numbers, strategies, values), the same Pareto set, and the same stored study.
"""

from __future__ import annotations

import pytest

from autopar.calibration.apply import load_default_calibration
from autopar.catalog import get_gpu, get_model
from autopar.search import nsga2, optimize
from autopar.specs import ClusterSpec, Workload

MODEL = get_model("Llama-3.1-8B")
CLUSTER = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=16)
WL = Workload(seq_len=4096, global_batch=64)


def _run(monkeypatch, reference: bool, **kw):
    monkeypatch.setattr(nsga2, "REFERENCE_PATH", reference)
    return optimize(MODEL, CLUSTER, WL, min_headroom_gib=2.0, **kw)


def _trials(r):
    return [(t.number, t.strategy, t.num_gpus, t.feasible, t.reason, t.values) for t in r.trials]


def _front(r):
    return sorted((t.strategy.label(), tuple(sorted(t.values.items()))) for t in r.trials if not t.dominated)


@pytest.mark.parametrize(
    "budget, seed, local_search, calibrated",
    [(150, 0, 0.7, True), (120, 3, 0.0, False), (400, 1, 0.7, False)],
)
def test_fast_path_equals_reference_path(monkeypatch, budget, seed, local_search, calibrated):
    kw = dict(budget=budget, seed=seed, local_search=local_search)
    if calibrated:
        kw["calibration"] = load_default_calibration()
    ref, fast = _run(monkeypatch, True, **kw), _run(monkeypatch, False, **kw)
    assert fast.stats["optuna_trials"] == ref.stats["optuna_trials"] > budget  # duplicates were replaced
    assert fast.stats["duplicates"] == ref.stats["duplicates"]
    assert _trials(fast) == _trials(ref)
    assert _front(fast) and _front(fast) == _front(ref)


def test_stored_study_is_the_same(monkeypatch, tmp_path):
    """What optuna-dashboard reads: the same trials with the same params, values, constraints, attrs."""
    import optuna

    rows = []
    for reference in (True, False):
        path = tmp_path / f"{reference}.journal"
        _run(monkeypatch, reference, budget=120, seed=2, storage=str(path), study_name="s")
        storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(path)))
        trials = optuna.load_study(study_name="s", storage=storage).trials
        rows.append(
            [
                (t.number, t.state, t.params, t.values, t.constraints, t.user_attrs, t.system_attrs)
                for t in trials
            ]
        )
    assert len(rows[0]) > 120 and rows[0] == rows[1]


def test_resumed_study_is_the_same(monkeypatch, tmp_path):
    """Resuming reads the earlier trials back into the private study (generation counts included)."""
    import optuna

    rows = []
    for reference in (True, False):
        path = str(tmp_path / f"{reference}.journal")
        _run(monkeypatch, reference, budget=100, seed=4, storage=path, study_name="s")
        r = _run(monkeypatch, reference, budget=260, seed=5, storage=path, study_name="s")
        storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(path))
        trials = optuna.load_study(study_name="s", storage=storage).trials
        rows.append(([(t.number, t.params, t.values, t.system_attrs) for t in trials], _front(r)))
    assert len(rows[0][0]) > 260 and rows[0] == rows[1]
