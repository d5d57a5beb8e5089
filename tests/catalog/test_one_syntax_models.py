"""Issue 46 item 5 (one syntax): `--model 70B` answered with the presets of that size, and an unknown model name
told that a local config.json can be passed (autopar/catalog/loader.py get_model, model_for_size)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from autopar.catalog import get_model, list_models
from autopar.catalog.loader import nominal_size, presets_of_size
from autopar.cli import app
from autopar.errors import AutoparError

runner = CliRunner()


@pytest.mark.parametrize(
    ("size", "preset"),
    [
        ("405B", "Llama-3.1-405B"),  # the only 405B in `autopar models`
        ("405b", "Llama-3.1-405B"),
        ("8x7B", "Mixtral-8x7B"),  # an MoE by the total its name writes
        ("671B", "DeepSeek-V3"),  # no size in its name: its alias deepseek-v3-671b
        ("1T", "GPT-1T"),
    ],
)
def test_a_size_one_preset_has_names_it(size, preset):
    assert get_model(size).name == preset


def test_the_cli_says_which_preset_a_size_named():
    res = runner.invoke(app, ["estimate", "--model", "405B", "--gpus", "128", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["inputs"]["model"] == "Llama-3.1-405B"
    assert "--model 405B: Llama-3.1-405B, the one built-in preset of that size" in res.stderr


@pytest.mark.parametrize(
    ("size", "presets"),
    [
        # by hand from `autopar models`: the presets whose names end in 70B / 8B, in catalog order
        ("70B", "MPT-70B, Llama-2-70B, Llama-3-70B, Llama-3.1-70B"),
        ("8b", "Llama-3-8B, Llama-3.1-8B, Qwen3-8B, Nemotron-8B"),
    ],
)
def test_a_size_several_presets_have_lists_them(size, presets):
    with pytest.raises(AutoparError, match=f"'{size}' is a size; presets of that size: {presets}; pass one"):
        get_model(size)
    res = runner.invoke(app, ["estimate", "--model", size])
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1 and presets in res.output


def test_a_size_no_preset_has_says_so():
    with pytest.raises(AutoparError, match="'3T' is a size no built-in preset has .*config.json"):
        get_model("3T")


def test_every_preset_has_a_nominal_size():
    sizes = {m.name: nominal_size(m) for m in list_models()}
    assert not [n for n, s in sizes.items() if s is None]
    assert sizes["Qwen3-235B-A22B"] == "235B" and sizes["GPT-2-XL"] == "1.5B"  # total, not active; by alias
    assert presets_of_size("Llama-3.1-70B") is None  # a name is no size


@pytest.mark.parametrize("name", ["meta-llama/Meta-Llama-3-70B-Instruct-foo", "some-org/some-model"])
def test_an_unknown_model_is_told_about_config_json(name):
    res = runner.invoke(app, ["estimate", "--model", name])
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1
    assert f"unknown model '{name}'" in res.output
    assert "or pass the path of its config.json (autopar reads it offline)" in res.output
