"""The request end to end: `parse_request` (words, facts, problem, command and flags, echo) and
`check_understood`, which refuses words not understood that look like part of the problem.
"""

from __future__ import annotations

from collections.abc import Sequence

from autopar.cli.ask_parse.echo import fact_meaning
from autopar.cli.ask_parse.errors import AskError
from autopar.cli.ask_parse.flags import defaults_note, optimize_flags, whatif_flags
from autopar.cli.ask_parse.resolve import Reader, check_money, read_problem
from autopar.cli.ask_parse.result import OPTIMIZE, WHATIF, AskParse, Span, Unparsed
from autopar.cli.ask_parse.scan import scan
from autopar.cli.ask_parse.tokens import tokenize
from autopar.cli.ask_parse.vocabulary import FILLERS, OTHER_ACCELERATORS
from autopar.text import excerpt, one_line

MAX_REQUEST_CHARS = 2000  # a longer request is refused before any parsing (bounded time on any input)


def _unparsed(r: Reader, left: Sequence[int]) -> tuple[Unparsed, ...]:
    """Runs of consecutive words no rule claimed, those made only of filler words dropped."""
    runs: list[list[int]] = []
    for k in left:
        if runs and runs[-1][-1] == k - 1:
            runs[-1].append(k)
        else:
            runs.append([k])
    out = []
    for run in runs:
        words = [r.toks[k] for k in run]
        if all(w.low in FILLERS for w in words):
            continue
        matters = any(
            any(c.isdigit() for c in w.low) or "$" in w.low or w.low in OTHER_ACCELERATORS for w in words
        )
        start, end = words[0].start, words[-1].end
        out.append(Unparsed(excerpt(one_line(r.text[start:end])), start, end, matters))
    return tuple(out)


def parse_request(text: str) -> AskParse:
    """The command a plain-language request asks for (see the package doc); AskError when it cannot be one."""
    if len(text) > MAX_REQUEST_CHARS:
        raise AskError(f"request: {len(text):,} characters; at most {MAX_REQUEST_CHARS:,} are read")
    toks = tokenize(text)
    facts, left = scan(toks)
    if all(f.kind == "aside" for f in facts):
        shown = excerpt(one_line(text.strip()))
        raise AskError(
            f"nothing understood in '{shown}': say what to plan, e.g. 'Llama 3 70B on 64 H100, 8k context, "
            "15T tokens, fastest under $5M'"
        )
    r = Reader(text, toks, facts)
    p = read_problem(r)
    check_money(r, p)
    command = WHATIF if p.cues or p.deadline is not None or len(p.gpus) > 1 else OPTIMIZE
    flags = whatif_flags(r, p) if command == WHATIF else optimize_flags(r, p)
    if r.errors:
        raise AskError("; ".join(m for _, m in sorted(r.errors, key=lambda e: e[0])))
    default = defaults_note(command, flags)
    spans = tuple(Span(r.said(f), fact_meaning(f), toks[f.first].start, toks[f.end - 1].end) for f in facts)
    notes = (*r.notes, *([default] if default else []))
    return AskParse(command, flags, spans, _unparsed(r, left), notes)


def check_understood(parsed: AskParse, lenient: bool) -> None:
    """Words not understood that look like they matter (a number, an amount, an accelerator word) are an
    error unless `lenient`: they would otherwise be dropped from the problem without a word."""
    serious = [u.text for u in parsed.not_understood if u.matters]
    if serious and not lenient:
        shown = ", ".join(f"'{t}'" for t in serious)
        raise AskError(
            f"not understood: {shown}, which looks like part of the problem (a number, an amount or an "
            "accelerator); rephrase it (`autopar ask --help` lists what is read) or add --lenient to go on without it"
        )
