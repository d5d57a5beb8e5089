"""Run-record ingestion: read tables and training logs, validate them, write valid records to the store.

A run record is one measured training run: its configuration (the columns of the run-record schema,
the header of ``shared/groundtruth/public.csv``) plus at least one throughput measurement. Row
validation and the fingerprint live in `autopar.calibration.records` (checks.py, record.py), tokens/s
derivation in records/throughput.py; tables are read by ingest/tables.py, logs by ingest/log_files.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autopar.calibration.ingest.formats import FORMATS
from autopar.calibration.ingest.log_files import (
    GIVEN_SOURCE,
    MissingFieldsError,
    check_log_file,
    note_default_source,
)
from autopar.calibration.ingest.log_steps import LOG_FORMATS
from autopar.calibration.ingest.tables import FileCheck, check_table_file, detect_format
from autopar.calibration.records.plausibility import far_off, far_off_warning
from autopar.calibration.records.record import fingerprint
from autopar.errors import DataError


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
    # one line per stored run far off the analytical prediction (records/plausibility.py far_off): stored, but worth a look
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
    note_default_source(check, source or p.stem, GIVEN_SOURCE if source else "named after the file")
    return check


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
    """plausibility.far_off_warning for each valid record far off the analytical prediction, named by its file
    (and its id where the file holds several rows)."""
    out = []
    for c in checks:
        for r in c.records:
            hit = far_off(r)
            if hit is not None:
                name = c.path.name if c.rows_read == 1 else f"{c.path.name} run {r.get('id')}"
                out.append(far_off_warning(name, *hit, num_gpus=r.get("num_gpus")))
    return out
