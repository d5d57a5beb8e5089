"""The log parsers on real excerpts (tests/fixtures/logs/PROVENANCE.md): every returned field by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from autopar.calibration.ingest.log_config import log_config, merge_log_config
from autopar.calibration.ingest.log_record import aggregate
from autopar.calibration.ingest.log_steps import parse_log, sniff_log_format
from autopar.errors import DataError

REAL = Path(__file__).parents[1] / "fixtures" / "logs"


def _read(name: str) -> tuple[str, str]:
    text = (REAL / name).read_text()
    fmt = sniff_log_format(text)
    assert fmt is not None, name
    return text, fmt


def test_megatron_moe_argument_dump_and_aux_loss_lines():
    text, fmt = _read("megatron_mixtral_moe_ep8.log")
    assert fmt == "megatron-log"
    # the dump's lines: expert_model_parallel_size 8, ffn_hidden_size 14336, global_batch_size 128,
    # hidden_size 4096, recompute_granularity None (no recomputation); fp8 None and fp16 False say
    # nothing positive about the precision (the excerpt has no bf16 line), so none is read.
    assert log_config(text, fmt) == {
        "ep": 8,
        "ffn_hidden": 14336,
        "global_batch": 128,
        "hidden": 4096,
        "recompute": "none",
    }
    s = parse_log(text, fmt)
    assert s.steps == [43, 44, 45, 71, 72, 73] and s.train_iters == 100 and s.global_batch == 128
    assert s.step_s == pytest.approx([5.4449, 5.5338, 5.7186, 5.3616, 5.4707, 5.8299])
    assert s.tflops == pytest.approx([239.8, 236.0, 228.4, 243.6, 238.7, 224.0])
    assert s.tokens_per_s_per_gpu == [] and s.mem_gib == []  # no memory report in the excerpt
    rec = aggregate(s, merge_log_config({"num_gpus": 16, "seq_len": 4096}, log_config(text, fmt)))
    # 6 samples: ceil(0.6) = 1 warm-up skipped; kept ms 5533.8 5718.6 5361.6 5470.7 5829.9,
    # sorted 5361.6 5470.7 [5533.8] 5718.6 5829.9; p10 at 0.4 -> 5361.6 + 0.4*109.1 = 5405.24,
    # p90 at 3.6 -> 5718.6 + 0.6*111.3 = 5785.38; TFLOP/s sorted 224.0 228.4 [236.0] 238.7 243.6.
    assert rec["log_warmup_skipped"] == 1 and rec["log_first_step"] == 44 and rec["log_last_step"] == 73
    assert rec["measured_step_s"] == pytest.approx(5.5338)
    assert rec["measured_step_s_p10"] == pytest.approx(5.40524)
    assert rec["measured_step_s_p90"] == pytest.approx(5.78538)
    assert rec["measured_tflops_per_gpu"] == pytest.approx(236.0)
    # tokens/s/GPU = 128 * 4096 / 5.5338 / 16 (seq_len and GPU count given here, not in the excerpt)
    assert rec["measured_tokens_per_s_per_gpu"] == pytest.approx(128 * 4096 / 5.5338 / 16)
    assert rec["ep"] == 8 and rec["global_batch"] == 128 and rec["framework"] == "Megatron-LM"


def test_megatron_flag_that_contradicts_the_dump_is_an_error():
    text, fmt = _read("megatron_mixtral_moe_ep8.log")
    with pytest.raises(DataError, match=r"^ep=4 \(flags/sidecar\) but the log itself says ep=8$"):
        merge_log_config({"ep": 4}, log_config(text, fmt))
    assert merge_log_config({"ep": 8, "tp": 2}, log_config(text, fmt))["tp"] == 2  # agreeing + completing


def test_megatron_older_line_format_without_throughput():
    text, fmt = _read("megatron_llama2_no_throughput.log")
    s = parse_log(text, fmt)
    assert s.steps == [5, 10] and s.train_iters == 2000 and s.global_batch == 64
    assert s.step_s == pytest.approx([11.0756, 14.6427]) and s.tflops == []
    assert log_config(text, fmt) == {}  # no argument dump in the excerpt
    rec = aggregate(s, {"num_gpus": 8, "seq_len": 4096})
    assert rec["measured_step_s"] == pytest.approx(14.6427) and "measured_tflops_per_gpu" not in rec


def test_torchtitan_every_rank_logging_the_same_step():
    text, fmt = _read("torchtitan_moe_ranks.log")
    assert fmt == "torchtitan-log"
    s = parse_log(text, fmt)
    assert s.steps == [4, 5]
    # step 4: 7 ranks, tps 10,050 x5 and 10,049 x2 -> mean 10049.714; tflops (314.71 + 4*314.69 +
    # 2*314.68)/7 = 314.69; memory max 66.91 GiB; mfu 13.99%
    assert s.tokens_per_s_per_gpu == pytest.approx([(5 * 10050 + 2 * 10049) / 7, 10007])
    assert s.tflops == pytest.approx([(314.71 + 4 * 314.69 + 2 * 314.68) / 7, 313.36])
    assert s.mfu == pytest.approx([0.1399, 0.1393]) and s.mem_gib == [66.91, 66.91]
    rec = aggregate(s, {})  # 2 samples: 1 warm-up skipped, step 5 kept
    assert rec["measured_tokens_per_s_per_gpu"] == 10007 and rec["measured_mfu"] == pytest.approx(0.1393)
    assert rec["measured_mem_gb_per_gpu"] == pytest.approx(66.91)


def test_torchtitan_gc_and_profiler_lines_between_steps():
    text, fmt = _read("torchtitan_llama3_8b_gc_profiler.log")
    s = parse_log(text, fmt)
    assert s.steps == [200, 210, 220, 230, 240, 250]
    rec = aggregate(s, {})
    # kept (after 1 warm-up) tps 5593 5868 5869 5864 5862 -> sorted 5593 5862 [5864] 5868 5869;
    # tflops sorted 323.92 339.48 [339.59] 339.82 339.88; mfu sorted 32.75 34.33 [34.34] 34.36 34.37
    assert rec["measured_tokens_per_s_per_gpu"] == 5864
    assert rec["measured_tflops_per_gpu"] == pytest.approx(339.59)
    assert rec["measured_mfu"] == pytest.approx(0.3434)
    assert rec["measured_mem_gb_per_gpu"] == pytest.approx(49.66)
    assert log_config(text, fmt) == {}


def test_torchtitan_mesh_line_gives_the_layout():
    text, fmt = _read("torchtitan_fsdp_mesh.log")
    # "Building 1-D device mesh with ['dp_shard'], [8]": FSDP over 8 GPUs
    assert log_config(text, fmt) == {"num_gpus": 8, "dp": 8, "tp": 1, "pp": 1, "cp": 1, "zero": 3}
    s = parse_log(text, fmt)
    assert s.tokens_per_s_per_gpu == [1772, 168877, 175100] and s.mem_gib == [2.65, 2.66, 2.66]


def test_torchtitan_trainer_line_gives_batch_and_sequence():
    text, fmt = _read("torchtitan_trainer_init.log")
    # "local batch size 8, global batch size 64, gradient accumulation steps 1, sequence length 2048"
    assert log_config(text, fmt) == {
        **{"num_gpus": 8, "dp": 8, "tp": 1, "pp": 1, "cp": 1, "zero": 3},
        **{"micro_batch": 8, "global_batch": 64, "seq_len": 2048},
    }
    rec = aggregate(parse_log(text, fmt), log_config(text, fmt))
    # 4 steps, 1 warm-up: tps 301092 359546 347712 -> median 347712; tflops 21.55 25.74 24.89 -> 24.89
    assert rec["measured_tokens_per_s_per_gpu"] == 347712
    assert rec["measured_tflops_per_gpu"] == pytest.approx(24.89)
    assert rec["measured_mem_gb_per_gpu"] == pytest.approx(1.34)


def test_torchtitan_float8_issue_run():
    text, fmt = _read("torchtitan_float8_issue.log")
    rec = aggregate(parse_log(text, fmt), {})
    # 7 steps, 1 warm-up; kept tps sorted 117679 365678 392553 | 415488 425589 427040 -> (392553+415488)/2
    assert rec["measured_tokens_per_s_per_gpu"] == pytest.approx(404020.5)
    assert rec["log_steps_used"] == 6 and rec["measured_mem_gb_per_gpu"] == pytest.approx(0.82)


def test_older_torchtitan_batch_line_and_memory_typo():
    # torchtitan's early-2025 start line and a step line with the doubled 'mmemory' one version printed
    text = (
        "[rank0]:2025-02-13 11:33:29,482 - root - INFO - Training starts at step 1, with local batch size 1, "
        "global batch size 8, sequence length 8192, total steps 100 (warmup 200)\n"
        "[rank0]:2025-02-13 11:33:45,521 - root - INFO - step: 10  loss:  9.8821  mmemory: 49.59GiB(35.46%)"
        "  tps: 7,026  mfu: 41.15%\n"
    )
    assert log_config(text, "torchtitan-log") == {"micro_batch": 1, "global_batch": 8, "seq_len": 8192}
    s = parse_log(text, "torchtitan-log")
    assert s.tokens_per_s_per_gpu == [7026] and s.mem_gib == [49.59] and s.mfu == pytest.approx([0.4115])


def test_megatron_fp8_and_parallel_degrees_from_dump():
    text = (
        "using world size: 16, data-parallel size: 2, context-parallel size: 1, tensor-model-parallel size: 4\n"
        "------------------------ arguments ------------------------\n"
        "  bf16 ............................................ True\n"
        "  cpu_offloading .................................. False\n"
        "  fp8 ............................................. hybrid\n"
        "  group_query_attention ........................... True\n"
        "  num_query_groups ................................ 8\n"
        "  pipeline_model_parallel_size .................... 2\n"
        "  recompute_granularity ........................... selective\n"
        "  sequence_parallel ............................... True\n"
        "  tensor_model_parallel_size ...................... 4\n"
        "  use_distributed_optimizer ....................... True\n"
        "  virtual_pipeline_model_parallel_size ............ None\n"
        "-------------------- end of arguments ---------------------\n"
    )
    assert log_config(text, "megatron-log") == {
        **{"num_gpus": 16, "dp": 2, "tp": 4, "pp": 2, "kv_heads": 8, "sp": 1},
        **{"precision": "fp8", "recompute": "selective", "zero": 1, "cpu_offloading_num_layers": 0},
    }


def test_partial_log_is_one_line_naming_file_and_missing(tmp_path):
    from autopar.calibration.ingest.ingest import check_file

    p = tmp_path / "partial.log"
    p.write_text((REAL / "torchtitan_fsdp_mesh.log").read_text())
    with pytest.raises(DataError) as e:
        check_file(p)
    # the mesh line gives num_gpus; gpu, seq_len, global_batch and the model are missing
    assert str(e.value).startswith(f"{p}: neither the log nor the flags/--sidecar give gpu, seq_len, ")
    assert "global_batch, model" in str(e.value) and "\n" not in str(e.value)


def test_a_partial_log_among_good_ones_writes_nothing(tmp_path):
    from typer.testing import CliRunner

    from autopar.calibration.store.run_store import RunStore
    from autopar.cli import app

    db = tmp_path / "runs.db"
    good = Path(__file__).parents[1] / "fixtures" / "plan" / "run1.log"
    partial = tmp_path / "partial.log"
    partial.write_text((REAL / "megatron_llama2_no_throughput.log").read_text())  # no dump: no layout
    args = ["calibrate", "ingest", str(good), str(partial), "--store", str(db), "--model", "Llama-3.1-8B"]
    r = CliRunner().invoke(app, [*args, "--gpu", "H100-SXM", "--gpus-per-node", "8"])
    assert r.exit_code == 2 and r.output.count("\n") == 1
    assert f"{partial}: neither the log nor the flags/--sidecar give num_gpus, seq_len" in r.output
    assert RunStore(db).records() == []  # the good log was not written either: one transaction
