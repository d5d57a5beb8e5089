"""The fixed word lists the phrase rules match against: filler words, unit and noun words, duration
units, precisions, framework aliases, goal and question phrases, and `KNOWN_WORDS` (every word some rule
reads, so never taken for the name of an unknown accelerator).
"""

from __future__ import annotations


def word_set(*ws: str) -> frozenset[str]:
    return frozenset(ws)


FILLERS = word_set(
    *("a", "an", "the", "on", "with", "for", "to", "of", "and", "or", "in", "within", "by", "under", "below"),
    *("at", "using", "use", "train", "training", "trained", "pretrain", "pretraining", "pre-train", "run"),
    *("i", "we", "want", "need", "should", "would", "could", "can", "what", "is", "are", "it", "me", "my"),
    *("our", "us", "model", "models", "please", "plan", "find", "best", "strategy", "parallelism", "budget"),
    *("max", "maximum", "most", "than", "less", "no", "more", "up", "cap", "spend", "spending", "total"),
    *("cost", "costs", "llm", "gpu", "gpus", "get", "do", "be", "possible", "over", "from", "across", "via"),
    *("time", "precision", "framework", "stack", "cluster", "about", "around", "if", "so", "that", "this"),
    *("just", "only", "help", "how", "many", "tokens", "token", "parameters", "params", "parameter"),
    *("dense", "pytorch", "size", "length", "dataset", "data", "one", "option", "options", "will"),
)
MAGNITUDES = {"thousand": 1e3, "million": 1e6, "billion": 1e9, "trillion": 1e12}
TOKEN_WORDS = word_set("token", "tokens", "tok", "toks")
SEQ_WORDS = word_set(
    *("seq", "sequence", "context", "ctx", "seq-len", "seq_len", "seqlen", "context-length"),
    *("context_length", "context-window", "sequence-length", "ctx-len"),
)
LEN_WORDS = word_set("len", "length", "size", "window")
LINK_WORDS = word_set("of", "is")
SEQUENCE_NOUNS = word_set("sequences", "seqs", "samples")
PER_WORDS = word_set("per", "a", "/", "each", "every")
STEP_WORDS = word_set("step", "steps", "batch", "iteration", "iter", "update")
BATCH_WORDS = word_set("batch", "batch-size", "batch_size", "gbs", "global-batch", "global_batch")
DOLLAR_WORDS = word_set("dollars", "dollar", "usd", "$", "bucks")
MTOK_WORDS = word_set("mtok", "mtoks", "mtoken", "mtokens")
RATE_UNIT_WORDS = word_set("$/mtok", "$/mtoken", "$/mtokens", "usd/mtok", "usd/mtoken")
GPU_NOUNS = word_set(
    "gpu", "gpus", "accelerator", "accelerators", "card", "cards", "device", "devices", "chips"
)
OTHER_ACCELERATORS = word_set("npu", "npus", "tpu", "tpus", "ipu", "ipus", "hpu", "hpus", "lpu", "lpus")
NODE_WORDS = word_set(
    "node", "nodes", "server", "servers", "host", "hosts", "machine", "machines", "box", "boxes"
)
RACK_WORDS = word_set("rack", "racks")
TIMES_WORDS = word_set("x", "×")
SYSTEM_PREFIXES = ("dgx", "hgx")  # '8 DGX H100' counts systems (nodes), not GPUs
DURATION_UNITS = {
    **dict.fromkeys(("hour", "hours", "h", "hr", "hrs"), "h"),
    **dict.fromkeys(("day", "days", "d"), "d"),
    **dict.fromkeys(("week", "weeks", "w", "wk", "wks"), "w"),
    **dict.fromkeys(("month", "months", "mo"), "mo"),
    **dict.fromkeys(("year", "years", "y", "yr", "yrs"), "y"),
}
PRECISIONS = {"bf16": "bf16", "bfloat16": "bf16", "fp8": "fp8", "float8": "fp8"}
PRECISION_ORDER = ("bf16", "fp8")
FRAMEWORK_ALIASES = {
    "megatron-lm": "megatron",
    "megatron-core": "megatron",
    "mcore": "megatron",
    "megatron-bridge": "megatron",
    "fsdp2": "fsdp",
    "pytorch-fsdp": "fsdp",
    "colossal-ai": "colossalai",
    "paddlepaddle": "paddle",
    "mindformers": "mindspore",
    "veomni": "vescale",
}
# Goal words -> the objective put first in --objectives (optimize recommends that objective's best first and
# sorts its Pareto table by it); the others keep their default order.
GOALS: dict[tuple[str, ...], str] = {
    **dict.fromkeys(
        [("fastest",), ("quickest",), ("as", "fast", "as", "possible"), ("shortest", "time")], "throughput"
    ),
    **dict.fromkeys([(w, "throughput") for w in ("max", "maximum", "highest", "most", "best")], "throughput"),
    **dict.fromkeys([("cheapest",), ("least", "expensive"), ("as", "cheap", "as", "possible")], "cost"),
    **dict.fromkeys(
        [(w, c) for w in ("lowest", "least", "minimum", "min") for c in ("cost", "price")], "cost"
    ),
    **dict.fromkeys([("safest",), ("most", "free", "memory"), ("most", "memory")], "headroom"),
    **dict.fromkeys([(w, "headroom") for w in ("most", "max", "maximum", "more")], "headroom"),
    ("most", "memory", "headroom"): "headroom",
}
GOALS_BY_WORD: dict[str, list[tuple[str, ...]]] = {}
for _phrase in sorted(GOALS, key=len, reverse=True):  # the longest phrase first
    GOALS_BY_WORD.setdefault(_phrase[0], []).append(_phrase)
GOAL_WORDS = {"throughput": "fastest", "cost": "cheapest", "headroom": "most headroom"}
CUES: tuple[tuple[str, ...], ...] = (("how", "many"), ("which",), ("compare",), ("vs",), ("versus",))
CUE_NOUNS = word_set("gpu", "gpus", "hardware", "accelerator", "accelerators", "one", "option", "is")
KNOWN_WORDS = (
    TOKEN_WORDS
    | SEQ_WORDS
    | LEN_WORDS
    | SEQUENCE_NOUNS
    | STEP_WORDS
    | BATCH_WORDS
    | DOLLAR_WORDS
    | MTOK_WORDS
    | GPU_NOUNS
    | OTHER_ACCELERATORS
    | NODE_WORDS
    | RACK_WORDS
    | TIMES_WORDS
    | frozenset(PRECISIONS)
    | frozenset(DURATION_UNITS)
    | frozenset(MAGNITUDES)
    | frozenset(FRAMEWORK_ALIASES)
)
