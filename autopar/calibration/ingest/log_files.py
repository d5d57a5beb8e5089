"""A training log as a run record: its config from the log, completed by flags or a YAML sidecar, validated;
a log that lacks fields is one line naming each missing field and how to give it.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autopar.calibration.ingest.log_config import log_config, merge_log_config
from autopar.calibration.ingest.log_record import aggregate, oom_record
from autopar.calibration.ingest.log_steps import LOG_REQUIRED, parse_log
from autopar.calibration.ingest.tables import FileCheck
from autopar.calibration.records.checks import given_value_errors, validate_rows
from autopar.calibration.records.columns import ARCH_COLUMNS, RECORD_COLUMNS
from autopar.errors import DataError
from autopar.inputs import (
    CONFIG_MAX_BYTES,
    RECORD_MAX_BYTES,
    parse_yaml,
    read_text,
)

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
    note_default_source(check, name, how)
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


_MODEL_FIELD = "model (or the arch: " + "/".join(ARCH_COLUMNS) + ")"


def missing_log_fields(rec: Mapping[str, Any]) -> list[str]:
    """The fields a log record still lacks (LOG_REQUIRED, and a model or its arch), in schema names."""
    missing = [k for k in LOG_REQUIRED if rec.get(k) in (None, "")]
    if not rec.get("model") and not all(rec.get(k) for k in ARCH_COLUMNS):
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
    for key in sorted(k for k in given if k not in RECORD_COLUMNS):
        like = [n for n in spelled if n in key or difflib.SequenceMatcher(None, key, n).ratio() >= 0.6]
        if like:
            best = max(like, key=lambda n: difflib.SequenceMatcher(None, key, n).ratio())
            out.append(
                f"sidecar key {key!r} is not read: did you mean {_SIDECAR_KEY.get(spelled[best], best)}?"
            )
    return out


GIVEN_SOURCE = "given"


def note_default_source(check: FileCheck, name: str, how: str) -> None:
    """Record on the check which name rows without a source got, and why (if any row got it)."""
    if any(r.get("source") == name for r in check.records):
        check.default_source, check.source_how = name, how
