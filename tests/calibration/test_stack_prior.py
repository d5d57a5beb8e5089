"""The unprofiled-stack prior (issue 43 item 1): a stack autopar has no kernel profile for is named, estimated
with the surrogate profile, moved by the prior's offset and given a wider band, never read as Megatron."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from autopar.calibration.apply import load_default_calibration
from autopar.calibration.apply.batch import calibrated_batch
from autopar.calibration.ingest.tables import read_run_records
from autopar.calibration.models.stack_prior import PRIOR_FILE, Z80, StackPrior, parse_prior, stack_prior
from autopar.calibration.records.specs import row_to_specs
from autopar.calibration.records.workload_spec import stack_of
from autopar.cli.app import app
from autopar.data import published_runs_path
from autopar.errors import DataError
from autopar.knobs import SURROGATE_PROFILE, UNPROFILED_STACKS

TPS = "pred_tokens_per_s_per_gpu"


@pytest.mark.parametrize(
    ("text", "stack", "framework"),
    [
        ("MaxText (JAX/XLA, FSDP)", "maxtext", SURROGATE_PROFILE),  # JAX words win over 'fsdp'
        ("Pax / Praxis on GPU", "jax", SURROGATE_PROFILE),
        ("InternEvo (hybrid ZeRO)", "internevo", SURROGATE_PROFILE),
        ("Colossal-AI 0.3", "colossalai", SURROGATE_PROFILE),
        ("", "other", SURROGATE_PROFILE),  # unstated: not silently Megatron
        ("in-house trainer v2", "other", SURROGATE_PROFILE),
        ("NeMo 24.07 (Megatron-Core)", "", "megatron"),
        ("torchtitan (FSDP2)", "", "torchtitan"),
        ("Composer/llm-foundry (PyTorch FSDP FULL_SHARD)", "", "fsdp"),
    ],
)
def test_record_framework_text_names_the_stack(text: str, stack: str, framework: str) -> None:
    assumed: list[str] = []
    got = stack_of(text, assumed)
    assert got.get("stack", "") == stack and got["framework"] == framework
    assert bool(stack) == any(a.startswith(f"stack={stack}") for a in assumed)


def test_shipped_prior_is_the_median_and_sd_of_its_sources() -> None:
    """The JSON's offset and sd are what bench/stack_prior.py says they are: the median and the sample sd of
    the per-source median log ratios it lists (recomputed here from the listed numbers)."""
    doc = json.loads(PRIOR_FILE.read_text())
    logs = np.array([u["median_log_ratio"] for u in doc["units"]])
    assert len(logs) >= 5
    assert doc["offset"] == pytest.approx(float(np.median(logs)), abs=1e-12)
    assert doc["sd"] == pytest.approx(float(np.std(logs, ddof=1)), abs=1e-12)
    p = stack_prior()
    assert p.offset < 0  # the non-Megatron stacks measured run slower than the tuned surrogate predicts
    assert p.sources == tuple(sorted(u["source"] for u in doc["units"]))


def test_prior_applied_by_hand() -> None:
    """Centre x exp(offset); each log half-width sqrt(h^2 + (z80 sd)^2), by hand for one row."""
    p = StackPrior(offset=-0.2, sd=0.1, sources=("a", "b"))
    f, lo, hi = np.array([1.1, 1.1]), np.array([1.0, 1.0]), np.array([1.3, 1.3])
    f2, lo2, hi2 = p.apply(f, lo, hi, np.array([True, False]))
    assert f2[0] == pytest.approx(1.1 * math.exp(-0.2))
    below, above, add = math.log(1.1 / 1.0), math.log(1.3 / 1.1), Z80 * 0.1
    assert lo2[0] == pytest.approx(f2[0] * math.exp(-math.sqrt(below**2 + add**2)))
    assert hi2[0] == pytest.approx(f2[0] * math.exp(math.sqrt(above**2 + add**2)))
    assert (f2[1], lo2[1], hi2[1]) == (1.1, 1.0, 1.3)  # a profiled row is untouched


@settings(max_examples=60, deadline=None)
@given(
    c=st.floats(-1, 1), below=st.floats(0, 1), above=st.floats(0, 1), off=st.floats(-1, 1), sd=st.floats(0, 1)
)
def test_prior_band_holds_its_centre_and_only_widens(c, below, above, off, sd) -> None:
    f, lo, hi = np.exp([c]), np.exp([c - below]), np.exp([c + above])
    f2, lo2, hi2 = StackPrior(off, sd, ()).apply(f, lo, hi, np.array([True]))
    assert lo2[0] <= f2[0] * (1 + 1e-12) and hi2[0] >= f2[0] * (1 - 1e-12)
    assert math.log(hi2[0] / lo2[0]) >= math.log(hi[0] / lo[0]) - 1e-9


def test_parse_prior_rejects_nonsense() -> None:
    for doc, field in (
        ({"offset": "x", "sd": 0.1, "units": []}, "offset"),
        ({"offset": 0, "sd": -1, "units": []}, "sd"),
    ):
        with pytest.raises(DataError, match=field):
            parse_prior(doc, "f.json")


def test_unprofiled_record_is_the_surrogate_times_the_prior() -> None:
    """The same published run read as an unknown stack: estimated with the surrogate profile, and its
    calibrated figure is the same record estimated as the surrogate (as a new cluster) x exp(offset)."""
    rows = read_run_records(published_runs_path()).fillna("")
    row = rows[rows["id"] == "NAR21-T1-05"].copy()
    row["source"] = "a-new-cluster"
    mega = row.assign(framework="Megatron-LM (2023)", notes="")
    other = row.assign(framework="MaxText (JAX)", notes="")
    assert row_to_specs(other.iloc[0].to_dict()).workload.stack == "maxtext"
    cal = load_default_calibration()
    a, b = calibrated_batch(mega, cal), calibrated_batch(other, cal)
    p = stack_prior()
    assert b[TPS + "_analytical"].iloc[0] == pytest.approx(a[TPS + "_analytical"].iloc[0], rel=1e-9)
    assert b[TPS].iloc[0] == pytest.approx(a[TPS].iloc[0] * p.factor, rel=1e-9)
    width = lambda d: math.log(d[TPS + "_hi"].iloc[0] / d[TPS + "_lo"].iloc[0])  # noqa: E731
    assert width(b) > width(a) + p.halfwidth  # half-widths combined in quadrature: wider by > one halfwidth


def test_cli_names_the_stack_and_the_prior() -> None:
    r = CliRunner().invoke(
        app, ["estimate", "--model", "llama3-8b", "--gpu", "H100", "--gpus", "16", "--framework", "internevo"]
    )
    assert r.exit_code == 0, r.output
    assert "stack internevo" in r.output and UNPROFILED_STACKS["internevo"] in r.output


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--framework", "maxtxt"], "did you mean maxtext"),
    ],
)
def test_cli_bad_stack_input_is_one_line(args: list[str], needle: str) -> None:
    r = CliRunner().invoke(app, ["estimate", "--model", "llama3-8b", "--gpu", "H100", "--gpus", "16", *args])
    assert r.exit_code != 0 and needle in r.output
    assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1


def test_memory_savers_cannot_take_effect_on_an_unprofiled_stack() -> None:
    from autopar.catalog import get_model
    from autopar.errors import SpecError
    from autopar.problem import WorkloadConfig

    with pytest.raises(SpecError, match="--memory-savers offload"):
        WorkloadConfig(framework="other", memory_savers=("offload",)).build(get_model("llama3-8b"))


def test_launch_settings_say_no_launcher_for_an_unprofiled_stack() -> None:
    from autopar.catalog import get_gpu, get_model
    from autopar.launch.settings import launch_settings
    from autopar.specs import ClusterSpec, Strategy, Workload

    wl = Workload(seq_len=4096, global_batch=64, framework=SURROGATE_PROFILE, stack="jax")
    ls = launch_settings(
        get_model("llama3-8b"), ClusterSpec(gpu=get_gpu("H100"), num_gpus=8), wl, Strategy(tp=2)
    )
    assert "no launch file for jax" in ls.notes[0]
    profiled = Workload(seq_len=4096, global_batch=64, framework=SURROGATE_PROFILE)
    assert not any(
        "no launch file" in n
        for n in launch_settings(
            get_model("llama3-8b"), ClusterSpec(gpu=get_gpu("H100"), num_gpus=8), profiled, Strategy(tp=2)
        ).notes
    )


def _estimate_json(*args: str) -> dict:
    r = CliRunner().invoke(
        app, ["estimate", "--model", "llama3-8b", "--gpu", "H100", "--tp", "1", "--json", *args]
    )
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_answer_states_the_stack_and_the_fabric_it_assumes() -> None:
    """Issue 43 items 2 and 4: a tuned-Megatron default and the catalog fabric are said, not silent; a stated
    fabric (or one NVLink domain) drops the fabric line; an unprofiled stack names its prior."""
    said = _estimate_json("--gpus", "64")["assumptions"]
    assert "tuned like its published recipes" in said[0] and "--framework other" in said[0]
    assert "400 Gb/s infiniband per GPU" in said[1]  # H100-SXM catalog: one 400 Gb/s NDR NIC per GPU
    assert (
        len(_estimate_json("--gpus", "64", "--internode-gbps", "12.5", "--transport", "roce")["assumptions"])
        == 1
    )
    assert len(_estimate_json("--gpus", "8")["assumptions"]) == 1
    said = _estimate_json("--gpus", "8", "--framework", "other")["assumptions"]
    assert said[0].startswith("assumes: stack other") and f"x{stack_prior().factor:.2f}" in said[0]
