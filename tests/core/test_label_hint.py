"""A mistyped strategy-label token gets a close match (the standard: one line, the field and value, close
matches suggested), built from the token's own numbers; every shape a label is written in is a known shape."""

from __future__ import annotations

import pytest

from autopar.knobs import parse_label, token_candidates
from autopar.specs import Strategy


@pytest.mark.parametrize(
    ("typo", "meant"),
    [
        ("CP2-allgathr", "CP2-allgather"),
        # not 'TP4+Sp' / 'DP8/z1': labels read in any case (tests/core/test_one_syntax.py)
        ("TP4+S", "TP4+SP"),
        ("DP8-Z1", "DP8/Z1"),
        ("fulll-AC", "full-AC"),
        ("PP4v5-interleavd", "PP4v5-interleaved"),
        ("emb-splt", "emb-split"),
    ],
)
def test_typo_gets_the_close_token(typo: str, meant: str) -> None:
    with pytest.raises(ValueError) as e:
        parse_label(f"TP2 {typo} mb1")
    msg = str(e.value)
    assert f"'{typo}' not understood; did you mean '{meant}'?" in msg and "\n" not in msg
    parse_label(meant)  # the suggestion itself reads


def test_no_hint_for_nonsense() -> None:
    with pytest.raises(ValueError, match="not understood \\(expected"):
        parse_label("xyzzy")


@pytest.mark.parametrize(
    "label",
    [
        "TP4+SP PP2v2 CP2 EP8 DP8/Z1 mb1 sel-AC",
        "TP8+SP PP8v4-interleaved emb-split loss-split CP2-allgather EP32 ETP1 DP16/Z3 mb2 full-AC AO4",
        "TP1 PP4 first3 last1 CP4-a2a+p2p HSDP8 mb1 sel:layernorm+moe_act-AC bf16-states offload0.5",
    ],
)
def test_every_written_token_has_a_known_shape(label: str) -> None:
    s = Strategy(**parse_label(label))
    for tok in s.label().split():
        assert tok in token_candidates(tok), tok
