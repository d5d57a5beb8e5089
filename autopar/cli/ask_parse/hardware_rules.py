"""Phrase rules for the hardware: counted GPUs ('64 H100', '64xH100', '8 nodes of H100', '2 GB200
racks', '8 DGX H100'), a bare GPU count ('128 GPUs'), a GPU type ('B200', 'H100:64'), and accelerators
autopar does not know ('64 A2 NPUs'), kept as such so that they are never guessed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from autopar.cli.ask_parse.catalog_match import catalog_hits, gpu_at, gpu_index
from autopar.cli.ask_parse.errors import AskError
from autopar.cli.ask_parse.facts import Hit
from autopar.cli.ask_parse.numbers import count_prefix, whole_number
from autopar.cli.ask_parse.tokens import Tok, has_letter, skip, word_at
from autopar.cli.ask_parse.vocabulary import (
    FILLERS,
    GPU_NOUNS,
    KNOWN_WORDS,
    NODE_WORDS,
    OTHER_ACCELERATORS,
    RACK_WORDS,
    SYSTEM_PREFIXES,
    TIMES_WORDS,
    word_set,
)

_COUNT_TIMES_NAME = re.compile(r"([0-9]+)[x×]([a-z].*)", re.A)  # '64xh100'
_GPU_LIKE = re.compile(r"[a-z][a-z0-9-]*[0-9][a-z0-9-]*", re.A)  # a letter first and a digit somewhere


def _unit_gpus(gpu: str, unit: str) -> int:
    """GPUs in one node (server, tray) or one rack (an NVLink domain spanning hosts) of a catalog GPU, by
    the cluster model's own rule (`ClusterSpec.host_size`, `.node_size`)."""
    from autopar.catalog import get_gpu
    from autopar.specs import ClusterSpec

    one = ClusterSpec(gpu=get_gpu(gpu), num_gpus=1)
    if unit in NODE_WORDS:
        return one.host_size
    if one.node_size <= one.host_size:
        raise AskError(
            f"'{unit}' of {gpu}: its NVLink domain is one server ({one.host_size} GPUs), so a rack has no fixed "
            "size; count the nodes or the GPUs"
        )
    return one.node_size


def _counted(toks: Sequence[Tok], i: int, j: int, count: int, gpu: tuple[int, str]) -> Hit:
    """The hit of `count` GPUs (or nodes/racks/DGX systems of them) named by `gpu` at j, the count at i."""
    used, name = gpu
    k = j + used
    unit = word_at(toks, k)
    if unit in NODE_WORDS or unit in RACK_WORDS:
        return k + 1 - i, "gpu", (name, count * _unit_gpus(name, unit))
    if word_at(toks, j).startswith(SYSTEM_PREFIXES):
        return k - i, "gpu", (name, count * _unit_gpus(name, "node"))
    return skip(toks, k, GPU_NOUNS) - i, "gpu", (name, count)


def counted_gpu_rule(toks: Sequence[Tok], i: int) -> Hit | None:
    """'64 H100', '64x H100', '64 x H100 GPUs', '64xH100', '8 nodes of H100', '8 H100 nodes', '2 GB200 racks',
    or a count alone: '128 GPUs'."""
    fused = _COUNT_TIMES_NAME.fullmatch(word_at(toks, i))
    if fused is not None:
        hits = catalog_hits(gpu_index(), [fused.group(2)])
        return (1, "gpu", (hits[0].name, int(fused.group(1)))) if len(hits) == 1 else None
    prefix = count_prefix(toks, i)
    if prefix is None:
        return None
    count, j = prefix
    gpu = gpu_at(toks, j)
    if gpu is not None:
        return _counted(toks, i, j, count, gpu)
    unit = word_at(toks, j)
    if unit in NODE_WORDS or unit in RACK_WORDS:
        k = skip(toks, j + 1, word_set("of", "with"))
        gpu = gpu_at(toks, k)
        if gpu is not None:
            return skip(toks, k + gpu[0], GPU_NOUNS) - i, "gpu", (gpu[1], count * _unit_gpus(gpu[1], unit))
    if unit in GPU_NOUNS and j == i + 1:
        return 2, "count", count
    return None


def gpu_rule(toks: Sequence[Tok], i: int) -> Hit | None:
    """A GPU type: 'H100', 'B200 GPUs', 'H100 x 64', 'H100:64'."""
    name, _, count = word_at(toks, i).partition(":")
    if count:
        n, hits = whole_number(count), catalog_hits(gpu_index(), [name])
        return (1, "gpu", (hits[0].name, n)) if n is not None and len(hits) == 1 else None
    gpu = gpu_at(toks, i)
    if gpu is None:
        return None
    j = i + gpu[0]
    n = whole_number(word_at(toks, j + 1)) if word_at(toks, j) in TIMES_WORDS else None
    if n is not None:
        return j + 2 - i, "gpu", (gpu[1], n)
    return skip(toks, j, GPU_NOUNS) - i, "gpu", (gpu[1], None)


def _singular(word: str) -> str:
    return word[:-1] if len(word) > 3 and word[-1] in "sS" else word


def _plain_word(word: str) -> bool:
    """A word no rule knows: a candidate name for an accelerator autopar does not know."""
    return has_letter(word) and word not in FILLERS and word not in KNOWN_WORDS


def unknown_gpu_rule(toks: Sequence[Tok], i: int) -> Hit | None:
    """An accelerator autopar does not know, named so that it is never guessed: '64 A2 NPUs' -> 'A2 NPU',
    '64 X9', 'on TPUv5 chips', '64 NPUs'."""
    prefix = count_prefix(toks, i)
    j = prefix[1] if prefix is not None else i
    for n in (2, 1):
        words = toks[j : j + n]
        if len(words) < n or not all(_plain_word(t.low) for t in words):
            continue
        noun = word_at(toks, j + n)
        gpu_like = any(_GPU_LIKE.fullmatch(t.low) for t in words)
        if noun in OTHER_ACCELERATORS or (noun in GPU_NOUNS and gpu_like):
            other = [_singular(toks[j + n].text)] if noun in OTHER_ACCELERATORS else []
            return j + n + 1 - i, "unknown_gpu", " ".join([*(t.text for t in words), *other])
    if prefix is None:
        return None
    if word_at(toks, j) in OTHER_ACCELERATORS:
        return j + 1 - i, "unknown_gpu", _singular(toks[j].text)
    if _plain_word(word_at(toks, j)) and _GPU_LIKE.fullmatch(word_at(toks, j)):
        return j + 1 - i, "unknown_gpu", toks[j].text
    return None
