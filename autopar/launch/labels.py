"""Strategy labels read back: `parse_strategy_label` inverts `Strategy.label()` ('TP4+SP PP2v2 DP8/Z1 mb1 sel-AC').

Used by `autopar launch --strategy`, `autopar fix` and evaluation files; needs only the specs and the layouts.
"""

from __future__ import annotations

import re

from autopar.errors import SpecError
from autopar.layouts import Axis
from autopar.specs import Strategy

_LABEL_TOKENS = [
    (re.compile(r"^TP(\d+)(\+SP)?$"), Axis.TP),
    (re.compile(r"^PP(\d+)(?:v(\d+))?(?:-(1f1b|interleaved|zb-h1|dualpipe))?$"), Axis.PP),
    (re.compile(r"^CP(\d+)(?:-(p2p|a2a|allgather|a2a\+p2p))?$"), Axis.CP),
    (re.compile(r"^first(\d+)$"), "pp_first_layers"),
    (re.compile(r"^last(\d+)$"), "pp_last_layers"),
    (re.compile(r"^(emb|loss)-split$"), "account"),
    (re.compile(r"^HSDP(\d+)$"), "dp_shard"),
    (re.compile(r"^(fp32|bf16|8bit)-states$"), "states"),
    (re.compile(r"^offload([\d.]+)?$"), "offload"),
    (re.compile(r"^EP(\d+)$"), Axis.EP),
    (re.compile(r"^ETP(\d+)$"), Axis.ETP),
    (re.compile(r"^Z(\d)$"), "z"),
    (re.compile(r"^DP(\d+)(?:/Z(\d))?$"), Axis.DP),
    (re.compile(r"^mb(\d+)$"), "mb"),
    (re.compile(r"^(sel|full)-AC$"), "ac"),
    (re.compile(r"^AO(\d+)$"), "activation_offload_layers"),
]


def parse_strategy_label(label: str) -> Strategy:
    """Parse a `Strategy.label()` string ('TP4+SP PP2v2 DP8/Z1 mb1 sel-AC') back into a Strategy."""
    fields: dict[str, object] = {"zero": 0}
    for tok in label.split():
        for rx, key in _LABEL_TOKENS:
            m = rx.match(tok)
            if not m:
                continue
            if key == Axis.TP:
                fields[Axis.TP], fields["sp"] = int(m[1]), bool(m[2])
            elif key == Axis.PP:
                fields[Axis.PP] = int(m[1])
                if m[2]:
                    fields[Axis.VPP], fields["pp_schedule"] = int(m[2]), "interleaved"
                if m[3]:
                    fields["pp_schedule"] = m[3]
            elif key == Axis.CP:
                fields[Axis.CP], fields["cp_comm"] = int(m[1]), m[2] or "p2p"
            elif key == "account":
                fields[f"pp_account_{'embedding' if m[1] == 'emb' else 'loss'}"] = True
            elif key == "states":
                fields["optimizer_states"] = m[1]
            elif key == "offload":
                fields["optimizer_offload"] = float(m[1] or 1.0)
            elif key == Axis.DP:
                fields[Axis.DP], fields["zero"] = int(m[1]), int(m[2] or 0)
            elif key == "z":
                fields["zero"] = int(m[1])
            elif key == "mb":
                fields["micro_batch"] = int(m[1])
            elif key == "ac":
                fields["recompute"] = {"sel": "selective", "full": "full"}[m[1]]
            else:
                fields[key] = int(m[1])
            break
        else:
            raise SpecError(
                f"strategy label token '{tok}' not understood (expected e.g. "
                "'TP4+SP PP2v2 CP2 EP8 DP8/Z1 mb1 sel-AC')"
            )
    return Strategy(**fields)
