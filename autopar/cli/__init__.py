"""autopar's command line: `autopar estimate|optimize|whatif|calibrate|launch|models|gpus`."""

from __future__ import annotations

from autopar.cli import calibrate as _calibrate  # noqa: F401,E402

# Each module registers its commands on `app` when imported.
from autopar.cli import catalog as _catalog  # noqa: F401,E402
from autopar.cli import estimate as _estimate  # noqa: F401,E402
from autopar.cli import launch as _launch  # noqa: F401,E402
from autopar.cli import optimize as _optimize  # noqa: F401,E402
from autopar.cli import whatif as _whatif  # noqa: F401,E402
from autopar.cli.app import app


def main() -> None:
    """Console-script entry point."""
    app()
