"""`--help` shows every option's text whole: Typer renders help as Rich markup, so a bare "[default: X]" in a
help string is read as a markup tag and vanishes, leaving a stray " ." (issue 27). Help strings escape it."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from autopar.cli.app import app

COMMANDS = [
    ["optimize"], ["estimate"], ["whatif"], ["compare"], ["fix"], ["launch"], ["study", "report"],
    ["calibrate", "ingest"], ["calibrate", "fit"],
]  # fmt: skip


def _help(args: list[str]) -> str:
    result = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "400", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_help_has_no_text_lost_to_markup(args: list[str]):
    text = _help(args)
    assert not re.search(r"\s\.(\s|$)", text), "a help text lost a bracketed part (read as markup)"


def test_option_defaults_are_shown():
    text = _help(["optimize"])
    assert re.search(r"--model\s.*\[default: Llama-3\.1-70B\]", text)
    assert re.search(r"--gpus-per-node\s.*\[default: GPU's\]", text)
