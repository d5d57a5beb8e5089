"""The runners of `autopar tune`: where a candidate runs and how its measurement comes back (one module each;
the shared contract is base.py)."""

from __future__ import annotations

from typing import Any

from autopar.errors import SpecError
from autopar.tune.runners.base import Job, Outcome, Runner

RUNNERS = ("dryrun", "slurm", "cmd:TEMPLATE")

__all__ = ["RUNNERS", "Job", "Outcome", "Runner", "make_runner"]


def make_runner(spec: str, model_arg: str | None = None) -> Any:
    """The runner a --runner value names (one line naming the value otherwise)."""
    text = spec.strip()
    if text == "dryrun":
        from autopar.tune.runners.dryrun import DryrunRunner

        return DryrunRunner(model_arg)
    if text == "slurm":
        from autopar.tune.runners.slurm import SlurmRunner

        return SlurmRunner()
    if text.startswith("cmd:"):
        template = text[4:].strip()
        if not template:
            raise SpecError("runner='cmd:': the command after 'cmd:' is empty")
        from autopar.tune.runners.command import CommandRunner

        return CommandRunner(template)
    from autopar.errors import close_hint

    raise SpecError(
        f"runner={spec!r}: expected one of {', '.join(RUNNERS)}{close_hint(text, ['dryrun', 'slurm'])}"
    )
