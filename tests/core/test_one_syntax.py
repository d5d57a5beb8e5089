"""Issue 46 item 5 (one syntax): sequence lengths with binary suffixes, as context lengths are written ("8k
context" = 8,192 tokens; Llama 3.1's "128K" = 131,072), and every other count with the suffix convention of
autopar/units.py (labels: test_one_syntax_labels.py; model names: test_one_syntax_models.py)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from autopar.cli import app
from autopar.errors import SpecError
from autopar.units import (
    BINARY_SUFFIX,
    DECIMAL_SUFFIX,
    expand_count_suffixes,
    parse_seq_len,
    parse_whole_count,
)

runner = CliRunner()


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("8k", 8192),
        ("8K", 8192),
        ("32K", 32768),
        ("128k", 131072),
        ("1M", 1048576),
        ("8192", 8192),
        ("8,192", 8192),
    ],
)
def test_seq_len_suffixes_are_binary(text, tokens):
    assert parse_seq_len(text) == tokens


@pytest.mark.parametrize("text", ["8x", "0", "-8k", "1.3", "8 T", "nan"])
def test_a_bad_seq_len_is_one_line(text):
    with pytest.raises(SpecError, match="seq-len="):
        parse_seq_len(text)
    res = runner.invoke(app, ["estimate", "--seq-len", text])
    assert res.exit_code != 0 and len(res.output.strip().splitlines()) == 1 and "seq-len=" in res.output


@pytest.mark.parametrize("command", [["estimate"], ["optimize", "--budget", "10"]])
def test_commands_take_8k(command):
    res = runner.invoke(app, [*command, "--seq-len", "8k", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["inputs"]["seq_len"] == 8192


# --- item 1: size suffixes on every count (units.py: BINARY_SUFFIX for GPUs, batches, parallel sizes; DECIMAL_SUFFIX
# for search trials). Expected values by hand: K = 2**10 = 1,024, M = 2**20 = 1,048,576; decimal k = 1,000.
@pytest.mark.parametrize(
    ("text", "binary", "decimal"),
    [
        ("1k", 1024, 1000),
        ("2K", 2048, 2000),
        ("16K", 16384, 16000),  # the Llama 3 paper's "16K H100 GPUs" = 16,384
        ("1.5k", 1536, 1500),
        ("1M", 1048576, 1000000),
        ("1,024", 1024, 1024),
        ("512", 512, 512),
    ],
)
def test_count_suffixes(text, binary, decimal):
    assert parse_whole_count(text, "gpus", "GPU count", BINARY_SUFFIX) == binary
    assert parse_whole_count(text, "budget", "number of trials", DECIMAL_SUFFIX) == decimal


@given(n=st.integers(1, 2**20))
def test_plain_and_suffixed_counts_agree(n):
    assert parse_whole_count(str(n), "gpus", "GPU count") == n
    assert parse_whole_count(f"{n:,}", "gpus", "GPU count") == n
    assert parse_whole_count(f"{n}k", "gpus", "GPU count", BINARY_SUFFIX) == n * 1024
    assert parse_whole_count(f"{n}K", "budget", "trials", DECIMAL_SUFFIX) == n * 1000


@pytest.mark.parametrize(
    ("text", "spelt"), [("1k..4k", "1024..4096"), ("64,1K", "64,1024"), ("8..2k:8", "8..2048:8")]
)
def test_gpu_ranges_spell_out_suffixes(text, spelt):
    assert expand_count_suffixes(text) == spelt


def test_estimate_reads_suffixed_counts():
    args = [
        "estimate",
        "--model",
        "Llama-3.1-8B",
        "--gpus",
        "2k",
        "--gpus-per-node",
        "1k",
        "--nvlink-domain",
        "1K",
    ]
    res = runner.invoke(app, [*args, "--global-batch", "2K", "--json"])
    assert res.exit_code == 0, res.output
    inputs = json.loads(res.stdout)["inputs"]
    assert (inputs["num_gpus"], inputs["gpus_per_node"], inputs["nvlink_domain"]) == (2048, 1024, 1024)
    assert inputs["global_batch"] == 2048


def test_estimate_knobs_take_suffixes_too():
    # 2K GPUs / (tp 8) = 256-way data parallel; micro-batch 1 x dp 256 divides the 1K (1,024) global batch
    args = ["estimate", "--model", "Llama-3.1-8B", "--gpus", "2K", "--tp", "8", "--global-batch", "1k"]
    res = runner.invoke(app, [*args, "--micro-batch", "1", "--zero", "1", "--json"])
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)["strategy"]
    assert (s["tp"], s["dp"], s["micro_batch"]) == (8, 256, 1)


def test_optimize_reads_a_suffixed_range_and_a_decimal_budget():
    args = ["optimize", "--model", "Llama-3.1-8B", "--gpus", "1k..2k", "--budget", "1k", "--no-calibration"]
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    inputs = json.loads(res.stdout)["inputs"]
    assert (
        inputs["gpus"] == [1024, 2048] and inputs["budget"] == 1000
    )  # powers of two 1,024..2,048; 1k trials


def test_launch_reads_suffixed_counts():
    args = [
        "launch",
        "--model",
        "Llama-3.1-8B",
        "--gpus",
        "1k",
        "--tp",
        "8",
        "--global-batch",
        "2K",
        "--json",
    ]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["strategy"]["dp"] == 128  # 1,024 GPUs / tp 8


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["estimate", "--gpus", "1x"], "gpus='1x'"),
        (["estimate", "--global-batch", "1.3k"], "global-batch='1.3k'"),  # 1.3 x 1,024 is not whole
        (["estimate", "--micro-batch", "two"], "micro-batch='two'"),
        (["estimate", "--tp", "8T"], "tp='8T'"),
        (["optimize", "--budget", "2x"], "budget='2x'"),
        (["launch", "--dp", "many"], "dp='many'"),
    ],
)
def test_a_bad_count_is_one_line_naming_the_option(argv, named):
    res = runner.invoke(app, argv)
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1 and named in res.output, (
        res.output
    )


def test_plain_integers_keep_their_checks():
    res = runner.invoke(
        app, ["estimate", "--gpus", "-4"]
    )  # read as before: the cluster's own check refuses it
    assert res.exit_code == 2 and "num_gpus=-4" in res.output
