"""The facts resolved into one `Problem`: each part stated at most once (contradictions such as '64 H100
on 128 GPUs' are errors naming each phrase), the model from its name or size, the GPU types with their
counts, and the global batch in sequences. `Reader` holds the facts and the errors found so far.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from autopar.cli.ask_parse.catalog_match import presets_by_size, unknown_gpu_message
from autopar.cli.ask_parse.echo import fact_meaning
from autopar.cli.ask_parse.facts import Fact
from autopar.cli.ask_parse.numbers import plain_number
from autopar.cli.ask_parse.tokens import Tok
from autopar.cli.ask_parse.vocabulary import PRECISION_ORDER
from autopar.defaults import DEFAULT_SEQ_LEN
from autopar.text import excerpt, one_line


@dataclass
class Reader:
    """The facts of one request, with the words each was read from and the errors found so far (with a
    priority: unknown names first, then ambiguous ones, then contradictions)."""

    text: str
    toks: Sequence[Tok]
    facts: list[Fact]
    errors: list[tuple[int, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def said(self, f: Fact) -> str:
        """The words of a fact as written, on one line, cut if long."""
        return excerpt(one_line(self.text[self.toks[f.first].start : self.toks[f.end - 1].end]))

    def all(self, *kinds: str) -> list[Fact]:
        return [f for f in self.facts if f.kind in kinds]

    def fail(self, priority: int, message: str) -> None:
        self.errors.append((priority, message))

    def one(
        self,
        facts: Sequence[Fact],
        what: str,
        value: Callable[[Fact], Any] = lambda f: f.value,
        same: Callable[[Any], Any] = lambda v: v,
    ) -> Any:
        """The value the facts agree on (`same` says when two agree; None without any facts); values that
        differ are an error naming each."""
        seen: dict[Any, Fact] = {}
        for f in facts:
            seen.setdefault(same(value(f)), f)
        if len(seen) > 1:
            shown = ", ".join(f"'{self.said(f)}' says {fact_meaning(f)}" for f in seen.values())
            self.fail(2, f"conflicting {what}: {shown}; give one")
        return value(facts[0]) if facts else None


def _model(r: Reader) -> str | None:
    """The model: a name, or a size that exactly one built-in model has."""
    unknown = [f.value for f in r.all("unknown_gpu")]
    if unknown:
        r.fail(0, unknown_gpu_message(unknown))
    for f in r.all("model_ambiguous"):
        r.fail(
            1, f"'{r.said(f)}' names {len(f.value)} built-in models: {', '.join(f.value)}; use the exact name"
        )
    model = r.one(r.all("model"), "models")
    sizes = r.all("size")
    size = r.one(sizes, "model sizes")
    if size is None:
        return model
    said, names = r.said(sizes[0]), presets_by_size().get(size, ())
    if model is not None:
        if model not in names:
            r.fail(2, f"conflicting models: {model} and '{said}' (not its size); give one")
        return model
    if len(names) == 1:
        return names[0]
    if not names:
        r.fail(
            1, f"'{said}': no built-in model is {plain_number(size)}B (`autopar models` lists them); name one"
        )
    else:
        r.fail(1, f"'{said}' matches {len(names)} built-in models: {', '.join(names)}; name one")
    return None


def _hardware(r: Reader) -> tuple[list[tuple[str, int | None]], int | None]:
    """The GPU types named, each with its count (own, or the one count given without a type), and that
    count. A type counted twice differently, or one type and a different bare count, is a contradiction."""
    counted = r.all("gpu")
    names = list(dict.fromkeys(f.value[0] for f in counted))
    bare = r.all("count")
    shared = r.one(bare, "GPU counts") if len(names) != 1 else None
    out: list[tuple[str, int | None]] = []
    for name in names:
        mine = [f for f in counted if f.value[0] == name and f.value[1] is not None]
        pool = mine + (bare if len(names) == 1 else [])
        own = r.one(pool, f"GPU counts of {name}", lambda f: f.value[1] if f.kind == "gpu" else f.value)
        out.append((name, own if own is not None else shared))
    for f in [*counted, *bare]:
        if (f.value[1] if f.kind == "gpu" else f.value) == 0:
            r.fail(2, f"'{r.said(f)}': a GPU count must be at least 1")
    return out, (shared if len(names) != 1 else out[0][1])


@dataclass(frozen=True)
class Problem:
    """What a request asks, resolved: None where it says nothing."""

    model: str | None
    gpus: list[tuple[str, int | None]]
    count: int | None
    seq_len: int | None
    global_batch: int | None
    precision: str | None
    framework: str | None
    tokens: float | None
    deadline: str | None
    spend: float | None
    rate: float | None
    goal: str | None
    cues: tuple[str, ...]


def _global_batch(r: Reader, seq_len: int | None) -> int | None:
    """The global batch in sequences: stated, or a token count per step over the sequence length."""
    seq = seq_len or DEFAULT_SEQ_LEN
    facts = r.all("batch", "batch_tokens")
    for f in facts:
        if f.kind == "batch_tokens" and f.value % seq:
            r.fail(2, f"'{r.said(f)}' is {f.value / seq:,.2f} sequences of {seq} tokens, not a whole number; "
                   "give the global batch in sequences ('global batch 512')")  # fmt: skip
    return r.one(
        facts, "global batches", lambda f: int(f.value // seq) if f.kind == "batch_tokens" else f.value
    )


def read_problem(r: Reader) -> Problem:
    """Every part of the request, each stated at most once (contradictions are errors)."""
    from autopar.units import parse_duration

    gpus, count = _hardware(r)
    seq_len = r.one(r.all("seq_len"), "sequence lengths")
    precisions = {f.value for f in r.all("precision")}
    return Problem(
        model=_model(r),
        gpus=gpus,
        count=count,
        seq_len=seq_len,
        global_batch=_global_batch(r, seq_len),
        precision=",".join(p for p in PRECISION_ORDER if p in precisions) or None,
        framework=r.one(r.all("framework"), "frameworks"),
        tokens=r.one(r.all("tokens"), "token budgets"),
        deadline=r.one(r.all("deadline"), "deadlines", same=parse_duration),
        spend=r.one(r.all("spend"), "spending caps"),
        rate=r.one(r.all("rate"), "$/Mtoken caps"),
        goal=r.one(r.all("goal"), "goals"),
        cues=tuple(dict.fromkeys(f.value for f in r.all("cue"))),
    )


def check_money(r: Reader, p: Problem) -> None:
    if p.spend is not None and p.rate is not None:
        said = [r.said(f) for f in r.all("spend", "rate")]
        r.fail(2, f"two money limits, '{said[0]}' and '{said[1]}': give one (a total or a $/Mtoken rate)")
