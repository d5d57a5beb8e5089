"""MoE all-to-all overlap and CUDA-graph mode a record's notes quote from its stack preset
(records.notes_moe_options), and the recipe benchmark giving them to recipe and pick alike."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from autopar.calibration.records.specs import row_to_specs
from autopar.calibration.records.workload_spec import stated_moe_options
from autopar.specs import Workload

ROW = {
    "id": "X",
    "model": "Qwen3-235B-A22B",
    "gpu": "H100-SXM",
    "num_gpus": 256,
    "gpus_per_node": 8,
    "tp": 2,
    "pp": 8,
    "vpp": 4,
    "ep": 32,
    "seq_len": 4096,
    "global_batch": 2048,
    "micro_batch": 1,
    "precision": "fp8",
    "framework": "Megatron-Bridge",
}


def _recipes_module(monkeypatch):
    path = Path(__file__).resolve().parents[2] / "bench" / "recipes.py"
    spec = importlib.util.spec_from_file_location("bench_recipes_opts", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, mod)  # its dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize(
    ("notes", "expected"),
    [
        ("", {}),
        ("distributed optimizer, sp, recompute, etp not stated", {}),
        ("preset: dispatcher alltoall; moe_a2a_overlap=True; cuda_graph_impl=none", {
            "moe_ep_overlap": True, "cuda_graphs": False}),
        ("moe_a2a_overlap=False; cuda_graph_impl=full_iteration (whole step captured)", {
            "moe_ep_overlap": False, "cuda_graphs": True}),
        # per-layer TE scopes leave expert compute and dispatch eager: not the whole-layer flag
        ("cuda_graph_impl=transformer_engine scope attn+moe_router+moe_preprocess", {"cuda_graphs": False}),
        # words about overlap without the preset's field and value state nothing
        ("MoE A2A overlap not stated", {}),
    ],
)  # fmt: skip
def test_notes_moe_options(notes, expected):
    # an older file's notes: moved into the moe_ep_overlap / cuda_graphs columns (legacy_notes.py)
    assert stated_moe_options({"notes": notes}) == expected
    # the columns themselves win over any notes
    assert stated_moe_options({"notes": notes, "moe_ep_overlap": "false", "cuda_graphs": "true"}) == {
        "moe_ep_overlap": False,
        "cuda_graphs": True,
    }


def test_record_workload_takes_the_stated_options():
    on = row_to_specs({**ROW, "notes": "moe_a2a_overlap=True; cuda_graph_impl=full_iteration"})
    assert on.workload.moe_ep_overlap and on.workload.cuda_graphs
    assert any(a.startswith("moe_ep_overlap=true") for a in on.assumed)
    off = row_to_specs({**ROW, "notes": ""})
    assert not off.workload.moe_ep_overlap and not off.workload.cuda_graphs


def test_recipe_bench_keeps_stated_options_and_defaults_the_rest(monkeypatch):
    mod = _recipes_module(monkeypatch)
    w = Workload(seq_len=4096, global_batch=2048, moe_ep_overlap=True, cuda_graphs=True, framework="megatron")
    default = Workload(seq_len=4096, global_batch=2048, framework="megatron")
    # nothing stated: both options back at optimize's defaults
    plain = mod.user_workload(w)
    assert (plain.moe_ep_overlap, plain.cuda_graphs) == (default.moe_ep_overlap, default.cuda_graphs)
    # the preset states overlap only: overlap kept, CUDA graphs at the default
    kept = mod.user_workload(w, {"moe_ep_overlap": True})
    assert kept.moe_ep_overlap and kept.cuda_graphs == default.cuda_graphs
    # a stated False stays False
    assert not mod.user_workload(w, {"moe_ep_overlap": False}).moe_ep_overlap


@pytest.mark.parametrize(
    ("notes", "on"),
    [
        ("async TP on, FSDP", True),
        ("TP comm overlap (userbuffers)", True),
        ("TP comm overlap not stated", False),
        ("tp_comm_overlap=False", False),
        ("no async TP", False),
        ("async TP, offload 2 layers", True),
    ],
)
def test_tp_overlap_notes_read_negations(notes, on):
    # A dense torchtitan row (the NeMo TP>1 default does not apply): only the notes decide.
    row = dict(ROW, model="Llama-3.1-8B", framework="torchtitan", ep="", vpp="", pp=1, notes=notes)
    assert row_to_specs(row).workload.tp_comm_overlap is on


@pytest.mark.parametrize(("notes", "flex"), [("dispatcher DeepEP", True), ("alltoall, no DeepEP", False)])
def test_dispatcher_notes_read_negations(notes, flex):
    spec = row_to_specs(dict(ROW, notes=notes))
    assert (spec.workload.moe_dispatcher == "flex") is flex


@pytest.mark.parametrize(
    ("notes", "on"),
    [
        (
            "TP-communication overlap not stated",
            True,
        ),  # silent: the NeMo / Bridge recipes' default (on at TP > 1)
        ("tp_comm_overlap unknown", True),
        (
            "derived: tp_comm_overlap=false (recipe comm_overlap None)",
            False,
        ),  # stated off: the default yields
        ("TP comm overlap off", False),
        ("no async TP", False),
        ("TP comm overlap (userbuffers)", True),
    ],
)
def test_tp_overlap_stated_off_beats_the_stack_default(notes, on):
    # The AWS Megatron-Bridge sweeps (bench/data/sweeps.csv AWSW-*) built on the library recipes, which leave
    # TP comm overlap off; a record that says so must not get the performance recipes' TP > 1 default.
    row = dict(ROW, framework="Megatron-Bridge 0.4.2", sp=1, notes=notes)
    assert row_to_specs(row).workload.tp_comm_overlap is on
