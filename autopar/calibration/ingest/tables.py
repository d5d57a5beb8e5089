"""Run-record tables (CSV, JSONL, Parquet): the format of a file, its raw rows, and a validated table.

`read_run_records` is the one reader of run-record files (the published runs, bench data, `calibrate`),
`check_table_file` the one validation of a table before ingest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autopar.calibration.ingest.formats import TABLE_FORMATS
from autopar.calibration.ingest.log_steps import sniff_log_format
from autopar.calibration.records.checks import RowError, validate_rows
from autopar.errors import DataError, MissingExtraError
from autopar.inputs import (
    RECORD_MAX_BYTES,
    InputError,
    csv_rows,
    parse_json,
    read_bytes,
    read_text,
)

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class FileCheck:
    """The result of validating one file: normalized good records and the errors of the bad rows."""

    path: Path
    fmt: str
    records: list[dict[str, Any]] = field(default_factory=list)
    errors: list[RowError] = field(default_factory=list)
    rows_read: int = 0
    # the source given to rows without one, and why that name ("" when every row named its own)
    default_source: str = ""
    source_how: str = ""

    @property
    def bad_rows(self) -> list[int]:
        return sorted({e.row for e in self.errors})


def detect_format(path: Path) -> str:
    """The input format from the file name, or by sniffing a log's content."""
    suffixes = [s.lower() for s in path.suffixes]
    last = suffixes[-1] if suffixes else ""
    if last in (".csv", ".tsv"):
        return "csv"
    if last in (".jsonl", ".ndjson", ".json"):
        return "jsonl"
    if last in (".parquet", ".pq"):
        return "parquet"
    if not path.is_file():  # a FIFO or device would block the read below (every reader refuses them)
        raise DataError(f"'{path}' does not exist or is not a regular file")
    with path.open("r", errors="replace") as fh:
        head = fh.read(1 << 20)
    fmt = sniff_log_format(head)
    if fmt is None:
        raise DataError(
            f"cannot tell the format of '{path}': pass --format csv|jsonl|parquet|megatron-log|torchtitan-log"
        )
    return fmt


def read_table_rows(path: Path, fmt: str) -> tuple[list[dict[str, Any]], list[RowError]]:
    """Raw rows of a CSV/JSONL/Parquet file (values as written) and errors for unreadable lines."""
    if fmt == "csv":
        text = read_text(path, RECORD_MAX_BYTES, "run-record file")
        sample = text[:4096]
        delim = "\t" if path.suffix.lower() == ".tsv" or ("\t" in sample and "," not in sample) else ","
        header, rows = csv_rows(text, f"run-record file '{path}'", delimiter=delim)
        if not header:
            raise DataError(f"'{path}' is empty: expected a header row with the run-record columns")
        return rows, []
    if fmt == "jsonl":
        return _jsonl_rows(path)
    if fmt == "parquet":
        import pandas as pd

        read_bytes(path, RECORD_MAX_BYTES, "run-record file")  # size check (pyarrow reads the path)
        try:
            df = pd.read_parquet(path)
        except ImportError as e:
            raise MissingExtraError("pyarrow", "parquet", "reading Parquet") from e
        except Exception as e:
            raise DataError(f"'{path}' is not a readable Parquet file: {e}") from e
        return [{k: (None if _is_na(v) else v) for k, v in r.items()} for r in df.to_dict("records")], []
    raise DataError(f"unknown table format '{fmt}' (allowed: {', '.join(TABLE_FORMATS)})")


def _jsonl_rows(path: Path) -> tuple[list[dict[str, Any]], list[RowError]]:
    """Rows of a JSON-lines file; a line that is not a (depth-limited, finite) JSON object is an error row."""
    rows: list[dict[str, Any]] = []
    errors: list[RowError] = []
    text = read_text(path, RECORD_MAX_BYTES, "run-record file")
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = parse_json(line, f"line {n}", finite=False)
        except InputError as e:
            errors.append(RowError(n, "(line)", line.strip()[:60], str(e).removeprefix(f"line {n}: ")))
            rows.append({})
            continue
        if not isinstance(obj, dict):
            errors.append(RowError(n, "(line)", line.strip()[:60], "not a JSON object"))
            obj = {}
        rows.append(obj)
    return rows, errors


def _is_na(v: Any) -> bool:
    try:
        return v is None or (isinstance(v, float) and math.isnan(v))
    except TypeError:
        return False


def check_table_file(path: Path, fmt: str, *, default_source: str | None = None) -> FileCheck:
    """Read and validate a run-record table; rows that cannot be parsed count as invalid."""
    try:
        raw, read_errors = read_table_rows(path, fmt)
    except UnicodeDecodeError as e:  # binary or non-UTF-8 file: one line, not a traceback
        raise DataError(
            f"'{path}' is not UTF-8 text ({e.reason} at byte {e.start}); expected {fmt}"
        ) from None
    bad_lines = {e.row for e in read_errors}
    rows = [r for i, r in enumerate(raw, start=1) if i not in bad_lines]
    numbers = [i for i in range(1, len(raw) + 1) if i not in bad_lines]
    good: list[dict[str, Any]] = []
    errors = list(read_errors)
    for i, r in zip(numbers, rows, strict=True):
        g, e = validate_rows([r], default_source=default_source, start=i)
        good.extend(g)
        errors.extend(e)
    errors.sort(key=lambda e: e.row)
    return FileCheck(path=path, fmt=fmt, records=good, errors=errors, rows_read=len(raw))


def read_run_records(path: str | Path) -> pd.DataFrame:
    """Read run records from CSV, JSONL or Parquet (by extension) as a table of raw cells.

    The one reader of run-record files: it is `read_table_rows` (also used by
    ingestion), with unreadable lines an error here; a missing `id` column is numbered row1, row2, ...
    """
    p = Path(path)
    if not p.exists():
        raise DataError(f"run-record file not found: {p}")
    fmt = {
        ".jsonl": "jsonl",
        ".ndjson": "jsonl",
        ".parquet": "parquet",
        ".csv": "csv",
        ".tsv": "csv",
        "": "csv",
    }
    suffix = p.suffix.lower()
    if suffix not in fmt:
        raise DataError(f"{p}: unsupported run-record format '{suffix}' (use .csv, .jsonl or .parquet)")
    try:
        rows, errors = read_table_rows(p, fmt[suffix])
    except (ValueError, OSError) as e:
        if isinstance(e, DataError):
            raise
        raise DataError(f"{p}: could not be read as run records ({e})") from e
    if errors:
        raise DataError(f"{p}: line {errors[0].row} is {errors[0].reason}")
    import pandas as pd

    df = pd.DataFrame(rows)
    if "id" not in df.columns:
        df.insert(0, "id", [f"row{i + 1}" for i in range(len(df))])
    return df
