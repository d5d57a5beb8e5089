"""The left-to-right reading of the words: at each word the phrase rules are tried in the fixed order of
`RULES`, each on at most a few words, so the time is linear in the length of the request.
"""

from __future__ import annotations

from collections.abc import Sequence

from autopar.cli.ask_parse.budget_rules import duration_rule, money_rule
from autopar.cli.ask_parse.catalog_match import model_rule, size_rule
from autopar.cli.ask_parse.facts import Fact, Rule
from autopar.cli.ask_parse.hardware_rules import counted_gpu_rule, gpu_rule, unknown_gpu_rule
from autopar.cli.ask_parse.tokens import Tok
from autopar.cli.ask_parse.word_rules import aside_rule, cue_rule, goal_rule, word_rule
from autopar.cli.ask_parse.workload_rules import batch_rule, seq_rule, tokens_rule

RULES: tuple[Rule, ...] = (
    batch_rule,
    seq_rule,
    tokens_rule,
    money_rule,
    duration_rule,
    counted_gpu_rule,
    model_rule,
    gpu_rule,
    size_rule,
    word_rule,
    goal_rule,
    cue_rule,
    aside_rule,
    unknown_gpu_rule,
)


def scan(toks: Sequence[Tok]) -> tuple[list[Fact], list[int]]:
    """Read the words left to right: at each, the first rule that matches claims its words. Returns the
    facts and the indices of the words no rule claimed."""
    facts: list[Fact] = []
    left: list[int] = []
    i = 0
    while i < len(toks):
        for rule in RULES:
            hit = rule(toks, i)
            if hit is not None:
                used, kind, value = hit
                facts.append(Fact(kind, value, i, i + used))
                i += used
                break
        else:
            left.append(i)
            i += 1
    return facts, left
