"""Run-record ingestion: read tables and training logs, validate them, write valid records to the store.

A run record is one measured training run: its configuration (the columns of the run-record schema,
the header of ``shared/groundtruth/public.csv``) plus at least one throughput measurement. Row
validation and the fingerprint live in `autopar.calibration.rows`, tokens/s derivation in
`autopar.calibration.throughput`; both are re-exported here for existing importers.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autopar.calibration.formats import FORMATS, TABLE_FORMATS
from autopar.calibration.logs import (
    LOG_FORMATS,
    LOG_REQUIRED,
    aggregate,
    log_config,
    merge_log_config,
    oom_record,
    parse_log,
    sniff_log_format,
)
from autopar.calibration.rows import (
    CORE_ARCH_COLUMNS,
    LABEL_COLUMNS,
    SCHEMA_COLUMNS,
    RowError,
    RunRow,
    far_off,
    far_off_warning,
    fingerprint,
    given_value_errors,
    normalize_record,
    validate_rows,
)
from autopar.calibration.throughput import (
    TFLOPS_DEFINITIONS,
    flops_per_token,
    measured_tokens_per_s_per_gpu,
    tflops_definition,
)
from autopar.errors import DataError, MissingExtraError
from autopar.inputs import (
    CONFIG_MAX_BYTES,
    RECORD_MAX_BYTES,
    InputError,
    csv_rows,
    parse_json,
    parse_yaml,
    read_bytes,
    read_text,
)

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "CONFIG_ALIASES",
    "CORE_ARCH_COLUMNS",
    "FORMATS",
    "LABEL_COLUMNS",
    "SCHEMA_COLUMNS",
    "TABLE_FORMATS",
    "TFLOPS_DEFINITIONS",
    "GIVEN_SOURCE",
    "FileCheck",
    "IngestReport",
    "InvalidRowsError",
    "MissingFieldsError",
    "RowError",
    "RunRow",
    "check_file",
    "check_log_file",
    "check_table_file",
    "detect_format",
    "far_off_lines",
    "fingerprint",
    "flops_per_token",
    "ingest",
    "load_sidecar",
    "measured_tokens_per_s_per_gpu",
    "missing_log_fields",
    "normalize_config",
    "normalize_record",
    "read_table_rows",
    "tflops_definition",
    "validate_rows",
]


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


# ------------------------------------------------------------------------------------ file reading
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


# ------------------------------------------------------------------------------------------ ingest
# Sidecar/flag spellings accepted for schema columns.
CONFIG_ALIASES = {
    "gpus": "num_gpus",
    "micro-batch": "micro_batch",
    "global-batch": "global_batch",
    "seq-len": "seq_len",
    "seq_length": "seq_len",
    "micro_batch_size": "micro_batch",
    "global_batch_size": "global_batch",
    "gpus-per-node": "gpus_per_node",
}


class InvalidRowsError(DataError):
    """A file (or several) had invalid rows; nothing was written. Carries every file's check."""

    def __init__(self, checks: list[FileCheck]):
        self.checks = checks
        bad = [c for c in checks if c.errors]
        parts = [f"{c.path}: {len(c.bad_rows)} invalid of {c.rows_read} rows" for c in bad]
        valid = sum(len(c.records) for c in checks)
        super().__init__(
            "; ".join(parts) + f" — nothing written (--skip-invalid ingests the {valid} valid rows)"
        )


@dataclass
class IngestReport:
    """What one ingest did: per-file checks, records new to the store, duplicates, skipped rows."""

    checks: list[FileCheck]
    added: int
    store_path: str  # the store's location: its file, or its URL with the password masked
    # one line per stored run far off the analytical prediction (rows.far_off): stored, but worth a look
    warnings: list[str] = field(default_factory=list)

    @property
    def valid(self) -> int:
        return sum(len(c.records) for c in self.checks)

    @property
    def duplicates(self) -> int:
        return self.valid - self.added

    @property
    def skipped(self) -> int:
        return sum(len(c.bad_rows) for c in self.checks)


def load_sidecar(path: str | Path) -> dict[str, Any]:
    """Run configuration from a YAML sidecar (keys: run-record columns, or flag spellings)."""
    p = Path(path)
    data = parse_yaml(read_text(p, CONFIG_MAX_BYTES, "sidecar"), f"sidecar '{p}'")
    if not isinstance(data, dict):
        raise DataError(f"sidecar '{p}' must be a mapping of run-record columns (model, gpu, num_gpus, ...)")
    return normalize_config(data)


def normalize_config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Config keys in schema spelling (aliases such as gpus -> num_gpus), None values dropped."""
    out: dict[str, Any] = {}
    for k, v in cfg.items():
        key = str(k).strip()
        key = CONFIG_ALIASES.get(key, key.replace("-", "_"))
        if v is not None:
            out[key] = v
    return out


def check_log_file(
    path: Path,
    fmt: str,
    config: Mapping[str, Any],
    *,
    warmup: int | None = None,
    default_source: str | None = None,
) -> FileCheck:
    """Parse a training log into one record (config from the log's own dump, completed by flags/sidecar)
    and validate it. A log that cannot make a record is one DataError naming the file."""
    text = read_text(path, RECORD_MAX_BYTES, "training log", errors="replace")
    try:
        samples = parse_log(text, fmt)
        cfg = merge_log_config(dict(config), log_config(text, fmt))
        rec = oom_record(samples, cfg, text) or aggregate(samples, cfg, warmup=warmup)
    except DataError as e:
        raise DataError(f"{path}: {e}") from None
    missing = missing_log_fields(rec)
    if missing:
        raise MissingFieldsError(path, missing, rec, config)
    name, how = _log_source(default_source, rec, fmt)
    good, errors = validate_rows([rec], default_source=name)
    check = FileCheck(path=path, fmt=fmt, records=good, errors=errors, rows_read=1)
    _note_default_source(check, name, how)
    return check


def _log_source(given: str | None, rec: Mapping[str, Any], fmt: str) -> tuple[str, str]:
    """The source of a log's record when it names none, and why: --group/--source, else the sidecar's
    `cluster`, else the log format. Not the file name: a source is the unit leave-one-source-out validation
    holds out and weighs like a whole published source, so a name per file would count every log of one
    cluster as an independent source (and the store's runs would never share the one group `calibrate fit`
    defaults to)."""
    if given:
        return given, GIVEN_SOURCE
    cluster = str(rec.get("cluster") or "").strip()
    if cluster:
        return cluster, "the sidecar's cluster"
    return fmt, "named after the log format: no --group NAME given"


# What a missing log field is called on the command line and in a sidecar (schema name otherwise).
_FLAG = {"gpu": "--gpu", "num_gpus": "--gpus", "seq_len": "--seq-len", "global_batch": "--global-batch"}
_SIDECAR_KEY = {"num_gpus": "gpus"}
_MODEL_FIELD = "model (or the arch: " + "/".join(CORE_ARCH_COLUMNS) + ")"


def missing_log_fields(rec: Mapping[str, Any]) -> list[str]:
    """The fields a log record still lacks (LOG_REQUIRED, and a model or its arch), in schema names."""
    missing = [k for k in LOG_REQUIRED if rec.get(k) in (None, "")]
    if not rec.get("model") and not all(rec.get(k) for k in CORE_ARCH_COLUMNS):
        missing.append("model")
    return missing


class MissingFieldsError(DataError):
    """A log whose record lacks fields: one line naming every missing field, the flags and sidecar keys that
    give them, the given values that are invalid too, and sidecar keys that look like a missing field."""

    def __init__(
        self, path: Path, missing: list[str], rec: Mapping[str, Any], given: Mapping[str, Any]
    ) -> None:
        self.path, self.missing = path, missing
        names = ", ".join(_MODEL_FIELD if m == "model" else m for m in missing)
        flags = "/".join(_FLAG.get(m, f"--{m}") for m in missing)
        keys = ", ".join(_SIDECAR_KEY.get(m, m) for m in missing)
        text = (
            f"{path}: neither the log nor the flags/--sidecar give {names} — pass {flags} or add {keys} "
            "to a --sidecar YAML (examples/README.md)"
        )
        problems = [f"{f}={v!r}: {_short(why)}" for f, v, why in given_value_errors(rec)]
        problems += _lookalike_keys(given, missing)
        super().__init__(text + ("; also " + "; ".join(problems) if problems else ""))


def _short(reason: str) -> str:
    """A reason without the catalog listing an unknown-name error appends."""
    return reason.split(" (known:", 1)[0]


def _lookalike_keys(given: Mapping[str, Any], missing: list[str]) -> list[str]:
    """'sidecar key K is not read: did you mean M?' for the given keys outside the schema that look like a
    missing field (a close spelling, or the field's name inside the key: gpu_type, num_gpu)."""
    spelled = {_SIDECAR_KEY.get(m, m): m for m in missing} | {m: m for m in missing}
    out = []
    for key in sorted(k for k in given if k not in SCHEMA_COLUMNS):
        like = [n for n in spelled if n in key or difflib.SequenceMatcher(None, key, n).ratio() >= 0.6]
        if like:
            best = max(like, key=lambda n: difflib.SequenceMatcher(None, key, n).ratio())
            out.append(
                f"sidecar key {key!r} is not read: did you mean {_SIDECAR_KEY.get(spelled[best], best)}?"
            )
    return out


def check_file(
    path: str | Path,
    fmt: str = "auto",
    *,
    config: Mapping[str, Any] | None = None,
    warmup: int | None = None,
    source: str | None = None,
) -> FileCheck:
    """Read and validate one input file of any supported format."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(2, "No such file or directory", str(p))
    if fmt not in FORMATS:
        raise DataError(f"--format={fmt} is not a known format (allowed: {', '.join(FORMATS)})")
    fmt = detect_format(p) if fmt == "auto" else fmt
    if fmt in LOG_FORMATS:
        return check_log_file(p, fmt, config or {}, warmup=warmup, default_source=source)
    if config:
        raise DataError(
            f"config flags/--sidecar ({', '.join(sorted(config))}) describe a training log; "
            f"'{p.name}' is a {fmt} table whose rows carry their own config"
        )
    check = check_table_file(p, fmt, default_source=source or p.stem)
    if check.rows_read == 0:
        raise DataError(f"'{p}' has no rows")
    _note_default_source(check, source or p.stem, GIVEN_SOURCE if source else "named after the file")
    return check


GIVEN_SOURCE = "given"


def _note_default_source(check: FileCheck, name: str, how: str) -> None:
    """Record on the check which name rows without a source got, and why (if any row got it)."""
    if any(r.get("source") == name for r in check.records):
        check.default_source, check.source_how = name, how


def ingest(
    paths: Sequence[str | Path],
    store: Any,
    *,
    fmt: str = "auto",
    skip_invalid: bool = False,
    config: Mapping[str, Any] | None = None,
    warmup: int | None = None,
    source: str | None = None,
) -> IngestReport:
    """Validate every file, then write all valid records in one transaction (unless any row is bad). Logs
    that lack fields are reported together, one line naming each log's missing fields."""
    checks, missing = [], []
    for p in paths:
        try:
            checks.append(check_file(p, fmt, config=config, warmup=warmup, source=source))
        except MissingFieldsError as e:
            missing.append(str(e))
    if missing:
        raise DataError(" | ".join(missing))
    if any(c.errors for c in checks) and not skip_invalid:
        raise InvalidRowsError(checks)
    items = [(fingerprint(r), r, str(c.path.resolve())) for c in checks for r in c.records]
    added = store.add(items) if items else 0
    return IngestReport(checks=checks, added=added, store_path=store.location, warnings=far_off_lines(checks))


def far_off_lines(checks: Sequence[FileCheck]) -> list[str]:
    """rows.far_off_warning for each valid record far off the analytical prediction, named by its file
    (and its id where the file holds several rows)."""
    out = []
    for c in checks:
        for r in c.records:
            hit = far_off(r)
            if hit is not None:
                name = c.path.name if c.rows_read == 1 else f"{c.path.name} run {r.get('id')}"
                out.append(far_off_warning(name, *hit, num_gpus=r.get("num_gpus")))
    return out


def read_run_records(path: str | Path) -> pd.DataFrame:
    """Read run records from CSV, JSONL or Parquet (by extension) as a table of raw cells.

    The one reader of run-record files: it is `autopar.calibration.runs.read_table_rows` (also used by
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
