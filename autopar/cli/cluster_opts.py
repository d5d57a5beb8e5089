"""`--cluster NAME:COUNT` and `--nvlink-domain`: the cluster options shared by estimate, optimize, whatif."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import typer

from autopar.errors import SpecError

ClusterOpt = Annotated[
    str | None,
    typer.Option(
        "--cluster",
        help="System shorthand NAME:COUNT, e.g. gb200-nvl72:4 (4 racks = 288 GPUs) or dgx-h100:32 "
        "(32 nodes); sets the GPU, the count, GPUs per host and the NVLink domain (`autopar clusters`). "
        "detect:COUNT = COUNT hosts like this one (`autopar topology`); detect@DIR:COUNT reads a folder "
        "recorded with `autopar topology --save DIR` (also: $AUTOPAR_TOPOLOGY_DIR).",
    ),
]
NvlinkDomainOpt = Annotated[
    int | None,
    typer.Option(
        "--nvlink-domain",
        min=1,
        help="GPUs sharing one NVLink fabric (GB200 NVL72 = 72, NVL36 = 36; DGX H100 = 8) "
        "\\[default: the GPU's]. The GPU count need not be a multiple of it.",
    ),
]


@dataclass(frozen=True)
class ClusterChoice:
    """The cluster inputs after resolving a shorthand: GPU name(s), count(s), host and domain size."""

    gpu: str
    gpus: str
    gpus_per_node: int | None
    nvlink_domain: int | None
    internode_gbps: float | None = None  # set by --cluster detect (the NICs found); None: the GPU's default


def resolve_cluster(
    cluster: str | None,
    *,
    gpu: str | None,
    gpus: str | int | None,
    gpus_per_node: int | None,
    nvlink_domain: int | None,
    default_gpu: str,
    default_gpus: str | int,
) -> ClusterChoice:
    """Merge --cluster with the explicit flags; a flag that --cluster already sets is an error."""
    if cluster is None:
        return ClusterChoice(
            gpu if gpu is not None else default_gpu,
            str(gpus if gpus is not None else default_gpus),
            gpus_per_node,
            nvlink_domain,
        )
    given = [
        f for f, v in (("--gpu", gpu), ("--gpus", gpus), ("--gpus-per-node", gpus_per_node)) if v is not None
    ]
    if nvlink_domain is not None:
        given.append("--nvlink-domain")
    if given:
        raise SpecError(
            f"--cluster {cluster} already sets the GPU, count, host and NVLink domain; drop {', '.join(given)}"
        )
    detected = _detected(cluster)
    if detected is not None:
        return detected
    from autopar.catalog.clusters import parse_cluster

    shape = parse_cluster(cluster)
    return ClusterChoice(shape.gpu, str(shape.num_gpus), shape.gpus_per_node, shape.nvlink_domain)


def _detected(cluster: str) -> ClusterChoice | None:
    """`--cluster detect[@DIR][:COUNT]`: COUNT hosts like this one (or like the one recorded in DIR)."""
    from autopar.cli.topology import detect_host, parse_detect

    parsed = parse_detect(cluster.strip())
    if parsed is None:
        return None
    from autopar.catalog.topology import describe

    folder, hosts = parsed
    d = describe(detect_host(folder), hosts)
    return ClusterChoice(d.gpu, str(d.num_gpus), d.gpus_per_node, d.nvlink_domain, d.internode_gbps)


def _register() -> None:
    from autopar.cli.app import command, console, emit_json

    @command("clusters")
    def clusters_cmd(
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table")] = False,
    ) -> None:
        """List the `--cluster NAME:COUNT` system shorthands (GPU, unit, host size, NVLink domain)."""
        from rich.table import Table

        from autopar.catalog.clusters import list_systems

        if as_json:
            emit_json([s.model_dump() for s in list_systems()])
            return
        t = Table("name", "GPU", "COUNT counts", "GPUs per unit", "GPUs per host", "NVLink domain")
        for s in list_systems():
            t.add_row(s.name, s.gpu, s.unit, str(s.unit_gpus), str(s.gpus_per_node), str(s.nvlink_domain))
        console.print(t)


_register()
