"""Run-record row validation: pydantic types and ranges, cross-field checks, smoke records, normalization.

A file is validated row by row; invalid rows are reported with (row, field, value, reason) and the
caller decides whether to reject the file whole or keep the valid rows. The record model and its
fingerprint: records/record.py; the plausibility of a measurement: records/plausibility.py.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import (
    Field,
    ValidationError,
    create_model,
)

from autopar.calibration.records.cells import catalog_lookup
from autopar.calibration.records.columns import ARCH_COLUMNS
from autopar.calibration.records.plausibility import plausibility_error
from autopar.calibration.records.record import RunRecord, fingerprint, normalize_record
from autopar.calibration.records.specs import row_to_specs
from autopar.calibration.records.stack_columns import stated_true
from autopar.calibration.records.throughput import (
    TFLOPS_DEFINITIONS,
    tflops_definition,
)
from autopar.errors import AutoparError
from autopar.layouts import Axis


@dataclass(frozen=True)
class RowError:
    """Why one row of a file is invalid: 1-based row (first data row = 1), field, value, reason."""

    row: int
    field: str
    value: Any
    reason: str

    def __str__(self) -> str:
        return f"row {self.row}: {self.field}={self.value!r}: {self.reason}"


def _semantic_errors(r: RunRecord) -> list[tuple[str, Any, str]]:
    """Cross-field rules a row must satisfy: model known, GPU known, degrees and a throughput."""
    errs: list[tuple[str, Any, str]] = []
    missing_arch = [c for c in ARCH_COLUMNS if getattr(r, c) is None]
    if missing_arch:
        if not r.model:
            errs.append(
                (
                    "model",
                    None,
                    "required: a catalog model name, or the arch columns " + "/".join(ARCH_COLUMNS),
                )
            )
        else:
            spec, reason = catalog_lookup("model", r.model)
            if spec is None and reason is not None:
                errs.append(
                    (
                        "model",
                        r.model,
                        f"{reason}; or give the arch columns ({', '.join(missing_arch)} are empty)",
                    )
                )
    _, reason = catalog_lookup("gpu", r.gpu) if r.gpu else (None, None)  # None: a _GivenRecord without one
    if reason is not None:
        errs.append(("gpu", r.gpu, reason))
    degrees = {k: getattr(r, k) for k in (Axis.TP, Axis.PP, Axis.CP, Axis.DP)}
    if r.num_gpus and all(v is not None for v in degrees.values()):
        prod = math.prod(degrees.values())
        if prod != r.num_gpus:
            errs.append(
                (
                    "num_gpus",
                    r.num_gpus,
                    f"tp*pp*cp*dp = {'*'.join(str(v) for v in degrees.values())} = {prod} != num_gpus",
                )
            )
    if r.micro_batch and r.dp and r.global_batch and r.global_batch % (r.micro_batch * r.dp):
        errs.append(
            ("global_batch", r.global_batch, f"not a multiple of micro_batch*dp = {r.micro_batch}*{r.dp}")
        )
    has_tflops = r.measured_tflops_per_gpu is not None and tflops_definition(r.model_dump()) is not None
    oom = stated_true((r.model_extra or {}).get("measured_oom"))
    if r.measured_tokens_per_s_per_gpu is None and r.measured_step_s is None and not has_tflops and not oom:
        errs.append(
            (
                "measured_tokens_per_s_per_gpu",
                None,
                "no throughput: give measured_tokens_per_s_per_gpu, measured_step_s, or "
                "measured_tflops_per_gpu with tflops_definition in " + "|".join(TFLOPS_DEFINITIONS),
            )
        )
    return errs


# A smoke record: `autopar dryrun` run on CPU (a tiny model on gloo processes; autopar/dryrun/record.py). It
# shows that the command ran end to end, not how any GPU performs, so it says so twice (`device` = cpu and
# `gpu` = cpu). Ingest stores it after the checks that need no GPU (types, finite positive measurements,
# architecture columns, degrees, a throughput) — the GPU catalog, the implied-MFU and the prediction-factor
# gates compare with a GPU and do not apply — and `calibrate fit`/`report` never learn from it. Any other
# record goes through every gate; a smoke mark on a record naming a GPU is refused.
SMOKE_DEVICE = "cpu"


_NO_GPU_FIELDS = ("measured_mem_gb_per_gpu", "measured_tflops_per_gpu", "measured_mfu")


def is_smoke_record(rec: Mapping[str, Any]) -> bool:
    """A CPU smoke record (SMOKE_DEVICE above), by its `device` cell."""
    return str(rec.get("device") or "").strip().lower() == SMOKE_DEVICE


def _smoke_errors(r: RunRecord) -> list[tuple[str, Any, str]]:
    """What a smoke record must satisfy instead of the GPU checks of _semantic_errors."""
    errs: list[tuple[str, Any, str]] = []
    if r.gpu.lower() != SMOKE_DEVICE:
        errs.append(
            (
                "gpu",
                r.gpu,
                f"a smoke record (device={SMOKE_DEVICE}) is a CPU run: gpu must be '{SMOKE_DEVICE}'",
            )
        )
    missing = [c for c in ARCH_COLUMNS if getattr(r, c) is None]
    if missing:
        errs.append(
            (missing[0], None, "a smoke record must give its architecture (" + "/".join(missing) + ")")
        )
    errs += [
        (f, getattr(r, f), "a smoke record is a CPU run: no GPU memory or GPU FLOP rate")
        for f in _NO_GPU_FIELDS
        if getattr(r, f) is not None
    ]
    if r.measured_step_s is None and r.measured_tokens_per_s_per_gpu is None:
        errs.append(
            ("measured_step_s", None, "no throughput: give measured_step_s or measured_tokens_per_s_per_gpu")
        )
    degrees = [getattr(r, k) or 1 for k in (Axis.TP, Axis.PP, Axis.CP, Axis.DP)]
    if math.prod(degrees) != r.num_gpus:
        errs.append(("num_gpus", r.num_gpus, f"tp*pp*cp*dp = {math.prod(degrees)} != num_gpus"))
    return errs


def learnable(records: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """(the records a corrector may learn from, how many smoke records were left out)."""
    kept = [r for r in records if not is_smoke_record(r)]
    return kept, len(records) - len(kept)


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


def stored_record_problem(rec: Mapping[str, Any]) -> str | None:
    """Why a record already in a store would be refused by today's ingest (non-finite or implausible
    measurements from an older autopar), as one line; None when it is still valid."""
    _, errors = validate_rows([rec])
    return str(errors[0]).removeprefix("row 1: ") if errors else None


def validate_rows(
    rows: Iterable[Mapping[str, Any]], *, default_source: str | None = None, start: int = 1
) -> tuple[list[dict[str, Any]], list[RowError]]:
    """Validate raw rows; return the normalized good records and one RowError per problem."""
    good: list[dict[str, Any]] = []
    errors: list[RowError] = []
    for i, raw in enumerate(rows, start=start):
        raw = {str(k).strip(): v for k, v in raw.items() if k is not None}
        try:
            r = RunRecord.model_validate(raw)
        except ValidationError as e:
            errors.extend(RowError(i, *err) for err in _pydantic_errors(e, raw))
            continue
        smoke = is_smoke_record(raw)
        sem = _smoke_errors(r) if smoke else _semantic_errors(r)
        if sem:
            errors.extend(RowError(i, f, v, why) for f, v, why in sem)
            continue
        rec = normalize_record(r)
        spec_err = None if smoke else (_specs_error(rec) or plausibility_error(rec))
        if spec_err:
            errors.append(RowError(i, *spec_err))
            continue
        if not rec.get("source") and default_source:
            rec["source"] = default_source
        if not rec.get("id"):
            rec["id"] = f"{rec.get('source') or 'run'}-{fingerprint(rec)[:10]}"
        good.append(rec)
    return good, errors


def _pydantic_errors(e: ValidationError, raw: Mapping[str, Any]) -> list[tuple[str, Any, str]]:
    """(field, value, reason) of each type or range error pydantic found in a raw row."""
    out = []
    for err in e.errors():
        loc = str(err["loc"][0]) if err.get("loc") else "row"
        val = raw.get(loc, err.get("input")) if loc != "row" else None
        out.append((loc, val, err.get("msg", "invalid")))
    return out


# RunRecord with its required columns optional: what a log, its flags and sidecar give is checked while some
# of those are still missing, so that one message names the missing fields and the invalid values together.
_GivenRecord = create_model(
    "_GivenRecord",
    __base__=RunRecord,
    seq_len=(int | None, Field(default=None, gt=0)),
    gpu=(str | None, None),
    num_gpus=(int | None, Field(default=None, gt=0)),
    global_batch=(int | None, Field(default=None, gt=0)),
)


def given_value_errors(raw: Mapping[str, Any]) -> list[tuple[str, Any, str]]:
    """(field, value, reason) of every value a row gives that is invalid (type or range, unknown model or
    GPU, degrees against the GPU count), whatever it still lacks; the checks of missing values (a model,
    a throughput) are left to the caller, which names the missing fields itself."""
    row = {str(k).strip(): v for k, v in raw.items() if k is not None}
    bad: list[tuple[str, Any, str]] = []
    try:
        given = _GivenRecord.model_validate(row)
    except ValidationError as e:  # check the rest without the invalid values
        bad = _pydantic_errors(e, row)
        invalid = {f for f, _, _ in bad}
        try:
            given = _GivenRecord.model_validate({k: v for k, v in row.items() if k not in invalid})
        except ValidationError:
            return bad
    return bad + [e for e in _semantic_errors(given) if e[1] is not None]
