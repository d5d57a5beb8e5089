"""Issue 46 item 5 (one syntax): strategy labels read in any case, and a key=value form ('DP=4,TP=8,PP=2') read
by the same reader (autopar/knobs.py parse_label), so every command that takes a label takes both."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from autopar import knobs
from autopar.cli import app
from autopar.errors import SpecError
from autopar.knobs import parse_label
from autopar.launch.labels import parse_strategy_label
from autopar.specs import Strategy

runner = CliRunner()
LABEL = "TP4+SP PP2v2 DP8/Z1 mb1 sel-AC"


def test_a_lower_case_label_is_the_same_strategy():
    assert parse_strategy_label("tp4+sp pp2v2 dp8/z1 mb1 sel-ac") == parse_strategy_label(LABEL)
    assert parse_strategy_label("tp8 pp4-ZB-H1 cp2-ALLGATHER full-ac") == parse_strategy_label(
        "TP8 PP4-zb-h1 CP2-allgather full-AC"
    )


@st.composite
def strategies(draw: st.DrawFn) -> Strategy:
    tp, pp = draw(st.sampled_from([1, 2, 8])), draw(st.sampled_from([1, 2, 4]))
    sched = draw(st.sampled_from(["1f1b", "zb-h1", "dualpipe"])) if pp > 1 else "1f1b"
    cp = draw(st.sampled_from([1, 2]))
    return Strategy(
        tp=tp,
        sp=tp > 1 and draw(st.booleans()),
        pp=pp,
        pp_schedule=sched,
        cp=cp,
        cp_comm=draw(st.sampled_from(knobs.CP_COMM_NAMES)) if cp > 1 else "p2p",
        dp=draw(st.sampled_from([0, 4])),
        zero=draw(st.integers(0, 3)),
        recompute=draw(st.sampled_from(["none", "selective", "full", "sel:layernorm+moe_act"])),
        optimizer_states=draw(st.sampled_from([None, "bf16", "8bit"])),
        optimizer_offload=draw(st.sampled_from([0.0, 1.0, 0.5])),
    )


@given(s=strategies())
def test_labels_read_in_any_case(s: Strategy):
    label = s.label()
    assert parse_strategy_label(label.lower()) == parse_strategy_label(label.upper()) == s


# --- key=value ----------------------------------------------------------------------------------------------
def test_key_values_set_the_fields_the_tokens_set():
    assert parse_strategy_label("DP=4,TP=8,PP=2") == parse_strategy_label("TP8 PP2 DP4")
    spaced = parse_strategy_label("tp=8 pp=2 dp=4 mb=1 zero=1 cp=2 vpp=2 ep=8")
    assert spaced == parse_strategy_label("TP8 PP2v2 CP2 EP8 DP4/Z1 mb1")
    # by hand: vpp 2 is the interleaved schedule, as the PP2v2 token reads
    assert (spaced.tp, spaced.pp, spaced.vpp, spaced.pp_schedule, spaced.dp, spaced.zero) == (
        8, 2, 2, "interleaved", 4, 1,
    )  # fmt: skip
    assert parse_strategy_label("tp=4, sp=1, recompute=sel") == parse_strategy_label("TP4+SP sel-AC")
    assert parse_strategy_label("TP = 4 SP=true Schedule=zb-h1 PP=4") == parse_strategy_label(
        "TP4+SP PP4-zb-h1"
    )


@given(
    tp=st.sampled_from([1, 2, 8]),
    pp=st.sampled_from([1, 2, 4]),
    vpp=st.sampled_from([1, 2]),
    cp=st.sampled_from([1, 2]),
    ep=st.sampled_from([1, 8]),
    dp=st.sampled_from([1, 4, 64]),
    zero=st.integers(0, 3),
    mb=st.sampled_from([1, 2]),
    sep=st.sampled_from([",", " ", ", "]),
)
def test_key_values_and_tokens_agree(tp, pp, vpp, cp, ep, dp, zero, mb, sep):
    vpp = vpp if pp > 1 else 1
    kv = sep.join(
        f"{k}={v}" for k, v in {"TP": tp, "pp": pp, "Vpp": vpp, "cp": cp, "EP": ep, "dp": dp}.items()
    )
    kv += f"{sep}zero={zero}{sep}mb={mb}"
    tokens = f"TP{tp} PP{pp}" + (f"v{vpp}" if vpp > 1 else "") + f" CP{cp} EP{ep} DP{dp}/Z{zero} mb{mb}"
    assert parse_strategy_label(kv) == parse_strategy_label(tokens)


def test_left_out_dp_is_derived_as_for_a_label():
    assert "dp" not in parse_label("tp=8,pp=2") and "dp" not in parse_label("TP8 PP2")
    res = runner.invoke(
        app, ["estimate", "--model", "Llama-3.1-8B", "--gpus", "64", "--strategy", "tp=8,pp=2", "--json"]
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["strategy"]["dp"] == 4  # 64 GPUs / (tp 8 x pp 2)


def test_launch_takes_key_values():
    argv = ["launch", "--model", "Llama-3.1-8B", "--gpus", "64", "--strategy", "DP=4,TP=8,PP=2", "--json"]
    res = runner.invoke(app, argv)
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)["strategy"]
    assert (s["tp"], s["pp"], s["dp"]) == (8, 2, 4)


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("tpp=2", "strategy key 'tpp' not understood; did you mean 'tp'? (keys: tp, pp, vpp, dp"),
        ("TP4 pp=2", "mixes a label token ('TP4') with key=value pairs"),
        ("tp=x", "strategy tp='x': expected a whole number"),
        ("sp=maybe", "strategy sp='maybe': expected 1 or 0"),
        ("tp=2,TP=4", "strategy key 'TP' is given twice"),
        ("schedule=zb", "strategy schedule='zb': expected one of 1f1b, interleaved"),
    ],
)
def test_bad_key_values_are_one_line(spec, said):
    with pytest.raises(SpecError) as e:
        parse_strategy_label(spec)
    assert said in str(e.value) and "\n" not in str(e.value)
    res = runner.invoke(app, ["estimate", "--strategy", spec])
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1 and said in res.output


# --- catalog names: already case-blind (names.NameIndex); kept so ------------------------------------------
@pytest.mark.parametrize(
    "argv",
    [
        ["--gpu", "h100-sxm", "--model", "llama-3.1-70b"],
        ["--gpu", "H100-SXM", "--model", "LLAMA-3.1-70B"],
        ["--cluster", "dgx-h100:8", "--model", "Llama-3.1-70B"],
        ["--cluster", "DGX-H100:8", "--model", "llama-3.1-70B"],
    ],
)
def test_gpu_model_and_cluster_names_read_in_any_case(argv):
    res = runner.invoke(app, ["estimate", *argv, "--json"])
    assert res.exit_code == 0, res.output
    inputs = json.loads(res.stdout)["inputs"]
    assert (inputs["model"], inputs["gpu"], inputs["num_gpus"]) == ("Llama-3.1-70B", "H100-SXM", 64)
