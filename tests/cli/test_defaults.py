"""One set of defaults (issue 27): every command that states a problem takes the model, GPU, GPU count,
sequence length and global batch it uses when none is given from autopar/defaults.py, and reports them."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from autopar.cli import app
from autopar.defaults import DEFAULT_GLOBAL_BATCH, DEFAULT_GPU, DEFAULT_GPUS, DEFAULT_MODEL, DEFAULT_SEQ_LEN

runner = CliRunner()
LABEL = "TP8+SP PP4 DP2/Z1 mb1"
EXPECTED = {
    "model": DEFAULT_MODEL,
    "gpu": DEFAULT_GPU,
    "num_gpus": DEFAULT_GPUS,
    "seq_len": DEFAULT_SEQ_LEN,
    "global_batch": DEFAULT_GLOBAL_BATCH,
}


def _json(args: list[str]):
    r = runner.invoke(app, [*args, "--json", "--no-calibration"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def _problem(inputs: dict) -> dict:
    return {k: inputs[k] for k in EXPECTED}


def test_every_command_without_problem_flags_uses_the_shared_defaults():
    assert EXPECTED == {
        "model": "Llama-3.1-70B",
        "gpu": "H100-SXM",
        "num_gpus": 64,
        "seq_len": 8192,
        "global_batch": 512,
    }  # the README's default problem
    assert _problem(_json(["estimate", "--strategy", LABEL])["inputs"]) == EXPECTED
    assert _problem(_json(["compare", LABEL])[0]["inputs"]) == EXPECTED
    assert _problem(_json(["fix", "--strategy", LABEL])["inputs"]) == EXPECTED
    opt = _json(["optimize", "--budget", "20"])["inputs"]
    assert _problem({**opt, "gpu": opt["gpu"][0], "num_gpus": opt["gpus"][0]}) == EXPECTED
    # whatif takes its hardware from --option; its problem defaults are the same
    w = _json(["whatif", "--option", "H100-SXM:64", "--tokens", "1T", "--budget", "10", "--no-sensitivity"])
    assert {k: w[k] for k in ("model", "seq_len", "global_batch")} == {
        k: EXPECTED[k] for k in ("model", "seq_len", "global_batch")
    }
