"""CLI command `autopar ask "REQUEST"`: a plain-language request, parsed deterministically (cli/ask_parse/)
into the equivalent `optimize` or `whatif` command line, echoed, then run through the same typer app as
typing that line would."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer

from autopar.cli.app import NOTE_STYLE, command, console, emit_json, styled

if TYPE_CHECKING:
    from autopar.cli.ask_parse import AskParse

_HELP = """Plan from a plain-language request: it is parsed (no network, no model, no randomness) into the
equivalent `optimize` or `whatif` command, which is printed first, then run.

Read: a built-in model ('Llama 3 70B', 'llama-3.1-70b', 'Mixtral 8x7B', 'a 405B' where one preset has that
size); GPUs ('64 H100', '64x B200', '8 nodes of H100', '2 GB200 racks', '128 GPUs'); context ('8k context',
'sequence length 8192'; k = 1024); tokens ('15T tokens', '15 trillion tokens'); 'global batch 1024'; bf16 or
fp8; a stack (megatron, torchtitan, fsdp, deepspeed, ...); a deadline ('in 30 days', 'in 2 weeks'); money
('under $5M' = total spend, '$0.50 per million tokens' = a rate); a goal ('fastest', 'cheapest', 'most
headroom'/'safest'); hardware questions ('which GPU, H100 or B200', 'how many H100s', 'compare'), which run
`whatif`, as a deadline or several GPU types do. Words not understood are listed; those holding a number,
an amount or an accelerator name are an error unless --lenient."""


def run_command(name: str, argv: Sequence[str]) -> int:
    """Run `autopar NAME ARGV...` through autopar's typer app, in this process; its exit code."""
    import typer.main

    from autopar.cli.app import app

    rc = typer.main.get_command(app).main(args=[name, *argv], prog_name="autopar", standalone_mode=False)
    return rc if isinstance(rc, int) else 0


def _print_parse(parsed: AskParse) -> None:
    """The understood command line, then the words not understood, then the notes."""
    console.print(
        styled(("understood:", "bold"), " " + parsed.command_line()), soft_wrap=True, highlight=False
    )
    if parsed.not_understood:
        shown = ", ".join(f"'{u.text}'" for u in parsed.not_understood)
        console.print(
            styled(("not understood:", "bold yellow"), " " + shown), soft_wrap=True, highlight=False
        )
    for note in parsed.notes:
        console.print(styled((f"- {note}", NOTE_STYLE)), soft_wrap=True, highlight=False)


def _run_json(parsed: AskParse) -> tuple[int, Any]:
    """Run the command with --json, its document captured: (exit code, the document or its raw text)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = run_command(parsed.command, [*parsed.argv, "--json"])
    text = out.getvalue()
    try:
        return rc, json.loads(text) if text.strip() else None
    except ValueError:
        return rc, text


@command("ask", help=_HELP)
def ask_cmd(
    request: Annotated[
        list[str],
        typer.Argument(
            help="The request, e.g. 'Llama 3 70B on 64 H100, 8k context, 15T tokens, fastest under $5M' "
            "(quote it: a shell reads $5M as a variable)",
            show_default=False,
        ),
    ],
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the understood command; do not run it.")
    ] = False,
    lenient: Annotated[
        bool,
        typer.Option(
            "--lenient", help="Go on when words holding a number or an accelerator name are not understood."
        ),
    ] = False,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print one JSON object: the parse (command, argv, understood, not_understood, notes) and, under "
            "`result`, the command's own --json document (null with --dry-run).",
        ),
    ] = False,
) -> None:
    """Parse, echo, check, then run the request's command (its exit code is this command's)."""
    from autopar.cli.ask_parse import check_understood, parse_request

    parsed = parse_request(" ".join(request))
    if not as_json:
        _print_parse(parsed)
    check_understood(parsed, lenient)
    if as_json:
        rc, result = (0, None) if dry_run else _run_json(parsed)
        emit_json({**parsed.to_json(), "dry_run": dry_run, "exit_code": rc, "result": result}, indent=2)
    elif not dry_run:
        console.print()
        rc = run_command(parsed.command, parsed.argv)
    else:
        rc = 0
    if rc:
        raise typer.Exit(rc)
