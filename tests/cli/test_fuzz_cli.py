"""Hypothesis fuzz of the whole CLI: generated documents (HF configs, ModelSpec YAML, price files, run
records, training logs, calibration models) and argument combinations for every command.

tests/cli/test_fuzz_inputs.py damages valid files byte by byte; this file builds hostile *documents*
(wrong types, missing keys, JSON Infinity/NaN, huge ints, deep nesting, huge strings, names carrying
rich markup / ESC / newlines, YAML alias bombs, thousands of columns) and hostile *argument sets*
(out-of-range --seed, --gpus ranges with huge bounds or steps, odd --out paths). Every case, whatever
the command, must hold the CLI's contract (`check`):

- exit code 0, 1 or 2 (never 130 or anything else), no Python traceback;
- a failed command prints exactly one `error:` line and leaves the files it was pointed at as they
  were: the --out target absent or byte-identical, no stray temporary file, the run store's rows
  unchanged (a refused ingest adds nothing);
- JSON on stdout (--json) and JSON/JSONL files written parse with non-finite constants rejected;
  a stored run record holds no non-finite number;
- no ESC or BEL byte on stdout or stderr (a name from a file cannot drive the terminal).

Each class of input is its own test function, so a failure names the class. Cases run in-process
through the console-script entry point (`run_cli`), derandomized (the same examples on every run).
`AUTOPAR_FUZZ_EXAMPLES=N` runs N examples per class instead of the CI defaults (a local, longer run);
`pytest -s` prints how many cases each class tried. A case is bounded in time (CASE_SECONDS) and
address space (CASE_MEMORY) so a runaway input fails its test instead of hanging or killing CI.
"""

from __future__ import annotations

import atexit
import contextlib
import csv
import io
import json
import math
import os
import shutil
import signal
import sqlite3
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_fuzz_inputs import assert_clean, run_cli

from autopar.calibration.store.run_store import RunStore
from autopar.catalog.loader import get_model
from autopar.data import published_runs_path

DATA = Path(__file__).parents[1] / "data"
PUBLIC = published_runs_path()
DEFAULT_MODEL_DOC = PUBLIC.parent / "default_calibration.json"
ENV_EXAMPLES = "AUTOPAR_FUZZ_EXAMPLES"
CASE_SECONDS = 30  # one in-process command; the slowest legitimate case here takes ~5 s
CASE_MEMORY = 2**30  # extra address space one case may take before MemoryError
ALLOWED_CODES = {0, 1, 2}  # ok, nothing feasible, bad input (130 = interrupted: never here)
TERMINAL_CONTROL = ("\x1b", "\x07")  # ESC starts CSI/OSC sequences, BEL ends OSC (title, hyperlinks)
CASES: Counter[str] = Counter()


def fuzz(examples: int) -> settings:
    """Settings of one class: `examples` cases (or $AUTOPAR_FUZZ_EXAMPLES), reproducible, no deadline."""
    n = int(os.environ.get(ENV_EXAMPLES) or examples)
    return settings(
        max_examples=n,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )


@pytest.fixture(autouse=True)
def _count_cases(request: pytest.FixtureRequest) -> Iterator[None]:
    """Print how many cases the test's class tried (visible with -s)."""
    cls = request.node.name.removeprefix("test_fuzz_")
    before = CASES[cls]
    yield
    print(f"\nfuzz {cls}: {CASES[cls] - before} cases")


# --- guards and the invariant check ---------------------------------------------------------------
class CaseTimeout(BaseException):  # BaseException: no `except Exception` in the CLI can swallow it
    """A single case ran past CASE_SECONDS."""


@contextlib.contextmanager
def bounded() -> Iterator[None]:
    """Run a case with a wall-clock alarm and a cap on extra address space (Linux; else no caps)."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        with open("/proc/self/statm") as f:
            used = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        cap = used + CASE_MEMORY
        if hard == resource.RLIM_INFINITY or cap < hard:
            resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    except (ImportError, OSError, ValueError):
        resource = None  # type: ignore[assignment]

    def alarm(*_: Any) -> None:
        raise CaseTimeout(f"case ran longer than {CASE_SECONDS} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(CASE_SECONDS)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        if resource is not None:
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-finite JSON constant {name}")


def strict_json(text: str) -> Any:
    """json.loads that refuses NaN/Infinity (what a strict consumer such as jq or JavaScript does)."""
    return json.loads(text, parse_constant=_reject_constant)


def tree(root: Path, skip: frozenset[Path] = frozenset()) -> dict[str, bytes | str]:
    """Every entry under root: file bytes, link target or '<dir>' (files in `skip` left out)."""
    out: dict[str, bytes | str] = {}
    if not root.exists():
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            if p in skip or any(str(p).startswith(str(s) + "-") for s in skip):  # sqlite -journal/-wal
                continue
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = "->" + os.readlink(p)
            elif p.is_dir():
                out[rel] = "<dir>"
            else:
                with contextlib.suppress(OSError):
                    out[rel] = p.read_bytes()
    return out


def store_rows(store: Path | None) -> list[tuple[str, str]]:
    """(fingerprint, record) of every stored run; [] without a readable store."""
    if store is None or not store.is_file():
        return []
    try:
        with contextlib.closing(sqlite3.connect(f"file:{store}?mode=ro", uri=True)) as c:
            return sorted(c.execute("SELECT fingerprint, record FROM runs").fetchall())
    except sqlite3.DatabaseError:
        return []


def _check_written(path: Path, fmt: str) -> None:
    """A JSON ('json') or JSON Lines ('jsonl') file the command wrote parses strictly."""
    if not path.is_file():
        return
    text = path.read_text(encoding="utf-8")
    for doc in [text] if fmt == "json" else [ln for ln in text.splitlines() if ln.strip()]:
        strict_json(doc)


@dataclass
class Case:
    """One command run in a scratch folder `base` (inputs and outputs live there)."""

    cls: str
    args: list[str]
    base: Path
    store: Path | None = None
    outs: dict[Path, str] = field(default_factory=dict)  # files it may write as 'json' or 'jsonl'


def check(case: Case) -> tuple[int, str, str]:
    """Run the case and assert the CLI contract (module docstring); return (code, stdout, stderr)."""
    CASES[case.cls] += 1
    skip = frozenset({case.store} if case.store else ())
    files_before, rows_before = tree(case.base, skip), store_rows(case.store)
    with bounded(), contextlib.chdir(case.base):  # relative outputs ('--out ""') land in the scratch folder
        code, out, err = run_cli(case.args)
    shown = f"args={case.args!r}\nstderr={err[-2000:]!r}"
    assert code in ALLOWED_CODES, shown
    assert_clean(code, out, err)
    for ch in TERMINAL_CONTROL:
        assert ch not in out and ch not in err, f"{ch!r} on the terminal\n{shown}\nstdout={out[-2000:]!r}"
    if "--json" in case.args and out.strip():
        strict_json(out)
    failed = code != 0 and not (code == 1 and out.strip())
    if failed:
        assert tree(case.base, skip) == files_before, f"a failed command changed files\n{shown}"
        assert store_rows(case.store) == rows_before, f"a failed command changed the store\n{shown}"
    else:
        for p, fmt in case.outs.items():
            _check_written(p, fmt)
    for _, record in store_rows(case.store):
        strict_json(record)  # no NaN/Infinity ever stored
    return code, out, err


@contextlib.contextmanager
def scratch() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="autopar-fuzzcli-"))
    try:
        yield d
    finally:
        for p in d.rglob("*"):  # a case may leave a read-only folder behind
            with contextlib.suppress(OSError):
                p.chmod(0o700)
        shutil.rmtree(d, ignore_errors=True)


# --- shared value strategies ----------------------------------------------------------------------
HOSTILE = [
    "[/]",
    "[bold red]x[/bold red]",
    "[link=http://example.com]x",
    "\x1b[31mred\x1b[0m",
    "\x1b]0;title\x07",
    "\x1b]8;;http://e\x1b\\x\x1b]8;;\x1b\\",
    "a\nb",
    "a\rb",
    "\x07",
    "\t",
    "\u202etxt",
    "\x9b31m",
    "",
    " ",
    "é",
    '=HYPERLINK("http://e")',
    "+1",
    "@SUM(1)",
    "%s%n{0}",
    "'\"\\",
    "NaN",
    "Infinity",
    "x" * 5000,
]
FS_HOSTILE = [h for h in HOSTILE if h and "/" not in h and h.strip(".") and len(h.encode()) < 200]
HUGE_INTS = [2**31, 2**63, 2**64 + 1, 10**30, -(2**63), 10**400]
NUMBERS = [math.nan, math.inf, -math.inf, 0, -1, -0.5, 1e-300, 1e308, 3.5, *HUGE_INTS]
INT_ARGS = ["-1", "0", "1", "2", "8", "3.5", "1e3", "nan", "", "x", str(2**31), str(2**63), str(2**64 + 1), "9" * 40]  # fmt: skip
BAD_VALUES = st.one_of(
    st.sampled_from(NUMBERS),
    st.sampled_from(HOSTILE),
    st.none(),
    st.booleans(),
    st.lists(st.integers(-3, 5), max_size=3),
    st.dictionaries(st.sampled_from(["a", "type", "factor"]), st.integers(-2, 9), max_size=2),
    st.integers(-(2**70), 2**70),
    st.floats(),
)
SEEDS = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(["0", "-1", str(2**32 - 1), str(2**32), str(2**63), "1.5", "nan", "x"]),
)
GPU_COUNTS = st.one_of(
    st.sampled_from(["8", "16", "8,16", "8..32", "8..64:8", "1..8", "0", "-8", "8..1", "8..8:0", "8..16:-8",
                     "8,,16", "..8", "1..100000000:1", f"8..{10**30}:{10**29}", "1..2**70", "NaN"]),
    st.builds(lambda lo, hi, step: f"{lo}..{hi}:{step}", st.integers(-4, 64), st.integers(-4, 10**24),
              st.integers(-4, 10**24)),
)  # fmt: skip
OUT_KINDS = ["fresh", "existing", "nested", "dir", "under_file", "hostile", "long", "trailing_slash",
             "symlink", "readonly", "devnull", "empty"]  # fmt: skip


@st.composite
def out_paths(draw: st.DrawFn, ext: str) -> tuple[str, str]:
    """(kind, name) of an --out target; `prepare_out` makes it real inside a scratch folder."""
    kind = draw(st.sampled_from(OUT_KINDS))
    return kind, (draw(st.sampled_from(FS_HOSTILE)) if kind == "hostile" else "out") + ext


def prepare_out(base: Path, spec: tuple[str, str]) -> str:
    """Create the situation an --out path of this kind points into; return the argument."""
    kind, name = spec
    if kind == "devnull":
        return os.devnull
    if kind == "empty":
        return ""
    if kind == "existing":
        (base / name).write_bytes(b"previous contents\n")
    if kind == "nested":
        return str(base / "a" / "b" / name)
    if kind == "dir":
        (base / "adir").mkdir()
        return str(base / "adir")
    if kind == "under_file":
        (base / "afile").write_text("x")
        return str(base / "afile" / name)
    if kind == "long":
        return str(base / ("x" * 300 + name))
    if kind == "trailing_slash":
        return str(base / "newdir") + "/"
    if kind == "symlink":
        (base / "target").write_bytes(b"target contents\n")
        (base / name).symlink_to(base / "target")
    if kind == "readonly":
        ro = base / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        return str(ro / name)
    return str(base / name)


def options(draw: st.DrawFn, table: dict[str, Any], max_size: int = 4) -> list[str]:
    """A random subset of `table`'s options (option -> strategy of its value) as arguments."""
    chosen = draw(st.lists(st.sampled_from(sorted(table)), unique=True, max_size=max_size))
    args: list[str] = []
    for opt in chosen:
        v = draw(table[opt])
        args += [opt] if v is None else [opt, v]
    return args


def pick(*values: str) -> st.SearchStrategy[str]:
    return st.sampled_from(list(values))


def ints(*good: str) -> st.SearchStrategy[str]:
    return st.sampled_from([*good, *INT_ARGS])


FLAG = st.none()  # a flag without a value


# --- class: Hugging Face config.json documents -----------------------------------------------------
HF_FILES = sorted((DATA / "hf").glob("*.json"))
HF_KEYS = ["hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
           "intermediate_size", "vocab_size", "model_type", "num_experts", "num_local_experts",
           "num_experts_per_tok", "moe_intermediate_size", "n_routed_experts", "first_k_dense_replace",
           "sliding_window", "layer_types", "rope_scaling", "rope_theta", "tie_word_embeddings",
           "text_config", "_name_or_path", "kv_lora_rank", "q_lora_rank", "hidden_act",
           "max_position_embeddings", "torch_dtype"]  # fmt: skip
DEEP = "@@DEEP@@"  # placeholder replaced by a deeply nested JSON text after json.dumps
MODEL_CMDS = {
    "estimate": ["estimate", "--gpus", "8", "--tp", "8", "--no-calibration"],
    "estimate-json": ["estimate", "--gpus", "8", "--tp", "8", "--no-calibration", "--json"],
    "launch": ["launch", "--gpus", "8", "--tp", "8", "--framework", "megatron", "--json"],
    "optimize": ["optimize", "--gpus", "8", "--budget", "2", "--global-batch", "16", "--no-calibration", "--json"],
}  # fmt: skip


@st.composite
def hf_documents(draw: st.DrawFn) -> tuple[str, str]:
    """(directory name, config.json text) of a damaged real config."""
    cfg = json.loads(draw(st.sampled_from(HF_FILES)).read_text())
    for key in draw(st.lists(st.sampled_from(sorted(cfg)), max_size=3)):
        cfg.pop(key, None)
    cfg.update(draw(st.dictionaries(st.sampled_from(HF_KEYS), BAD_VALUES, max_size=4)))
    if draw(st.booleans()):
        cfg["_name_or_path"] = "org/" + draw(st.sampled_from(HOSTILE))
    if draw(st.integers(0, 5)) == 0:
        cfg[draw(st.sampled_from(["text_config", "rope_scaling", "hidden_size"]))] = DEEP
    text = json.dumps(cfg, allow_nan=True, default=str)  # NaN/Infinity tokens, as Python writes them
    depth = draw(st.sampled_from([50, 1000, 100_000]))
    text = text.replace(json.dumps(DEEP), "[" * depth + "]" * depth)
    return draw(st.sampled_from(FS_HOSTILE + ["model"])), text


@fuzz(60)
@given(doc=hf_documents(), cmd=st.sampled_from(sorted(MODEL_CMDS)))
def test_fuzz_hf_config(doc, cmd):
    dirname, text = doc
    with scratch() as base:
        (base / dirname).mkdir()
        (base / dirname / "config.json").write_text(text)
        check(Case("hf_config", [*MODEL_CMDS[cmd], "--model", str(base / dirname)], base))


# --- class: ModelSpec YAML/JSON files ------------------------------------------------------------
SPEC = get_model("Llama-3.1-8B").model_dump(mode="json")
SPEC_MOE = get_model("Mixtral-8x7B").model_dump(mode="json")


def alias_bomb(width: int, depth: int) -> str:
    """YAML whose aliases expand to width**depth scalars (a 'billion laughs' kept small)."""
    lines = ["l0: &l0 [" + ", ".join(["lol"] * width) + "]"]
    for i in range(1, depth + 1):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


@st.composite
def spec_documents(draw: st.DrawFn) -> tuple[str, str]:
    """(file name, text) of a ModelSpec mapping with damaged fields, sometimes an alias bomb."""
    spec = dict(draw(st.sampled_from([SPEC, SPEC_MOE])))
    for key in draw(st.lists(st.sampled_from(sorted(spec)), max_size=3)):
        spec.pop(key, None)
    spec.update(draw(st.dictionaries(st.sampled_from(sorted(SPEC)), BAD_VALUES, max_size=3)))
    if draw(st.booleans()):
        spec["name"] = draw(st.sampled_from(HOSTILE))
    ext = draw(pick(".yaml", ".yml", ".json"))
    if ext == ".json":
        return "spec.json", json.dumps(spec, allow_nan=True, default=str)
    text = yaml.safe_dump(spec, allow_unicode=True, default_flow_style=False)
    if draw(st.integers(0, 3)) == 0:  # 5**7 = 78125 leaves, shared by aliases
        width, depth = draw(st.sampled_from([(5, 7), (9, 5), (2, 16)]))
        target = draw(pick("aliases", "name", "layers", "notes", "extra"))
        text = (
            alias_bomb(width, depth)
            + "\n".join(ln for ln in text.splitlines() if not ln.startswith(target + ":"))
            + f"\n{target}: *l{depth}\n"
        )
    return draw(st.sampled_from(FS_HOSTILE + ["spec"])) + ext, text


@fuzz(50)
@given(doc=spec_documents(), cmd=st.sampled_from(sorted(MODEL_CMDS)))
def test_fuzz_model_spec_file(doc, cmd):
    name, text = doc
    with scratch() as base:
        (base / name).write_text(text)
        check(Case("model_spec_file", [*MODEL_CMDS[cmd], "--model", str(base / name)], base))


# --- class: price files -----------------------------------------------------------------------------
GPU_NAMES = ["H100-SXM", "H200", "B200", "A100-80GB", "MI300X", "GB200"]
TIERS = ["on_demand", "reserved", "spot", "owned"]
PRICE_VALUES = st.one_of(
    st.sampled_from(NUMBERS),
    st.sampled_from(HOSTILE),
    st.floats(-10, 100),
    st.builds(
        lambda v, src, date: {"usd_per_gpu_hour": v, "source": src, "date": date},
        st.one_of(st.sampled_from(NUMBERS), st.floats(0.1, 10)),
        st.sampled_from(HOSTILE),
        st.sampled_from(["2026-01", "2026-13", "", "\x1b[2J", 20260101, None]),
    ),
)
PRICE_CMDS = {
    "prices": ["prices"],
    "prices-json": ["prices", "--json", "--quotes"],
    "whatif": ["whatif", "-m", "Llama-3.1-8B", "-o", "H100-SXM:8", "-o", "H200:8", "-t", "1T", "--budget",
               "2", "--global-batch", "16", "--no-calibration", "--no-sensitivity", "--json"],
    "optimize": ["optimize", "--model", "Llama-3.1-8B", "--gpus", "8", "--budget", "2", "--global-batch",
                 "16", "--no-calibration", "--objectives", "throughput,cost", "--json"],
}  # fmt: skip


@st.composite
def price_documents(draw: st.DrawFn) -> tuple[str, str]:
    """(file name, text) of a YAML or CSV price file with hostile names and values."""
    gpus = st.one_of(st.sampled_from(GPU_NAMES), st.sampled_from(HOSTILE))
    tiers = st.one_of(st.sampled_from(TIERS), st.sampled_from(HOSTILE))
    if draw(st.booleans()):
        book = draw(st.dictionaries(gpus, st.dictionaries(tiers, PRICE_VALUES, max_size=3), max_size=4))
        return "prices.yaml", yaml.safe_dump({"prices": book}, allow_unicode=True)
    header = ["gpu", "tier", "usd_per_gpu_hour", "source"]
    header += [f"extra{i}" for i in range(draw(st.sampled_from([0, 0, 3, 2000])))]
    header = draw(st.permutations(header)) if draw(st.booleans()) else header
    cell = st.one_of(gpus, tiers, st.sampled_from(NUMBERS).map(str), st.sampled_from(HOSTILE))
    rows = draw(st.lists(st.lists(cell, min_size=len(header), max_size=len(header)), max_size=4))
    buf = io.StringIO()
    csv.writer(buf).writerows([header, *rows])
    return "prices.csv", buf.getvalue()


@fuzz(60)
@given(doc=price_documents(), cmd=st.sampled_from(sorted(PRICE_CMDS)))
def test_fuzz_price_file(doc, cmd):
    name, text = doc
    with scratch() as base:
        (base / name).write_text(text)
        check(Case("price_file", [*PRICE_CMDS[cmd], "--prices", str(base / name)], base))


# --- class: run-record files (calibrate ingest, estimate --batch, calibrate fit --data) -----------
SAMPLE_ROWS = list(csv.DictReader(io.StringIO("".join(PUBLIC.read_text().splitlines(keepends=True)[:5]))))
RECORD_COLUMNS = list(SAMPLE_ROWS[0])
RECORD_VALUES = st.one_of(
    st.sampled_from(NUMBERS),
    st.sampled_from(HOSTILE),
    st.sampled_from(["", "0", "-5", "1e309", "nan", "inf", "5.0", "1000000", "true", "[1]"]),
)


def _template_store(rows: list[dict[str, Any]]) -> Path:
    """A run store holding `rows` (written directly, as an older tool might have), reused per case."""
    path = Path(tempfile.mkdtemp(prefix="autopar-fuzzcli-store-")) / "runs.db"
    atexit.register(shutil.rmtree, path.parent, True)
    RunStore(path).add([(f"fp{i}", r, "seed.csv") for i, r in enumerate(rows)])
    return path


VALID_STORE = _template_store(SAMPLE_ROWS[:2])
HOSTILE_STORE = _template_store(
    [{**SAMPLE_ROWS[0], "id": h, "model": h, "source": h, "notes": h} for h in HOSTILE[:10]]
)


@st.composite
def record_documents(draw: st.DrawFn) -> tuple[str, bytes]:
    """(file name, bytes) of run records with damaged cells, dropped or thousands of extra columns."""
    rows = [dict(r) for r in SAMPLE_ROWS[: draw(st.integers(1, 4))]]
    for _ in range(draw(st.integers(0, 4))):
        rows[draw(st.integers(0, len(rows) - 1))][draw(st.sampled_from(RECORD_COLUMNS))] = draw(RECORD_VALUES)
    for col in draw(st.lists(st.sampled_from(RECORD_COLUMNS), max_size=2)):
        for r in rows:
            r.pop(col, None)
    extra = draw(st.sampled_from([0, 0, 0, 5, 3000]))
    for r in rows:
        r.update({f"x{i}": i for i in range(extra)})
    fmt = draw(pick("csv", "jsonl", "parquet"))
    if fmt == "jsonl":
        return "runs.jsonl", "".join(json.dumps(r, allow_nan=True, default=str) + "\n" for r in rows).encode()
    import pandas as pd

    df = pd.DataFrame(rows)
    if fmt == "csv":
        return "runs.csv", df.to_csv(index=False).encode()
    buf = io.BytesIO()
    try:
        df.to_parquet(buf)
    except Exception:  # noqa: BLE001 - pyarrow cannot store a mixed column: store it as text
        df.astype(str).to_parquet(buf)
    return "runs.parquet", buf.getvalue()


@fuzz(60)
@given(
    doc=record_documents(),
    store=pick("valid", "hostile", "absent"),
    cmd=pick("ingest", "ingest-skip", "ingest-json", "batch", "batch-out"),
    out_ext=pick(".csv", ".jsonl", ".parquet", ".txt"),
)
def test_fuzz_run_records(doc, store, cmd, out_ext):
    name, data = doc
    with scratch() as base:
        (base / name).write_bytes(data)
        db = base / "runs.db"
        if store != "absent":
            shutil.copy(VALID_STORE if store == "valid" else HOSTILE_STORE, db)
        args = ["calibrate", "ingest", str(base / name), "--store", str(db)]
        args += {"ingest-skip": ["--skip-invalid"], "ingest-json": ["--json"]}.get(cmd, [])
        outs = {}
        if cmd.startswith("batch"):
            args = ["estimate", "--batch", str(base / name), "--no-calibration"]
            if cmd == "batch-out":
                outs = {base / ("pred" + out_ext): "jsonl"} if out_ext == ".jsonl" else {}
                args += ["--out", str(base / ("pred" + out_ext))]
        check(Case("run_records", args, base, store=db, outs=outs))


# --- class: Megatron / torchtitan training logs ----------------------------------------------------
LOG_NUMBERS = st.one_of(
    st.sampled_from(["nan", "inf", "-inf", "-1", "0", "1e309", "1e-300", "99999999999999999999999", "x", ""]),
    st.floats(0.1, 1e5).map(lambda v: f"{v:.1f}"),
)
MEG_LINE = (" [2025-03-02 10:16:59] iteration {step:>8}/     130 | consumed samples: 1280 | elapsed time per "
            "iteration (ms): {ms} | throughput per GPU (TFLOP/s/GPU): {tf} | global batch size: {gb} | "
            "lm loss: 1.05E+01 |")  # fmt: skip
TT_LINE = ("[rank0]:[titan] 2025-01-20 10:02:00,101 - root - INFO - \x1b[31mstep: {step}  \x1b[32mloss: 11.75"
           "  \x1b[38;2;54;234;195mmemory: {mem}GiB(81.00%)  \x1b[34mtps: {tps}  \x1b[36mtflops: {tf}  "
           "\x1b[35mmfu: {mfu}%\x1b[39m")  # fmt: skip
LOG_FLAGS = ["--gpu", "H100-SXM", "--gpus", "8", "--tp", "2", "--pp", "1", "--dp", "4", "--micro-batch", "1",
             "--global-batch", "128", "--seq-len", "8192", "--precision", "bf16"]  # fmt: skip


@st.composite
def log_documents(draw: st.DrawFn) -> tuple[str, str, str, list[str]]:
    """(file name, log text, sidecar YAML, extra flags) of a generated training log."""
    kind = draw(pick("megatron", "torchtitan"))
    lines = []
    for i in range(draw(st.integers(0, 12))):
        step = draw(st.one_of(st.just(str(10 * (i + 1))), LOG_NUMBERS))
        n = LOG_NUMBERS
        if kind == "megatron":
            lines.append(MEG_LINE.format(step=step, ms=draw(n), tf=draw(n), gb=draw(n)))
        else:
            lines.append(TT_LINE.format(step=step, mem=draw(n), tps=draw(n), tf=draw(n), mfu=draw(n)))
    for _ in range(draw(st.integers(0, 2))):
        lines.insert(
            draw(st.integers(0, len(lines))), draw(st.sampled_from(HOSTILE + ["\x00\xff", "y" * 10**5]))
        )
    side_src = (
        DATA / "logs" / ("megatron_gpt_tp2.yaml" if kind == "megatron" else "torchtitan_llama3_8b.yaml")
    )
    side = yaml.safe_load(side_src.read_text())
    side.update(draw(st.dictionaries(st.sampled_from(sorted(side)), BAD_VALUES, max_size=2)))
    flags = LOG_FLAGS if kind == "megatron" else []
    if draw(st.booleans()):
        flags = [*flags, draw(pick("--warmup", "--gpus", "--tp", "--zero")), draw(st.sampled_from(INT_ARGS))]
    name = draw(st.sampled_from(FS_HOSTILE + ["train"])) + ".log"
    return name, "\n".join(lines) + "\n", yaml.safe_dump(side, allow_unicode=True), flags


@fuzz(50)
@given(doc=log_documents(), fmt=pick("auto", "megatron-log", "torchtitan-log"), json_out=st.booleans())
def test_fuzz_training_logs(doc, fmt, json_out):
    name, text, sidecar, flags = doc
    with scratch() as base:
        (base / name).write_text(text, errors="surrogateescape")
        (base / "side.yaml").write_text(sidecar)
        shutil.copy(VALID_STORE, base / "runs.db")
        args = ["calibrate", "ingest", str(base / name), "--store", str(base / "runs.db"), "--format", fmt]
        args += ["--sidecar", str(base / "side.yaml"), *flags] + (["--json"] if json_out else [])
        check(Case("training_logs", args, base, store=base / "runs.db"))


# --- class: calibration model files ---------------------------------------------------------------
MODEL_DOC = json.loads(DEFAULT_MODEL_DOC.read_text())


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path in a JSON document (list items by index, first 3 of each list)."""
    out = [prefix] if prefix else []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:3]):
            out += _paths(v, (*prefix, i))
    return out


MODEL_PATHS = _paths(MODEL_DOC)


def _set(doc: Any, path: tuple[Any, ...], value: Any, delete: bool) -> None:
    for k in path[:-1]:
        doc = doc[k]
    if delete and isinstance(doc, dict):
        doc.pop(path[-1], None)
    elif isinstance(doc, dict) or (isinstance(doc, list) and path[-1] < len(doc)):
        doc[path[-1]] = value


@st.composite
def model_documents(draw: st.DrawFn) -> str:
    """Text of a calibration model with values replaced (NaN, huge, wrong types) or keys removed."""
    doc = json.loads(json.dumps(MODEL_DOC))
    for _ in range(draw(st.integers(1, 4))):
        path = draw(st.sampled_from(MODEL_PATHS))
        _set(doc, path, draw(BAD_VALUES), delete=draw(st.integers(0, 4)) == 0)
    if draw(st.integers(0, 6)) == 0:
        doc["throughput"]["coef"] = [1.0] * draw(st.sampled_from([0, 1, 100_000]))
    return json.dumps(doc, allow_nan=True, default=str)


CALIB_CMDS = {
    "estimate": ["estimate", "--model", "Llama-3.1-8B", "--gpus", "8", "--tp", "8", "--json"],
    "optimize": ["optimize", "--model", "Llama-3.1-8B", "--gpus", "8", "--budget", "2", "--global-batch",
                 "16", "--json"],
    "whatif": ["whatif", "-m", "Llama-3.1-8B", "-o", "H100-SXM:8", "-t", "1T", "--budget", "2",
               "--global-batch", "16", "--no-sensitivity", "--json"],
}  # fmt: skip


@fuzz(50)
@given(text=model_documents(), cmd=st.sampled_from(sorted(CALIB_CMDS)))
def test_fuzz_calibration_model(text, cmd):
    with scratch() as base:
        (base / "model.json").write_text(text)
        check(Case("calibration_model", [*CALIB_CMDS[cmd], "--calibration", str(base / "model.json")], base))


# --- classes: argument combinations per command ---------------------------------------------------
COMMON = {
    "--seq-len": ints("4096", "8192", "128"),
    "--global-batch": ints("16", "64"),
    "--precision": pick("bf16", "fp8", "bf16,fp8", "fp4", "", "bf16,", "BF16"),
    "--framework": pick("megatron", "torchtitan", "fsdp", "deepspeed", "megatron-legacy", "jax", "", "[/]"),
    "--gpus-per-node": ints("8", "4"),
    "--nvlink-domain": ints("8", "72"),
    "--internode-gbps": pick("50", "0", "-1", "nan", "inf", "1e309", "x"),
    "--cluster": pick("dgx-h100:4", "gb200-nvl72:1", "dgx-h100:0", "dgx-h100:-1", "nope:4", "dgx-h100:99999999999",
                      "dgx-h100", ":", "[/]:1"),
    "--seed": SEEDS,
    "--tp-comm-overlap": FLAG,
}  # fmt: skip
OPTIMIZE_OPTS = {
    **COMMON,
    "--gpus": GPU_COUNTS,
    "--gpu": pick("H100-SXM", "H100-SXM,H200", "H100", "nope", "H100-SXM,", "", "\x1b[31m"),
    "--objectives": pick(
        "throughput,cost", "mfu,step_time", "throughput", "a,b,c", "throughput,throughput", ""
    ),
    "--min-headroom": pick("4GiB", "0", "-3GiB", "NaN GiB", "1e309GiB", "80GiB", "x"),
    "--max-cost": pick("1", "0", "-1", "nan", "inf"),
    "--tokens": pick("1T", "0", "-1T", "1e400", "NaN", "x", "1e-30"),
    "--timeout": pick("5", "0", "-1", "nan", "inf", "1e309"),
    "--sampler": pick("nsga2", "exhaustive", "random", ""),
    "--top": ints("3"),
    "--budget": pick("1", "2", "3", "0", "-1", "x", "2.5"),
    "--memory-savers": pick("offload", "act_offload,bf16_states", "", "nope", ","),
    "--moe-imbalance": pick("1", "0.5", "nan", "inf", "1e309"),
    "--fp8-recipe": pick("delayed", "mxfp8", "x"),
    "--workers": pick("1", "0", "-1", "x"),
    "--heartbeat": pick("60", "0", "-1", str(2**63)),
    "--cuda-graphs": FLAG,
    "--plotly": pick("inline", "cdn", "x"),
}


@fuzz(60)
@given(data=st.data(), out=out_paths(".html"), with_out=st.booleans(), storage=st.integers(0, 4))
def test_fuzz_optimize_args(data, out, with_out, storage):
    with scratch() as base:
        args = ["optimize", "--model", "Llama-3.1-8B", "--gpus", "8", "--budget", "2", "--global-batch", "16"]
        args += ["--no-calibration", *options(data.draw, OPTIMIZE_OPTS)]
        args += data.draw(st.sampled_from([["--json"], []]))
        if with_out:
            args += ["--out", prepare_out(base, out)]
        if storage == 0:  # a journal file to keep the study in (resumable)
            args += [
                "--storage",
                str(base / "study.log"),
                "--study-name",
                data.draw(st.sampled_from(HOSTILE)),
            ]
        check(Case("optimize_args", args, base))


WHATIF_OPTS = {
    **COMMON,
    "-o": pick("H100-SXM:8", "H100-SXM:8..64", "H100-SXM:1..1000000000000", "H100-SXM:8,16", "H100-SXM",
               "H100-SXM:0", "nope:8", ":8", f"H100-SXM:8..16:{10**30}", "[/]:8", "\x1b[2J:8"),
    "--tokens": pick("1T", "500B", "0", "-1T", "1e400", "NaN", "inf", "1e-30", "10K"),
    "--deadline": pick("30d", "720h", "0d", "-1d", "nanh", "1e400d", "x"),
    "--max-spend": pick("2M", "0", "-5", "nan", "1e400", "x"),
    "--goodput": pick("1", "0.5", "0", "-1", "nan", "inf", "2"),
    "--budget": pick("1", "2", "0", "-1"),
    "--tier": pick("on_demand", "spot", "owned", "nope", "", "[/]"),
    "--min-headroom": pick("4GiB", "-3GiB", "NaN GiB", "x"),
    "--plotly": pick("inline", "cdn", "x"),
}  # fmt: skip


@fuzz(50)
@given(data=st.data(), out=out_paths(".html"), with_out=st.booleans())
def test_fuzz_whatif_args(data, out, with_out):
    with scratch() as base:
        args = ["whatif", "-m", "Llama-3.1-8B", "-o", "H100-SXM:8", "-t", "1T", "--budget", "2"]
        args += ["--global-batch", "16", "--no-calibration", "--no-sensitivity"]
        args += [*options(data.draw, WHATIF_OPTS), *data.draw(st.sampled_from([["--json"], []]))]
        if with_out:
            args += ["--out", prepare_out(base, out)]
        check(Case("whatif_args", args, base))


ESTIMATE_OPTS = {
    **{k: v for k, v in COMMON.items() if k != "--seed"},
    "--gpu": pick("H100-SXM", "B200", "nope", "", "[/]"),
    "--gpus": ints("8", "16", "64"),
    **{f"--{k}": ints("1", "2", "4", "8") for k in ("tp", "pp", "cp", "ep", "etp", "vpp", "micro-batch")},
    "--zero": ints("0", "1", "3", "4"),
    "--recompute": pick("none", "selective", "full", "x", ""),
    "--pp-schedule": pick("1f1b", "interleaved", "zb-h1", "dualpipe", "x"),
    "--activation-offload-layers": ints("2"),
    "--sp": FLAG,
    "--no-sp": FLAG,
    "--allow-uneven": FLAG,
    "--model": pick("Llama-3.1-8B", "Mixtral-8x7B", "DeepSeek-V3", "nope", "", "[/]", "x.json"),
}


@fuzz(60)
@given(data=st.data(), out=out_paths(".csv"), batch=st.integers(0, 3), out_ext=pick(".csv", ".jsonl", ".parquet", ".xlsx", ""))  # fmt: skip
def test_fuzz_estimate_args(data, out, batch, out_ext):
    with scratch() as base:
        args = [
            "estimate",
            "--gpus",
            "8",
            "--tp",
            "8",
            "--no-calibration",
            *options(data.draw, ESTIMATE_OPTS),
        ]
        args += data.draw(st.sampled_from([["--json"], []]))
        outs = {}
        if batch == 0:
            (base / "runs.csv").write_text("".join(PUBLIC.read_text().splitlines(keepends=True)[:4]))
            kind, name = out
            target = prepare_out(base, (kind, name.removesuffix(".csv") + out_ext))
            args += ["--batch", str(base / "runs.csv"), "--out", target]
            outs = {Path(target): "jsonl"} if out_ext == ".jsonl" and target else {}
        check(Case("estimate_args", args, base, outs=outs))


FIX_OPTS = {
    **{k: v for k, v in COMMON.items() if k != "--seed"},
    "--gpu": pick("H100-SXM", "A100-SXM-80GB", "nope", "", "[/]"),
    "--gpus": ints("8", "16", "4"),
    "--strategy": pick("TP2 DP4/Z1 mb1", "TP1 CP8-a2a DP1 mb1", "TP3 mb1", "TP2 PP2v9 DP2 mb1", "TP8 EP8 mb1",
                       "", "[/]", "\x1b[31m", "TP99999999999999999999 mb1", "TP0 mb1"),
    "--goal": pick("fit", "faster", "gpus", "x", "", "[/]"),
    "--max-changes": ints("0", "2"),
    "--min-headroom": pick("4GiB", "-3GiB", "NaN GiB", "1e309GiB", "80GiB", "x"),
    "--allow": pick("precision", "precision,precision", "x", "", ",", "\x1b[2J"),
    "--memory-savers": pick("offload", "act_offload,bf16_states", "", "nope"),
    "--fix": pick("tp=8", "tp=3", "x=1", "tp", ""),
    "--forbid": pick("cp", "cp_comm=allgather", "x", ""),
    "--top": ints("2"),
    "--allow-uneven": FLAG,
    "--model": pick("Llama-3.1-8B", "Mixtral-8x7B", "nope", "[/]"),
}  # fmt: skip


@fuzz(40)
@given(data=st.data())
def test_fuzz_fix_args(data):
    with scratch() as base:
        args = ["fix", "--model", "Llama-3.1-8B", "--strategy", "TP8+SP DP1/Z1 mb1", "--global-batch", "16"]
        args += [
            "--no-calibration",
            *options(data.draw, FIX_OPTS),
            *data.draw(st.sampled_from([["--json"], []])),
        ]
        check(Case("fix_args", args, base))


LAUNCH_OPTS = {
    **{f"--{k}": ints("1", "2", "4", "8") for k in ("tp", "pp", "dp", "cp", "ep", "etp", "vpp", "micro-batch")},
    "--gpus": ints("8", "64"),
    "--seq-len": ints("4096"),
    "--global-batch": ints("16", "512"),
    "--zero": ints("0", "1", "3"),
    "--recompute": pick("none", "selective", "full", "x"),
    "--schedule": pick("1f1b", "interleaved", "x"),
    "--precision": pick("bf16", "fp8", "fp4"),
    "--tokens": pick("1T", "0", "-1T", "1e400", "NaN"),
    "--gpus-per-node": ints("8"),
    "--framework": pick("megatron", "torchtitan", "deepspeed", "slurm", "all", "x", ""),
    "--framework-version": pick("torchtitan=v0.2.2", "megatron=core_r0.12.0", "v0.0.1", "x=y", "=", "[/]=1",
                                "megatron=$(reboot)", "torchtitan=\nv1"),
    "--strategy": st.one_of(pick("TP4+SP PP2v2 DP8/Z1 mb1 sel-AC", "TP8 DP8/Z1 mb1", "TP0", "", "[/]", "TP4+SP PP2v2",
                                 f"TP{2**70} DP1", "\x1b[31m"), st.text(max_size=12)),
    "--model": pick("Llama-3.1-70B", "Llama-3.1-8B", "Mixtral-8x7B", "nope", "[/]"),
    "--gpu": pick("H100-SXM", "B200", "nope", "\x1b[31m"),
    "--sp": FLAG,
    "--allow-uneven": FLAG,
    "--tp-comm-overlap": FLAG,
}  # fmt: skip


@fuzz(60)
@given(data=st.data(), out=out_paths(""), with_out=st.booleans())
def test_fuzz_launch_args(data, out, with_out):
    with scratch() as base:
        args = [
            "launch",
            *options(data.draw, LAUNCH_OPTS, max_size=5),
            *data.draw(st.sampled_from([["--json"], []])),
        ]
        if with_out:
            args += ["--out", prepare_out(base, out)]
        check(Case("launch_args", args, base))


STORES = ["valid", "hostile", "absent", "corrupt", "empty", "directory"]


def prepare_store(base: Path, kind: str) -> Path:
    db = base / "runs.db"
    if kind in ("valid", "hostile"):
        shutil.copy(VALID_STORE if kind == "valid" else HOSTILE_STORE, db)
    elif kind == "corrupt":
        db.write_bytes(b"SQLite format 3\x00" + b"\xff" * 600)
    elif kind == "empty":
        db.write_bytes(b"")
    elif kind == "directory":
        db.mkdir()
    return db


@fuzz(50)
@given(
    sub=pick("list", "export", "fit", "report"),
    store=st.sampled_from(STORES),
    out=out_paths(".json"),
    data_file=st.one_of(st.none(), record_documents()),
    extra=st.lists(st.sampled_from([["--json"], ["--format", "jsonl"], ["--format", "x"], ["--group", "[/]\x1b"],
                                    ["--plotlyjs", "x"], ["--public"]]), max_size=2),
)  # fmt: skip
def test_fuzz_calibrate_args(sub, store, out, data_file, extra):
    with scratch() as base:
        db = prepare_store(base, store)
        args = ["calibrate", sub, "--store", str(db)]
        outs = {}
        if sub != "list" and out[0] != "devnull":
            target = prepare_out(base, out)
            args += ["--out", target]
            jsonl = sub == "export" and ["--format", "jsonl"] in extra
            kind = "json" if sub == "fit" else "jsonl" if jsonl else ""
            outs = {Path(target): kind} if target and kind else {}
        if sub in ("fit", "report"):
            args += ["--no-public"]  # the published runs make a fit take seconds: the store and --data only
            if data_file is not None:
                (base / data_file[0]).write_bytes(data_file[1])
                args += ["--data", str(base / data_file[0])]
        for e in extra:
            if e != ["--public"]:
                args += e
        check(Case("calibrate_args", args, base, store=db if db.is_file() else None, outs=outs))


def _template_study() -> Path:
    """A journal storage holding study 's' (a 2-trial optimize run), copied per case."""
    path = Path(tempfile.mkdtemp(prefix="autopar-fuzzcli-study-")) / "study.log"
    atexit.register(shutil.rmtree, path.parent, True)
    args = ["optimize", "--model", "Llama-3.1-8B", "--gpus", "8", "--budget", "2", "--global-batch", "16"]
    code, _, err = run_cli([*args, "--no-calibration", "--storage", str(path), "--study-name", "s", "--json"])
    assert code == 0, err
    return path


@pytest.fixture(scope="module")
def study_template() -> Path:
    return _template_study()


@fuzz(40)
@given(
    sub=pick("status", "report"),
    name=st.one_of(pick("s", "nope", ""), st.sampled_from(HOSTILE)),
    storage=pick("journal", "missing", "garbage", "sqlite-missing", "hostile"),
    out=out_paths(".html"),
    with_out=st.booleans(),
    extra=st.lists(st.sampled_from([["--json"], ["--top", "0"], ["--top", "-1"], ["--top", str(2**63)],
                                    ["--calibration", "/nonexistent.json"]]), max_size=2),
)  # fmt: skip
def test_fuzz_study_args(study_template, sub, name, storage, out, with_out, extra):
    with scratch() as base:
        journal = base / "study.log"
        if storage == "journal":
            shutil.copy(study_template, journal)
        elif storage == "garbage":
            journal.write_bytes(b'{"op_code": 999}\n\x00\xff[/]\x1b[2J\n')
        where = {"sqlite-missing": f"sqlite:///{base}/x.db", "hostile": str(base / "[/]\x1b.log")}
        args = ["study", sub, "--storage", where.get(storage, str(journal)), "--study-name", name]
        if sub == "report":
            args += ["--no-calibration"] + (["--out", prepare_out(base, out)] if with_out else [])
        for e in extra:
            if sub == "report" or e == ["--json"]:
                args += e
        check(Case("study_args", args, base))


CATALOG_QUERIES = st.one_of(st.sampled_from(HOSTILE), st.sampled_from(["llama", "H100", "", "*", ".*", "(", "\\"]),
                            st.text(max_size=10))  # fmt: skip


@fuzz(60)
@given(
    cmd=pick("models", "gpus", "clusters", "version", "prices"),
    query=CATALOG_QUERIES,
    json_out=st.booleans(),
    price_filter=pick("--gpu", "--tier"),
)
def test_fuzz_catalog_args(cmd, query, json_out, price_filter):
    args = [cmd]
    if cmd in ("models", "gpus"):
        args += ["--", query] if query.startswith("-") else [query]
    elif cmd == "prices":
        args += [price_filter, query, "--quotes"]
    with scratch() as base:
        check(Case("catalog_args", [*args[:1], *(["--json"] if json_out else []), *args[1:]], base))
