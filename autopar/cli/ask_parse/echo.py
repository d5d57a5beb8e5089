"""The parse in words: what each fact is echoed as ('deadline 30d', 'spending cap $5M'), and the whole
parse written back as a plain request (`render_request`, the round trip the tests check).
"""

from __future__ import annotations

from collections.abc import Callable

from autopar.cli.ask_parse.facts import Fact
from autopar.cli.ask_parse.numbers import format_si, plain_number
from autopar.cli.ask_parse.result import WHATIF, AskParse
from autopar.cli.ask_parse.vocabulary import GOAL_WORDS


def fact_meaning(f: Fact) -> str:
    """What one fact says, in words."""
    v = f.value
    shown: dict[str, Callable[[], str]] = {
        "model": lambda: f"model {v}",
        "size": lambda: f"a {plain_number(v)}B model",
        "gpu": lambda: f"{v[1]} x {v[0]}" if v[1] is not None else f"GPU {v[0]}",
        "count": lambda: f"{v} GPUs",
        "seq_len": lambda: f"sequence length {v}",
        "tokens": lambda: f"{format_si(v)} tokens",
        "batch": lambda: f"global batch {v}",
        "batch_tokens": lambda: f"{format_si(v)} tokens per step",
        "precision": lambda: f"precision {v}",
        "framework": lambda: f"framework {v}",
        "deadline": lambda: f"deadline {v}",
        "spend": lambda: f"spending cap ${format_si(v, 'BMK')}",
        "rate": lambda: f"at most ${plain_number(v)} per million tokens",
        "goal": lambda: f"goal: {GOAL_WORDS[v]}",
        "cue": lambda: "a hardware question (whatif)",
        "aside": lambda: "nothing to set",
    }
    return shown[f.kind]() if f.kind in shown else f.kind


def render_request(parsed: AskParse) -> str:
    """The parse written back as a plain request (`parse_request` reads it to the same command and flags):
    the round trip the tests check."""
    f = parsed.flags
    words = ["compare"] if parsed.command == WHATIF else []
    if "--model" in f:
        words.append(str(f["--model"]))
    hardware = [" ".join(reversed(o.split(":"))) for o in f.get("--option", ())]
    if "--gpu" in f or "--gpus" in f:
        hardware = [
            " ".join(str(f[k]) for k in ("--gpus", "--gpu") if k in f) + ("" if "--gpu" in f else " GPUs")
        ]
    words.append(" or ".join(hardware))
    phrases = {
        "--seq-len": "{} context",
        "--global-batch": "global batch {}",
        "--precision": "{}",
        "--framework": "{}",
        "--tokens": "{} tokens",
        "--deadline": "in {}",
        "--max-spend": "under ${}",
        "--max-cost": "under ${} per million tokens",
    }
    for flag, phrase in phrases.items():
        if flag in f:
            words.append(phrase.format(str(f[flag]).replace(",", " or ")))
    if "--objectives" in f:
        words.append(GOAL_WORDS[str(f["--objectives"]).split(",")[0]])
    return ", ".join(w for w in words if w)
