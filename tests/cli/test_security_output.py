"""Text from inputs never reaches a terminal, a markup renderer, a spreadsheet or a JSON parser unquoted.

Hostile strings (rich markup fragments, ESC/OSC sequences, bidi overrides, newlines, formula prefixes)
go in as a model name, a GPU name, an --out path, calibration run ids and sources, study names and price
sources. Every command must then exit 0, 1 or 2 without a traceback, print no ESC or BEL (so nothing moves
the cursor, sets the title or hides a hyperlink), show the string literally (control characters as
visible escapes, as `autopar.text.one_line` writes them) where it shows it, write JSON that a strict
parser accepts, and write formula-looking CSV text cells behind a leading `'`.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.table import Table
from typer.testing import CliRunner

from autopar.catalog import get_model
from autopar.cli import app
from autopar.cli.app import _SafeConsole, emit_json, styled
from autopar.text import FORMULA_PREFIXES, csv_cell, json_text, one_line, unsafe_chars

runner = CliRunner()

# Fragments a hostile name is built from: rich markup (closing, unbalanced, hyperlink), terminal
# escapes (clear screen, OSC window title, OSC 8 hyperlink), a bidi override, a newline, formula starts.
FRAGMENTS = [
    "[/]",
    "[link=http://x]y[/link]",
    "[bold",
    "[red]",
    "]",
    "[",
    "\\",
    ":smile:",
    "\x1b[2J",
    "\x1b]0;t\x07",
    "\x1b]8;;http://e\x1b\\",
    "\u202e",
    "\n",
    "=",
    "@",
    "-",
]
hostile = st.lists(
    st.sampled_from(FRAGMENTS) | st.text(alphabet="ab =+", min_size=1, max_size=2), min_size=1, max_size=3
).map("".join)
trimmed_hostile = hostile.filter(lambda s: s.strip() == s != "")  # ids: ingest trims and fills blanks
CLI = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
SGR = re.compile(r"\x1b\[[0-9;]*m")  # colour/bold codes: the only escapes autopar's own styling writes


def _strict(text: str) -> Any:
    """json.loads that refuses NaN/Infinity (not JSON)."""

    def refuse(name: str) -> None:
        raise ValueError(f"non-JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


def _clean(res: Any, codes: tuple[int, ...] = (0, 1, 2)) -> Any:
    """The run exited with one of `codes`, without a traceback, and wrote no ESC or BEL."""
    out = res.stdout + res.stderr
    assert res.exit_code in codes, out
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert "Traceback" not in out
    assert "\x1b" not in out and "\x07" not in out, repr(out)
    if res.exit_code == 2:  # a refusal is one line on stderr
        assert res.stderr.count("\n") == 1 and res.stderr.startswith("error: "), res.stderr
    return res


@contextmanager
def _cwd() -> Iterator[Path]:
    """A fresh folder as the working directory (short relative paths: no wrapped lines)."""
    old = os.getcwd()
    with tempfile.TemporaryDirectory() as d:
        os.chdir(d)
        try:
            yield Path(d)
        finally:
            os.chdir(old)


# ---------------------------------------------------------------------------------- the mechanism


@given(hostile)
@settings(max_examples=200)
def test_styled_parts_are_text_never_markup(data: str) -> None:
    t = styled((data, "bold"), f" on {data}")
    assert t.plain == f"{one_line(data)} on {one_line(data)}"
    assert [(s.start, s.end, str(s.style)) for s in t.spans] == [(0, len(one_line(data)), "bold")]


@given(hostile)
@settings(max_examples=200)
def test_console_shows_plain_strings_as_one_line_of_text(data: str) -> None:
    """On a colour terminal too: table cells, titles and messages are text; only SGR codes are written."""
    buf = io.StringIO()
    c = _SafeConsole(file=buf, width=400, force_terminal=True, color_system="truecolor")
    t = Table("name", title=data)
    t.add_row(data)
    c.print(t)
    c.print(data, style="dim")
    shown = SGR.sub("", buf.getvalue())
    assert "\x1b" not in shown and "\x07" not in shown
    assert shown.count(one_line(data)) >= 3


@given(st.text(max_size=12))
@settings(max_examples=300)
def test_csv_cell_quotes_formulas_and_keeps_numbers(text: str) -> None:
    cell = csv_cell(text)
    numeric = re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", text) is not None
    quoted = text.startswith(FORMULA_PREFIXES) and not numeric
    assert cell == ("'" if quoted else "") + one_line(text)
    assert not str(cell).startswith(("=", "+", "-", "@")) or numeric


@pytest.mark.parametrize("value", [-1.5, -3, 0.0, "-1.5", "-2e3", "+4", True, None])
def test_csv_cell_leaves_numbers_alone(value: object) -> None:
    assert csv_cell(value) == value


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=10,
)


@given(json_values)
def test_json_text_is_strict_json_with_non_finite_as_null(doc: Any) -> None:
    back = _strict(json_text(doc))

    def same(a: Any, b: Any) -> bool:
        if isinstance(a, float) and not math.isfinite(a):
            return b is None
        if isinstance(a, dict):
            return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        if isinstance(a, list):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
        return a == b

    assert same(doc, back)


def test_emit_json_writes_null_for_infinity(capsys: pytest.CaptureFixture[str]) -> None:
    emit_json({"headroom": float("-inf"), "mfu": float("nan"), "n": [1.5, float("inf")]})
    assert _strict(capsys.readouterr().out) == {"headroom": None, "mfu": None, "n": [1.5, None]}


# ------------------------------------------------------------------------------- model and GPU names


def _model_file(folder: Path, name: str) -> Path:
    fields = get_model("llama-3.1-8b").model_dump(exclude_defaults=True)
    path = folder / "model.json"
    path.write_text(json.dumps({**fields, "name": name}))
    return path


@given(hostile)
@CLI
def test_model_name_is_refused_or_shown_literally(name: str) -> None:
    with _cwd() as d:
        args = [
            "estimate",
            "--model",
            str(_model_file(d, name)),
            "--gpus",
            "8",
            "--tp",
            "8",
            "--no-calibration",
        ]
        res = _clean(runner.invoke(app, args))
        js = _clean(runner.invoke(app, [*args, "--json"]))
    if unsafe_chars(name) or not name.strip():
        assert res.exit_code == 2 and js.exit_code == 2  # control characters: refused in one line
        return
    assert res.exit_code == 0 and f"{name} on 8x H100-SXM".strip() in res.stdout
    assert _strict(js.stdout)["inputs"]["model"] == name


@given(hostile)
@CLI
def test_gpu_name_is_refused_in_one_visible_line(name: str) -> None:
    res = _clean(runner.invoke(app, ["estimate", "--gpu", name, "--no-calibration"]), codes=(2,))
    assert "unknown GPU" in res.stderr


# ------------------------------------------------------------------------------------- --out paths


@given(hostile)
@CLI
def test_out_path_is_shown_literally(name: str) -> None:
    with _cwd():
        out = Path(f"o{name}") / "runs.csv"
        res = _clean(runner.invoke(app, ["calibrate", "export", "--store", "s.db", "--out", str(out)]))
        assert res.exit_code in (0, 2)
        if res.exit_code == 0:
            assert f"wrote {one_line(str(out))}" in res.stdout
            js = _clean(
                runner.invoke(app, ["calibrate", "export", "--store", "s.db", "--out", str(out), "--json"])
            )
            assert _strict(js.stdout)["out"] == str(out)


# --------------------------------------------------------------------------------- calibration runs


def _run(**kw: object) -> dict[str, object]:
    """A valid run record (GPT-3 175B-like on 64 A100s, Megatron-LM, measured step time)."""
    base: dict[str, object] = {
        "id": "R1",
        "source": "unit",
        "model": "GPT-test",
        "arch": "dense",
        "layers": 96,
        "hidden": 12288,
        "ffn_hidden": 49152,
        "heads": 96,
        "kv_heads": 96,
        "vocab": 51200,
        "seq_len": 2048,
        "gpu": "A100-80GB",
        "num_gpus": 64,
        "gpus_per_node": 8,
        "tp": 8,
        "pp": 8,
        "dp": 1,
        "cp": 1,
        "ep": 1,
        "sp": 1,
        "zero": 0,
        "recompute": "selective",
        "micro_batch": 1,
        "global_batch": 64,
        "precision": "bf16",
        "framework": "Megatron-LM",
        "measured_step_s": 13.75,
    }
    return {**base, **kw}


def _write_runs(path: Path, rows: list[dict[str, object]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


def _ingest(path: Path, store: str) -> Any:
    return _clean(runner.invoke(app, ["calibrate", "ingest", str(path), "--store", store]))


@given(st.lists(trimmed_hostile, min_size=1, max_size=3, unique=True), trimmed_hostile)
@CLI
def test_run_ids_and_sources_list_and_export_safely(ids: list[str], source: str) -> None:
    with _cwd() as d:
        # distinct runs by their measured memory: a larger batch in the same step time would imply an
        # MFU above the GPU's peak, which ingest refuses
        rows = [_run(id=i, source=source, measured_mem_gb_per_gpu=40 + k) for k, i in enumerate(ids)]
        res = _ingest(_write_runs(d / "runs.csv", rows), "s.db")
        if res.exit_code != 0:  # refused (a control character): nothing stored, one line said why
            return
        listed = _clean(runner.invoke(app, ["calibrate", "list", "--store", "s.db"]), codes=(0,))
        for i in ids:
            assert one_line(i) in listed.stdout
        js = _strict(_clean(runner.invoke(app, ["calibrate", "list", "--store", "s.db", "--json"])).stdout)
        assert sorted(r["id"] for r in js["runs"]) == sorted(ids)
        exported = _clean(runner.invoke(app, ["calibrate", "export", "--store", "s.db"]), codes=(0,)).stdout
        got = {r["id"]: r for r in csv.DictReader(io.StringIO(exported))}
        assert set(got) == {csv_cell(i) for i in ids}
        assert all(r["measured_step_s"] == "13.75" and r["num_gpus"] == "64" for r in got.values())
        jsonl = _clean(
            runner.invoke(app, ["calibrate", "export", "--store", "s.db", "--format", "jsonl"])
        ).stdout
        assert sorted(_strict(line)["id"] for line in jsonl.splitlines()) == sorted(ids)


def test_non_finite_extra_column_is_null_in_json_outputs() -> None:
    """An ingested JSONL row may carry Infinity/NaN in a column autopar does not use (Python's json
    reads them); list --json and the JSONL export still write strict JSON, the value as null."""
    with _cwd() as d:
        (d / "runs.jsonl").write_text(json.dumps(_run(loss=float("inf"), grad_norm=float("nan"))) + "\n")
        assert _ingest(d / "runs.jsonl", "s.db").exit_code == 0
        listed = _clean(runner.invoke(app, ["calibrate", "list", "--store", "s.db", "--json"]), codes=(0,))
        run = _strict(listed.stdout)["runs"][0]
        assert run["loss"] is None and run.get("grad_norm") is None and run["measured_step_s"] == 13.75
        args = ["calibrate", "export", "--store", "s.db", "--format", "jsonl"]
        line = _strict(_clean(runner.invoke(app, args), codes=(0,)).stdout)
        assert line["loss"] is None and line.get("grad_norm") is None


# Ids and sources for fit/report (slow commands: one fixed store rather than generated examples).
FIXED_IDS = ["run[/]1", '=HYPERLINK("http://x","y")', "[link=http://x]y[/link]", "-2+3", "@SUM(A1)", "[bold"]
FIXED_SOURCES = ["s[/]a", "[link=http://x]b[/link]", "<a href='http://e'>c</a>"]


def test_stored_hostile_runs_keep_list_fit_report_working() -> None:
    with _cwd() as d:
        rows = [
            _run(id=i, source=FIXED_SOURCES[k % 3], global_batch=64 * (k + 1), measured_step_s=12.5 * (k + 1))
            for k, i in enumerate(FIXED_IDS)
        ] + [  # one run: its rank correlation is NaN (16x the batch, so 16x the step time)
            _run(id="solo-1", source="solo", global_batch=1024, measured_step_s=16 * 13.75)
        ]
        assert _ingest(_write_runs(d / "runs.csv", rows), "s.db").exit_code == 0
        listed = _clean(runner.invoke(app, ["calibrate", "list", "--store", "s.db"]), codes=(0,)).stdout
        assert all(i in listed for i in FIXED_IDS)
        exported = _clean(runner.invoke(app, ["calibrate", "export", "--store", "s.db", "--out", "x.csv"]))
        assert exported.exit_code == 0
        ids = [r["id"] for r in csv.DictReader((d / "x.csv").open(encoding="utf-8"))]
        assert sorted(ids) == sorted(
            ["run[/]1", '\'=HYPERLINK("http://x","y")', "[link=http://x]y[/link]"]
            + ["'-2+3", "'@SUM(A1)", "[bold", "solo-1"]
        )
        fit = _clean(
            runner.invoke(app, ["calibrate", "fit", "--store", "s.db", "--no-public", "--out", "c.json"])
        )
        assert fit.exit_code == 0 and all(s in fit.stdout for s in FIXED_SOURCES)
        fit_json = _clean(
            runner.invoke(
                app, ["calibrate", "fit", "--store", "s.db", "--no-public", "--out", "c.json", "--json"]
            )
        )
        loso = _strict(fit_json.stdout)["leave_one_source_out"]
        assert next(r for r in loso if r["source"] == "solo")["spearman_after"] is None  # NaN -> null
        args = [
            "calibrate",
            "report",
            "--store",
            "s.db",
            "--no-public",
            "--out",
            "r.html",
            "--plotlyjs",
            "cdn",
        ]
        rep = _clean(runner.invoke(app, args), codes=(0,))
        assert all(s in rep.stdout for s in FIXED_SOURCES)
        doc = _strict(_clean(runner.invoke(app, [*args, "--json"]), codes=(0,)).stdout)
        assert {r["source"] for r in doc["by_source"]} >= set(FIXED_SOURCES)
        figure = re.search(r'data-autopar-fig="[^"]*">(.*?)</script>', (d / "r.html").read_text()).group(1)
        traces = json.loads(figure)["data"]
        shown = [t.get("name", "") for t in traces] + [h for t in traces for h in t.get("text") or []]
        assert "&lt;a href='http://e'&gt;c&lt;/a&gt;" in shown  # plotly shows it as typed, not as a link
        assert not any("<a" in s for s in shown) and not any("<" in t.get("name", "") for t in traces)


# ------------------------------------------------------------------------------------------ studies


def _study(storage: str, name: str, model: str) -> None:
    """A stored study as a search leaves it (inputs with a model and a cluster), with no trials."""
    import optuna

    from autopar.search.shared import INPUTS_ATTR
    from autopar.search.storage import open_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    s = optuna.create_study(
        study_name=name, storage=open_storage(storage), directions=["maximize", "minimize"]
    )
    s.set_user_attr(
        INPUTS_ATTR, {"model": {"name": model}, "clusters": [{"num_gpus": 8, "gpu": {"name": model}}]}
    )


@given(hostile, hostile)
@CLI
def test_study_names_never_break_study_status(name: str, model: str) -> None:
    with _cwd():
        _study("j.log", name, model)
        _study("j.log", "plain", "m")
        both = _clean(runner.invoke(app, ["study", "status", "--storage", "j.log"]), codes=(2,))
        assert one_line(name) in both.stderr and "plain" in both.stderr
        one = _clean(
            runner.invoke(app, ["study", "status", "--storage", "j.log", "--study-name", name]), codes=(0,)
        )
        assert one.stdout.startswith(f"{one_line(name)} · {one_line(model)} on 8x {one_line(model)}")
        plain = _clean(runner.invoke(app, ["study", "status", "--storage", "j.log", "--study-name", "plain"]))
        assert plain.exit_code == 0
        js = _clean(
            runner.invoke(app, ["study", "status", "--storage", "j.log", "--study-name", name, "--json"])
        )
        assert _strict(js.stdout)["study_name"] == name


def test_searched_study_with_hostile_names_reports() -> None:
    name, model = "x[/]=y[link=http://x]z", "[bold]m[/]"
    with _cwd() as d:
        args = ["optimize", "--model", str(_model_file(d, model)), "--gpus", "8", "--budget", "12"]
        args += ["--no-calibration", "--storage", "j.log", "--study-name", name]
        res = _clean(runner.invoke(app, args), codes=(0, 1))
        if res.exit_code == 0:
            assert res.stdout.startswith(f"{model} · H100-SXM x 8 GPUs")
        status = _clean(runner.invoke(app, ["study", "status", "--storage", "j.log"]), codes=(0,))
        assert status.stdout.startswith(f"{name} · {model} on 8x H100-SXM")
        rep = _clean(
            runner.invoke(app, ["study", "report", "--storage", "j.log", "--json", "--no-calibration"])
        )
        if rep.exit_code == 0:
            assert _strict(rep.stdout)["study"]["name"] == name


# ---------------------------------------------------------------------------- price files, batches


@given(hostile)
@CLI
def test_price_source_is_shown_literally(source: str) -> None:
    with _cwd() as d:
        p = d / "p.csv"
        with p.open("w", newline="", encoding="utf-8") as f:
            csv.writer(f).writerows(
                [["gpu", "tier", "usd_per_gpu_hour", "source"], ["H100-SXM", "spot", "1.25", source]]
            )
        res = _clean(
            runner.invoke(app, ["prices", "--prices", str(p), "--gpu", "H100-SXM", "--tier", "spot"])
        )
        if res.exit_code == 0:
            assert one_line(source.strip()) in res.stdout
            js = _clean(runner.invoke(app, ["prices", "--prices", str(p), "--json", "--gpu", "H100-SXM"]))
            assert any(r["usd_per_gpu_hour"] == 1.25 for r in _strict(js.stdout))


def test_batch_predictions_csv_quotes_formula_ids() -> None:
    with _cwd() as d:
        rows = [_run(id='=HYPERLINK("http://x","y")'), _run(id="-1", global_batch=128), _run(id="[/]", tp=3)]
        batch = _write_runs(d / "batch.csv", rows)
        args = ["estimate", "--batch", str(batch), "--no-calibration"]
        res = _clean(runner.invoke(app, [*args, "--out", "p[/].csv"]), codes=(0,))
        assert "wrote p[/].csv" in res.stdout
        got = list(csv.DictReader((d / "p[/].csv").open(encoding="utf-8")))
        assert [r["id"] for r in got] == ['\'=HYPERLINK("http://x","y")', "-1", "[/]"]
        assert float(got[0]["pred_step_s"]) > 0  # numbers stay numbers
        js = _strict(_clean(runner.invoke(app, [*args, "--json"]), codes=(0,)).stdout)
        assert [r["id"] for r in js] == ['=HYPERLINK("http://x","y")', "-1", "[/]"]


# ----------------------------------------------------------------------------------- launch scripts


@given(hostile.filter(lambda s: not unsafe_chars(s)).map(lambda s: "zq" + s))  # zq: in no fixed token
@settings(max_examples=40, deadline=None)
def test_launch_scripts_carry_a_name_only_in_comments(name: str) -> None:
    """Every shell line of the torchrun command and the sbatch script is numbers and fixed tokens: the
    model name appears only in `# ...` comments and, reduced to [a-z0-9_.-], in the SLURM job name."""
    from autopar.catalog import get_gpu
    from autopar.launch.settings import launch_settings
    from autopar.specs import ClusterSpec, Strategy, Workload

    model = get_model("llama-3.1-8b").model_copy(update={"name": name})
    cluster = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=16)
    ls = launch_settings(
        model, cluster, Workload(seq_len=4096, global_batch=64), Strategy(tp=8, pp=2, sp=True)
    )
    for text in (ls.torchrun, ls.slurm):
        for line in text.splitlines():
            if line.startswith("#SBATCH --job-name="):
                assert re.fullmatch(r"#SBATCH --job-name=autopar-[a-z0-9_.-]+", line)
            elif name in line:
                assert line.startswith("# "), line
