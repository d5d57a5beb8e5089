"""A runner that answers from published measurements (bench/tune_replay.py; tests): each candidate's
measured row, hidden until the tune "runs" it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autopar.tune.runners.base import Job, Outcome, failed


class ReplayRunner:
    """`answers` maps a candidate key to its Outcome (a key it lacks FAILs)."""

    name = "replay"

    def __init__(self, answers: Mapping[str, Outcome]) -> None:
        self.answers = dict(answers)
        self.asked: list[str] = []

    def start(self, job: Job) -> dict[str, Any]:
        self.asked.append(job.candidate.key)
        return {"key": job.candidate.key}

    def wait(self, job: Job, handle: dict[str, Any]) -> Outcome:
        return self.answers.get(str(handle["key"])) or failed(f"no measurement of {handle['key']!r}")

    def attach(self, job: Job, handle: dict[str, Any]) -> Outcome | None:
        return self.wait(job, handle)
