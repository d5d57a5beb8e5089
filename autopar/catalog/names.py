"""Name matching for catalog entries: exact (case-insensitive) first, then loose, never a guess."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from autopar.errors import AutoparError, UnknownNameError

T = TypeVar("T")

_LOOSE_DROP = re.compile(r"[-_. ]+")


def strip_org(name: str) -> str:
    """Drop a Hugging Face organisation prefix ('meta-llama/Llama-3.1-70B' -> 'Llama-3.1-70B')."""
    return name.strip().rsplit("/", 1)[-1]


def exact_key(name: str) -> str:
    """The case-insensitive key of a name (surrounding spaces ignored)."""
    return name.strip().lower()


def loose_key(name: str) -> str:
    """The loose key: no org prefix, lower case, without '-', '_', '.' and spaces."""
    return _LOOSE_DROP.sub("", strip_org(name).lower())


@dataclass
class NameIndex(Generic[T]):
    """Lookup of catalog entries by name or alias.

    Exact keys (lower case, with and without an org prefix) must be unique across the catalog;
    loose keys may collide (GPT-3 '1.3B' and '13B' both become 'gpt313b'), and a loose query that
    hits several entries is reported as ambiguous rather than resolved by guessing.
    """

    kind: str
    exact: dict[str, T] = field(default_factory=dict)
    loose: dict[str, list[T]] = field(default_factory=dict)
    canonical: list[str] = field(default_factory=list)

    def add(self, name: str, aliases: Iterable[str], entry: T) -> None:
        """Register an entry under its name and aliases; duplicate exact keys are a catalog bug."""
        self.canonical.append(name)
        for label in (name, *aliases):
            for key in {exact_key(label), exact_key(strip_org(label))}:
                other = self.exact.get(key)
                if other is not None and other is not entry:
                    raise AutoparError(f"{self.kind} catalog: name or alias '{label}' is used twice")
                self.exact[key] = entry
            bucket = self.loose.setdefault(loose_key(label), [])
            if not any(e is entry for e in bucket):
                bucket.append(entry)

    def get(self, query: str) -> T:
        """Resolve a name or alias; unknown -> UnknownNameError, ambiguous -> AutoparError."""
        for key in (exact_key(query), exact_key(strip_org(query))):
            if key in self.exact:
                return self.exact[key]
        hits = self.loose.get(loose_key(query), [])
        if len(hits) == 1:
            return hits[0]
        if len(hits) > 1:
            names = ", ".join(sorted(getattr(h, "name", str(h)) for h in hits))
            raise AutoparError(
                f"{self.kind} name '{query}' is ambiguous: it matches {names}; use the exact name"
            )
        raise UnknownNameError(self.kind, query, self.canonical)
