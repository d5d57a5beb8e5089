"""The service's view of a CLI command: its request schema, read from the command's own options, and a run.

A request body is the command's options by their Python names (`gpus_per_node` for `--gpus-per-node`), so the
service declares no input of its own: the schema (`request_model`) is built from the typer/click parameters
cli/options.py declares, each field's description is its `--help`, and `to_argv` turns a body back into the
command line that `run` executes in this process with `--json`. The answer is therefore the CLI's, number for
number, and so are its error messages.

Options that name files on the server (`--out`, `--calibration`, `--batch`, …: any Path option) or shape a
terminal's output are not offered: the service never reads or writes a path a request names.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model

# Options a request may not set: terminal output (--json is always on), and server-side state a request must
# not steer (study storage, worker processes); Path-typed options are left out by type (`_served`).
NOT_OVER_HTTP = frozenset(
    {"as_json", "explain", "top", "plotly", "storage", "study_name", "workers", "heartbeat", "prices", "save"}
    | {"files", "data", "candidates", "sidecar", "store"}  # files the command would read (its paths, by name)
)
# String options that also accept a file path on the command line (a custom GPU file, a config.json): over
# HTTP they take names only.
NAME_ONLY = frozenset({"model", "gpu", "cluster_name"})
PATH_SUFFIXES = (".json", ".yaml", ".yml", ".toml", ".csv", ".jsonl", ".parquet")


class RequestError(ValueError):
    """A body that does not map onto the command's options: names the field, as the CLI would."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Param:
    """One served option (or the positional arguments) of a command."""

    name: str  # Python name, the body's key
    flag: str  # '--gpus-per-node'; '' for positional arguments
    negative: str  # '--no-sp' for a boolean with an off switch, else ''
    kind: str  # 'flag' (boolean), 'value', 'multi' (repeatable) or 'args' (positional, several)
    annotation: Any
    help: str
    required: bool


@cache
def click_group() -> Any:
    """The CLI as one click group, built once (typer builds it anew on every call otherwise)."""
    import typer.main

    from autopar.cli import app

    return typer.main.get_command(app)


def _command(path: str) -> Any:
    cmd = click_group()
    for part in path.split():
        cmd = cmd.commands[part]
    return cmd


def _served(p: Any) -> bool:
    annotation = getattr(getattr(p, "type_descriptor", None), "annotation", None)
    return p.name not in NOT_OVER_HTTP and annotation is not Path and p.expose_value


def _param(p: Any) -> Param:
    annotation = getattr(getattr(p, "type_descriptor", None), "annotation", str)
    if p.param_type_name == "argument":
        kind = "args" if p.nargs == -1 else "value"
    else:
        kind = "flag" if p.is_flag else "multi" if p.multiple else "value"
    flag = "" if p.param_type_name == "argument" else p.opts[0]
    negative = p.secondary_opts[0] if getattr(p, "secondary_opts", None) else ""
    text = (getattr(p, "help", "") or "").strip().replace("\\[", "[")  # the CLI escapes rich markup's `[`
    return Param(p.name, flag, negative, kind, annotation, text, p.required)


@cache
def params(path: str) -> tuple[Param, ...]:
    """The served parameters of command `path` ('estimate', 'calibrate list'), in --help order."""
    return tuple(_param(p) for p in _command(path).params if _served(p))


def _field_type(p: Param) -> Any:
    if p.kind == "flag":
        return bool
    if p.kind in ("multi", "args"):
        return list[str | int | float] | str  # one value may come bare, as the command line takes it
    return str | int | float


@cache
def request_model(path: str) -> type[BaseModel]:
    """A pydantic model of the command's served options (unknown fields refused), for validation and OpenAPI."""
    fields: dict[str, Any] = {
        p.name: (_field_type(p) | None, Field(None, description=p.help or None)) for p in params(path)
    }
    name = "".join(w.capitalize() for w in path.replace("-", " ").split()) + "Request"
    return create_model(name, __config__=ConfigDict(extra="forbid"), **fields)


def _known(path: str, key: str) -> Param:
    by_name = {p.name: p for p in params(path)}
    if key in by_name:
        return by_name[key]
    close = difflib.get_close_matches(key, list(by_name), n=1)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    raise RequestError(key, f"{key}: not an input of `{path}`{hint} (inputs: {', '.join(sorted(by_name))})")


def _name_only(key: str, value: Any) -> None:
    text = str(value)
    if key == "cluster_name" and text.lower().startswith("detect"):
        raise RequestError(
            key, f"{key}={text!r}: 'detect' reads the server's own hardware; name a cluster instead"
        )
    if key in NAME_ONLY and (text.lower().endswith(PATH_SUFFIXES) or text.startswith(("/", ".", "~"))):
        raise RequestError(
            key, f"{key}={text!r}: the service takes names only, not file paths (see /api/models, /api/gpus)"
        )


def _scalar(value: Any) -> str:
    if isinstance(value, bool | dict) or value is None:
        raise TypeError
    return str(value)


def to_argv(path: str, body: dict[str, Any]) -> list[str]:
    """The command line that `body` stands for, with --json; RequestError naming the first bad field."""
    argv, positional = [*path.split()], []
    for key, value in body.items():
        if value is None:
            continue
        p = _known(path, key)
        _name_only(key, value)
        try:
            if p.kind == "flag":
                if not isinstance(value, bool):
                    raise TypeError
                argv += [p.flag] if value else ([p.negative] if p.negative else [])
            elif p.kind in ("multi", "args"):
                items = [_scalar(v) for v in (value if isinstance(value, list) else [value])]
                positional += items if p.kind == "args" else []
                argv += [x for v in items for x in (p.flag, v)] if p.kind == "multi" else []
            else:
                argv += [p.flag, _scalar(value)]
        except TypeError:
            raise RequestError(
                key, f"{key}={value!r}: not a value this input takes ({p.help[:80]})"
            ) from None
    return [*argv, "--json", *(["--", *positional] if positional else [])]


@dataclass(frozen=True)
class Outcome:
    """What a command run gave: its exit code, its --json document (None when it printed none), its error line."""

    exit_code: int
    document: Any
    error: str


def run(argv: list[str]) -> Outcome:
    """Run the CLI on `argv` in this process (one at a time per process: it redirects stdout and stderr)."""
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rv = click_group().main(args=argv, prog_name="autopar", standalone_mode=False)
            code = rv if isinstance(rv, int) else 0  # an Exit(code) comes back as the return value
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except Exception as e:  # noqa: BLE001 - usage errors carry their own message; anything else is one line
            code = getattr(e, "exit_code", 2) or 2
            fmt = getattr(e, "format_message", None)
            err.write(f"error: {fmt() if fmt else type(e).__name__ + ': ' + str(e)}\n")
    return Outcome(code, _document(out.getvalue()), _error_line(err.getvalue()))


def _document(text: str) -> Any:
    try:
        return json.loads(text) if text.strip() else None
    except json.JSONDecodeError:
        return None


def _error_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    errors = [line.removeprefix("error: ") for line in lines if line.startswith("error: ")]
    return errors[-1] if errors else (lines[-1] if lines else "")
