"""Workload.grad_reduce_dtype: the main-gradient buffer's dtype (Megatron-Core grad_reduce_in_fp32) sets its
memory (2 or 4 B a parameter outside ZeRO-3), the DP reduction's bytes, the optimizer step's grad read, the
Megatron launch flag, the CLI option and the NeMo performance-summary records that state it."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from autopar.calibration.ingest.tables import read_run_records
from autopar.calibration.records.specs import row_to_specs
from autopar.catalog import get_gpu, get_model
from autopar.cli import app
from autopar.data import published_runs_path
from autopar.launch.schema import check_megatron
from autopar.launch.settings import launch_settings
from autopar.perf import fsdp, memory
from autopar.perf.estimate import estimate
from autopar.perf.params import count_params
from autopar.specs import ClusterSpec, Strategy, Workload

GiB = 2**30


def _sharding(zero: int, grad_bytes: float) -> memory.Sharding:
    return memory.Sharding(
        zero=zero, n_shard=4, n_eshard=2, state_bytes=12.0, offload=0.0, fp8_weight_copies=False,
        zero3_units=2, unit_fraction=1.0, stage_gathered=0, grad_bytes=grad_bytes,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("zero", "fp32", "bf16"), [(0, 4.0 * 1.5e9, 2.0 * 1.5e9), (1, 6e9, 3e9), (2, 2e9, 1e9)]
)
def test_replicated_grads_are_two_or_four_bytes_a_parameter(zero: int, fp32: float, bf16: float) -> None:
    # 1e9 dense + 0.5e9 expert parameters; ZeRO-2 shards them over 4 (dense) and 2 (expert):
    # fp32: 4·(1e9/4 + 0.5e9/2) = 2e9 B, bf16: half; ZeRO 0-1 keep all 1.5e9: 6e9 / 3e9 B.
    sp = memory.StageParams(non_expert=1e9, expert=0.5e9, biggest_layer=1e8)
    assert memory.model_states(sp, _sharding(zero, 4.0))[1] == pytest.approx(fp32)
    assert memory.model_states(sp, _sharding(zero, 2.0))[1] == pytest.approx(bf16)
    # weights and optimizer states do not depend on it
    a, b = memory.model_states(sp, _sharding(zero, 4.0)), memory.model_states(sp, _sharding(zero, 2.0))
    assert (a[0], a[2], a[3]) == (b[0], b[2], b[3])


def test_zero3_states_ignore_it() -> None:
    sp = memory.StageParams(non_expert=1e9, expert=0.0, biggest_layer=1e8)
    assert memory.model_states(sp, _sharding(3, 4.0)) == memory.model_states(sp, _sharding(3, 2.0))


@pytest.mark.parametrize(
    ("framework", "dtype", "per_param"),
    [("megatron", "fp32", 18.0), ("megatron", "bf16", 16.0), ("torchtitan", "fp32", 16.0)],
)
def test_zero3_state_bytes_per_parameter(framework: str, dtype: str, per_param: float) -> None:
    # Megatron-FSDP (optim_grads_params) keeps sharded bf16 weights (2 B), fp32 main weights (4), the main-gradient
    # buffer in its dtype (4 or 2) and Adam's two fp32 moments (8): 18 or 16 B per parameter over the shard group
    # (Megatron-LM megatron/core/distributed/fsdp param_and_grad_buffer, --megatron-fsdp-main-grads-dtype);
    # FSDP2 16 B (fp32 shard + fp32 gradient + 8 B Adam)
    m = get_model("Llama-3.1-8B")
    c = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=16)
    w = Workload(seq_len=4096, global_batch=64, grad_reduce_dtype=dtype, framework=framework)
    e = estimate(m, c, w, Strategy(tp=1, pp=1, zero=3, micro_batch=1, recompute="full"))
    states = e.memory.weights + e.memory.grads + e.memory.optimizer
    assert states == pytest.approx(per_param * count_params(m).total / 16, rel=1e-9)


def test_optimizer_step_reads_the_main_grad_in_its_dtype() -> None:
    assert memory.optimizer_step_bytes(12.0) == 32.0  # fp32 Adam, fp32 grads (formulas §6)
    assert memory.optimizer_step_bytes(12.0, 2.0) == 30.0


def _toy(kind: int, nbytes: fsdp.Num, size: fsdp.Num, stride: fsdp.Num) -> fsdp.Num:
    return nbytes * 1e-9  # 1 GB/s for every collective


GROUPS = fsdp.DpGroups(n_shard=8, shard_stride=1, n_rep=1, rep_stride=8, n_edp=4, edp_stride=2)


def test_reduction_bytes_halve_in_bf16() -> None:
    # ZeRO-1, 160M dense parameters, no window: reduce-scatter 4 B (0.64 s) or 2 B (0.32 s) a parameter, the
    # bf16 parameter all-gather 2 B (0.32 s) either way.
    args = (1, 160e6, 0.0, GROUPS, None, "megatron", 0.0, 0.0, _toy)
    fp32 = fsdp.ddp_time(*args)  # type: ignore[arg-type]
    bf16 = fsdp.ddp_time(*args, 1, 2.0)  # type: ignore[arg-type]
    assert fp32.exposed == pytest.approx(0.64 + 0.32)
    assert bf16.exposed == pytest.approx(0.32 + 0.32)


def _nemotron_340b() -> tuple:
    m = get_model("Nemotron-4-340B")
    c = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=128)
    s = Strategy(
        tp=8, pp=8, vpp=12, sp=True, zero=1, micro_batch=1, recompute="none", pp_schedule="interleaved"
    )
    return m, c, s


def test_estimate_frees_two_bytes_a_parameter_under_zero1() -> None:
    m, c, s = _nemotron_340b()
    w32 = Workload(seq_len=4096, global_batch=32, precision="fp8", grad_reduce_dtype="fp32")
    w16 = w32.model_copy(update={"grad_reduce_dtype": "bf16"})
    a, b = estimate(m, c, w32, s, check=False), estimate(m, c, w16, s, check=False)
    assert b.memory.grads == pytest.approx(a.memory.grads / 2)  # ZeRO-1 keeps the whole buffer
    assert a.memory.weights == b.memory.weights and a.memory.grads == pytest.approx(a.memory.weights * 2)
    assert b.headroom_bytes - a.headroom_bytes == pytest.approx(a.memory.grads / 2)
    assert b.step_time_s <= a.step_time_s


def _row(rid: str) -> dict:
    rows = read_run_records(published_runs_path()).fillna("").to_dict("records")
    return next(r for r in rows if r["id"] == rid)


def test_nemo_summary_rows_take_the_launcher_configs_dtype() -> None:
    # NeMo-Framework-Launcher 24.07 / 24.12 nemotron_340b.yaml: optim.grad_sync_dtype bf16; the other models'
    # configs keep fp32
    for rid in ("NEMO2407-10", "NEMO2412-10"):
        assert row_to_specs(_row(rid)).workload.grad_reduce_dtype == "bf16"
    for rid in ("NEMO2407-03", "NEMO2412-01", "NEMO2412-12"):
        assert row_to_specs(_row(rid)).workload.grad_reduce_dtype == "fp32"
    other = {**_row("NEMO2412-10"), "source": "other"}
    assert row_to_specs(other).workload.grad_reduce_dtype == "fp32"


def test_megatron_launch_flag_is_valid() -> None:
    m, c, s = _nemotron_340b()
    w = Workload(seq_len=4096, global_batch=32, grad_reduce_dtype="bf16")
    ls = launch_settings(m, c, w, s)
    assert "--grad-reduce-in-bf16" in ls.megatron_args
    assert check_megatron(ls.megatron_args, "core_v0.19.0", list(ls.placeholders)) == []
    plain = launch_settings(m, c, w.model_copy(update={"grad_reduce_dtype": "fp32"}), s)
    assert "--grad-reduce-in-bf16" not in plain.megatron_args


def test_cli_option_and_its_error() -> None:
    base = ["estimate", "--model", "Llama-3.1-8B", "--gpus", "8", "--tp", "1", "--pp", "1", "--json"]
    bad = CliRunner().invoke(app, [*base, "--grad-reduce-dtype", "fp16"])
    assert bad.exit_code == 2 and "--grad-reduce-dtype fp16: expected one of fp32, bf16" in bad.output
    ok = CliRunner().invoke(app, [*base, "--grad-reduce-dtype", "bf16"])
    assert ok.exit_code == 0, ok.output


@pytest.mark.parametrize("zero", [2, 3])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_megatron_fsdp_launch_names_the_priced_gradient_dtype(zero: int, dtype: str) -> None:
    # Megatron-FSDP ignores --grad-reduce-in-bf16 since Megatron-Core 0.17 (b969f76: main grads 'auto' = the
    # compute dtype): the launch names --megatron-fsdp-main-grads-dtype, valid for every pinned parser
    m = get_model("Llama-3.1-8B")
    c = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=16)
    s = Strategy(tp=1, pp=1, zero=zero, micro_batch=1, recompute="none")
    w = Workload(seq_len=4096, global_batch=64, grad_reduce_dtype=dtype)
    ls = launch_settings(m, c, w, s)
    args = ls.megatron_args
    assert f"--megatron-fsdp-main-grads-dtype {dtype}" in args
    for version in ("core_v0.19.0", "core_v0.18.2", "core_v0.17.1"):
        assert check_megatron(args, version, list(ls.placeholders)) == []
    plain = launch_settings(m, c, w, s.model_copy(update={"zero": 1})).megatron_args
    assert not any(a.startswith("--megatron-fsdp") for a in plain)


def test_unstated_dtype_is_the_stacks_recipe_default() -> None:
    # Megatron-Bridge performance configs (set_<family>_common_configs: grad_reduce_in_fp32 = False) for
    # megatron; every other stack's library default is fp32
    assert Workload(seq_len=4096, global_batch=32).grad_reduce_dtype == "bf16"
    assert Workload(seq_len=4096, global_batch=32, framework="torchtitan").grad_reduce_dtype == "fp32"
    assert Workload(seq_len=4096, global_batch=32, framework="megatron-legacy").grad_reduce_dtype == "fp32"
    assert Workload(seq_len=4096, global_batch=32, grad_reduce_dtype="fp32").grad_reduce_dtype == "fp32"
    assert Workload(seq_len=4096, global_batch=32, grad_reduce_dtype=None).grad_reduce_dtype == "bf16"


def test_a_record_that_does_not_state_its_dtype_ran_fp32() -> None:
    # a measured run is read as its stack's library default (Megatron-LM reduces bf16 training's gradients in
    # fp32), not as the megatron search default
    for rid in ("NEMO2407-01", "NEMO2412-01"):
        specs = row_to_specs(_row(rid))
        assert specs.workload.framework == "megatron"
        assert specs.workload.grad_reduce_dtype == "fp32"


def _dump(**args: str) -> str:
    """A Megatron-LM argument dump (`  name ..... value`, as megatron/training/arguments.py prints it)."""
    lines = [f"  {k} {'.' * (48 - len(k))} {v}" for k, v in {"world_size": "16", **args}.items()]
    return "\n".join(
        ["-" * 24 + " arguments " + "-" * 24, *lines, "-" * 20 + " end of arguments " + "-" * 21]
    )


@pytest.mark.parametrize(
    ("args", "dtype"),
    [
        # validate_args: --grad-reduce-in-bf16 sets accumulate_allreduce_grads_in_fp32 = False for a bf16 run
        ({"bf16": "True", "accumulate_allreduce_grads_in_fp32": "False"}, "bf16"),
        # ... which a bf16 run otherwise forces to True: fp32, the record default, so no column
        ({"bf16": "True", "accumulate_allreduce_grads_in_fp32": "True"}, None),
        # an fp16 run keeps fp16 gradients (False is its default): not a bf16 buffer
        ({"bf16": "False", "fp16": "True", "accumulate_allreduce_grads_in_fp32": "False"}, None),
        # Megatron-FSDP names its own buffer dtype (core 0.17+), whatever the DDP flag says
        ({"bf16": "True", "use_megatron_fsdp": "True", "accumulate_allreduce_grads_in_fp32": "False",
          "megatron_fsdp_main_grads_dtype": "torch.float32"}, None),
        ({"bf16": "True", "use_megatron_fsdp": "True", "accumulate_allreduce_grads_in_fp32": "True",
          "megatron_fsdp_main_grads_dtype": "auto"}, "bf16"),
        # an older dump without the field: nothing is read
        ({"bf16": "True"}, None),
    ],
)  # fmt: skip
def test_megatron_log_states_the_main_gradient_dtype(args: dict[str, str], dtype: str | None) -> None:
    from autopar.calibration.ingest.log_config import log_config

    assert log_config(_dump(**args), "megatron-log").get("grad_reduce_dtype") == dtype


def test_a_record_column_states_the_dtype() -> None:
    from autopar.errors import DataError

    row = _row("NEMO2412-01")  # a summary row read as fp32 when unstated (above)
    assert row_to_specs({**row, "grad_reduce_dtype": "bf16"}).workload.grad_reduce_dtype == "bf16"
    assert row_to_specs({**row, "grad_reduce_dtype": " FP32 "}).workload.grad_reduce_dtype == "fp32"
    with pytest.raises(DataError) as e:
        row_to_specs({**row, "grad_reduce_dtype": "bf61"})
    assert (
        str(e.value) == "column 'grad_reduce_dtype' = 'bf61': expected one of fp32, bf16; did you mean bf16?"
    )


def test_ingested_bf16_log_is_priced_bf16_and_reingests_as_a_duplicate(tmp_path) -> None:
    from autopar.calibration.records.specs import row_to_specs as specs_of
    from autopar.calibration.store.run_store import RunStore

    # the plan example's first log: a run of autopar's megatron launch, whose dump states bf16 main gradients
    bf16 = Path(__file__).parents[1] / "fixtures" / "plan" / "run1.log"
    text = bf16.read_text()
    stated = "  accumulate_allreduce_grads_in_fp32 .............. False\n"
    assert stated in text
    plan = tmp_path / "fp32.log"  # the same run without --grad-reduce-in-bf16
    plan.write_text(text.replace(stated, stated.replace("False", "True"), 1))
    db = tmp_path / "runs.db"
    base = ["calibrate", "ingest", "--store", str(db), "--model", "Llama-3.1-8B", "--gpu", "H100-SXM"]
    for _ in range(2):  # idempotent: the second ingest adds nothing
        r = CliRunner().invoke(app, [*base, str(plan), str(bf16), "--gpus-per-node", "8"])
        assert r.exit_code == 0, r.output
    records = RunStore(db).records()
    assert len(records) == 2
    half = next(rec for rec in records if rec.get("grad_reduce_dtype") == "bf16")
    full = next(rec for rec in records if rec is not half)
    # the fp32 log's record has no such key: its fingerprint is what it was before the column existed
    assert full.get("grad_reduce_dtype") is None
    assert specs_of(half).workload.grad_reduce_dtype == "bf16"
    assert specs_of(full).workload.grad_reduce_dtype == "fp32"


def test_megatron_log_states_tp_comm_overlap() -> None:
    # Megatron-LM --tp-comm-overlap (dest tp_comm_overlap), which the megatron launch writes for TP + SP: read
    # into the record column; off (the record default for a Megatron-LM run) adds no column
    from autopar.calibration.ingest.log_config import log_config

    on = log_config(_dump(bf16="True", tp_comm_overlap="True"), "megatron-log")
    off = log_config(_dump(bf16="True", tp_comm_overlap="False"), "megatron-log")
    assert on["tp_comm_overlap"] == 1 and "tp_comm_overlap" not in off
