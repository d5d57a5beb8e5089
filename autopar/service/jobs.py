"""Where the service runs commands: worker processes, and jobs for the long ones.

Each command runs in a worker process (`commands.run` redirects the process's stdout, so one command per
process at a time); quick commands share `quick` workers, jobs (optimize, whatif) have their own pool of
`max_jobs` processes, so a long search never queues an estimate behind it. A job is an id with a state
(queued, running, done, failed), its answer or the one line that says why it failed; a job over the limit is
refused (HTTP 429), never queued without bound. Jobs live in memory: a restarted service forgets them (the
studies a search writes to a --storage do not depend on it).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
import uuid
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

from autopar.service.commands import Outcome, click_group, run

# States a job passes through, in order; `failed` replaces `done` when the command exited non-zero.
QUEUED, RUNNING, DONE, FAILED = "queued", "running", "done", "failed"
WORKER_DIED = 3  # the exit code a lost worker reports (the service answers 503, as for a failed storage)


def _warm() -> None:
    """Build the CLI once in a fresh worker, so that its first request does not pay for it."""
    click_group()


def _pool(workers: int) -> ProcessPoolExecutor:
    # spawn: the service's threads (uvicorn's) are not copied into a forked child half-locked
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))


@dataclass
class Job:
    """A long command run for a client: its id, state, timings and answer."""

    id: str
    command: str
    argv: list[str]
    state: str = QUEUED
    created: float = field(default_factory=time.time)
    started: float | None = None
    finished: float | None = None
    outcome: Outcome | None = None

    def view(self, with_result: bool = True) -> dict[str, Any]:
        """The job as the API shows it."""
        out: dict[str, Any] = {
            "id": self.id,
            "command": self.command,
            "state": self.state,
            "created": self.created,
            "started": self.started,
            "finished": self.finished,
            "url": f"/api/jobs/{self.id}",
        }
        if self.outcome is not None and with_result:
            out["exit_code"] = self.outcome.exit_code
            out["result"] = self.outcome.document
            out["error"] = self.outcome.error or None
        return out


def new_job_id() -> str:
    """A job's id: 12 hex digits, unguessable enough that one client does not stumble on another's job."""
    return uuid.uuid4().hex[:12]


class JobLimitError(RuntimeError):
    """More jobs asked for than the service runs at once (HTTP 429)."""


class Workers:
    """The service's worker processes: `quick` for short commands, `max_jobs` for jobs."""

    def __init__(self, quick: int, max_jobs: int):
        self.max_jobs, self.quick_workers = max_jobs, quick
        self.quick = _pool(quick)
        self.long = _pool(max_jobs)
        self.jobs: dict[str, Job] = {}

    def warm(self) -> None:
        """Start every worker process and build the CLI in it (the service calls this once it is listening, so
        that start-up is not spent importing autopar four times over)."""
        for pool, n in ((self.quick, self.quick_workers), (self.long, self.max_jobs)):
            for _ in range(n):
                pool.submit(_warm)

    async def call(self, argv: list[str]) -> Outcome:
        """Run a short command and wait for it; a worker that died is replaced and the call answers why."""
        try:
            return await asyncio.wrap_future(self.quick.submit(run, argv))
        except BrokenProcessPool as e:
            self.quick.shutdown(wait=False, cancel_futures=True)
            self.quick = _pool(self.quick_workers)
            for _ in range(self.quick_workers):
                self.quick.submit(_warm)
            return Outcome(WORKER_DIED, None, f"the worker running this request stopped ({e}); try again")

    def active(self) -> int:
        return sum(j.state in (QUEUED, RUNNING) for j in self.jobs.values())

    def start(self, command: str, argv: list[str], job_id: str | None = None) -> Job:
        """Start a job; JobLimitError when max_jobs are already queued or running."""
        if self.active() >= self.max_jobs:
            raise JobLimitError(
                f"{self.max_jobs} job(s) already running (the service's --max-jobs); try again when one is done"
            )
        job = Job(job_id or new_job_id(), command, argv)
        self.jobs[job.id] = job
        job.state, job.started = RUNNING, time.time()
        self.long.submit(run, argv).add_done_callback(lambda fut: self._finish(job, fut))
        return job

    def _finish(self, job: Job, fut: Future[Outcome]) -> None:
        try:
            job.outcome = fut.result()
        except Exception as e:  # noqa: BLE001 - a worker that died: the job fails with one line
            job.outcome = Outcome(1, None, f"the worker running this job stopped: {type(e).__name__}: {e}")
        job.finished = time.time()
        job.state = DONE if job.outcome.exit_code == 0 else FAILED

    async def wait(self, job: Job, timeout_s: float) -> Job:
        """Wait until `job` is finished or `timeout_s` passed."""
        end = time.monotonic() + timeout_s
        while job.state in (QUEUED, RUNNING) and time.monotonic() < end:
            await asyncio.sleep(0.02)
        return job

    def close(self) -> None:
        self.quick.shutdown(wait=False, cancel_futures=True)
        self.long.shutdown(wait=False, cancel_futures=True)
