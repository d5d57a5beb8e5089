"""What the phrase rules produce: a `Hit` (words used, kind, value) at one word, and the `Fact` it
becomes once placed in the request; `Rule` is the signature every phrase rule has.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from autopar.cli.ask_parse.tokens import Tok


@dataclass(frozen=True)
class Fact:
    """What a phrase of the request says: its kind, its value and the words [first, end) it spans."""

    kind: str
    value: Any
    first: int
    end: int


# A phrase rule: at word i, (words used, kind, value) or None.
Hit = tuple[int, str, Any]
Rule = Callable[[Sequence[Tok], int], Hit | None]
