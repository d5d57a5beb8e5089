"""Memory-efficient optimizers (issue 44 item 5): Workload.optimizer (adam, adam_bf16_states, adam_8bit, sgd,
adafactor, lion, came) and Workload.master_weights (fp32, fp16, bf16) set the optimizer-state bytes a parameter
and the optimizer step's HBM traffic, the same in the scalar and the array model; the CLI, the launch writers,
the memory savers and the study fingerprint take them; an unknown name is a one-line error."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError
from test_batch_model import SAVERS, _build, mismatches, sample
from typer.testing import CliRunner

from autopar.catalog import get_gpu, get_model
from autopar.cli import app
from autopar.errors import SpecError
from autopar.knobs import OPTIMIZERS
from autopar.launch.schema import check_megatron
from autopar.launch.settings import launch_settings
from autopar.layouts import idle_saver, saver_values
from autopar.perf import memory
from autopar.perf.estimate import estimate
from autopar.perf.params import count_params
from autopar.problem import check_savers_take_effect
from autopar.search.loops import _workload_blob
from autopar.specs import ClusterSpec, Strategy, Workload

H = 4096  # Llama-3.1-8B hidden size
F = 8.0 / H  # one factored statistic (fp32 row + column of an h x h matrix): 4(h + h)/h^2 B a parameter
# Hand-derived bytes a parameter with the fp32 master copy (4 B): moments x 4 (bf16: 2, 8-bit: 1) + factored.
STATE_BYTES = {
    "adam": 4 + 4 + 4,  # m, v (ZeRO's K = 12)
    "adam_bf16_states": 4 + 2 + 2,
    "adam_8bit": 4 + 1 + 1,
    "sgd": 4 + 4,  # momentum
    "adafactor": 4 + F,  # no momentum (beta1 = 0), factored v
    "lion": 4 + 4,  # one momentum
    "came": 4 + 4 + 2 * F,  # m, factored v and factored confidence
}
MASTER = {"fp32": 4.0, "fp16": 2.0, "bf16": 0.0}
# Step traffic with fp32 grads: grad reads x 4 + grad-norm 2 + bf16 write 2 + 2 x states (read and write),
# CAME + its states less master read again; no master copy: + 2 (the bf16 weights read in place).
STEP_BYTES = {
    "adam": 4 + 4 + 2 * 12,
    "sgd": 4 + 4 + 2 * 8,
    "lion": 4 + 4 + 2 * 8,
    "adafactor": 2 * 4 + 4 + 2 * (4 + F),
    "came": 2 * 4 + 4 + 2 * (8 + 2 * F) + (4 + 2 * F),
}
GPU = get_gpu("H100-SXM")


def _estimate(optimizer: str, master: str = "fp32", zero: int = 1, **wl: object):
    m = get_model("Llama-3.1-8B")
    c = ClusterSpec(gpu=GPU, num_gpus=8)
    w = Workload(seq_len=4096, global_batch=64, optimizer=optimizer, master_weights=master, **wl)
    return m, estimate(m, c, w, Strategy(tp=1, pp=1, dp=8, zero=zero, micro_batch=1, recompute="full"))


def test_every_optimizer_has_hand_derived_bytes() -> None:
    assert set(STATE_BYTES) == set(OPTIMIZERS)
    for opt, want in STATE_BYTES.items():
        for master, mb in MASTER.items():
            assert memory.state_bytes_of(opt, master, H) == pytest.approx(want - 4 + mb, rel=1e-12)
    # Adam's table by state precision is the same count
    for states, want in memory.OPTIMIZER_STATE_BYTES.items():
        if states != "sgd":
            assert memory.state_bytes_of("adam", "fp32", H, states) == want
    assert F < 0.01  # factored statistics: negligible for h >= 1024


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
@pytest.mark.parametrize("master", ["fp32", "bf16"])
def test_zero1_optimizer_memory_is_params_over_dp_times_state_bytes(optimizer: str, master: str) -> None:
    # Llama-3.1-8B, tp = pp = 1, ZeRO-1 over dp = 8: every GPU holds N/8 of the optimizer states
    m, e = _estimate(optimizer, master)
    n = count_params(m).total
    want = n / 8 * (STATE_BYTES[optimizer] - 4 + MASTER[master])
    assert e.memory.optimizer == pytest.approx(want, rel=1e-12)
    # the bf16 weights (2 B, all N with ZeRO-1) are the weights term whatever the master: never counted twice
    assert e.memory.weights == _estimate("adam")[1].memory.weights


def test_estimate_cli_breakdown_per_optimizer() -> None:
    base = ["estimate", "--model", "Llama-3.1-8B", "--gpus", "8", "--tp", "1", "--pp", "1", "--zero", "1"]
    n = count_params(get_model("Llama-3.1-8B")).total
    for opt in ("adam", "adafactor", "lion", "came"):
        r = CliRunner().invoke(app, [*base, "--recompute", "full", "--optimizer", opt, "--json"])
        assert r.exit_code == 0, r.output
        gib = json.loads(r.output)["memory_gib"]
        assert gib["optimizer"] == pytest.approx(n / 8 * STATE_BYTES[opt] / 2**30, rel=1e-9)
    r = CliRunner().invoke(app, [*base, "--recompute", "full", "--master-weights", "bf16", "--json"])
    assert json.loads(r.output)["memory_gib"]["optimizer"] == pytest.approx(n / 8 * 8 / 2**30, rel=1e-9)


@pytest.mark.parametrize("optimizer", ["adam", "sgd", "lion", "adafactor", "came"])
def test_step_traffic_per_optimizer(optimizer: str) -> None:
    sb = memory.state_bytes_of(optimizer, "fp32", H)
    assert memory.optimizer_step_bytes(sb, 4.0, optimizer, "fp32") == pytest.approx(STEP_BYTES[optimizer])
    # no master copy: 4 B less state read and written (-8), the bf16 weights read where they are updated (+2)
    nb = memory.state_bytes_of(optimizer, "bf16", H)
    assert memory.optimizer_step_bytes(nb, 4.0, optimizer, "bf16") == pytest.approx(STEP_BYTES[optimizer] - 6)


def test_step_time_scales_with_the_traffic() -> None:
    # the optimizer step is memory bound: its time is in the ratio of the bytes (grads bf16 on megatron: 2 B)
    t = {o: _estimate(o)[1].time.optimizer for o in ("adam", "adafactor", "came")}
    sb = {o: memory.state_bytes_of(o, "fp32", H) for o in t}
    for o in ("adafactor", "came"):
        ratio = memory.optimizer_step_bytes(sb[o], 2.0, o) / memory.optimizer_step_bytes(sb["adam"], 2.0)
        assert t[o] / t["adam"] == pytest.approx(ratio, rel=1e-9)


@pytest.mark.parametrize(
    ("optimizer", "master", "framework"),
    [("lion", "fp32", "megatron"), ("adafactor", "bf16", "deepspeed"), ("came", "fp16", "megatron")],
)
def test_block_equals_single_estimates(optimizer: str, master: str, framework: str) -> None:
    wl = {"seq_len": 8192, "global_batch": 256, "framework": framework, "memory_savers": SAVERS[:3]}
    m, c, w, space = _build(
        ("Llama-3.1-8B", "H100-SXM", 32, {**wl, "optimizer": optimizer, "master_weights": master})
    )
    bad = mismatches(m, c, w, sample(space, 60, seed=7))
    assert not bad, f"{len(bad)} mismatches, e.g. {bad[:5]}"


def test_unknown_names_are_one_line_errors() -> None:
    with pytest.raises(ValidationError, match=r"optimizer='adamw': expected one of .*did you mean adam\?"):
        Workload(seq_len=1, global_batch=1, optimizer="adamw")
    with pytest.raises(ValidationError, match=r"master_weights='fp8': expected one of fp32, fp16, bf16"):
        Workload(seq_len=1, global_batch=1, master_weights="fp8")
    base = ["estimate", "--model", "Llama-3.1-8B", "--gpus", "8", "--tp", "1", "--pp", "1"]
    r = CliRunner().invoke(app, [*base, "--optimizer", "adafacter"])
    assert r.exit_code == 2
    assert "--optimizer adafacter: expected one of" in r.output and "did you mean adafactor?" in r.output
    r = CliRunner().invoke(app, [*base, "--master-weights", "fp8"])
    assert r.exit_code == 2 and "--master-weights fp8: expected one of fp32, fp16, bf16" in r.output


def test_savers_an_optimizer_cannot_take() -> None:
    m = get_model("Llama-3.1-8B")
    w = Workload(seq_len=4096, global_batch=64, optimizer="adafactor", memory_savers=("bf16_states",))
    assert "no full-size moments" in idle_saver(m, w, "bf16_states")
    with pytest.raises(SpecError, match="bf16_states cannot take effect"):
        check_savers_take_effect(m, w)
    # Megatron-Core's precision-aware optimizer (bf16 states, CPU offload) is Adam's only
    lion = Workload(seq_len=4096, global_batch=64, optimizer="lion", memory_savers=("bf16_states", "offload"))
    assert saver_values(lion) == ((None, 0.0),)
    assert saver_values(lion.model_copy(update={"framework": "deepspeed"})) == ((None, 0.0), (None, 1.0))
    adam = lion.model_copy(update={"optimizer": "adam"})
    assert len(saver_values(adam)) == 4


def _launch(optimizer: str, master: str = "fp32", zero: int = 1):
    m = get_model("Llama-3.1-8B")
    c = ClusterSpec(gpu=GPU, num_gpus=16)
    w = Workload(seq_len=4096, global_batch=64, optimizer=optimizer, master_weights=master)
    return launch_settings(m, c, w, Strategy(tp=2, pp=1, zero=zero, micro_batch=1, recompute="full"))


def test_megatron_launch_names_the_optimizer() -> None:
    for opt in ("sgd", "lion"):
        ls = _launch(opt)
        assert f"--optimizer {opt}" in ls.megatron_args and not ls.megatron_reason
        for version in ("core_v0.19.0", "core_v0.17.1"):
            assert check_megatron(ls.megatron_args, version, list(ls.placeholders)) == []
    assert not any(a.startswith("--optimizer ") for a in _launch("adam").megatron_args)  # Megatron's default
    ls = _launch("adam", "fp16")
    assert (
        "--main-params-dtype fp16" in ls.megatron_args
        and "--use-precision-aware-optimizer" in ls.megatron_args
    )
    assert check_megatron(ls.megatron_args, "core_v0.19.0", list(ls.placeholders)) == []
    assert "zero >= 1" in _launch("adam", "fp16", zero=0).megatron_reason
    assert "has no came" in _launch("came").megatron_reason
    assert "main-params copy" in _launch("adam", "bf16").megatron_reason


def test_other_launch_targets() -> None:
    ls = _launch("adafactor")
    assert ls.torchtitan is None and "Adam or AdamW only" in ls.torchtitan_reason
    assert any("'Adafactor'" in n for n in ls.framework_notes["deepspeed"])
    assert _launch("adam").torchtitan is not None
    args = [
        "launch",
        "--model",
        "Llama-3.1-8B",
        "--gpus",
        "8",
        "--optimizer",
        "came",
        "--framework",
        "megatron",
    ]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2 and "optimizer=came: Megatron-LM's --optimizer has no came" in r.output


def test_stored_studies_resume() -> None:
    # a new Workload field is left out of the fingerprint at its default (studies stored before it resume)
    w = Workload(seq_len=4096, global_batch=64)
    assert "master_weights" not in _workload_blob(w)
    assert _workload_blob(w.model_copy(update={"master_weights": "bf16"}))["master_weights"] == "bf16"
