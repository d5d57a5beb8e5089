"""Text from inputs, made safe where it is written: one printable line, shell words, terminal output,
CSV cells a spreadsheet will not run, strict JSON.

One source of truth for what counts as a control character (Unicode categories Cc and Cf, which include
ESC, newlines, bidi overrides and zero-width characters, plus the line/paragraph separators Zl and Zp)
and for how such text is shown ("\\x1b", "\\n"): a name from a config file can then never end a shell
comment, move the terminal's cursor or reorder what a reader sees.
"""

from __future__ import annotations

import json
import math
import re
import shlex
import unicodedata
from typing import Any

_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})


# Longest excerpt of an input value echoed in a message (a 5,000-character name stays one short line).
EXCERPT_CHARS = 60
# Longest error line the CLI prints; a longer one is cut and says how much was left out.
MESSAGE_CHARS = 1000


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """`text` cut to `limit` characters, ending in '...' where it was cut."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def is_unsafe_char(ch: str) -> bool:
    """True for a control, format, separator, surrogate, private-use or unassigned character."""
    return unicodedata.category(ch) in _UNSAFE_CATEGORIES


def unsafe_chars(text: str) -> list[str]:
    """The distinct unsafe characters of `text`, in order of first appearance."""
    return list(dict.fromkeys(ch for ch in text if is_unsafe_char(ch)))


def escape_char(ch: str) -> str:
    """A visible escape for one character: \\n, \\t, \\x1b, \\u202e."""
    named = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
    if ch in named:
        return named[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def one_line(text: str) -> str:
    """`text` as one printable line: every unsafe character replaced by its visible escape."""
    return "".join(escape_char(ch) if is_unsafe_char(ch) else ch for ch in str(text))


def mask(url: str) -> str:
    """The URL with its password replaced by ***: in user:password@ and in a password= query parameter
    (libpq and SQLAlchemy accept both)."""
    url = re.sub(r"(://[^:/@]+:)[^/?#]*@", r"\1***@", url)  # up to the last @ of the authority
    return re.sub(r"([?&](?:password|passwd|pwd)=)[^&#]*", r"\1***", url, flags=re.IGNORECASE)


def shell_word(text: str) -> str:
    """`text` as one shell word that the shell reads as data (single-quoted where needed)."""
    return shlex.quote(str(text))


def shell_comment(text: str) -> str:
    """A `# ...` shell comment line: the text on one printable line, so nothing after it can run."""
    return "# " + one_line(text)


# A cell a spreadsheet would run as a formula starts with one of these (OWASP "CSV Injection").
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def csv_cell(value: object) -> object:
    """A value as a CSV export writes it: text on one printable line and, when it would start a
    formula, behind a leading `'` (OWASP's rule); numbers, including negative ones, unchanged."""
    if not isinstance(value, str):
        return value
    shown = one_line(value)
    return "'" + shown if value.startswith(FORMULA_PREFIXES) and not _NUMBER.fullmatch(value) else shown


def finite(doc: Any) -> Any:
    """`doc` with every NaN or infinite float (also inside dicts, lists, tuples) replaced by None."""
    if isinstance(doc, float):
        return doc if math.isfinite(doc) else None
    if isinstance(doc, dict):
        return {k: finite(v) for k, v in doc.items()}
    if isinstance(doc, list | tuple):
        return [finite(v) for v in doc]
    return doc


def json_text(doc: Any, indent: int | None = None) -> str:
    """`doc` as strict JSON (RFC 8259): non-finite numbers become null, never bare NaN/Infinity;
    values JSON has no type for (numpy integers, paths, dates) are written as their str()."""
    return json.dumps(finite(doc), indent=indent, default=str, allow_nan=False)
