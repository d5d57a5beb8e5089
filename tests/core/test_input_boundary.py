"""The input boundary (autopar/inputs.py and its users): every hostile file or value a tester found ends
in exit 2 and one `error:` line naming the field, never a traceback, a hang or gigabytes of memory; a
refused ingest leaves the store unchanged; stored rows an older autopar accepted never break fit/report.

Commands run in-process through the console-script entry point (`autopar.cli.main`).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import sqlite3
import sys
import time
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autopar.calibration.apply.default import default_artifact_path
from autopar.calibration.ingest.ingest import check_file
from autopar.calibration.records.record import fingerprint
from autopar.calibration.store.run_store import RunStore
from autopar.cli import main
from autopar.data import published_runs_path
from autopar.inputs import (
    CONFIG_MAX_BYTES,
    CSV_MAX_COLUMNS,
    MAX_DEPTH,
    InputError,
    parse_json,
    parse_yaml,
    read_bytes,
)
from autopar.parse import MAX_GPU_COUNT_OPTIONS, MAX_SEED
from autopar.units import drop_thousands_commas

HF = Path(__file__).parents[1] / "data" / "hf"
LOGS = Path(__file__).parents[1] / "data" / "logs"


def run_cli(args: list[str]) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `autopar ARGS` run in this process."""
    out, err = io.StringIO(), io.StringIO()
    with (
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
        mock.patch.object(sys, "argv", ["autopar", *args]),
    ):
        try:
            main()
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def refused(args: list[str], *needles: str) -> str:
    """Run a command that must fail: exit 2, no traceback, exactly one `error:` line holding every needle."""
    code, out, err = run_cli(args)
    assert "Traceback" not in out + err, err[-3000:]
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert code == 2 and len(lines) == 1, (code, err[-3000:])
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def nested_json(depth: int) -> str:
    return "[" * depth + "]" * depth


# ------------------------------------------------------------------------------------ depth and size
@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_deeply_nested_model_config_is_one_line(tmp_path, suffix):
    p = tmp_path / f"deep{suffix}"
    body = nested_json(100_000)  # JSON is YAML too: flow sequences
    p.write_text('{"model_type": "llama", "x": ' + body + "}")
    refused(["estimate", "--model", str(p), "--gpus", "8"], str(p), "nested", f"at most {MAX_DEPTH}")


def test_deeply_nested_calibration_model_and_price_file(tmp_path):
    cal = tmp_path / "cal.json"
    cal.write_text('{"format": "autopar-calibration", "x": ' + nested_json(50_000) + "}")
    refused(["estimate", "--calibration", str(cal), "--model", "llama-3.1-8b", "--gpus", "8"], "nested")
    prices = tmp_path / "p.yaml"
    prices.write_text("H100-SXM: " + nested_json(50_000) + "\n")
    refused(["prices", "--prices", str(prices)], "prices file", "nested")


def test_deeply_nested_jsonl_ingest_line_is_a_row_error_and_nothing_is_written(tmp_path):
    f = tmp_path / "runs.jsonl"
    f.write_text('{"gpu": ' + nested_json(50_000) + "}\n")
    db = tmp_path / "runs.db"
    line = refused(["calibrate", "ingest", str(f), "--store", str(db)], "nothing written")
    assert "1 invalid of 1" in line and RunStore(db).count() == 0


BOMB = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
    f"{c}: &{c} [{','.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True)
)  # 9^9 = 387M leaves from ~600 bytes


@pytest.mark.parametrize("kind", ["model", "sidecar", "prices"])
def test_yaml_alias_bomb_is_refused_at_once(tmp_path, kind):
    p = tmp_path / f"{kind}.yaml"
    p.write_text(BOMB)
    assert len(BOMB) < 700
    args = {
        "model": ["estimate", "--model", str(p), "--gpus", "8"],
        "sidecar": ["calibrate", "ingest", str(LOGS / "megatron_gpt_tp2.log"), "--sidecar", str(p)],
        "prices": ["prices", "--prices", str(p)],
    }[kind]
    t0 = time.perf_counter()
    refused(args, "alias *a", "aliases are not allowed")
    assert time.perf_counter() - t0 < 5


def test_csv_with_too_many_columns_is_refused(tmp_path):
    f = tmp_path / "wide.csv"
    n = CSV_MAX_COLUMNS + 1
    f.write_text(",".join(f"c{i}" for i in range(n)) + "\n" + ",".join("1" for _ in range(n)) + "\n")
    refused(
        ["calibrate", "ingest", str(f), "--store", str(tmp_path / "s.db")], f"{n} columns", "at most 1024"
    )


def test_oversized_sidecar_is_refused_without_reading_it(tmp_path):
    big = tmp_path / "run.yaml"
    with big.open("wb") as fh:  # sparse: 17 MiB on paper, nothing on disk
        fh.truncate(CONFIG_MAX_BYTES + 2**20)
    args = ["calibrate", "ingest", str(LOGS / "megatron_gpt_tp2.log"), "--sidecar", str(big)]
    refused(args, "sidecar", "larger than the 16 MiB")


# ---------------------------------------------------------------------------------- Hugging Face fields
def _hf(tmp_path: Path, **changes: object) -> Path:
    cfg = json.loads((HF / "qwen3-30b-a3b.json").read_text())
    for key, value in changes.items():
        if "." in key:
            outer, inner = key.split(".")
            cfg[outer] = {**(cfg.get(outer) or {"rope_type": "yarn", "factor": 4.0}), inner: value}
        else:
            cfg[key] = value
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    return p


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"mlp_only_layers": [0, "1"]}, "'mlp_only_layers'=[0, '1'] must be a list of layer indices"),
        ({"rope_scaling.rope_type": ["yarn"]}, "'rope_scaling.rope_type'=['yarn'] must be a string"),
        ({"rope_scaling.factor": "4"}, "'rope_scaling.factor'='4' must be a finite number"),
        ({"rope_theta": 1e300}, "'rope_theta'=1e+300 must be a finite number > 0 and <= 1e+12"),
        ({"layer_types": "sliding_attention"}, "'layer_types'='sliding_attention' must be a list"),
        ({"use_sliding_window": "yes"}, "'use_sliding_window'='yes' must be true or false"),
        ({"rope_scaling": [1, 2]}, "'rope_scaling'=[1, 2] must be an object"),
    ],
)
def test_hf_fields_of_the_wrong_type_are_one_line(tmp_path, changes, field):
    p = _hf(tmp_path, **changes)
    refused(["estimate", "--model", str(p), "--gpus", "8"], field)


def test_hf_infinite_rope_theta_is_refused_in_optimize_and_launch(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(
        (HF / "qwen2.5-7b.json").read_text().replace('"rope_theta": 1000000.0', '"rope_theta": 1e999')
    )
    assert "1e999" in p.read_text()
    for cmd in (["optimize", "--budget", "5"], ["launch", "--tp", "1"]):
        refused([*cmd, "--model", str(p), "--gpus", "8"], "rope_theta=inf", "only finite numbers")


# ------------------------------------------------------------------------------------------ ingest
def _public_row(n: int = 0, **changes: str) -> dict[str, str]:
    """Published run n (run 0: GPT-1.7B on A100-80GB, 137 TFLOP/s, MFU 0.44) with changed cells."""
    with published_runs_path().open() as fh:
        row = list(csv.DictReader(fh))[n]
    return row | changes


def _write(path: Path, rows: list[dict[str, str]]) -> Path:
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


def _store_rows(db: Path) -> list[tuple]:
    if not db.exists():
        return []
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return conn.execute("SELECT fingerprint, record FROM runs ORDER BY pk").fetchall()


NO_MEASURE = {"measured_tflops_per_gpu": "", "measured_mfu": "", "measured_step_s": ""}


@pytest.mark.parametrize(
    ("tps", "reason"),
    [
        ("inf", "finite number"),
        ("nan", "no throughput"),  # 'nan' is an empty cell (as in pandas): the row measures nothing
        ("-5", "greater than 0"),
        ("1e9", "implies MFU"),  # 1e9 tokens/s per GPU on an A100
        ("100", "below the model's prediction"),  # a 1.7B model at 100 tokens/s per GPU: 100x too slow
    ],
)
def test_ingest_refuses_impossible_measurements_atomically(tmp_path, tps, reason):
    db = tmp_path / "runs.db"
    good = _write(tmp_path / "good.csv", [_public_row(id="ok")])
    assert run_cli(["calibrate", "ingest", str(good), "--store", str(db)])[0] == 0
    before = _store_rows(db)
    bad_row = _public_row(id="b", measured_tokens_per_s_per_gpu=tps, **NO_MEASURE)
    bad = _write(tmp_path / "bad.csv", [_public_row(1, id="a"), bad_row])
    code, _, err = run_cli(["calibrate", "ingest", str(bad), "--store", str(db)])
    assert code == 2 and reason in err and "measured_tokens_per_s_per_gpu" in err and "Traceback" not in err
    assert _store_rows(db) == before
    code, out, err = run_cli(["calibrate", "ingest", str(bad), "--store", str(db), "--skip-invalid"])
    assert code == 0 and "1 invalid row(s) skipped" in out and reason in err
    assert _store_rows(db)[: len(before)] == before and len(_store_rows(db)) == len(before) + 1


def test_implausibility_bounds_keep_every_published_run():
    chk = check_file(published_runs_path())
    assert chk.errors == [] and len(chk.records) == chk.rows_read == 106


def test_megatron_log_with_a_zero_step_time_is_one_line(tmp_path):
    log = tmp_path / "train.log"
    text = (LOGS / "megatron_gpt_tp2.log").read_text()
    log.write_text(
        text.replace("elapsed time per iteration (ms): 9876.5", "elapsed time per iteration (ms): 0.0")
    )
    args = [
        "calibrate",
        "ingest",
        str(log),
        "--format",
        "megatron-log",
        "--sidecar",
        str(LOGS / "megatron_gpt_tp2.yaml"),
    ]
    refused(
        [*args, "--store", str(tmp_path / "s.db")],
        "iteration 10",
        "elapsed time per iteration (ms)='0.0'",
        "> 0",
    )


def test_fit_and_report_skip_stored_rows_an_older_autopar_accepted(tmp_path):
    """A store written before these checks holds an infinite measurement: fit skips it with a note (it
    crashed with 'Input y contains infinity')."""
    db = tmp_path / "old.db"
    public = check_file(published_runs_path()).records
    rec = public[0] | {
        "id": "bad-old",
        "measured_tokens_per_s_per_gpu": float("inf"),
        "source": "old-cluster",
    }
    RunStore(db).add([(fingerprint(r), r, "public.csv") for r in public[:24]] + [("f" * 64, rec, "old.csv")])
    code, out, err = run_cli(
        ["calibrate", "fit", "--store", str(db), "--no-public", "--out", str(tmp_path / "m.json")]
    )
    assert code == 0, err[-2000:]
    assert "skipped 1 stored run(s)" in err and "bad-old" in err and "finite" in err
    assert (tmp_path / "m.json").is_file()


# ------------------------------------------------------------------------------- calibration models
def test_calibration_model_with_an_extreme_intercept_is_refused(tmp_path):
    doc = json.loads(default_artifact_path().read_text())
    doc["throughput"]["intercept"] = 700.0  # exp(700) = 1e304: infinite tokens/s before
    p = tmp_path / "m.json"
    p.write_text(json.dumps(doc))
    refused(
        ["estimate", "--calibration", str(p), "--model", "llama-3.1-8b", "--gpus", "8"],
        "intercept=700",
        "factor of 100",
    )


# ------------------------------------------------------------------------------------------ CLI values
@pytest.mark.parametrize(
    ("gpus", "needle"),
    [
        ("8..8000000:8", f"at most {2**20} GPUs"),
        ("8..800000:8", f"100000 GPU counts; at most {MAX_GPU_COUNT_OPTIONS}"),
        ("8.." + "9" * 25 + ":8", "at most"),
        ("8..4096:8", f"512 GPU counts; at most {MAX_GPU_COUNT_OPTIONS}"),
        ("99999999999999", f"at most {2**20} GPUs"),
    ],
)
def test_gpu_ranges_are_capped_and_answer_at_once(gpus, needle):
    t0 = time.perf_counter()
    refused(["optimize", "--gpus", gpus, "--budget", "5"], "gpus=", needle)
    assert time.perf_counter() - t0 < 5


@pytest.mark.parametrize("seed", [-1, MAX_SEED + 1, 10**30])
def test_seed_out_of_range_is_one_line(seed):
    refused(["optimize", "--seed", str(seed), "--budget", "5"], f"seed={seed}", "between 0 and 4294967295")
    refused(
        [
            "whatif",
            "--model",
            "llama-3.1-8b",
            "--tokens",
            "1T",
            "--option",
            "H100-SXM:64",
            "--seed",
            str(seed),
        ],
        f"seed={seed}",
    )


@pytest.mark.parametrize(
    ("price", "needle"),
    [
        ("1e308", "must be >= 0.001 and <= 1000"),
        ("0", "must be >= 0.001"),
        ('"1,e5"', "'1,e5' is not a number"),
        ('"1,2"', "'1,2' is not a number"),
        (".nan", "only finite numbers"),
    ],
)
def test_price_values_are_strict(tmp_path, price, needle):
    p = tmp_path / "prices.yaml"
    p.write_text(f"H100-SXM:\n  on_demand: {price}\n")
    refused(["prices", "--prices", str(p)], "prices file", needle)


def test_thousands_separators_still_read():
    assert drop_thousands_commas("1,234.5") == "1234.5" and drop_thousands_commas("$1,500,000") == "$1500000"
    assert [drop_thousands_commas(t) for t in ("1,e5", "1,2", "12,34", ",100")] == [None] * 4


# ---------------------------------------------------------------------------------- properties
def _nest(depth: int, kinds: list[bool]) -> object:
    """A document nested `depth` levels, each a list or a one-key object (kinds[i])."""
    doc: object = 1.5
    for i in range(depth):
        doc = {"k": doc} if kinds[i % len(kinds)] else [doc]
    return doc


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 3 * MAX_DEPTH), st.lists(st.booleans(), min_size=1, max_size=8))
def test_json_depth_limit_property(depth, kinds):
    text = json.dumps(_nest(depth, kinds))
    if depth > MAX_DEPTH:
        with pytest.raises(InputError) as ei:
            parse_json(text, "doc")
        assert "\n" not in str(ei.value) and f"nested {depth} levels" in str(ei.value)
    else:
        assert parse_json(text, "doc") == json.loads(text)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2 * MAX_DEPTH), st.lists(st.booleans(), min_size=1, max_size=8))
def test_yaml_depth_limit_property(depth, kinds):
    text = json.dumps(_nest(depth, kinds))  # JSON is YAML flow syntax
    if depth > MAX_DEPTH:
        with pytest.raises(InputError, match="nested more than"):
            parse_yaml(text, "doc")
    else:
        assert parse_yaml(text, "doc") == json.loads(text)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 4096), st.integers(0, 4096))
def test_size_limit_property(tmp_path_factory, size, limit):
    p = tmp_path_factory.mktemp("size") / "f.bin"
    p.write_bytes(b"x" * size)
    if size > limit:
        with pytest.raises(InputError, match="larger than"):
            read_bytes(p, limit, "file")
    else:
        assert read_bytes(p, limit, "file") == b"x" * size


def _all_finite(doc: object) -> bool:
    if isinstance(doc, float):
        return math.isfinite(doc)
    if isinstance(doc, dict):
        return all(_all_finite(v) for v in doc.values())
    if isinstance(doc, list):
        return all(_all_finite(v) for v in doc)
    return True


@settings(max_examples=40, deadline=None)
@given(
    st.recursive(
        st.floats() | st.integers() | st.text(max_size=3),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=3), c, max_size=3),
        max_leaves=12,
    )
)
def test_non_finite_anywhere_is_refused_with_its_path(doc):
    text = json.dumps(doc)  # writes NaN/Infinity for non-finite floats
    finite = _all_finite(doc)  # from the document, not the text: a string "NaN" is finite data
    if finite:
        assert parse_json(text, "doc") == json.loads(text)
    else:
        with pytest.raises(InputError, match="non-finite|only finite"):
            parse_json(text, "doc")
