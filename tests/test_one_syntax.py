"""Issue 46 item 5 (one syntax), first part: sequence lengths with binary suffixes, as context lengths are
written ("8k context" = 8,192 tokens; Llama 3.1's "128K" = 131,072)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from autopar.cli import app
from autopar.errors import SpecError
from autopar.units import parse_seq_len

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
