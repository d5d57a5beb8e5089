"""Reliability fuzz: whatever a user feeds autopar (CLI arguments, HF configs, price files, run
records and training logs; binary, truncated, wrong encoding, huge and NaN values) ends in a result or
one `error:` line and a non-zero exit, never a traceback. Ingest killed with SIGKILL at random
points and re-run leaves exactly the rows of a clean ingest.

Commands run in-process through the console-script entry point (`autopar.cli.main`) so hundreds of
cases fit in a few seconds; an unexpected exception propagates and fails the test with its traceback.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autopar.cli import main
from autopar.data import published_runs_path

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parents[1] / "data"
PUBLIC = published_runs_path()  # the shipped published runs (the test read a copy outside the repository)
FUZZ = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


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
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return code, out.getvalue(), err.getvalue()


def assert_clean(code: int, out: str, err: str) -> None:
    """Either success, or a non-zero exit with exactly one `error:` line and no traceback (exit 1 with
    a printed result is the documented "nothing fits" outcome)."""
    assert "Traceback" not in out + err, err[-3000:]
    if code == 1 and out.strip():
        return
    if code != 0:
        lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
        assert len(lines) == 1, err[-3000:]
        assert len(lines[0]) < 2000


# --- byte-level mutations of a valid file -------------------------------------------------------
JUNK = [b"\x00", b"\xff\xfe", b"\xc3\x28", b"NaN", b"nan", b"inf", b"-inf", b"1e309", b"-1", b"0",
        b"9" * 40, b'"', b",", b"\n", b"\r\n", b"\t", b"{", b"[", b"}", b"null", b"\xef\xbb\xbf"]  # fmt: skip


@st.composite
def mutated(draw: st.DrawFn, original: bytes) -> bytes:
    """A valid file after random damage: truncation, junk tokens spliced in, re-encoding or noise."""
    how = draw(st.sampled_from(["truncate", "splice", "utf16", "latin1", "random", "empty", "numbers"]))
    if how == "truncate":
        return original[: draw(st.integers(0, len(original)))]
    if how == "splice":
        data = bytearray(original)
        for _ in range(draw(st.integers(1, 6))):
            at = draw(st.integers(0, len(data)))
            data[at:at] = draw(st.sampled_from(JUNK))
        return bytes(data)
    if how == "utf16":
        return original.decode("utf-8", "replace").encode("utf-16")
    if how == "latin1":
        return original.decode("utf-8", "replace").replace("a", "ä").encode("latin-1", "replace")
    if how == "random":
        return draw(st.binary(min_size=1, max_size=400))
    if how == "numbers":  # every number replaced by a huge, NaN, negative or zero value
        import re

        bad = draw(st.sampled_from([b"nan", b"1e308", b"-5", b"0", b"inf", b"123456789012345678901234"]))
        return re.sub(rb"\b\d+(\.\d+)?\b", bad, original)
    return b""


def _tmp(suffix: str, data: bytes) -> Path:
    d = Path(tempfile.mkdtemp(prefix="autopar-fuzz-"))
    p = d / f"input{suffix}"
    p.write_bytes(data)
    return p


def _public_sample() -> bytes:
    lines = PUBLIC.read_bytes().splitlines(keepends=True)
    return b"".join(lines[:6])


INGEST_SAMPLES = {
    ".csv": _public_sample,
    ".jsonl": lambda: b"".join(
        json.dumps(r).encode() + b"\n"
        for r in __import__("csv").DictReader(io.StringIO(_public_sample().decode()))
    ),
    ".log": lambda: (DATA / "logs" / "megatron_gpt_tp2.log").read_bytes(),
    ".txt": lambda: (DATA / "logs" / "torchtitan_llama3_8b.log").read_bytes(),
}


@pytest.mark.parametrize("suffix", sorted(INGEST_SAMPLES))
def test_fuzz_ingest_files(suffix, tmp_path):
    original = INGEST_SAMPLES[suffix]()
    store = tmp_path / "runs.db"
    extra = []
    if suffix in (".log", ".txt"):
        side = "megatron_gpt_tp2.yaml" if suffix == ".log" else "torchtitan_llama3_8b.yaml"
        extra = ["--sidecar", str(DATA / "logs" / side)]

    @FUZZ
    @given(data=mutated(original))
    def check(data: bytes) -> None:
        p = _tmp(suffix, data)
        try:
            assert_clean(*run_cli(["calibrate", "ingest", str(p), "--store", str(store), *extra]))
        finally:
            shutil.rmtree(p.parent, ignore_errors=True)

    check()


def test_fuzz_parquet(tmp_path):
    import pandas as pd

    good = tmp_path / "good.parquet"
    pd.read_csv(io.BytesIO(_public_sample()), dtype=str, keep_default_na=False).to_parquet(good)
    original = good.read_bytes()

    @FUZZ
    @given(data=mutated(original))
    def check(data: bytes) -> None:
        p = _tmp(".parquet", data)
        try:
            assert_clean(*run_cli(["calibrate", "ingest", str(p), "--store", str(tmp_path / "s.db")]))
        finally:
            shutil.rmtree(p.parent, ignore_errors=True)

    check()


def test_fuzz_parquet_values(tmp_path):
    """Well-formed Parquet whose cells are NaN, infinite, huge, negative or of the wrong type."""
    import pandas as pd

    base = pd.read_csv(io.BytesIO(_public_sample()), dtype=str, keep_default_na=False)
    values = [float("nan"), float("inf"), 1e308, -1.0, 0, "x", None, 2**62]

    @FUZZ
    @given(col=st.sampled_from(list(base.columns)), value=st.sampled_from(values))
    def check(col: str, value: object) -> None:
        df = base.copy()
        df[col] = [value] * len(df)
        p = tmp_path / "v.parquet"
        try:
            df.to_parquet(p)
        except Exception:  # noqa: BLE001 - pyarrow cannot store this mix; nothing to test
            return
        assert_clean(*run_cli(["calibrate", "ingest", str(p), "--store", str(tmp_path / "s.db")]))

    check()


HF_VALUES = st.one_of(
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.none(),
    st.booleans(),
    st.lists(st.integers(-3, 5), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)
HF_FILES = sorted((DATA / "hf").glob("*.json"))


@FUZZ
@given(
    base=st.sampled_from(HF_FILES),
    edits=st.dictionaries(
        st.sampled_from(
            [
                "hidden_size",
                "num_hidden_layers",
                "num_attention_heads",
                "num_key_value_heads",
                "intermediate_size",
                "vocab_size",
                "model_type",
                "head_dim",
                "num_experts",
                "num_local_experts",
                "num_experts_per_tok",
                "moe_intermediate_size",
                "sliding_window",
                "tie_word_embeddings",
                "max_position_embeddings",
                "text_config",
                "n_routed_experts",
            ]
        ),  # fmt: skip
        HF_VALUES,
        max_size=4,
    ),
)
def test_fuzz_hf_configs(base, edits):
    cfg = json.loads(base.read_text())
    cfg.update(edits)
    p = _tmp(".json", json.dumps(cfg).encode())
    cfg_path = p.parent / "config.json"
    p.rename(cfg_path)
    try:
        assert_clean(*run_cli(["estimate", "--model", str(cfg_path), "--gpus", "8", "--tp", "8"]))
    finally:
        shutil.rmtree(cfg_path.parent, ignore_errors=True)


@FUZZ
@given(data=mutated((DATA / "hf" / "qwen3-8b.json").read_bytes()))
def test_fuzz_hf_config_bytes(data):
    p = _tmp(".json", data)
    cfg_path = p.parent / "config.json"
    p.rename(cfg_path)
    try:
        assert_clean(*run_cli(["estimate", "--model", str(cfg_path), "--gpus", "8", "--tp", "8"]))
    finally:
        shutil.rmtree(cfg_path.parent, ignore_errors=True)


PRICE_YAML = b"""prices:
  H100-SXM:
    on_demand: 2.99
    spot: {usd_per_gpu_hour: 1.5, source: "a quote", date: 2026-01}
  B200:
    reserved: 3.1
"""
PRICE_CSV = b"gpu,tier,usd_per_gpu_hour,source\nH100-SXM,on_demand,2.5,x\nH200,spot,1.9,y\n"


@FUZZ
@given(
    suffix_and_data=st.one_of(
        mutated(PRICE_YAML).map(lambda d: (".yaml", d)), mutated(PRICE_CSV).map(lambda d: (".csv", d))
    )
)
def test_fuzz_price_files(suffix_and_data):
    suffix, data = suffix_and_data
    p = _tmp(suffix, data)
    try:
        assert_clean(*run_cli(["prices", "--prices", str(p), "--json"]))
    finally:
        shutil.rmtree(p.parent, ignore_errors=True)


ARG_VALUES = st.one_of(
    st.sampled_from(
        [
            "",
            "-1",
            "0",
            "nan",
            "inf",
            "1e309",
            "abc",
            "8..",
            "..8",
            "64..8",
            "1..2:0",
            "9" * 30,
            "H100-SXM,",
            ",",
            "bf16,fp4",
            "2GiB",
            "-3GiB",
            "NaN GiB",
            "1T",
            "1e400",
            "\x00",
            "é",
        ]
    ),  # fmt: skip
    st.text(max_size=12),
)
OPT_FIELDS = ["--gpus", "--gpu", "--seq-len", "--global-batch", "--precision", "--budget", "--objectives",
              "--min-headroom", "--max-cost", "--tokens", "--timeout", "--tier", "--sampler", "--model",
              "--framework", "--gpus-per-node", "--internode-gbps", "--workers", "--heartbeat"]  # fmt: skip


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(field=st.sampled_from(OPT_FIELDS), value=ARG_VALUES)
def test_fuzz_optimize_arguments(field, value):
    base = ["optimize", "--model", "Llama-3.1-8B", "--gpus", "8", "--budget", "3", "--no-calibration"]
    base += ["--global-batch", "16", "--json"]
    assert_clean(*run_cli([*base, field, value]))


WHATIF_FIELDS = ["--option", "--tokens", "--deadline", "--max-spend", "--goodput", "--budget", "--tier",
                 "--seq-len", "--min-headroom", "--storage"]  # fmt: skip


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(field=st.sampled_from(WHATIF_FIELDS), value=ARG_VALUES)
def test_fuzz_whatif_arguments(field, value):
    base = ["whatif", "-m", "Llama-3.1-8B", "-o", "H100-SXM:8", "-t", "1T", "--budget", "3"]
    base += ["--no-calibration", "--no-sensitivity", "--global-batch", "16", "--json"]
    if field == "--storage":
        value = os.path.join(tempfile.mkdtemp(prefix="autopar-fuzz-"), value.replace("/", "_") or "x")
    assert_clean(*run_cli([*base, field, value]))


# --- SIGKILL during ingest ----------------------------------------------------------------------
def _rows(store: Path) -> list[tuple[str, str]]:
    if not store.exists():
        return []
    with contextlib.closing(sqlite3.connect(store)) as c:
        try:
            return sorted(c.execute("SELECT fingerprint, record FROM runs").fetchall())
        except sqlite3.OperationalError:  # killed before the tables were created
            return []


def test_ingest_killed_at_random_points_then_rerun_equals_clean(tmp_path):
    files = []
    lines = PUBLIC.read_text().splitlines(keepends=True)
    for i in range(3):  # three files of the published runs
        f = tmp_path / f"part{i}.csv"
        f.write_text(lines[0] + "".join(lines[1 + 30 * i : 31 + 30 * i]))
        files.append(str(f))
    args = ["calibrate", "ingest", *files, "--skip-invalid", "--store"]
    cmd = [sys.executable, "-m", "autopar", *args]  # the killed runs are real processes
    clean = tmp_path / "clean.db"
    code, _, err = run_cli([*args, str(clean)])  # the clean and resumed runs: the same command in process
    assert code == 0, err
    expected = _rows(clean)
    assert len(expected) > 20
    rng = random.Random(14)
    for k in range(3):
        store = tmp_path / f"killed{k}.db"
        p = subprocess.Popen(
            [*cmd, str(store)], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            p.wait(timeout=rng.uniform(0.2, 2.5))
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGKILL)
            p.wait()
        partial = _rows(store)
        assert partial in ([], expected)  # one transaction: all rows or none, never a torn store
        code, _, err = run_cli([*args, str(store)])
        assert code == 0, err
        assert _rows(store) == expected


STORAGE_VALUES = st.one_of(
    st.sampled_from(
        [
            "postgresql://",
            "postgresql://u:p@/db",
            "postgresql://u:p@127.0.0.1:0/db",
            "sqlite://",
            "sqlite:///",
            "mysql://x",
            "redis://x",
            "://",
            "x://y",
            "journal",
            ".",
            "/",
            "\x00",
            "sqlite:////nonexistent/dir/x.db",
            "postgres://u@[::1/db",
        ]
    ),  # fmt: skip
    st.text(max_size=20),
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=STORAGE_VALUES, cmd=st.sampled_from(["status", "report"]))
def test_fuzz_study_storage_argument(value, cmd):
    with tempfile.TemporaryDirectory() as d, contextlib.chdir(d):
        code, out, err = run_cli(["study", cmd, "--storage", value])
    assert_clean(code, out, err)
    assert code != 0  # nothing is stored there
