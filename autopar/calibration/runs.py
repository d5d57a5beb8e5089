"""Run-record ingestion: read tables, validate rows (pydantic), fingerprint, derive tokens/s.

A run record is one measured training run: its configuration (the columns of the run-record schema,
the header of ``shared/groundtruth/public.csv``) plus at least one throughput measurement. A file is
validated row by row; invalid rows are reported with (row, field, value, reason) and the caller
decides whether to reject the file whole or keep the valid rows.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from autopar.calibration.logs import LOG_FORMATS, aggregate, parse_log, sniff_log_format
from autopar.calibration.records import ARCH_COLUMNS, RECORD_COLUMNS, row_to_specs
from autopar.errors import AutoparError, DataError, UnknownNameError

# The run-record schema (the columns of shared/groundtruth/public.csv, in order) and the arch columns
# without which a row must name a catalog model: both as the specs builder in records.py reads them.
SCHEMA_COLUMNS: tuple[str, ...] = RECORD_COLUMNS
CORE_ARCH_COLUMNS: tuple[str, ...] = ARCH_COLUMNS
# Labels that name a record but are not part of what was run or measured (left out of the fingerprint).
LABEL_COLUMNS = frozenset({"id", "source", "source_ref", "notes"})
TFLOPS_DEFINITIONS = ("megatron_hfu", "megatron_mfu", "6n", "palm")
TABLE_FORMATS = ("csv", "jsonl", "parquet")

_MISSING = frozenset({"", "nan", "none", "null", "na", "n/a"})


def _blank_to_none(v: Any) -> Any:
    """Empty cells (blank, NaN, 'null') mean 'not stated'."""
    if v is None:
        return None
    if isinstance(v, float) and math.isnan(v):
        return None
    if isinstance(v, str):
        s = v.strip()
        return None if s.lower() in _MISSING else s
    return v


def _as_number(v: Any) -> Any:
    """Turn numeric text into a number (int when integral) so CSV and JSONL rows compare equal."""
    if hasattr(v, "item") and not isinstance(v, str | bytes):  # numpy scalar from Parquet/pandas
        v = v.item()
    if isinstance(v, bool) or not isinstance(v, str | int | float):
        return v
    if isinstance(v, str):
        try:
            v = float(v.replace(",", "")) if re.fullmatch(r"[-+0-9.,eE]+", v) else v
        except ValueError:
            return v
        if isinstance(v, str):
            return v
    if isinstance(v, float) and math.isfinite(v) and v.is_integer() and abs(v) < 2**53:
        return int(v)
    return v


class RunRow(BaseModel):
    """One run record as read from a file: types and ranges of every schema column."""

    model_config = ConfigDict(extra="allow", str_strip_whitespace=True)

    id: str | None = None
    source: str | None = None
    source_ref: str | None = None
    model: str | None = None
    arch: str | None = None
    params_b: float | None = Field(default=None, gt=0)
    active_params_b: float | None = Field(default=None, gt=0)
    layers: int | None = Field(default=None, gt=0)
    hidden: int | None = Field(default=None, gt=0)
    ffn_hidden: int | None = Field(default=None, gt=0)
    heads: int | None = Field(default=None, gt=0)
    kv_heads: int | None = Field(default=None, gt=0)
    head_dim: int | None = Field(default=None, gt=0)
    vocab: int | None = Field(default=None, gt=0)
    seq_len: int = Field(gt=0)
    experts: int | None = Field(default=None, ge=0)
    topk: int | None = Field(default=None, ge=0)
    shared_experts: int | None = Field(default=None, ge=0)
    moe_ffn_hidden: int | None = Field(default=None, gt=0)
    gpu: str
    num_gpus: int = Field(gt=0)
    gpus_per_node: int | None = Field(default=None, gt=0)
    tp: int | None = Field(default=None, gt=0)
    pp: int | None = Field(default=None, gt=0)
    dp: int | None = Field(default=None, gt=0)
    cp: int | None = Field(default=None, gt=0)
    ep: int | None = Field(default=None, gt=0)
    etp: int | None = Field(default=None, gt=0)
    vpp: int | None = Field(default=None, gt=0)
    sp: bool | None = None
    zero: int | None = Field(default=None, ge=0, le=3)
    recompute: Literal["none", "selective", "full"] | None = None
    micro_batch: int | None = Field(default=None, gt=0)
    global_batch: int = Field(gt=0)
    precision: Literal["bf16", "fp16", "fp8", "fp32"] | None = None
    framework: str | None = None
    measured_tflops_per_gpu: float | None = Field(default=None, gt=0)
    measured_mfu: float | None = Field(default=None, gt=0, le=1, description="a fraction: 0.44 = 44%")
    measured_tokens_per_s_per_gpu: float | None = Field(default=None, gt=0)
    measured_step_s: float | None = Field(default=None, gt=0)
    measured_mem_gb_per_gpu: float | None = Field(default=None, gt=0)
    notes: str | None = None
    tflops_definition: Literal["megatron_hfu", "megatron_mfu", "6n", "palm"] | None = None

    @field_validator("*", mode="before")
    @classmethod
    def _clean(cls, v: Any, info: ValidationInfo) -> Any:
        """Blank cells to None, numeric text to numbers, enum text to lower case."""
        v = _blank_to_none(v)
        name = info.field_name
        if name in _LOWER_FIELDS:
            return v.lower() if isinstance(v, str) else v
        if name not in _TEXT_FIELDS:
            return _as_number(v)
        return v


_TEXT_FIELDS = frozenset({"id", "source", "source_ref", "model", "arch", "gpu", "framework", "notes",
                          "recompute", "precision", "tflops_definition"})
_LOWER_FIELDS = frozenset({"recompute", "precision", "arch", "tflops_definition"})


@dataclass(frozen=True)
class RowError:
    """Why one row of a file is invalid: 1-based row (first data row = 1), field, value, reason."""

    row: int
    field: str
    value: Any
    reason: str

    def __str__(self) -> str:
        return f"row {self.row}: {self.field}={self.value!r}: {self.reason}"


@dataclass
class FileCheck:
    """The result of validating one file: normalized good records and the errors of the bad rows."""

    path: Path
    fmt: str
    records: list[dict[str, Any]] = field(default_factory=list)
    errors: list[RowError] = field(default_factory=list)
    rows_read: int = 0

    @property
    def bad_rows(self) -> list[int]:
        return sorted({e.row for e in self.errors})


# ---------------------------------------------------------------------------------------- catalog
def _catalog_lookup(kind: str, name: str) -> tuple[Any | None, str | None]:
    """(spec, None) if the catalog knows `name`; (None, reason) if it does not; (None, None) if no catalog."""
    try:
        from autopar import catalog
    except ImportError:
        return None, None
    fn = getattr(catalog, "get_model" if kind == "model" else "get_gpu", None)
    if fn is None:
        return None, None
    try:
        return fn(name), None
    except UnknownNameError as e:
        return None, str(e)
    except Exception:  # a catalog still being built or a broken entry: do not judge the row by it
        return None, None


def _semantic_errors(r: RunRow) -> list[tuple[str, Any, str]]:
    """Cross-field rules a row must satisfy: model known, GPU known, degrees and a throughput."""
    errs: list[tuple[str, Any, str]] = []
    missing_arch = [c for c in CORE_ARCH_COLUMNS if getattr(r, c) is None]
    if missing_arch:
        if not r.model:
            errs.append(("model", None, "required: a catalog model name, or the arch columns "
                         + "/".join(CORE_ARCH_COLUMNS)))
        else:
            spec, reason = _catalog_lookup("model", r.model)
            if spec is None and reason is not None:
                errs.append(("model", r.model, f"{reason}; or give the arch columns "
                             f"({', '.join(missing_arch)} are empty)"))
    _, reason = _catalog_lookup("gpu", r.gpu)
    if reason is not None:
        errs.append(("gpu", r.gpu, reason))
    degrees = {k: getattr(r, k) for k in ("tp", "pp", "cp", "dp")}
    if all(v is not None for v in degrees.values()):
        prod = math.prod(degrees.values())
        if prod != r.num_gpus:
            errs.append(("num_gpus", r.num_gpus,
                         f"tp*pp*cp*dp = {'*'.join(str(v) for v in degrees.values())} = {prod} != num_gpus"))
    if r.micro_batch and r.dp and r.global_batch % (r.micro_batch * r.dp):
        errs.append(("global_batch", r.global_batch,
                     f"not a multiple of micro_batch*dp = {r.micro_batch}*{r.dp}"))
    has_tflops = r.measured_tflops_per_gpu is not None and tflops_definition(r.model_dump()) is not None
    if r.measured_tokens_per_s_per_gpu is None and r.measured_step_s is None and not has_tflops:
        errs.append(("measured_tokens_per_s_per_gpu", None,
                     "no throughput: give measured_tokens_per_s_per_gpu, measured_step_s, or "
                     "measured_tflops_per_gpu with tflops_definition in " + "|".join(TFLOPS_DEFINITIONS)))
    return errs


def _specs_error(rec: Mapping[str, Any]) -> tuple[str, Any, str] | None:
    """Why the specs builder cannot turn a record into model/cluster/workload/strategy, if it cannot."""
    try:
        row_to_specs(rec)
    except (AutoparError, ValueError, TypeError) as e:
        msg = " ".join(str(e).split())
        m = re.search(r"column '(\w+)'|columns '(\w+)'|\b(\w+)=", msg)
        name = next((g for g in (m.groups() if m else ()) if g), None)
        if name not in rec:
            name = "model" if msg.startswith("model ") else ("gpu" if "GPU" in msg else "config")
        return name, rec.get(name), msg
    return None


def normalize_record(r: RunRow) -> dict[str, Any]:
    """A validated row as a plain dict: every schema column (None where empty) then the extras."""
    d = r.model_dump()
    out: dict[str, Any] = {c: d.get(c) for c in SCHEMA_COLUMNS}
    if d.get("sp") is not None:
        out["sp"] = int(d["sp"])
    for k, v in d.items():
        if k not in out:
            v = _as_number(_blank_to_none(v))
            if v is not None:
                out[k] = v
    return out


def validate_rows(rows: Iterable[Mapping[str, Any]], *, default_source: str | None = None,
                  start: int = 1) -> tuple[list[dict[str, Any]], list[RowError]]:
    """Validate raw rows; return the normalized good records and one RowError per problem."""
    good: list[dict[str, Any]] = []
    errors: list[RowError] = []
    for i, raw in enumerate(rows, start=start):
        raw = {str(k).strip(): v for k, v in raw.items() if k is not None}
        try:
            r = RunRow.model_validate(raw)
        except ValidationError as e:
            for err in e.errors():
                loc = str(err["loc"][0]) if err.get("loc") else "row"
                val = raw.get(loc, err.get("input")) if loc != "row" else None
                errors.append(RowError(i, loc, val, err.get("msg", "invalid")))
            continue
        sem = _semantic_errors(r)
        if sem:
            errors.extend(RowError(i, f, v, why) for f, v, why in sem)
            continue
        rec = normalize_record(r)
        spec_err = _specs_error(rec)
        if spec_err:
            errors.append(RowError(i, *spec_err))
            continue
        if not rec.get("source") and default_source:
            rec["source"] = default_source
        if not rec.get("id"):
            rec["id"] = f"{rec.get('source') or 'run'}-{fingerprint(rec)[:10]}"
        good.append(rec)
    return good, errors


# ------------------------------------------------------------------------------------ fingerprint
def _canon(v: Any) -> Any:
    """A value in canonical form: integral floats as ints, other floats to 9 significant digits."""
    v = _as_number(v)
    if isinstance(v, float):
        return float(f"{v:.9g}")
    return v


def fingerprint(record: Mapping[str, Any]) -> str:
    """sha256 of the canonical config + measurement (labels id/source/notes left out): the dedup key."""
    body = {k: _canon(v) for k, v in record.items()
            if k not in LABEL_COLUMNS and _blank_to_none(v) is not None}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


# ------------------------------------------------------------------------------ tokens/s from rows
def tflops_definition(record: Mapping[str, Any]) -> str | None:
    """The FLOP convention of measured_tflops_per_gpu: the column, or 'flops_def=eq.3' in notes."""
    d = _blank_to_none(record.get("tflops_definition"))
    if d:
        return str(d).lower()
    notes = str(record.get("notes") or "")
    if re.search(r"flops_def\s*=\s*eq\.?\s*3\b", notes):
        return "megatron_hfu"  # Narayanan et al. 2021 eq. 3, recompute forward included
    return None


def _arch(record: Mapping[str, Any]) -> tuple[float, float, float, float] | None:
    """(layers, hidden, vocab, params) from the row, or from the catalog model it names."""
    vals = [_as_number(_blank_to_none(record.get(c))) for c in ("layers", "hidden", "vocab")]
    params = _as_number(_blank_to_none(record.get("params_b")))
    if all(isinstance(v, int | float) for v in vals):
        n = float(params) * 1e9 if isinstance(params, int | float) else math.nan
        return float(vals[0]), float(vals[1]), float(vals[2]), n
    if record.get("model"):
        spec, _ = _catalog_lookup("model", str(record["model"]))
        if spec is not None:
            return float(spec.layers), float(spec.hidden), float(spec.vocab), float(spec.total_params)
    return None


def flops_per_token(record: Mapping[str, Any], definition: str) -> float | None:
    """FLOPs counted per trained token under a source's convention (for TFLOP/s -> tokens/s).

    megatron_hfu: Narayanan et al. 2021 eq. 3, 96·l·h²·(1 + s/6h + V/16lh) (recompute included);
    megatron_mfu: Korthikanti et al. 2022, 72·l·h²·(1 + s/6h + V/12lh) (no recompute);
    6n: 6·N; palm: 6·N + 12·l·h·s (PaLM appendix B). N = params_b·1e9.
    """
    a = _arch(record)
    s = float(record.get("seq_len") or 0)
    if a is None or s <= 0:
        return None
    nl, h, v, n = a
    if definition == "megatron_hfu":
        return 96 * nl * h * h * (1 + s / (6 * h) + v / (16 * nl * h))
    if definition == "megatron_mfu":
        return 72 * nl * h * h * (1 + s / (6 * h) + v / (12 * nl * h))
    if math.isnan(n):
        return None
    if definition == "6n":
        return 6 * n
    if definition == "palm":
        return 6 * n + 12 * nl * h * s
    return None


def measured_tokens_per_s_per_gpu(record: Mapping[str, Any]) -> tuple[float | None, str]:
    """Measured tokens/s per GPU and how it was obtained: as measured, from step time, or from TFLOP/s."""
    tps = _as_number(_blank_to_none(record.get("measured_tokens_per_s_per_gpu")))
    if isinstance(tps, int | float) and tps > 0:
        return float(tps), "measured"
    step = _as_number(_blank_to_none(record.get("measured_step_s")))
    gb, s, n = (_as_number(_blank_to_none(record.get(k))) for k in ("global_batch", "seq_len", "num_gpus"))
    if isinstance(step, int | float) and step > 0 and all(isinstance(x, int | float) for x in (gb, s, n)):
        return float(gb) * float(s) / float(step) / float(n), "step time"
    tf = _as_number(_blank_to_none(record.get("measured_tflops_per_gpu")))
    d = tflops_definition(record)
    if isinstance(tf, int | float) and tf > 0 and d:
        fpt = flops_per_token(record, d)
        if fpt:
            return float(tf) * 1e12 / fpt, f"TFLOP/s ({d})"
    return None, "none"


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
    with path.open("r", errors="replace") as fh:
        head = fh.read(1 << 20)
    fmt = sniff_log_format(head)
    if fmt is None:
        raise DataError(f"cannot tell the format of '{path}': pass --format "
                        "csv|jsonl|parquet|megatron-log|torchtitan-log")
    return fmt


def read_table_rows(path: Path, fmt: str) -> tuple[list[dict[str, Any]], list[RowError]]:
    """Raw rows of a CSV/JSONL/Parquet file (values as written) and errors for unreadable lines."""
    if fmt == "csv":
        with path.open(newline="", encoding="utf-8-sig") as fh:
            sample = fh.read(4096)
            fh.seek(0)
            delim = "\t" if path.suffix.lower() == ".tsv" or ("\t" in sample and "," not in sample) else ","
            reader = csv.DictReader(fh, delimiter=delim)
            if not reader.fieldnames:
                raise DataError(f"'{path}' is empty: expected a header row with the run-record columns")
            return [dict(r) for r in reader], []
    if fmt == "jsonl":
        rows: list[dict[str, Any]] = []
        errors: list[RowError] = []
        with path.open(encoding="utf-8") as fh:
            for n, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    errors.append(RowError(n, "(line)", line.strip()[:60], f"not JSON: {e.msg}"))
                    rows.append({})
                    continue
                if not isinstance(obj, dict):
                    errors.append(RowError(n, "(line)", line.strip()[:60], "not a JSON object"))
                    obj = {}
                rows.append(obj)
        return rows, errors
    if fmt == "parquet":
        import pandas as pd

        try:
            df = pd.read_parquet(path)
        except ImportError as e:
            raise DataError("reading Parquet needs pyarrow: pip install 'autopar[parquet]'") from e
        except Exception as e:
            raise DataError(f"'{path}' is not a readable Parquet file: {e}") from e
        return [{k: (None if _is_na(v) else v) for k, v in r.items()} for r in df.to_dict("records")], []
    raise DataError(f"unknown table format '{fmt}' (allowed: {', '.join(TABLE_FORMATS)})")


def _is_na(v: Any) -> bool:
    try:
        return v is None or (isinstance(v, float) and math.isnan(v))
    except TypeError:
        return False


def check_table_file(path: Path, fmt: str, *, default_source: str | None = None) -> FileCheck:
    """Read and validate a run-record table; rows that cannot be parsed count as invalid."""
    raw, read_errors = read_table_rows(path, fmt)
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
FORMATS = ("auto", *TABLE_FORMATS, *LOG_FORMATS)
# Sidecar/flag spellings accepted for schema columns.
CONFIG_ALIASES = {"gpus": "num_gpus", "micro-batch": "micro_batch", "global-batch": "global_batch",
                  "seq-len": "seq_len", "seq_length": "seq_len", "micro_batch_size": "micro_batch",
                  "global_batch_size": "global_batch", "gpus-per-node": "gpus_per_node"}


class InvalidRowsError(DataError):
    """A file (or several) had invalid rows; nothing was written. Carries every file's check."""

    def __init__(self, checks: list[FileCheck]):
        self.checks = checks
        bad = [c for c in checks if c.errors]
        parts = [f"{c.path}: {len(c.bad_rows)} invalid of {c.rows_read} rows" for c in bad]
        valid = sum(len(c.records) for c in checks)
        super().__init__("; ".join(parts) + f" — nothing written (--skip-invalid ingests the {valid} "
                         "valid rows)")


@dataclass
class IngestReport:
    """What one ingest did: per-file checks, records new to the store, duplicates, skipped rows."""

    checks: list[FileCheck]
    added: int
    store_path: Path

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
    import yaml

    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise DataError(f"sidecar '{p}' is not valid YAML: {e}") from e
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


def check_log_file(path: Path, fmt: str, config: Mapping[str, Any], *, warmup: int | None = None,
                   default_source: str | None = None) -> FileCheck:
    """Parse a training log into one record (config from flags/sidecar) and validate it."""
    text = path.read_text(errors="replace")
    samples = parse_log(text, fmt)
    rec = aggregate(samples, dict(config), warmup=warmup)
    good, errors = validate_rows([rec], default_source=default_source or fmt)
    return FileCheck(path=path, fmt=fmt, records=good, errors=errors, rows_read=1)


def check_file(path: str | Path, fmt: str = "auto", *, config: Mapping[str, Any] | None = None,
               warmup: int | None = None, source: str | None = None) -> FileCheck:
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
        raise DataError(f"config flags/--sidecar ({', '.join(sorted(config))}) describe a training log; "
                        f"'{p.name}' is a {fmt} table whose rows carry their own config")
    check = check_table_file(p, fmt, default_source=source or p.stem)
    if check.rows_read == 0:
        raise DataError(f"'{p}' has no rows")
    return check


def ingest(paths: Sequence[str | Path], store: Any, *, fmt: str = "auto", skip_invalid: bool = False,
           config: Mapping[str, Any] | None = None, warmup: int | None = None,
           source: str | None = None) -> IngestReport:
    """Validate every file, then write all valid records in one transaction (unless any row is bad)."""
    checks = [check_file(p, fmt, config=config, warmup=warmup, source=source) for p in paths]
    if any(c.errors for c in checks) and not skip_invalid:
        raise InvalidRowsError(checks)
    items = [(fingerprint(r), r, str(c.path.resolve())) for c in checks for r in c.records]
    added = store.add(items) if items else 0
    return IngestReport(checks=checks, added=added, store_path=store.path)
