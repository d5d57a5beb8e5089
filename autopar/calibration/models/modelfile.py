"""Calibration model files: JSON with the fitted parameters, never pickle.

A model file someone hands you must not be able to run code when loaded (issue 12), so the format
is plain JSON read with `json.loads` (no object hooks, no NaN/Infinity), size-capped, and checked
field by field before any number is used. joblib/pickle files, including the old
`default_calibration.joblib`, are refused with a one-line message without being unpickled.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from autopar.errors import DataError
from autopar.files import write_atomic
from autopar.inputs import parse_json, read_bytes

FORMAT = "autopar-calibration"
FORMAT_VERSION = 2
MAX_BYTES = 5 * 2**20  # a model is a few kB; anything bigger is not one
_PICKLE_MAGIC = (b"\x80", b"\x1f\x8b", b"PK", b"\x78")  # pickle protocol 2+, gzip, zip, zlib (joblib)


class CalibrationVersionError(DataError):
    """A saved calibration model in a format or feature schema this autopar cannot use."""


def read_model_doc(path: str | Path) -> dict[str, Any]:
    """The JSON document of a model file, or a one-line DataError (missing, binary, corrupt, foreign)."""
    p = Path(path)
    if not p.is_file():
        raise DataError(f"calibration model not found: {p}")
    raw = read_bytes(p, MAX_BYTES, "calibration model")
    head = raw.lstrip()[:2]
    if any(head.startswith(m) for m in _PICKLE_MAGIC):
        raise DataError(
            f"'{p}' is a pickle/joblib file; autopar refuses to load those (they can run code): "
            "refit with `autopar calibrate fit --out model.json`"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"'{p}' is not an autopar calibration model (not UTF-8: {e.reason})") from None
    src = f"calibration model '{p}'"
    try:
        doc = parse_json(text, src)
    except DataError as e:
        why = str(e).removeprefix(f"{src}: ")
        raise DataError(f"'{p}' is not an autopar calibration model (not valid JSON: {why})"[:240]) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise DataError(f"'{p}' is not an autopar calibration model (no '{FORMAT}' header)")
    if doc.get("format_version") != FORMAT_VERSION:
        raise CalibrationVersionError(
            f"calibration model '{p}' has format version {doc.get('format_version')!r}; this autopar "
            f"reads version {FORMAT_VERSION}: refit it with `autopar calibrate fit --out {p}`"
        )
    return doc


def write_model_doc(path: str | Path, doc: dict[str, Any]) -> Path:
    """Write a model document as stable, sorted JSON (atomically, autopar.files)."""
    return write_atomic(
        path, json.dumps({"format": FORMAT, "format_version": FORMAT_VERSION, **doc}, indent=1) + "\n"
    )
