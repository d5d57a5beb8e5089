"""The measured loop: propose a candidate, run it, learn from the measurement, until the stop rule holds.

`Tuner` holds the candidates, the prior, the runs measured so far (this tune's and, on a resumed study, the
earlier ones) and the belief they give (autopar/tune/belief.py); `step` runs one candidate, `run` loops until
a stop rule: "confident" (autopar/tune/decide.py), "max_runs", "max_hours" (GPU-job wall time of the runs,
resumed ones included) or "exhausted" (no candidate left that has not run). A candidate runs at most once:
a failed or stale run is kept, with its reason, and never launched again.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from autopar.calibration.planning.plan import SHORT_RUN_MEASURED, SHORT_RUN_WARMUP, Z80
from autopar.tune import belief as bf
from autopar.tune import decide
from autopar.tune.candidates import Candidate, knob_matrix
from autopar.tune.runners.base import Job, Outcome, checked, default_timeout, failed, read_handle

DEFAULT_STEPS = SHORT_RUN_WARMUP + SHORT_RUN_MEASURED  # a short run: 10 warm-up + 20 measured steps
SHARED_POLL_S = 5.0  # how often a tune whose open candidates all run in another tune looks at the study


@dataclass(frozen=True)
class TuneSettings:
    """How the loop runs and when it stops."""

    max_runs: int | None = None
    max_hours: float | None = None
    p_stop: float = decide.DEFAULT_STOP_PROBABILITY
    noise: float = decide.DEFAULT_NOISE
    steps: int = DEFAULT_STEPS
    warmup: int = SHORT_RUN_WARMUP
    run_timeout_s: float | None = None
    runs_dir: Path = Path("autopar-tune")


@dataclass
class RunInfo:
    """One run: which candidate, what was believed when it was chosen, what it measured."""

    number: int
    key: str
    outcome: Outcome
    believed: tuple[float, float, float]  # tokens/s per GPU: median, 80% band, when it was chosen
    p_fit: float
    win_probability: float
    wall_s: float
    run_dir: str
    resumed: bool = False
    trial: int | None = None  # its Optuna trial number, when a study holds it


@dataclass
class Belief:
    """Per candidate: believed median tokens/s per GPU and 80% band, probability to fit, chance to win."""

    median: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    fit: np.ndarray
    win: np.ndarray


@dataclass
class TuneResult:
    """What a tune did and concluded."""

    candidates: list[Candidate]
    runs: list[RunInfo]
    stopped: str
    why: str
    prior: Belief
    posterior: Belief
    pick: int | None  # index into candidates of the measured pick
    front: list[int] = field(default_factory=list)  # indices of the measured front (several clusters)
    study_name: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def multi(self) -> bool:
        return len({c.hardware for c in self.candidates}) > 1


class Tuner:
    """The loop's state: candidates, prior, runs."""

    def __init__(self, candidates: Sequence[Candidate], prior: bf.Prior | None = None) -> None:
        if not candidates:
            raise ValueError("no candidates to tune")
        self.cands = list(candidates)
        self.prior = prior or prior_of(self.cands)
        self.z = knob_matrix(self.cands)
        self.log_pred = np.log([c.predicted for c in self.cands])
        self.runs: list[RunInfo] = []
        self.taken: set[str] = set()  # candidates another tune on the same study is running now
        self.index = {c.key: i for i, c in enumerate(self.cands)}
        self.noise = decide.DEFAULT_NOISE
        self._cached: tuple[tuple, tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None
        # log(usable capacity / predicted peak) of each candidate (a candidate with no memory figure fits)
        self.rooms = np.array(
            [math.log(c.capacity_gib / c.mem_gib) if c.mem_gib > 0 else 50.0 for c in self.cands]
        )

    # ------------------------------------------------------------------------------------------ belief
    def _measured(self, runs: Sequence[RunInfo]) -> tuple[list[int], list[float]]:
        """(candidate index, y = log(measured / predicted)) of the runs that measured a throughput."""
        idx, y = [], []
        for r in runs:
            x = r.outcome.tokens_per_s_per_gpu
            if r.outcome.status == "ok" and x:
                i = self.index[r.key]
                idx.append(i)
                y.append(math.log(x) - self.log_pred[i])
        return idx, y

    def _memory_evidence(self, runs: Sequence[RunInfo]) -> list[bf.MemoryEvidence]:
        out = []
        for r in runs:
            i = self.index[r.key]
            c, o = self.cands[i], r.outcome
            if o.status == "oom":
                out.append(bf.MemoryEvidence(self.rooms[i], "oom"))
            elif o.status == "ok" and not o.smoke:
                if o.peak_mem_gib and c.mem_gib > 0:
                    out.append(bf.MemoryEvidence(self.rooms[i], "peak", math.log(o.peak_mem_gib / c.mem_gib)))
                else:
                    out.append(bf.MemoryEvidence(self.rooms[i], "fit"))
        return out

    def _posterior(self, runs: Sequence[RunInfo]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(log tokens/s per GPU believed, its sd, probability to fit) of every candidate given `runs` (the
        stop rule, the proposal and the run's attributes ask for the same runs: computed once)."""
        key = tuple((r.key, r.outcome) for r in runs)
        if self._cached is None or self._cached[0] != key:
            mean, sd = bf.throughput_posterior(self.prior, self.z, *self._measured(runs))
            fit = bf.fit_probability(self.prior, self._memory_evidence(runs), self.rooms)
            self._cached = (key, (self.log_pred + mean, sd, fit))
        return self._cached[1]

    def belief(self, runs: Sequence[RunInfo] | None = None) -> Belief:
        """The belief given `runs` (default: every run so far)."""
        runs = self.runs if runs is None else list(runs)
        center, sd, fit = self._posterior(runs)
        win = self._win(center, sd, fit, runs)
        return Belief(np.exp(center), np.exp(center - Z80 * sd), np.exp(center + Z80 * sd), fit, win)

    def _measured_arrays(self, runs: Sequence[RunInfo]) -> decide.Measured:
        ok = [
            (float(r.outcome.tokens_per_s_per_gpu), self.cands[self.index[r.key]])
            for r in runs
            if r.outcome.status == "ok" and r.outcome.tokens_per_s_per_gpu
        ]
        return decide.as_measured(
            [x for x, _ in ok], [c.num_gpus for _, c in ok], [c.usd_per_gpu_hour for _, c in ok]
        )

    def _beliefs(self, center: np.ndarray, sd: np.ndarray, fit: np.ndarray, idx: list[int]) -> decide.Beliefs:
        cs = [self.cands[i] for i in idx]
        return decide.Beliefs(
            center[idx],
            sd[idx],
            fit[idx],
            np.array([c.num_gpus for c in cs], float),
            np.array([c.usd_per_gpu_hour for c in cs], float),
        )

    def _win(
        self, center: np.ndarray, sd: np.ndarray, fit: np.ndarray, runs: Sequence[RunInfo]
    ) -> np.ndarray:
        """Each candidate's chance to fit and beat the measured front by more than the noise (0 once run)."""
        open_ = self.open(runs)
        win = np.zeros(len(self.cands))
        if open_:
            b = self._beliefs(center, sd, fit, open_)
            m = self._measured_arrays(runs)
            win[open_] = decide.win_probability(b, m, self.noise) if len(m.x) else b.fit
        return win

    def open(self, runs: Sequence[RunInfo] | None = None) -> list[int]:
        """Candidates that have not run (a run of any outcome closes its candidate) and that no other tune on
        the same study is running."""
        done = {r.key for r in (self.runs if runs is None else runs)} | self.taken
        return [i for i, c in enumerate(self.cands) if c.key not in done]

    # ------------------------------------------------------------------------------------------ decisions
    def propose(self) -> int | None:
        """The next candidate to run (None when none is left)."""
        open_ = self.open()
        if not open_:
            return None
        center, sd, fit = self._posterior(self.runs)
        b = self._beliefs(center, sd, fit, open_)
        return open_[decide.next_index(b, self._measured_arrays(self.runs))]

    def stop_rule(self, s: TuneSettings) -> tuple[str, str] | None:
        """(rule, why) when the loop should stop, else None."""
        if not self.open():
            return "exhausted", f"every one of the {len(self.cands)} candidates has run"
        m = self._measured_arrays(self.runs)
        if len(m.x):
            win = self.belief().win
            best = float(win.max())
            if best <= s.p_stop:
                top = self.cands[int(np.argmax(win))].key
                return "confident", (
                    f"no candidate that has not run has more than {s.p_stop:.0%} chance to beat the measured best "
                    f"by more than {s.noise:.0%} (the likeliest, {top}: {best:.1%})"
                )
        if s.max_runs is not None and len(self.runs) >= s.max_runs:
            return "max_runs", f"--max-runs {s.max_runs} reached"
        hours = sum(r.wall_s for r in self.runs) / 3600
        if s.max_hours is not None and hours >= s.max_hours:
            return "max_hours", f"--max-hours {s.max_hours:g} reached ({hours:.2f} h of runs)"
        return None

    def pick(self) -> tuple[int | None, list[int]]:
        """(the measured pick: highest tokens/s of the cluster, the measured front's indices into candidates)."""
        ok = [r for r in self.runs if r.outcome.status == "ok" and r.outcome.tokens_per_s_per_gpu]
        if not ok:
            return None, []
        m = self._measured_arrays(self.runs)
        front = [self.index[ok[i].key] for i in decide.measured_front(m)]
        best = max(
            ok, key=lambda r: (r.outcome.tokens_per_s_per_gpu or 0.0) * self.cands[self.index[r.key]].num_gpus
        )
        return self.index[best.key], front


def prior_of(cands: Sequence[Candidate], config_sd: float | None = None) -> bf.Prior:
    """The prior from the candidates' bands (autopar/tune/belief.py prior_from_bands)."""
    return bf.prior_from_bands(
        [bf.band_sd(c.lo, c.hi) for c in cands],
        [bf.band_sd(c.mem_lo, c.mem_hi) for c in cands],
        config_sd,
    )


Event = Callable[[str, Any], None]


def run_loop(
    tuner: Tuner,
    runner: Any,
    settings: TuneSettings,
    study: Any = None,
    on_event: Event | None = None,
) -> TuneResult:
    """Resume what `study` holds, then run candidates until a stop rule holds."""
    tuner.noise = settings.noise
    emit = on_event or (lambda kind, payload: None)
    prior_belief = tuner.belief([])
    if study is not None:
        study.set_stopped(None)  # running again: `study runs` must not show an earlier end
        _resume(tuner, runner, settings, study, emit)
    while True:
        _sync(tuner, study, emit)
        rule = tuner.stop_rule(settings)
        i = tuner.propose() if rule is None else None
        if i is None and tuner.taken and (rule is None or rule[0] in ("confident", "exhausted")):
            time.sleep(
                SHARED_POLL_S
            )  # another tune on this study runs the rest: its results may change the answer
            continue
        if i is None:
            break
        run = _one_run(tuner, i, runner, settings, study)
        if run is not None:
            tuner.runs.append(run)
            emit("run", run)
    stopped, why = rule or ("exhausted", "no candidate left")
    pick, front = tuner.pick()
    if study is not None:
        study.set_stopped(
            {
                "rule": stopped,
                "why": why,
                "pick": None if pick is None else tuner.cands[pick].label,
                "runs": len(tuner.runs),
            }
        )
    return TuneResult(
        tuner.cands,
        tuner.runs,
        stopped,
        why,
        prior_belief,
        tuner.belief(),
        pick,
        front,
        study_name=getattr(study, "name", None),
    )


def _job(tuner: Tuner, i: int, number: int, settings: TuneSettings) -> Job:
    c = tuner.cands[i]
    folder = settings.runs_dir / f"run{number:03d}-{_slug(c.key)}"
    return Job(number, c, folder, settings.steps, settings.warmup, *_timeout(c, settings))


def _timeout(c: Candidate, settings: TuneSettings) -> tuple[float, str]:
    """A run's timeout and what set it: --run-timeout, else the default rule (runners/base.py)."""
    if settings.run_timeout_s is not None:
        return settings.run_timeout_s, "--run-timeout"
    return default_timeout(c, settings.steps)


def _slug(text: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()[:60] or "run"


def _attrs_before(tuner: Tuner, i: int, job: Job, runner: Any) -> tuple[dict[str, Any], tuple, float, float]:
    c = tuner.cands[i]
    b = tuner.belief()
    believed = (float(b.median[i]), float(b.lo[i]), float(b.hi[i]))
    attrs = {
        "label": c.label,
        "candidate_id": c.candidate_id,
        "hardware": c.hardware,
        "runner": runner.name,
        "run_dir": str(job.run_dir),
        "predicted_tokens_per_s_per_gpu": c.predicted,
        "predicted_band": [c.lo, c.hi],
        "analytical_tokens_per_s_per_gpu": c.analytical,
        "believed_tokens_per_s_per_gpu": believed[0],
        "believed_band": [believed[1], believed[2]],
        "p_fit": float(b.fit[i]),
        "win_probability": float(b.win[i]),
        "predicted_peak_mem_gib": c.mem_gib,
        "owner": _owner(),
    }
    return attrs, believed, float(b.fit[i]), float(b.win[i])


def _one_run(tuner: Tuner, i: int, runner: Any, settings: TuneSettings, study: Any) -> RunInfo | None:
    """Run candidate i (None when another tune on the same study took it first)."""
    number = len(tuner.runs) + 1
    job = _job(tuner, i, number, settings)
    attrs, believed, p_fit, win = _attrs_before(tuner, i, job, runner)
    trial = study.begin(job.candidate.key, _knobs(job.candidate), attrs) if study is not None else None
    if trial is not None and study.claimed_before(job.candidate.key, trial.number):
        study.fail(trial, {"status": "duplicate", "fail_reason": "another tune on this study runs it"})
        return None
    t0 = time.monotonic()
    try:
        handle = runner.start(job)
    except Exception as e:  # noqa: BLE001 - a launch that fails is a failed run, the loop goes on
        outcome = failed(f"could not start: {e}")
    else:
        if trial is not None:
            trial.set_user_attr("handle", handle)
        try:
            outcome = checked(runner.wait(job, handle), job.candidate)
        except KeyboardInterrupt:
            raise  # the trial stays RUNNING with its handle: the next tune re-attaches
        except Exception as e:  # noqa: BLE001
            outcome = failed(f"runner error: {e}")
    wall = time.monotonic() - t0
    run = RunInfo(number, job.candidate.key, outcome, believed, p_fit, win, wall, str(job.run_dir))
    run.trial = trial.number if trial is not None else None
    if trial is not None:
        _finish(study, trial, tuner, run)
    return run


def _knobs(c: Candidate) -> dict[str, int]:
    from autopar.tune.study import KNOB_PARAMS

    return {k: int(getattr(c.strategy, k) or 1) for k in KNOB_PARAMS}


def _finish(study: Any, trial: Any, tuner: Tuner, run: RunInfo) -> None:
    o = run.outcome
    c = tuner.cands[tuner.index[run.key]]
    attrs = {"status": o.status, "wall_s": run.wall_s, "how": o.reason, "smoke": o.smoke}
    if o.peak_mem_gib is not None:
        attrs["measured_peak_mem_gib"] = o.peak_mem_gib
    if o.status == "ok" and o.tokens_per_s_per_gpu:
        x = o.tokens_per_s_per_gpu
        attrs["measured_tokens_per_s_per_gpu"] = x
        attrs["measured_over_predicted"] = x / c.predicted
        values = [x * c.num_gpus, 1e6 * c.usd_per_gpu_hour / 3600 / x] if study.multi else [x]
        study.complete(trial, values, attrs)
    else:
        study.fail(trial, {**attrs, "fail_reason": o.reason})


def _stored_run(t: Any, number: int, outcome: Outcome | None = None) -> RunInfo:
    """A run of an earlier (or another) tune as its trial stored it."""
    a = t.attrs
    if outcome is None and t.state == "COMPLETE":
        tps, mem = a.get("measured_tokens_per_s_per_gpu"), a.get("measured_peak_mem_gib")
        outcome = Outcome("ok", tps, mem, a.get("how", ""), smoke=bool(a.get("smoke")))
    elif outcome is None:
        status = a.get("status") if a.get("status") in ("oom", "failed") else "failed"
        outcome = Outcome(status, reason=a.get("fail_reason", "failed"))
    band = a.get("believed_band") or (math.nan, math.nan)
    believed = (a.get("believed_tokens_per_s_per_gpu") or math.nan, *band)
    p_fit, win = a.get("p_fit", math.nan), a.get("win_probability", math.nan)
    wall = float(a.get("wall_s") or 0.0)
    return RunInfo(
        number, t.key, outcome, believed, p_fit, win, wall, str(a.get("run_dir", "")), True, t.number
    )


def _owner() -> dict[str, Any]:
    """This tune process, as a RUNNING trial names its owner (host, pid, start time)."""
    import os
    import socket

    from autopar.tune.runners.local import process_start

    return {"host": socket.gethostname(), "pid": os.getpid(), "start": process_start(os.getpid())}


def _owned_elsewhere(attrs: dict[str, Any]) -> bool:
    """True when the tune that launched a RUNNING trial still runs (on this host), or runs on another host
    (which only a tune there can re-attach to)."""
    import socket

    from autopar.tune.runners.local import alive

    owner = attrs.get("owner") or {}
    if owner.get("host") and owner.get("host") != socket.gethostname():
        return True
    return bool(owner) and alive(owner)


def _never_launched(attrs: dict[str, Any]) -> bool:
    """True when the tune of a RUNNING trial died before its runner launched anything: no handle stored, and
    its run folder holds nothing a launch writes (a runner writes only strategy.json before it launches:
    the log or the sbatch script comes before the process or job; no folder or no run_dir yet)."""
    if attrs.get("handle") is not None:
        return False
    if not attrs.get("run_dir"):
        return True
    try:
        names = {p.name for p in Path(attrs["run_dir"]).iterdir()}
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return names <= {"strategy.json"}


def _resume(tuner: Tuner, runner: Any, settings: TuneSettings, study: Any, emit: Event) -> None:
    """Take in the study's finished runs; re-attach to RUNNING ones whose tune is gone (or mark them stale).
    A RUNNING trial whose tune died before it launched the run is no run: its candidate stays open."""
    from autopar.tune.study import NOT_RUNS

    study.fail_waiting()
    for t in sorted(study.trials(), key=lambda t: t.number):
        if t.key not in tuner.index or t.state == "WAITING" or t.attrs.get("status") in NOT_RUNS:
            continue
        if t.state == "RUNNING" and _owned_elsewhere(t.attrs):
            continue  # another tune runs it: _sync counts it as taken
        if t.state == "RUNNING" and _never_launched(t.attrs):
            reason = "the tune stopped before it launched the run; the candidate stays open"
            study.fail(study.trial_of(t), {"status": "not_launched", "fail_reason": reason})
            continue
        number = len(tuner.runs) + 1
        outcome = _reattach(tuner, runner, settings, study, t, number) if t.state == "RUNNING" else None
        run = _stored_run(t, number, outcome)
        tuner.runs.append(run)
        emit("resumed", run)


def _sync(tuner: Tuner, study: Any, emit: Event) -> None:
    """Take in what other tunes on the same study finished, and mark what they are running as taken."""
    from autopar.tune.study import NOT_RUNS

    if study is None:
        return
    known = {r.trial for r in tuner.runs if r.trial is not None}
    tuner.taken = set()
    for t in sorted(study.trials(), key=lambda t: t.number):
        if t.number in known or t.key not in tuner.index:
            continue
        if t.state == "RUNNING":
            tuner.taken.add(t.key)
        elif t.state in ("COMPLETE", "FAIL") and t.attrs.get("status") not in NOT_RUNS:
            run = _stored_run(t, len(tuner.runs) + 1)
            tuner.runs.append(run)
            emit("resumed", run)


def _reattach(tuner: Tuner, runner: Any, settings: TuneSettings, study: Any, t: Any, number: int) -> Outcome:
    """Wait for a run an earlier tune launched (or mark it stale); finish its trial. A run launched by a tune
    killed before its trial stored the handle is found by the handle its run folder holds; a runner that
    cannot say what became of the run (its scheduler down, a broken result) FAILs it with one reason."""
    a = t.attrs
    i = tuner.index[t.key]
    job = Job(
        number,
        tuner.cands[i],
        Path(a.get("run_dir") or settings.runs_dir),
        settings.steps,
        settings.warmup,
        *_timeout(tuner.cands[i], settings),
    )
    handle = a.get("handle") or (read_handle(job.run_dir) if a.get("run_dir") else None)
    outcome: Outcome | None = None
    t0 = time.monotonic()
    if handle is None:
        reason = "stale: the tune stopped before the run was launched"
    elif a.get("runner") != runner.name:
        reason = f"stale: launched by the {a.get('runner')} runner, not {runner.name}"
    else:
        try:
            outcome = runner.attach(job, handle)
        except Exception as e:  # noqa: BLE001 - one run the runner lost track of, not the whole tune
            outcome = failed(f"runner error on re-attach: {e}")
        reason = "stale: the run is gone and left no result"
    final = checked(outcome, tuner.cands[i]) if outcome is not None else Outcome("failed", reason=reason)
    run = RunInfo(
        number, t.key, final, (math.nan,) * 3, math.nan, math.nan, time.monotonic() - t0, str(job.run_dir)
    )
    if final.status == "failed" and final.reason.startswith("stale"):
        study.fail(study.trial_of(t), {"status": "stale", "fail_reason": final.reason})
    else:
        _finish(study, study.trial_of(t), tuner, run)
    return final
