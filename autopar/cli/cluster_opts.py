"""`autopar clusters`: the `--cluster NAME:COUNT` system shorthands (the option itself: autopar.cli.options)."""

from __future__ import annotations

from typing import Annotated

import typer


def _register() -> None:
    from autopar.cli.app import command, console, emit_json

    @command("clusters")
    def clusters_cmd(
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table")] = False,
    ) -> None:
        """List the `--cluster NAME:COUNT` system shorthands (GPU, unit, host size, NVLink domain, transport)."""
        from rich.table import Table

        from autopar.catalog.clusters import list_systems

        if as_json:
            emit_json([s.model_dump() for s in list_systems()])
            return
        t = Table(
            "name", "GPU", "COUNT counts", "GPUs per unit", "GPUs per host", "NVLink domain", "transport"
        )
        for s in list_systems():
            fabric = s.transport or "infiniband"
            t.add_row(
                s.name, s.gpu, s.unit, str(s.unit_gpus), str(s.gpus_per_node), str(s.nvlink_domain), fabric
            )
        console.print(t)


_register()
