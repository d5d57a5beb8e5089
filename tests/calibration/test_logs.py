"""Log parsers: Megatron-LM and torchtitan fixture logs ingest to hand-computed records."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from autopar.calibration.ingest.ingest import check_file
from autopar.calibration.ingest.log_files import load_sidecar
from autopar.calibration.ingest.log_record import aggregate, warmup_count
from autopar.calibration.ingest.log_steps import (
    LogSamples,
    parse_megatron_log,
    parse_torchtitan_log,
    sniff_log_format,
)
from autopar.calibration.store.run_store import RunStore
from autopar.cli import app
from autopar.errors import DataError

LOGS = Path(__file__).parents[1] / "data" / "logs"
MEG = LOGS / "megatron_gpt_tp2.log"
TT = LOGS / "torchtitan_llama3_8b.log"
MEG_FLAGS = {
    "gpu": "H100-SXM",
    "num_gpus": 8,
    "tp": 2,
    "pp": 1,
    "cp": 1,
    "dp": 4,
    "micro_batch": 1,
    "seq_len": 2048,
    "precision": "bf16",
    "recompute": "none",
}


def test_sniff_formats():
    assert sniff_log_format(MEG.read_text()) == "megatron-log"
    assert sniff_log_format(TT.read_text()) == "torchtitan-log"
    assert sniff_log_format("hello\nworld\n") is None


def test_megatron_parse_lines_and_memory():
    s = parse_megatron_log(MEG.read_text())
    assert s.steps == list(range(10, 131, 10))  # 13 logged lines, log_interval 10
    assert s.step_s[0] == pytest.approx(9.8765) and s.tflops[0] == pytest.approx(248.4)
    assert s.global_batch == 128 and s.train_iters == 130
    # four ranks report memory, two of them on one line; max reserved MB: 58212, 60010, 61440, 58000
    assert sorted(s.mem_gib) == pytest.approx(sorted(x / 1024 for x in (58212.0, 60010.0, 61440.0, 58000.0)))


def test_megatron_aggregate_matches_hand_values():
    cfg = {**load_sidecar(LOGS / "megatron_gpt_tp2.yaml"), **MEG_FLAGS}
    rec = aggregate(parse_megatron_log(MEG.read_text()), cfg)
    # 13 samples -> warm-up ceil(10% of 13) = 2 skipped (iterations 10, 20); 11 kept (30..130):
    # ms sorted 6070 6080 6085 6090 6095 [6100] 6105 6110 6115 6120 6130 -> median 6100 ms,
    # p10 at position 1.0 -> 6080 ms, p90 at position 9.0 -> 6120 ms.
    assert rec["log_warmup_skipped"] == 2 and rec["log_steps_used"] == 11 and rec["log_first_step"] == 30
    assert rec["measured_step_s"] == pytest.approx(6.100)
    assert rec["measured_step_s_p10"] == pytest.approx(6.080)
    assert rec["measured_step_s_p90"] == pytest.approx(6.120)
    # tokens/s/GPU = 128 seq * 2048 tok / 6.100 s / 8 GPUs = 5371.8
    assert rec["measured_tokens_per_s_per_gpu"] == pytest.approx(128 * 2048 / 6.1 / 8)
    assert rec["measured_tokens_per_s_per_gpu"] == pytest.approx(5371.8, abs=0.1)
    # TFLOP/s sorted 400.2 400.8 401.1 401.5 401.8 [402.1] 402.5 402.8 403.1 403.5 404.1
    assert rec["measured_tflops_per_gpu"] == pytest.approx(402.1)
    # memory: max 'max reserved' = 61440 MiB = 60.0 GiB
    assert rec["measured_mem_gb_per_gpu"] == pytest.approx(60.0)
    assert rec["global_batch"] == 128 and rec["framework"] == "Megatron-LM"


def test_megatron_explicit_warmup_and_batch_mismatch():
    s = parse_megatron_log(MEG.read_text())
    rec = aggregate(s, dict(MEG_FLAGS), warmup=0)
    # all 13 samples: the median is the 7th of 6070 6080 6085 6090 6095 6100 [6100] 6105 ... 9876.5
    assert rec["measured_step_s"] == pytest.approx(6.100) and rec["log_steps_used"] == 13
    rec5 = aggregate(s, dict(MEG_FLAGS), warmup=5)  # keeps iterations 60..130 (8 samples)
    # 6090 6105 6095 6130 6070 6115 6085 6100 -> sorted middle pair 6095, 6100 -> 6097.5 ms
    assert rec5["measured_step_s"] == pytest.approx(6.0975)
    with pytest.raises(DataError, match="global batch size 128"):
        aggregate(s, {**MEG_FLAGS, "global_batch": 256})
    with pytest.raises(DataError, match="skips all 13"):
        aggregate(s, dict(MEG_FLAGS), warmup=13)


def test_torchtitan_parse_strips_colours_and_skips_validation():
    s = parse_torchtitan_log(TT.read_text())
    assert s.steps == [1, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100]
    assert s.tokens_per_s_per_gpu[0] == 1021 and 9999 not in s.tokens_per_s_per_gpu
    assert s.mfu[0] == pytest.approx(0.0598) and s.mem_gib[0] == pytest.approx(42.18)


def test_torchtitan_aggregate_matches_hand_values():
    cfg = load_sidecar(LOGS / "torchtitan_llama3_8b.yaml")
    rec = aggregate(parse_torchtitan_log(TT.read_text()), cfg)
    # 11 samples -> skip ceil(1.1) = 2 (steps 1, 10); kept tps sorted:
    # 5740 5748 5755 5759 [5762] 5766 5771 5781 5790 -> median 5762;
    # p10 at position 0.8: 5740 + 0.8*8 = 5746.4; p90 at 7.2: 5781 + 0.2*9 = 5782.8
    assert rec["measured_tokens_per_s_per_gpu"] == pytest.approx(5762)
    assert rec["measured_tokens_per_s_per_gpu_p10"] == pytest.approx(5746.4)
    assert rec["measured_tokens_per_s_per_gpu_p90"] == pytest.approx(5782.8)
    # tflops sorted 332.75 333.21 333.62 333.85 [334.02] ...; mfu sorted ... [33.77%] ...
    assert rec["measured_tflops_per_gpu"] == pytest.approx(334.02)
    assert rec["measured_mfu"] == pytest.approx(0.3377)
    # memory: max over kept steps = 77.02 GiB (validation line's 80.00 ignored)
    assert rec["measured_mem_gb_per_gpu"] == pytest.approx(77.02)
    assert "measured_step_s" not in rec  # torchtitan prints no step time


def test_torchtitan_older_wps_and_multi_rank_lines():
    text = (
        "[rank0]:step:  1  loss: 10.0  memory: 10.00GiB(10.00%)  wps: 1,000  mfu: 1.00%\n"
        "[rank0]:step: 10  loss:  9.0  memory: 20.00GiB(20.00%)  wps: 3,000  mfu: 3.00%\n"
        "[rank1]:step: 10  loss:  9.0  memory: 22.00GiB(22.00%)  wps: 3,200  mfu: 3.20%\n"
    )
    s = parse_torchtitan_log(text)
    assert s.steps == [1, 10]
    assert s.tokens_per_s_per_gpu == [1000, 3100]  # ranks averaged
    assert s.mem_gib == [10.0, 22.0]  # max over ranks


def test_file_ingest_validates_the_aggregate():
    chk = check_file(TT, config=load_sidecar(LOGS / "torchtitan_llama3_8b.yaml"))
    assert chk.fmt == "torchtitan-log" and chk.errors == []
    rec = chk.records[0]
    assert (
        rec["source"] == "torchtitan-log" and rec["num_gpus"] == 8 and rec["id"].startswith("torchtitan-log-")
    )
    # without the config: one line naming the file and every missing column (the log prints none of them)
    with pytest.raises(DataError) as e:
        check_file(TT, config={})
    msg = str(e.value)
    assert msg.startswith(f"{TT}: ") and "\n" not in msg
    assert "give gpu, num_gpus, seq_len, global_batch, model" in msg


def test_no_step_lines_is_a_clear_error(tmp_path):
    p = tmp_path / "x.log"
    p.write_text("nothing to see\n")
    with pytest.raises(DataError, match="cannot tell the format"):
        check_file(p)
    with pytest.raises(DataError, match="no Megatron-LM step lines"):
        check_file(p, "megatron-log", config=MEG_FLAGS)


def test_a_non_integer_in_the_argument_dump_is_one_line_naming_it(tmp_path):
    # Found by the ingest fuzz test: a NUL before a number in Megatron's argument dump raised a bare
    # ValueError (a traceback). It is a DataError naming the file, the argument and the value (escaped).
    p = tmp_path / "bad.log"
    p.write_text(MEG.read_text(encoding="utf-8").replace("2048", "\x002048", 1), encoding="utf-8")
    with pytest.raises(DataError) as e:
        check_file(p, "megatron-log", config=MEG_FLAGS)
    msg = str(e.value)
    assert msg.startswith(f"{p}: argument dump: seq_length = ") and "is not an integer" in msg
    assert "\\x00" in msg and "\n" not in msg and "\x00" not in msg


@given(st.integers(0, 10_000))
def test_default_warmup_is_ten_percent_at_least_one(n):
    k = warmup_count(n, None)
    assert (k == 0) if n < 2 else (1 <= k <= n // 10 + 1 and k >= 0.1 * n)
    assert k < max(n, 1)


@given(st.lists(st.floats(0.5, 50), min_size=2, max_size=40))
def test_aggregate_median_lies_within_p10_p90(xs):
    s = LogSamples(framework="Megatron-LM", steps=list(range(len(xs))), step_s=list(xs))
    rec = aggregate(s, {"num_gpus": 8, "seq_len": 1024, "global_batch": 8}, warmup=0)
    assert rec["measured_step_s_p10"] <= rec["measured_step_s"] <= rec["measured_step_s_p90"]
    assert min(xs) <= rec["measured_step_s_p10"] and rec["measured_step_s_p90"] <= max(xs)


runner = CliRunner()


def test_cli_ingest_logs_with_flags_and_sidecar(tmp_path):
    db = tmp_path / "runs.db"
    args = [
        "calibrate",
        "ingest",
        str(MEG),
        "--store",
        str(db),
        "--sidecar",
        str(LOGS / "megatron_gpt_tp2.yaml"),
        "--gpu",
        "H100-SXM",
        "--gpus",
        "8",
        "--tp",
        "2",
        "--pp",
        "1",
        "--dp",
        "4",
        "--micro-batch",
        "1",
        "--precision",
        "bf16",
        "--recompute",
        "none",
    ]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "added 1 new record(s)" in r.output
    r2 = runner.invoke(app, args)
    assert "added 0 new record(s)" in r2.output
    r3 = runner.invoke(
        app,
        [
            "calibrate",
            "ingest",
            str(TT),
            "--store",
            str(db),
            "--sidecar",
            str(LOGS / "torchtitan_llama3_8b.yaml"),
            "--source",
            "my-cluster",
        ],
    )
    assert r3.exit_code == 0, r3.output
    recs = {r.source: r.record for r in RunStore(db).runs()}
    assert recs["megatron-log"]["tp"] == 2 and recs["megatron-log"]["measured_step_s"] == pytest.approx(6.1)
    assert recs["my-cluster"]["measured_tokens_per_s_per_gpu"] == pytest.approx(5762)


def test_cli_log_without_config_reports_fields(tmp_path):
    r = runner.invoke(app, ["calibrate", "ingest", str(MEG), "--store", str(tmp_path / "d.db")])
    assert r.exit_code == 2
    # the log's own dump gives num_gpus (world size 8) and seq_len; gpu and model are missing, one line
    assert "megatron_gpt_tp2.log: neither the log nor the flags/--sidecar give gpu, model" in r.output
    assert "num_gpus" not in r.output and "Traceback" not in r.output and r.output.count("\n") == 1


def _oom_log(tmp_path: Path) -> Path:
    """The fixture log's header (arguments, model build), then a CUDA OOM before its first iteration line."""
    head = MEG.read_text().split("training ...")[0]
    p = tmp_path / "oom.log"
    p.write_text(
        head
        + "training ...\n[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
        "GPU 3 has a total capacity of 79.11 GiB of which 1.21 GiB is free.\n"
    )
    return p


def test_a_log_that_ooms_before_its_first_step_is_an_oom_record(tmp_path):
    """Issue 44: a measured OOM is evidence. A Megatron log that ran out of memory before logging a step
    becomes one record: its configuration (flags, sidecar, the log's own argument dump) with measured_oom and
    no throughput; a log with neither steps nor an OOM is still the clear error above."""
    cfg = {**load_sidecar(LOGS / "megatron_gpt_tp2.yaml"), **MEG_FLAGS}
    chk = check_file(_oom_log(tmp_path), "megatron-log", config=cfg)
    (rec,) = chk.records
    assert rec["measured_oom"] is True and rec["global_batch"] == 128 and rec["tp"] == 2
    assert not rec.get("measured_tokens_per_s_per_gpu") and "out of memory before its first" in rec["notes"]


def test_cli_ingests_an_oom_log_once(tmp_path, monkeypatch):
    import json

    monkeypatch.setenv("AUTOPAR_HOME", str(tmp_path / "home"))
    log = _oom_log(tmp_path)
    args = [
        "calibrate",
        "ingest",
        str(log),
        "--format",
        "megatron-log",
        "--sidecar",
        str(LOGS / "megatron_gpt_tp2.yaml"),
    ]
    args += ["--gpu", "H100-SXM", "--gpus", "8", "--tp", "2", "--pp", "1", "--dp", "4", "--micro-batch", "1"]
    args += ["--seq-len", "2048"]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    res = CliRunner().invoke(app, ["calibrate", "list", "--json"])
    runs = json.loads(res.stdout)["runs"]
    assert len(runs) == 1 and runs[0]["measured_oom"] in (True, "true", "True", 1)
