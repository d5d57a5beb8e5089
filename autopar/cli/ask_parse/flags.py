"""A resolved problem as command flags: `optimize` on one cluster (a total spend becomes its $/Mtoken
cap) or `whatif` over hardware options (a $/Mtoken cap becomes its total spend), and the note on the
defaults that apply because the request did not say.
"""

from __future__ import annotations

from typing import Any

from autopar.cli.ask_parse.numbers import format_si, plain_number
from autopar.cli.ask_parse.resolve import Problem, Reader
from autopar.cli.ask_parse.result import OPTIMIZE
from autopar.cli.ask_parse.vocabulary import GOAL_WORDS
from autopar.defaults import DEFAULT_GPU, DEFAULT_MODEL, DEFAULT_OBJECTIVES


def objectives_for(goal: str) -> tuple[str, ...]:
    """--objectives for a goal: its objective first, then the default ones in their order."""
    return (goal, *(o for o in DEFAULT_OBJECTIVES if o != goal))


def _workload_flags(p: Problem) -> dict[str, str]:
    """Model and workload flags both commands share."""
    flags: dict[str, str] = {}
    for flag, value in (
        ("--seq-len", p.seq_len),
        ("--global-batch", p.global_batch),
        ("--precision", p.precision),
        ("--framework", p.framework),
    ):
        if value is not None:
            flags[flag] = str(value)
    return flags


def optimize_flags(r: Reader, p: Problem) -> dict[str, str | tuple[str, ...]]:
    """`optimize` on one cluster; a total spend becomes its $/Mtoken cap over the token budget."""
    from autopar.units import TOKENS_PER_MTOKEN

    flags: dict[str, str | tuple[str, ...]] = {} if p.model is None else {"--model": p.model}
    if p.gpus:
        flags["--gpu"] = p.gpus[0][0]
    if p.count is not None:
        flags["--gpus"] = str(p.count)
    flags |= _workload_flags(p)
    if p.tokens is not None:
        flags["--tokens"] = format_si(p.tokens)
    if p.goal is not None:
        flags["--objectives"] = ",".join(objectives_for(p.goal))
    rate = p.rate
    if p.spend is not None and p.tokens is None:
        said = r.said(r.all("spend")[0])
        r.fail(2, f"'{said}' is a total spend: optimize caps $ per million tokens, so give the token budget too "
               "('15T tokens'), or a rate ('$0.50 per million tokens')")  # fmt: skip
    elif p.spend is not None and p.tokens is not None:
        # a derived rate to 6 significant figures: a cap of $0.333333/Mtoken, not 0.3333333333333333
        rate = float(f"{p.spend / (p.tokens / TOKENS_PER_MTOKEN):.6g}")
        r.notes.append(
            f"${format_si(p.spend, 'BMK')} over {format_si(p.tokens)} tokens = ${plain_number(rate)} per "
            "million tokens (--max-cost)"
        )
    if rate is not None:
        flags["--max-cost"] = plain_number(rate)
    return flags


def _options(r: Reader, p: Problem) -> tuple[str, ...]:
    """whatif --option values: GPU:COUNT, or a bare GPU for --deadline sizing (the fewest that meet it)."""
    gpus = p.gpus
    if not gpus:
        if "which" in p.cues:
            r.fail(2, "'which GPU': name the GPUs to choose from, e.g. 'H100 or B200'")
        gpus = [(DEFAULT_GPU, p.count)]
        r.notes.append(f"no GPU type named: {DEFAULT_GPU}, autopar's default GPU")
    bare = [name for name, count in gpus if count is None]
    if bare and p.deadline is None:
        r.fail(
            2, f"'{bare[0]}' has no count: give one ('64 {bare[0]}') or a deadline to size it ('in 30 days')"
        )
    return tuple(name if count is None else f"{name}:{count}" for name, count in gpus)


def whatif_flags(r: Reader, p: Problem) -> dict[str, str | tuple[str, ...]]:
    """`whatif` over the hardware options; a $/Mtoken cap becomes its total over the token budget."""
    from autopar.units import TOKENS_PER_MTOKEN

    flags: dict[str, str | tuple[str, ...]] = {} if p.model is None else {"--model": p.model}
    flags["--option"] = _options(r, p)
    flags |= _workload_flags(p)
    if p.tokens is None:
        r.fail(2, "comparing hardware or meeting a deadline needs the token budget: add e.g. '15T tokens'")
        return flags
    flags["--tokens"] = format_si(p.tokens)
    if p.deadline is not None:
        flags["--deadline"] = p.deadline
    spend = p.spend
    if p.rate is not None:
        spend = p.rate * p.tokens / TOKENS_PER_MTOKEN
        r.notes.append(
            f"${plain_number(p.rate)} per million tokens over {format_si(p.tokens)} tokens = "
            f"${format_si(spend, 'BMK')} (--max-spend)"
        )
    if spend is not None:
        flags["--max-spend"] = format_si(spend, "BMK")
    if p.goal is not None:
        r.notes.append(
            f"'{GOAL_WORDS[p.goal]}': whatif has no goal option; it ranks the options by cost within the "
            "deadline and cap and shows each one's time and cost"
        )
    return flags


def defaults_note(command: str, flags: dict[str, Any]) -> str | None:
    """Which defaults apply because the request did not say (model, GPU, count)."""
    from autopar.defaults import DEFAULT_GPUS

    said = {"--model": DEFAULT_MODEL}
    if command == OPTIMIZE:
        said |= {"--gpu": DEFAULT_GPU, "--gpus": str(DEFAULT_GPUS)}
    unsaid = [f"{flag} {value}" for flag, value in said.items() if flag not in flags]
    return f"not in the request, so autopar's defaults: {', '.join(unsaid)}" if unsaid else None
