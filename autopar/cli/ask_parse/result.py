"""The parse of a request: `AskParse` (the command, its flags, its argv and one copy-pasteable command
line, its JSON form), the `Span`s understood and the `Unparsed` words, and the two command names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autopar.text import shell_word

OPTIMIZE, WHATIF = "optimize", "whatif"


@dataclass(frozen=True)
class Span:
    """Words of the request (characters [start, end)) and what they were understood as."""

    text: str
    meaning: str
    start: int
    end: int


@dataclass(frozen=True)
class Unparsed:
    """Words no rule understood; `matters` when they hold a number, an amount or an accelerator word."""

    text: str
    start: int
    end: int
    matters: bool


@dataclass(frozen=True)
class AskParse:
    """A request as one autopar command: its name, its flags in command-line order (a repeated flag holds a
    tuple), what each phrase was understood as, the words not understood and notes (defaults, conversions)."""

    command: str
    flags: dict[str, str | tuple[str, ...]]
    understood: tuple[Span, ...]
    not_understood: tuple[Unparsed, ...]
    notes: tuple[str, ...] = ()

    @property
    def argv(self) -> list[str]:
        """The command's arguments, as typed after `autopar COMMAND`."""
        out: list[str] = []
        for flag, value in self.flags.items():
            for v in (value,) if isinstance(value, str) else value:
                out += [flag, v]
        return out

    def command_line(self) -> str:
        """The one copy-pasteable line: `autopar optimize --model ... --gpus 64 ...`."""
        return " ".join(["autopar", self.command, *(shell_word(a) for a in self.argv)])

    def to_json(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "argv": self.argv,
            "command_line": self.command_line(),
            "understood": [{"text": s.text, "as": s.meaning} for s in self.understood],
            "not_understood": [u.text for u in self.not_understood],
            "notes": list(self.notes),
        }
