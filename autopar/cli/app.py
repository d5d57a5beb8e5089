"""The typer application object and the error boundary shared by every command."""

from __future__ import annotations

import functools
import shutil
import sys
from collections.abc import Callable
from typing import Any

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table
from rich.text import Text

from autopar.errors import AutoparError
from autopar.files import describe_os_error
from autopar.text import MESSAGE_CHARS, json_text, one_line

app = typer.Typer(
    name="autopar",
    help="Find how to parallelize LLM training on your GPUs (analytical model + NSGA-II search).",
    no_args_is_help=True,
    add_completion=True,  # `autopar --install-completion` (bash, zsh, fish, PowerShell)
    pretty_exceptions_enable=False,
)
# Width when the output is not a terminal (a pipe or file): $COLUMNS if set, else wide enough that
# tables are not squeezed to rich's 80-column default.
PIPE_WIDTH = 160


def _width(stream: Any) -> int | None:
    """None (rich follows the terminal, also on resize) for a TTY; else $COLUMNS or PIPE_WIDTH."""
    if getattr(stream, "isatty", lambda: False)():
        return None
    return shutil.get_terminal_size(fallback=(PIPE_WIDTH, 24)).columns


def styled(*parts: str | tuple[str, str]) -> Text:
    """autopar's styled output: each part a plain string or a (string, style) pair, shown as one
    printable line of text and never read as markup: `styled((name, "bold"), f" on {gpus} GPUs")`."""
    return Text.assemble(*((one_line(p[0]), p[1]) if isinstance(p, tuple) else one_line(p) for p in parts))


# Informational notes (assumptions, what a search did, where a price came from) are dim; the warning colour is
# kept for what asks the reader to act or doubt a result (an at-risk memory verdict, a winner that changes).
NOTE_STYLE = "dim"
WARNING_STYLE = "yellow"


def note_text(text: str) -> Text:
    """An informational note line: '- text', dim, never in the warning colour."""
    return styled((f"- {text}", NOTE_STYLE))


def warning_text(text: str) -> Text:
    """A real warning, in the warning colour."""
    return styled((text, WARNING_STYLE))


class _SafeConsole(Console):
    """The CLI's console: every plain string it prints (table cells, titles, headers, messages) is
    data, shown as one printable line (`autopar.text.one_line`) with no markup or emoji codes read;
    autopar's own styling is a `style=` or a `Text` from `styled`. Tables wrap long cells (fold)
    instead of cutting them with an ellipsis."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(markup=False, emoji=False, **kwargs)

    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(one_line(text), **{**kwargs, "markup": False, "emoji": False})

    def print(self, *objects: Any, **kwargs: Any) -> None:
        for o in objects:
            if isinstance(o, Table):
                self._fold(o)
        super().print(*objects, **kwargs)

    def _fold(self, table: Table) -> None:
        heads = [len(c.header) if isinstance(c.header, str | Text) else 1 for c in table.columns]
        whole = sum(heads) + 3 * len(heads) + 1 <= self.width  # headers fit unbroken: keep them whole
        for col, n in zip(table.columns, heads, strict=True):
            col.overflow = "fold"
            if whole:
                col.min_width = max(col.min_width or 0, n)


console = _SafeConsole(width=_width(sys.stdout))
err_console = _SafeConsole(stderr=True, width=_width(sys.stderr))


def emit_json(doc: Any, indent: int | None = None) -> None:
    """Print one JSON document on stdout (the --json output of every command): strict JSON,
    NaN and infinities as null."""
    sys.stdout.write(json_text(doc, indent) + "\n")


def validation_message(err: ValidationError) -> str:
    """One line naming each invalid field, its value and the reason."""
    parts = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e.get("loc", ())) or "input"
        val = e.get("input")
        shown = f"={val!r}" if not isinstance(val, dict) and val is not None else ""
        parts.append(f"{loc}{shown}: {e.get('msg', 'invalid')}")
    return "invalid input: " + "; ".join(parts)


def fail(message: str, code: int = 2) -> None:
    """Print a one-line error to stderr and exit with `code` (never a traceback)."""
    text = one_line(message)
    if len(text) > MESSAGE_CHARS:  # a safety net: messages name input values through text.excerpt
        text = f"{text[:MESSAGE_CHARS]}... ({len(text) - MESSAGE_CHARS:,} more characters)"
    err_console.print(styled(("error:", "bold red"), " " + text), soft_wrap=True)
    raise typer.Exit(code)


def guarded(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a command so user errors print one line and exit non-zero instead of a traceback."""

    @functools.wraps(fn)
    def wrapper(*a: Any, **kw: Any) -> Any:
        try:
            return fn(*a, **kw)
        except AutoparError as e:
            fail(str(e), e.exit_code)
        except ValidationError as e:
            fail(validation_message(e))
        except OSError as e:  # any file or device error left: errno's text and the file, one line
            fail(describe_os_error(e))
        except KeyboardInterrupt:
            err_console.print("interrupted")
            sys.exit(130)

    return wrapper


def command(
    *args: Any, typer_app: typer.Typer | None = None, **kwargs: Any
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a command on `app` (or a sub-app) with autopar's error boundary around it."""

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        return (typer_app or app).command(*args, **kwargs)(guarded(fn))

    return decorator
