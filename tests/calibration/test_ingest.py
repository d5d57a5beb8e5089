"""Run-record ingestion: validation, the SQLite store (atomic, idempotent), export round trip, CLI."""

from __future__ import annotations

import csv
import json
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from autopar.calibration.ingest.ingest import InvalidRowsError, check_file, ingest
from autopar.calibration.records.checks import validate_rows
from autopar.calibration.records.columns import RECORD_COLUMNS
from autopar.calibration.records.record import fingerprint
from autopar.calibration.records.throughput import measured_tokens_per_s_per_gpu
from autopar.calibration.store.run_store import RunStore, default_store_path
from autopar.cli import app
from autopar.errors import DataError


def _row(**kw: object) -> dict[str, object]:
    """A valid run record (GPT-3 175B-like on 64 A100s), overridable per test."""
    base: dict[str, object] = {
        "id": "R1",
        "source": "unit",
        "model": "GPT-test",
        "arch": "dense",
        "layers": 96,
        "hidden": 12288,
        "ffn_hidden": 49152,
        "heads": 96,
        "kv_heads": 96,
        "vocab": 51200,
        "seq_len": 2048,
        "gpu": "A100-80GB",
        "num_gpus": 64,
        "gpus_per_node": 8,
        "tp": 8,
        "pp": 8,
        "dp": 1,
        "cp": 1,
        "ep": 1,
        "sp": 1,
        "zero": 0,
        "recompute": "selective",
        "micro_batch": 1,
        "global_batch": 64,
        "precision": "bf16",
        "framework": "Megatron-LM",
        "measured_step_s": 13.75,
    }
    base.update(kw)
    return base


def _write_csv(path: Path, rows: list[dict[str, object]]) -> Path:
    cols = list(RECORD_COLUMNS) + sorted({k for r in rows for k in r} - set(RECORD_COLUMNS))
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols)
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if v is None else v) for k, v in r.items()})
    return path


def _three(tmp_path: Path, bad: dict[str, object] | None = None) -> Path:
    rows = [
        _row(id="R1"),
        _row(id="R2", global_batch=128, measured_step_s=27.1),
        _row(id="R3", num_gpus=128, dp=2, global_batch=128, measured_step_s=13.9),
    ]
    if bad:
        rows[1] = {**rows[1], **bad}
    return _write_csv(tmp_path / "runs.csv", rows)


# ------------------------------------------------------------------------------------- validation
def test_valid_row_normalized_and_tokens_from_step_time():
    good, errors = validate_rows([{k: str(v) for k, v in _row().items()}])
    assert errors == []
    rec = good[0]
    assert rec["num_gpus"] == 64 and isinstance(rec["num_gpus"], int) and rec["sp"] == 1
    tps, how = measured_tokens_per_s_per_gpu(rec)
    # 64 sequences * 2048 tokens / 13.75 s / 64 GPUs = 148.945... tokens/s per GPU
    assert how == "step time"
    assert tps == pytest.approx(64 * 2048 / 13.75 / 64)


@pytest.mark.parametrize(
    "field,value,needle",
    [
        ("seq_len", "abc", "valid integer"),
        ("num_gpus", 0, "greater than 0"),
        ("recompute", "sometimes", "'none', 'selective', 'full'"),
        ("measured_mfu", 44, "less than or equal to 1"),
        ("zero", 4, "less than or equal to 3"),
        ("tp", 2.5, "fractional part"),
    ],
)
def test_bad_field_reported_with_row_field_value_reason(field, value, needle):
    good, errors = validate_rows([_row(), _row(**{field: value})])
    assert len(good) == 1
    assert [(e.row, e.field) for e in errors] == [(2, field)]
    assert errors[0].value == value and needle in errors[0].reason


def test_semantic_rules():
    # tp*pp*cp*dp = 8*8*1*2 = 128 but num_gpus = 64
    _, e1 = validate_rows([_row(dp=2)])
    assert e1[0].field == "num_gpus" and "= 128 != num_gpus" in e1[0].reason
    # 64 sequences cannot split into micro-batches of 3 over dp=1 evenly: 64 % 3 != 0
    _, e2 = validate_rows([_row(micro_batch=3)])
    assert e2[0].field == "global_batch"
    # no throughput at all
    _, e3 = validate_rows([_row(measured_step_s=None)])
    assert e3[0].field == "measured_tokens_per_s_per_gpu"
    # TFLOP/s alone is not enough without its FLOP convention ...
    _, e4 = validate_rows([_row(measured_step_s=None, measured_tflops_per_gpu=150)])
    assert len(e4) == 1
    # ... and is with one
    good, e5 = validate_rows(
        [_row(measured_step_s=None, measured_tflops_per_gpu=150, tflops_definition="megatron_hfu")]
    )
    assert e5 == [] and len(good) == 1
    # required columns
    _, e6 = validate_rows([{k: v for k, v in _row().items() if k != "gpu"}])
    assert e6[0].field == "gpu" and "required" in e6[0].reason.lower()
    # no arch and no model name
    _, e7 = validate_rows([_row(model=None, layers=None)])
    assert e7[0].field == "model"
    # a GPU the catalog does not know, with the known names in the reason
    _, e8 = validate_rows([_row(gpu="Z100")])
    assert e8[0].field == "gpu" and "unknown GPU 'Z100'" in e8[0].reason and "H100-SXM" in e8[0].reason
    # a catalog model name stands in for the arch columns
    good, e9 = validate_rows(
        [
            _row(
                model="llama-3.1-8b",
                layers=None,
                hidden=None,
                heads=None,
                ffn_hidden=None,
                kv_heads=None,
                vocab=None,
                measured_step_s=1.0,  # ~2000 tokens/s per GPU: an 8B model's speed, not the 175B's 13.75 s
            )
        ]
    )
    assert e9 == [] and len(good) == 1


def test_tokens_from_tflops_megatron_eq3():
    # Narayanan 2021 Table 1 row 1: GPT 1.7B, l=24, h=2304, s=2048, V=51200, 137 TFLOP/s per GPU.
    # FLOPs/token = 96*l*h^2*(1 + s/6h + V/16lh) = 96*24*2304^2*(1 + 0.148148 + 0.0578704)
    #             = 1.2230590e10 * 1.2060185 = 1.4750317e10 -> 137e12 / 1.4750317e10 = 9287.9 tokens/s
    rec = _row(
        layers=24,
        hidden=2304,
        heads=24,
        ffn_hidden=9216,
        measured_step_s=None,
        measured_tflops_per_gpu=137,
        notes="flops_def=eq.3 incl. recompute",
    )
    tps, how = measured_tokens_per_s_per_gpu(rec)
    assert how == "TFLOP/s (megatron_hfu)"
    assert tps == pytest.approx(9287.9, rel=1e-4)


def test_fingerprint_ignores_labels_and_number_spelling():
    a = _row()
    b = {
        **a,
        "id": "other",
        "notes": "re-typed",
        "source": "elsewhere",
        "num_gpus": "64.0",
        "measured_step_s": "13.750",
    }
    assert fingerprint(a) == fingerprint(b)
    assert fingerprint(a) != fingerprint({**a, "measured_step_s": 13.76})


@settings(max_examples=40, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["tp", "pp", "micro_batch", "measured_step_s", "model"]),
        st.one_of(st.integers(1, 64), st.floats(0.1, 100), st.text(max_size=5)),
        max_size=4,
    )
)
def test_fingerprint_is_order_independent_and_stable(extra):
    rec = {**_row(), **extra}
    shuffled = dict(reversed(list(rec.items())))
    assert fingerprint(rec) == fingerprint(shuffled)
    assert len(fingerprint(rec)) == 64


# ------------------------------------------------------------------------------------------ store
def test_reingest_adds_zero(tmp_path):
    store = RunStore(tmp_path / "runs.db")
    f = _three(tmp_path)
    assert ingest([f], store).added == 3
    rep = ingest([f], store)
    assert (rep.added, rep.duplicates) == (0, 3)
    assert store.count() == 3
    assert {r.file for r in store.runs()} == {str(f.resolve())}
    assert {r.source for r in store.runs()} == {"unit"}


def test_one_bad_row_writes_nothing(tmp_path):
    store = RunStore(tmp_path / "runs.db")
    f = _three(tmp_path, bad={"num_gpus": "sixty-four"})
    with pytest.raises(InvalidRowsError) as ei:
        ingest([f], store)
    assert [(e.row, e.field, e.value) for e in ei.value.checks[0].errors] == [(2, "num_gpus", "sixty-four")]
    assert "nothing written" in str(ei.value)
    assert store.count() == 0


def test_skip_invalid_ingests_the_good_rows(tmp_path):
    store = RunStore(tmp_path / "runs.db")
    f = _three(tmp_path, bad={"seq_len": ""})
    rep = ingest([f], store, skip_invalid=True)
    assert (rep.added, rep.skipped) == (2, 1)
    assert sorted(r["id"] for r in store.records()) == ["R1", "R3"]


def test_failure_midway_leaves_store_unchanged(tmp_path, monkeypatch):
    store = RunStore(tmp_path / "runs.db")
    ingest([_write_csv(tmp_path / "first.csv", [_row(id="R0", measured_step_s=14.0)])], store)
    before = [(r.fingerprint, r.record) for r in store.runs()]
    calls = {"n": 0}
    real = RunStore._insert

    def flaky(self, conn, fp, record, file, now):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("disk went away")
        return real(self, conn, fp, record, file, now)

    monkeypatch.setattr(RunStore, "_insert", flaky)
    with pytest.raises(OSError):
        ingest([_three(tmp_path)], store)
    assert calls["n"] == 2  # the first new record had been inserted inside the transaction
    assert [(r.fingerprint, r.record) for r in store.runs()] == before


def test_store_rejects_a_non_store_file(tmp_path):
    p = tmp_path / "junk.db"
    p.write_text("this is not sqlite" * 100)
    with pytest.raises(DataError, match="not an autopar run store"):
        RunStore(p).count()


def test_store_that_is_a_directory_is_one_error_line(tmp_path):
    (tmp_path / "runs.db").mkdir()
    with pytest.raises(DataError, match="cannot open run store .*runs.db"):
        RunStore(tmp_path / "runs.db").count()
    r = CliRunner().invoke(app, ["calibrate", "list", "--store", str(tmp_path / "runs.db")])
    assert r.exit_code == 2 and "Traceback" not in r.output and "cannot open run store" in r.output


def test_default_store_under_autopar_home(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOPAR_HOME", str(tmp_path / "home"))
    assert default_store_path() == tmp_path / "home" / "runs.db"
    monkeypatch.delenv("AUTOPAR_HOME")
    assert default_store_path() == Path.home() / ".autopar" / "runs.db"


def test_store_schema_has_unique_fingerprint(tmp_path):
    store = RunStore(tmp_path / "runs.db")
    ingest([_three(tmp_path)], store)
    with sqlite3.connect(store.path) as conn:
        sql = conn.execute("SELECT sql FROM sqlite_master WHERE name='runs'").fetchone()[0]
    assert "fingerprint TEXT NOT NULL UNIQUE" in sql


# -------------------------------------------------------------------------------- formats, export
def test_jsonl_and_parquet_give_the_same_records(tmp_path):
    rows = [
        _row(id="A", log_steps_used=90),
        _row(id="B", global_batch=128, measured_step_s=27.0, log_steps_used=45),
    ]
    csv_f = _write_csv(tmp_path / "r.csv", rows)
    jl = tmp_path / "r.jsonl"
    jl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    import pandas as pd

    pq = tmp_path / "r.parquet"
    pd.DataFrame(rows).to_parquet(pq)
    checks = [check_file(p) for p in (csv_f, jl, pq)]
    fps = [sorted(fingerprint(r) for r in c.records) for c in checks]
    assert fps[0] == fps[1] == fps[2]
    assert [type(r["log_steps_used"]) for c in checks for r in c.records] == [int] * 6  # extras normalized


def test_jsonl_bad_line_is_a_row_error(tmp_path):
    jl = tmp_path / "r.jsonl"
    jl.write_text(json.dumps(_row()) + "\n{not json\n")
    chk = check_file(jl)
    assert len(chk.records) == 1 and chk.errors[0].row == 2 and chk.errors[0].field == "(line)"


def test_config_flags_rejected_for_tables(tmp_path):
    with pytest.raises(DataError, match="describe a training log"):
        check_file(_three(tmp_path), config={"gpu": "H100-SXM"})


runner = CliRunner()


def test_cli_ingest_list_export_roundtrip(tmp_path):
    db = tmp_path / "runs.db"
    f = _three(tmp_path)
    r1 = runner.invoke(app, ["calibrate", "ingest", str(f), "--store", str(db)])
    assert r1.exit_code == 0, r1.output
    assert "added 3 new record(s)" in r1.output
    r2 = runner.invoke(app, ["calibrate", "ingest", str(f), "--store", str(db)])
    assert "added 0 new record(s) (3 already stored" in r2.output
    lst = runner.invoke(app, ["calibrate", "list", "--store", str(db)])
    assert lst.exit_code == 0 and "R1" in lst.output and "R3" in lst.output
    out_csv = tmp_path / "dump.csv"
    ex = runner.invoke(
        app, ["calibrate", "export", "--store", str(db), "--format", "csv", "--out", str(out_csv)]
    )
    assert ex.exit_code == 0
    lines = out_csv.read_text().splitlines()
    assert lines[0].split(",")[:3] == ["id", "source", "source_ref"] and len(lines) == 4
    jl = runner.invoke(app, ["calibrate", "export", "--store", str(db), "--format", "jsonl"])
    assert [json.loads(x)["id"] for x in jl.output.splitlines()] == ["R1", "R2", "R3"]
    again = runner.invoke(app, ["calibrate", "ingest", str(out_csv), "--store", str(db)])
    assert "added 0 new record(s)" in again.output


def test_cli_bad_row_exits_2_with_report(tmp_path):
    db = tmp_path / "runs.db"
    f = _three(tmp_path, bad={"tp": "x"})
    r = runner.invoke(app, ["calibrate", "ingest", str(f), "--store", str(db)])
    assert r.exit_code == 2
    assert "nothing written" in r.output and "tp" in r.output
    assert "Traceback" not in r.output
    assert not db.exists() or RunStore(db).count() == 0
    r2 = runner.invoke(app, ["calibrate", "ingest", str(f), "--store", str(db), "--skip-invalid"])
    assert r2.exit_code == 0 and "added 2 new record(s)" in r2.output


def test_cli_missing_file_and_bad_format(tmp_path):
    r = runner.invoke(
        app, ["calibrate", "ingest", str(tmp_path / "nope.csv"), "--store", str(tmp_path / "d.db")]
    )
    assert r.exit_code == 2 and "No such file" in r.output
    r2 = runner.invoke(app, ["calibrate", "export", "--store", str(tmp_path / "d.db"), "--format", "xml"])
    assert r2.exit_code == 2 and "csv, jsonl" in r2.output


def test_module_exports_schema_of_public_csv():
    assert RECORD_COLUMNS[0] == "id" and RECORD_COLUMNS[-1] == "notes"
    assert len(RECORD_COLUMNS) == 42
