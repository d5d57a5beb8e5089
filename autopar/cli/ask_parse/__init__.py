"""`autopar ask`: a plain-language request parsed, deterministically, into one autopar command line.

No network, no language model, no randomness. The request (at most MAX_REQUEST_CHARS) is split into words
in one linear pass (the one regular expression over the whole text has no nested repetition; every other
one matches a single word), then read left to right: at each word the phrase rules below are tried in a
fixed order, each on at most a few words, against fixed word lists and the built-in catalogs (models,
GPUs), so the time is linear in the length. A word is either part of an understood phrase (a `Span`
saying what it set), a filler word ("on", "with", "under"), or reported as not understood. The problem is
then resolved into `optimize` (one cluster) or `whatif` (a deadline, several GPU types, "which GPU",
"how many GPUs") and its flags; contradictions ("64 H100 on 128 GPUs") and unknown names ("64 A2 NPUs")
are one-line `AskError`s that name what was written.

Numbers: sequence lengths are binary ("8k" = 8,192, as `--seq-len` reads them), token counts and money
decimal ("15T" = 15e12 tokens, "$500k" = 500,000 USD). GPU counts are whole numbers without a suffix.

The modules, in the order a request passes through them:

- `tokens`: the words of the request and the helpers the rules read them with;
- `vocabulary`: the fixed word lists; `numbers`: numbers, suffixes and counts, read and written back;
- the phrase rules, producing `facts`: `workload_rules` (batch, sequence length, tokens), `budget_rules`
  (money, deadline), `catalog_match` (models, sizes, GPU names), `hardware_rules` (GPU counts, nodes,
  racks, unknown accelerators), `word_rules` (precision, stack, goal, hardware questions);
- `scan`: the rules applied left to right; `resolve`: the facts as one problem;
- `flags`: the problem as `optimize` or `whatif` flags; `result`: the `AskParse`; `echo`: the parse in
  words; `request`: `parse_request` and `check_understood`, end to end; `errors`: `AskError`.
"""

from __future__ import annotations

from autopar.cli.ask_parse.catalog_match import gpu_at, presets_by_size, unknown_gpu_message
from autopar.cli.ask_parse.echo import render_request
from autopar.cli.ask_parse.errors import AskError
from autopar.cli.ask_parse.facts import Fact, Hit, Rule
from autopar.cli.ask_parse.flags import objectives_for
from autopar.cli.ask_parse.numbers import COUNT_SCALE, format_si, plain_number
from autopar.cli.ask_parse.request import MAX_REQUEST_CHARS, check_understood, parse_request
from autopar.cli.ask_parse.result import OPTIMIZE, WHATIF, AskParse, Span, Unparsed
from autopar.cli.ask_parse.scan import RULES, scan
from autopar.cli.ask_parse.tokens import Tok, tokenize
from autopar.cli.ask_parse.word_rules import framework_words

__all__ = [
    "COUNT_SCALE",
    "MAX_REQUEST_CHARS",
    "OPTIMIZE",
    "RULES",
    "WHATIF",
    "AskError",
    "AskParse",
    "Fact",
    "Hit",
    "Rule",
    "Span",
    "Tok",
    "Unparsed",
    "check_understood",
    "format_si",
    "framework_words",
    "gpu_at",
    "objectives_for",
    "parse_request",
    "plain_number",
    "presets_by_size",
    "render_request",
    "scan",
    "tokenize",
    "unknown_gpu_message",
]
