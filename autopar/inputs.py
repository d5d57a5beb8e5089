"""The one boundary for input files: size-limited reads, depth-limited JSON/YAML without alias expansion,
finite numbers only, CSV with a column cap. Every refusal is one `DataError` line naming the file, the
path of the value inside it (``rope_scaling.factor``), the value and what is allowed.

Why: a 600-byte YAML alias bomb expands to gigabytes, a deeply nested document overflows the parsers'
recursion, JSON's ``Infinity`` and YAML's ``.inf`` become floats that poison every later computation,
and a CSV header with a million columns costs gigabytes as dict rows. Each limit is far above any real
input of its kind and far below what hurts.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from autopar.errors import DataError
from autopar.text import excerpt

# Model configs, sidecars, price files and calibration models: real ones are kB (a Hugging Face
# config.json is < 10 kB, the shipped price table < 100 kB); 16 MiB leaves 1000x headroom.
CONFIG_MAX_BYTES = 16 * 2**20
# Run-record tables and training logs: a Megatron log prints ~200 bytes per iteration, so a
# 1M-iteration run is ~200 MiB; the largest published-runs table is < 1 MiB.
RECORD_MAX_BYTES = 256 * 2**20
# Nesting of a JSON/YAML document: HF configs nest 3 levels (text_config.rope_scaling.x), the catalogs 3;
# Python's parsers recurse once per level and overflow near 1000.
MAX_DEPTH = 64
# Columns of a run-record CSV: the schema has 42, extras are allowed; a header of 10^6 names is an attack.
CSV_MAX_COLUMNS = 1024


class InputError(DataError):
    """An input file or value refused at the boundary (too big, too deep, aliased, non-finite)."""


def shown(value: Any) -> str:
    """A value as it appears in a one-line message (repr, cut to a readable length)."""
    return excerpt(repr(value))


def read_bytes(path: str | Path, limit: int, what: str) -> bytes:
    """The bytes of a file no larger than `limit` (checked before and while reading)."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{what} '{p}' does not exist or is not a file")
    if p.stat().st_size > limit:
        raise InputError(f"{what} '{p}' is larger than the {_mib(limit)} allowed for a {what}")
    with p.open("rb") as fh:
        raw = fh.read(limit + 1)
    if len(raw) > limit:  # grew while reading (a pipe or a file being written)
        raise InputError(f"{what} '{p}' is larger than the {_mib(limit)} allowed for a {what}")
    return raw


def _mib(n: int) -> str:
    return f"{n / 2**20:g} MiB"


def read_text(path: str | Path, limit: int, what: str, *, errors: str = "strict") -> str:
    """A UTF-8 text file (BOM dropped) no larger than `limit`; non-UTF-8 is one line unless errors='replace'."""
    raw = read_bytes(path, limit, what)
    try:
        return raw.decode("utf-8-sig", errors=errors)
    except UnicodeDecodeError as e:
        raise InputError(f"{what} '{path}' is not UTF-8 text ({e.reason} at byte {e.start})") from None


# ------------------------------------------------------------------------------------------------ JSON
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_JSON_BRACKET = re.compile(r"[\[\]{}]")


def json_depth(text: str) -> int:
    """The deepest nesting of [ and { in JSON text (strings skipped), without recursion."""
    bare = _JSON_STRING.sub("", text)
    steps = (1 if b in "[{" else -1 for b in _JSON_BRACKET.findall(bare))
    return max(itertools.accumulate(steps, initial=0))


def _refuse_constant(name: str) -> float:
    raise ValueError(f"non-finite number {name} (only finite numbers are allowed)")


def parse_json(text: str, source: str, *, finite: bool = True) -> Any:
    """A JSON document: nesting at most MAX_DEPTH, no NaN/Infinity (nor overflowing literals like 1e999).

    finite=False keeps non-finite numbers for a caller that validates each field itself (run-record
    rows: their schema columns refuse them, unused extra columns are stored and written as null).
    """
    depth = json_depth(text)
    if depth > MAX_DEPTH:
        raise InputError(f"{source}: JSON nested {depth} levels deep (at most {MAX_DEPTH} allowed)")
    try:
        doc = json.loads(text, parse_constant=_refuse_constant) if finite else json.loads(text)
    except (ValueError, RecursionError) as e:
        raise InputError(
            f"{source}: could not be parsed as JSON ({' '.join(str(e).split())})"[:240]
        ) from None
    if finite:
        require_finite(doc, source)
    return doc


# ------------------------------------------------------------------------------------------------ YAML
class _NoAliasLoader(yaml.SafeLoader):
    """PyYAML's safe loader that refuses aliases (`*name`): no billion-laughs expansion."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise InputError(
                f"YAML alias *{event.anchor} at line {event.start_mark.line + 1}: aliases are not allowed"
            )
        return super().compose_node(parent, index)


_OPEN_EVENTS = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_CLOSE_EVENTS = (yaml.MappingEndEvent, yaml.SequenceEndEvent)


def yaml_depth(text: str, source: str) -> int:
    """The deepest nesting of a YAML stream, from its events (no recursion); aliases are refused."""
    depth = deepest = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent):
            line = event.start_mark.line + 1 if event.start_mark else "?"
            raise InputError(f"{source}: YAML alias *{event.anchor} at line {line}: aliases are not allowed")
        if isinstance(event, _OPEN_EVENTS):
            depth += 1
            deepest = max(deepest, depth)
            if deepest > MAX_DEPTH:
                break
        elif isinstance(event, _CLOSE_EVENTS):
            depth -= 1
    return deepest


def parse_yaml(text: str, source: str) -> Any:
    """A YAML document: nesting at most MAX_DEPTH, no aliases, no .inf/.nan."""
    try:
        depth = yaml_depth(text, source)
        if depth > MAX_DEPTH:
            raise InputError(
                f"{source}: YAML nested more than {MAX_DEPTH} levels deep (at most {MAX_DEPTH} allowed)"
            )
        doc = yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f", line {mark.line + 1}" if mark is not None else ""
        why = " ".join(str(getattr(e, "problem", None) or e).split())
        raise InputError(f"{source}{where}: not valid YAML ({why})"[:240]) from None
    except InputError as e:
        if str(e).startswith(source):
            raise
        raise InputError(f"{source}: {e}") from None
    except (
        ValueError
    ) as e:  # an integer past Python's 4,300-digit str->int limit (sys.get_int_max_str_digits)
        limit = sys.get_int_max_str_digits()
        raise InputError(f"{source}: a number of more than {limit} digits ({type(e).__name__})") from None
    require_finite(doc, source)
    return doc


def parse_document(text: str, source: str, *, yaml_syntax: bool) -> Any:
    """JSON or YAML text through the matching checked parser."""
    return parse_yaml(text, source) if yaml_syntax else parse_json(text, source)


def load_document(path: str | Path, what: str, limit: int = CONFIG_MAX_BYTES) -> Any:
    """A JSON (.json) or YAML (.yaml/.yml, anything else) file, size-, depth- and finite-checked."""
    p = Path(path)
    text = read_text(p, limit, what)
    return parse_document(text, f"{what} '{p}'", yaml_syntax=p.suffix.lower() != ".json")


# ------------------------------------------------------------------------------------- finite numbers
def _walk(doc: Any) -> Iterator[tuple[str, Any]]:
    """(dotted path, leaf) for every leaf of a parsed document, iteratively."""
    stack: list[tuple[str, Any]] = [("", doc)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, dict):
            stack.extend((f"{path}.{k}" if path else str(k), v) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((f"{path}[{i}]", v) for i, v in enumerate(node))
        else:
            yield path, node


def require_finite(doc: Any, source: str) -> None:
    """Refuse a parsed document holding an infinite or NaN number anywhere."""
    for path, leaf in _walk(doc):
        if isinstance(leaf, float) and not math.isfinite(leaf):
            raise InputError(f"{source}: {path or 'value'}={leaf!r}: only finite numbers are allowed")


def finite_number(value: Any, field: str, *, low: float | None = None, high: float | None = None) -> float:
    """A real number (not bool) that is finite and, when given, low < value <= high; one-line error otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(f"{field}={shown(value)}: expected a number")
    try:
        x = float(value)
    except OverflowError:
        x = math.inf
    if not math.isfinite(x):
        raise InputError(f"{field}={shown(value)}: only finite numbers are allowed")
    if (low is not None and x <= low) or (high is not None and x > high):
        lo = "" if low is None else f"> {low:g}"
        hi = "" if high is None else f"<= {high:g}"
        raise InputError(f"{field}={shown(value)}: must be {' and '.join(s for s in (lo, hi) if s)}")
    return x


# ------------------------------------------------------------------------------------------------- CSV
def csv_rows(text: str, source: str, delimiter: str = ",") -> tuple[list[str], list[dict[str, Any]]]:
    """(header, rows as dicts keyed by it) of a CSV text, at most CSV_MAX_COLUMNS columns per line.

    As csv.DictReader: blank lines skipped, missing cells None, extra cells listed under the key None.
    """
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    try:
        header = next(reader, None)
        if not header:
            return [], []
        return header, _csv_body(reader, header, source)
    except csv.Error as e:
        raise InputError(f"{source}: not valid CSV at line {reader.line_num} ({e})") from None


def _csv_body(reader: Any, header: list[str], source: str) -> list[dict[str, Any]]:
    _check_columns(header, source, 1)
    rows: list[dict[str, Any]] = []
    for cells in reader:
        _check_columns(cells, source, reader.line_num)
        if not cells:
            continue
        row: dict[str, Any] = dict(zip(header, cells, strict=False))
        for name in header[len(cells) :]:
            row[name] = None
        if len(cells) > len(header):
            row[None] = cells[len(header) :]  # type: ignore[index]  # as csv.DictReader: extras under None
        rows.append(row)
    return rows


def _check_columns(cells: list[str], source: str, line: int) -> None:
    if len(cells) > CSV_MAX_COLUMNS:
        raise InputError(
            f"{source}: line {line} has {len(cells)} columns (at most {CSV_MAX_COLUMNS} allowed)"
        )
