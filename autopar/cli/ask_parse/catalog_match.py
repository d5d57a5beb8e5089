"""Names matched against the built-in catalogs: GPUs ('H100 SXM', 'A100 80GB', a plural 'H100s'),
models ('Llama 3 70B', 'llama-3.1-70b'), model sizes ('a 70B', '70 billion parameters') and the models a
size names, and the one-line message for a GPU name that is not in the catalog.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from autopar.cli.ask_parse.facts import Hit
from autopar.cli.ask_parse.numbers import NUM, parse_number
from autopar.cli.ask_parse.tokens import Tok, has_letter, one_phrase, word_at
from autopar.text import excerpt, one_line

_PLAIN = re.compile(NUM, re.A)
_SIZE = re.compile(r"([0-9]+(?:\.[0-9]+)?)b", re.A)


def catalog_hits(index: Any, words: Sequence[str]) -> list[Any]:
    """Catalog entries the words name together: an exact name or alias (joined by '-', ' ' or nothing),
    else every entry of the loose key (case, '-', '_', '.', spaces and an org prefix ignored)."""
    from autopar.catalog.names import exact_key, loose_key

    for joined in ("-".join(words), " ".join(words), "".join(words)):
        hit = index.exact.get(exact_key(joined))
        if hit is not None:
            return [hit]
    return list(index.loose.get(loose_key("".join(words)), []))


def gpu_index() -> Any:
    from autopar.catalog.loader import gpu_catalog

    return gpu_catalog().index


def _model_index() -> Any:
    from autopar.catalog.loader import model_catalog

    return model_catalog().index


def gpu_at(toks: Sequence[Tok], i: int) -> tuple[int, str] | None:
    """(words used, catalog GPU) of the longest run of 1-3 words from i naming a GPU ('H100', 'H100 SXM',
    'A100 80GB', 'GB200 NVL72', a plural 'H100s')."""
    if not has_letter(word_at(toks, i)):
        return None
    for n in (3, 2, 1):
        if not one_phrase(toks, i, n):
            continue
        words = [t.low for t in toks[i : i + n]]
        hits = catalog_hits(gpu_index(), words)
        if not hits and words[-1].endswith("s"):
            hits = catalog_hits(gpu_index(), [*words[:-1], words[-1][:-1]])
        if len(hits) == 1:
            return n, hits[0].name
    return None


def model_rule(toks: Sequence[Tok], i: int) -> Hit | None:
    """A built-in model named in 1-4 words: 'Llama 3 70B', 'llama-3.1-70b', 'Llama3 70B', 'Mixtral 8x7B'."""
    if not has_letter(word_at(toks, i)):
        return None
    for n in (4, 3, 2, 1):
        if not one_phrase(toks, i, n):
            continue
        hits = catalog_hits(_model_index(), [t.low for t in toks[i : i + n]])
        if len(hits) == 1:
            return n, "model", hits[0].name
        if hits:
            return n, "model_ambiguous", sorted(h.name for h in hits)
    return None


@lru_cache(maxsize=1)
def presets_by_size() -> dict[float, tuple[str, ...]]:
    """Built-in models by the size in billions their name or an alias states ('Llama-3.1-70B' -> 70.0;
    'Mixtral-8x7B' states none)."""
    from autopar.catalog.loader import list_models

    out: dict[float, list[str]] = {}
    for spec in list_models():
        sizes = {
            float(m.group(1))
            for label in (spec.name, *spec.aliases)
            for part in re.split(r"[-_/ ]", label.lower())
            if (m := _SIZE.fullmatch(part))
        }
        for size in sizes:
            out.setdefault(size, []).append(spec.name)
    return {size: tuple(names) for size, names in out.items()}


def size_rule(toks: Sequence[Tok], i: int) -> Hit | None:
    """A model size alone: 'a 70B', '405B model', '70 billion parameters'."""
    m = _SIZE.fullmatch(word_at(toks, i))
    if m is not None:
        return 1, "size", parse_number(m.group(1))
    params = word_at(toks, i + 2) in ("parameters", "params", "parameter")
    if _PLAIN.fullmatch(word_at(toks, i)) and word_at(toks, i + 1) == "billion" and params:
        return 3, "size", parse_number(word_at(toks, i))
    return None


def unknown_gpu_message(names: Sequence[str]) -> str:
    """One line: "'A2 NPU' is not a known GPU; known: ...; did you mean ...?" (a hint only where one is close)."""
    import difflib

    index = gpu_index()
    labels = {key: entry.name for key, entry in index.exact.items()}
    close = [c for n in names for c in difflib.get_close_matches(n.lower(), list(labels), n=3, cutoff=0.6)]
    near = list(dict.fromkeys(labels[c] for c in close))
    hint = f"; did you mean {', '.join(near)}?" if near else ""
    unique = list(dict.fromkeys(names))
    verb = "is not a known GPU" if len(unique) == 1 else "are not known GPUs"
    shown = ", ".join(f"'{excerpt(one_line(n))}'" for n in unique)
    return f"{shown} {verb}; known: {', '.join(index.canonical)}{hint}"
