"""The CLI options are generated from the problem tree (autopar/problem.py, autopar/cliinput.py): a tree field's
description is its --help, its default the option's, and `problem_of` reads the options back into the tree."""

from __future__ import annotations

import inspect
from typing import Annotated, get_args

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, Field
from typer.testing import CliRunner

from autopar.cli import app
from autopar.cli.options import (
    CLUSTER,
    OPTIONS,
    TREE_NODES,
    WORKLOAD_EXTRAS,
    Flags,
    _node_values,
    _tree_options,
    problem_of,
    with_options,
)
from autopar.cliinput import CliInput, cli_input
from autopar.problem import ClusterConfig, Problem, SearchSettings, WorkloadConfig

runner = CliRunner()


def _marked(node: type[BaseModel]) -> list[tuple[str, str, CliInput]]:
    return [
        (name, spec.param or name, spec)
        for name, field in node.model_fields.items()
        if (spec := cli_input(field.metadata)) is not None
    ]


@pytest.mark.parametrize("node", TREE_NODES, ids=lambda n: n.__name__)
def test_each_marked_field_is_an_option_whose_help_is_its_description(node: type[BaseModel]) -> None:
    for name, key, _ in _marked(node):
        info = get_args(OPTIONS[key].annotation)[1]
        # typer's rich help reads `[x]` as markup: the tree's literal `[default: ...]` is escaped, nothing else
        assert info.help.replace("\\[", "[") == node.model_fields[name].description, key


def test_every_cluster_and_workload_field_reaches_the_problem_commands() -> None:
    # A field added to ClusterConfig/WorkloadConfig joins CLUSTER/WORKLOAD_EXTRAS or a named group, so
    # estimate (one cluster) and optimize (a search) both take it.
    from autopar.cli.estimate import estimate_cmd
    from autopar.cli.optimize import optimize_cmd

    search_only = {"tokens", "memory_savers"}  # a token budget and the savers a search may choose
    for cmd, skip in ((estimate_cmd, search_only), (optimize_cmd, set())):
        taken = set(inspect.signature(cmd).parameters)
        for node in (ClusterConfig, WorkloadConfig):
            assert {key for _, key, _ in _marked(node)} - skip <= taken, cmd.__name__
    assert "transport" in CLUSTER and "lora_rank" in WORKLOAD_EXTRAS and "seq_len" not in WORKLOAD_EXTRAS


def test_a_new_tree_field_is_one_declaration() -> None:
    class Node(BaseModel):
        warmup_ratio: Annotated[float | None, CliInput(minimum=0.0)] = Field(
            default=None, description="Share of steps in LR warm-up [default: 0.01]."
        )
        tp_dims: Annotated[tuple[str, ...], CliInput(type=str, read=lambda s: tuple(s.split(",")))] = Field(
            default=("a", "b"), description="Mesh dims."
        )
        hidden: int = Field(default=3, description="not a command-line input")

    entries = {key: (annotation, default) for key, annotation, default in _tree_options(Node)}
    assert set(entries) == {"warmup_ratio", "tp_dims"}
    ann, default = entries["warmup_ratio"]
    info = get_args(ann)[1]
    decls = (info.default, *info.param_decls)  # typer keeps an Annotated option's first flag as `default`
    assert "--warmup-ratio" in decls and (info.help, info.min, default) == (
        "Share of steps in LR warm-up \\[default: 0.01].",
        0.0,
        None,
    )
    assert entries["tp_dims"][1] == "a,b"  # the tuple default as typed on the command line
    read = _node_values(Node, Flags(warmup_ratio=0.05, tp_dims="x,y,z").get)
    assert read == {"warmup_ratio": 0.05, "tp_dims": ("x", "y", "z")}
    assert _node_values(Node, Flags().get) == {}  # unset: the tree's defaults


def test_options_read_back_into_the_tree() -> None:
    flags = Flags(
        model="Llama-3.1-8B",
        cluster_name=None,
        gpu="H100-SXM,B200",
        gpus="1k..4k",
        seq_len="8k",
        global_batch=1024,
        tokens="1T",
        memory_savers="offload, bf16_states",
        budget=200,
        seed=7,
        min_headroom="4GiB",
        max_cost=2.5,
        heartbeat=20,
        fix=["tp=8"],
    )
    p = problem_of(flags)
    assert p.cluster.gpus == "1024..4096"  # 1k = 1,024 (binary), spelt out for the range reader
    assert (p.workload.seq_len, p.workload.global_batch, p.workload.tokens) == (8192, 1024, 1e12)
    assert p.workload.memory_savers == ("offload", "bf16_states")
    assert (p.search.budget, p.search.seed, p.search.min_headroom_gib) == (200, 7, 4.0)
    assert (p.search.max_cost, p.search.heartbeat_s, len(p.search.constraints)) == (2.5, 20, 1)
    assert p.model == "Llama-3.1-8B" and p.cluster.gpu == "H100-SXM,B200"


def test_command_line_defaults_are_the_trees() -> None:
    # Each option's default, read as problem_of reads it, is the tree's default (or None: "not given").
    for node in (ClusterConfig, WorkloadConfig, SearchSettings, Problem):
        for name, key, spec in _marked(node):
            default = OPTIONS[key].default
            if default is None:
                continue
            value = spec.read(default) if spec.read else default
            tree = node.model_fields[name].default
            assert value == tree or (isinstance(tree, tuple) and value == ",".join(tree)), key


@given(st.integers(min_value=1, max_value=64), st.integers(min_value=1, max_value=512))
def test_counts_with_suffixes_reach_the_tree(k: int, n: int) -> None:
    # 2K = 2,048 (binary suffix, autopar/units.py) for batch sizes and GPU counts; a budget's 2k = 2,000
    cmd = with_options("gpus:one", "global_batch", "budget")(problem_of)
    p = cmd(gpus=f"{n}K", global_batch=f"{k}K", budget=f"{k}k")
    assert (p.cluster.gpus, p.workload.global_batch, p.search.budget) == (str(n * 1024), k * 1024, k * 1000)


def test_a_bad_tree_value_is_one_line_naming_the_option() -> None:
    res = runner.invoke(app, ["estimate", "--model", "Llama-3.1-8B", "--seq-len", "8q"])
    assert res.exit_code != 0 and "Traceback" not in res.output
    assert "seq-len" in res.output
