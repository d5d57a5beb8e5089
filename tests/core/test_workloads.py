"""Workload profiles (autopar/workloads.py): `--workload` fills in what the options leave unstated; `autopar
profile` lists them; a workload autopar does not plan yet is refused in one line."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from autopar.cli import app
from autopar.errors import SpecError
from autopar.problem import WorkloadConfig
from autopar.workloads import with_profile

runner = CliRunner()


def test_finetune_brings_megatron_bridges_recipe_defaults() -> None:
    # Megatron-Bridge _llama3_finetune_common with packed sequences: seq_length 4096, global_batch_size 8, LoRA
    w = WorkloadConfig(workload="finetune")
    assert (w.finetune, w.seq_len, w.global_batch) == ("lora", 4096, 8)
    assert WorkloadConfig(workload="pretrain") == WorkloadConfig(workload="pretrain", seq_len=8192)


@given(
    st.fixed_dictionaries(
        {},
        optional={
            "seq_len": st.sampled_from([1024, 2048, 32768]),
            "global_batch": st.integers(1, 4096),
            "finetune": st.sampled_from(["full", "lora"]),
        },
    )
)
def test_stated_fields_win_over_the_profile(stated: dict[str, object]) -> None:
    out = with_profile({"workload": "finetune", **stated})
    assert all(out[k] == v for k, v in stated.items())
    assert {"seq_len", "global_batch", "finetune"} <= out.keys()


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"workload": "rlhf"}, "--workload rlhf: not planned yet (autopar plans pretrain, finetune;"),
        ({"workload": "serve"}, "--workload serve: not planned yet"),
        ({"workload": "finetun"}, "expected one of pretrain, finetune, rlhf, serve; did you mean finetune?"),
        (
            {"workload": "pretrain", "finetune": "lora"},
            "--finetune lora: --workload pretrain trains every weight",
        ),
    ],
)
def test_a_workload_that_cannot_take_effect_is_one_line(values: dict[str, str], message: str) -> None:
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace("?", r"\?")):
        with_profile(values)
    res = runner.invoke(app, ["estimate", "--gpus", "8", *[f"--{k}={v}" for k, v in values.items()]])
    assert res.exit_code == 2 and message in res.output and len(res.output.strip().splitlines()) == 1


def test_estimate_of_a_finetune_workload_states_its_inputs() -> None:
    res = runner.invoke(
        app, ["estimate", "--model", "llama-3.1-8b", "--gpus", "8", "--workload", "finetune", "--json"]
    )
    assert res.exit_code == 0, res.output
    inputs = json.loads(res.stdout)["inputs"]
    assert (inputs["seq_len"], inputs["global_batch"]) == (4096, 8)
    explicit = ["--workload", "finetune", "--seq-len", "2k", "--json"]
    res = runner.invoke(app, ["estimate", "--model", "llama-3.1-8b", "--gpus", "8", *explicit])
    assert json.loads(res.stdout)["inputs"]["seq_len"] == 2048


def test_profile_lists_every_workload_and_what_is_planned() -> None:
    res = runner.invoke(app, ["profile", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert [(p["name"], p["planned"]) for p in doc] == [
        ("pretrain", True),
        ("finetune", True),
        ("rlhf", False),
        ("serve", False),
    ]
    assert doc[1]["defaults"] == {"finetune": "lora", "seq_len": 4096, "global_batch": 8}


def test_whatif_and_launch_take_the_workload_too() -> None:
    args = ["--model", "llama-3.1-8b", "--workload", "finetune", "--json"]
    res = runner.invoke(app, ["whatif", "--tokens", "1B", "--option", "H100-SXM:8", "--budget", "30", *args])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert (doc["seq_len"], doc["global_batch"]) == (4096, 8)
    res = runner.invoke(app, ["launch", "--gpus", "8", "--strategy", "TP1 DP8/Z1 mb1", *args])
    assert res.exit_code == 0, res.output
    assert "LoRA" in " ".join(json.loads(res.stdout)["notes"])
