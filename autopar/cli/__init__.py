"""autopar's command line: `autopar estimate|compare|fix|optimize|tune|whatif|study|calibrate|launch|dryrun|models|gpus`."""

from __future__ import annotations

from autopar.cli import ask as _ask  # noqa: F401,E402
from autopar.cli import calibrate as _calibrate  # noqa: F401,E402

# Each module registers its commands on `app` when imported.
from autopar.cli import catalog as _catalog  # noqa: F401,E402
from autopar.cli import cluster_opts as _cluster_opts  # noqa: F401,E402
from autopar.cli import compare as _compare  # noqa: F401,E402
from autopar.cli import dryrun as _dryrun  # noqa: F401,E402
from autopar.cli import estimate as _estimate  # noqa: F401,E402
from autopar.cli import fix as _fix  # noqa: F401,E402
from autopar.cli import launch as _launch  # noqa: F401,E402
from autopar.cli import optimize as _optimize  # noqa: F401,E402
from autopar.cli import serve as _serve  # noqa: F401,E402
from autopar.cli import study as _study  # noqa: F401,E402
from autopar.cli import topology as _topology  # noqa: F401,E402
from autopar.cli import tune as _tune  # noqa: F401,E402
from autopar.cli import whatif as _whatif  # noqa: F401,E402
from autopar.cli.app import app


def main() -> None:
    """Console-script entry point: usage errors (unknown option, wrong type) print one line, exit 2."""
    import sys

    try:
        rv = app(standalone_mode=False)
    except Exception as e:  # click/typer usage errors carry format_message() and exit_code
        if hasattr(e, "format_message") and hasattr(e, "exit_code"):
            from autopar.cli.app import err_console, styled

            ctx = getattr(e, "ctx", None)
            where = f"`{ctx.command_path} --help`" if ctx is not None else "`autopar --help`"
            err_console.print(
                styled(("error:", "bold red"), f" {e.format_message()} (see {where})"), soft_wrap=True
            )
            sys.exit(e.exit_code)
        if type(e).__name__ == "Abort":  # Ctrl-C at a prompt
            sys.exit(130)
        raise
    sys.exit(rv if isinstance(rv, int) else 0)
