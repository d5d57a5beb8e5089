"""What a GPU host is, read from the text its standard tools print (`autopar topology`, `--cluster detect`).

Pure parsers, no I/O: a dict {recorded file name -> text} (RECORDED_FILES names each file and the command
that prints it) becomes a `HostTopology` (GPU model, GPUs per host, NVLink domain, NICs, NUMA placement) and
then the cluster description the planning commands take. `autopar.cli.topology` runs the commands or reads
a recorded folder. Every problem is a one-line `DataError` naming the file and what it lacks.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from autopar.errors import DataError, UnknownNameError
from autopar.text import excerpt

# Recorded file name -> the command that prints it (no shell; run with a timeout by autopar.cli.topology).
# `env.txt` has no command: it is the report of `python -m sglang.check_env` or `vllm collect-env`, which
# holds the GPU names and the `nvidia-smi topo -m` matrix, so a report pasted in an issue can be planned on.
RECORDED_FILES: dict[str, tuple[str, ...]] = {
    "nvidia-smi-query.csv": (
        "nvidia-smi",
        "--query-gpu=index,name,memory.total",
        "--format=csv,noheader,nounits",
    ),
    "nvidia-smi-topo.txt": ("nvidia-smi", "topo", "-m"),
    "nvidia-smi-q.txt": ("nvidia-smi", "-q"),
    "rocm-smi.txt": ("rocm-smi", "--showproductname", "--showmeminfo", "vram", "--showtopo"),
    "ibstat.txt": ("ibstat",),
    "sysfs-infiniband.txt": (),  # written by the probe from /sys/class/infiniband/*/ports/*/{rate,link_layer,state}
    "env.txt": (),
}

BITS_PER_BYTE = 8
# PCIe path kinds of `nvidia-smi topo -m` that put a NIC on a GPU's own PCIe switch: that GPU's rail NIC.
GPU_NIC_PATHS = frozenset({"PIX", "PXB"})
_NVLINK_CELL = re.compile(r"^NV\d+$")
_DEVICE = re.compile(r"^(GPU\d+|NIC\d+|mlx\S+)$")  # older nvidia-smi names NIC columns mlx5_0 ...
_NIC_KEY = re.compile(r"NIC\d+")
_GPU0 = re.compile(r"GPU0\b")
_MAX_NAME_CHARS = 200  # a product string compared with catalog names (real ones are < 40 characters)

# Product strings as the tools print them -> catalog GPU names, for strings the catalog's aliases miss.
# Order matters: the first pattern that matches wins (PCIe before the bare H100).
PRODUCT_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\bGB300\b", re.I), "GB300"),
    (re.compile(r"\bGB200\b", re.I), "GB200"),
    (re.compile(r"\bB300\b", re.I), "B300"),
    (re.compile(r"\bB200\b", re.I), "B200"),
    (re.compile(r"\bH200\b", re.I), "H200"),
    (re.compile(r"\bH800\b", re.I), "H800"),
    (re.compile(r"\bH20\b(?!-3e)", re.I), "H20"),  # 'NVIDIA H20'; not the 141 GB H20-3e refresh
    (re.compile(r"\bH100\b.*\bPCIe\b", re.I), "H100-PCIe"),
    (re.compile(r"\bH100\b.*\b80\s?GB\s+HBM3\b", re.I), "H100-SXM"),
    (re.compile(r"\bH100\b.*\bSXM", re.I), "H100-SXM"),
    (re.compile(r"\bA100\b.*\bSXM4?-?40GB\b", re.I), "A100-40GB"),
    (re.compile(r"\bA100\b.*\bSXM4?-?80GB\b", re.I), "A100-80GB"),
    (re.compile(r"\bA800\b.*\bSXM4?-?80GB\b", re.I), "A800"),  # 'NVIDIA A800-SXM4-80GB'; not the PCIe card
    (re.compile(r"\bL40S\b", re.I), "L40S"),
    (re.compile(r"\bMI325X\b", re.I), "MI325X"),
    (re.compile(r"\bMI300X\b", re.I), "MI300X"),
)


@dataclass(frozen=True)
class Nic:
    """One network port: device name, port, line rate in Gb/s, link layer and whether it is up."""

    name: str
    port: int
    rate_gbps: float
    link_layer: str
    active: bool


@dataclass(frozen=True)
class Fabric:
    """The NVLink fabric registration of one GPU (`nvidia-smi -q`, section Fabric)."""

    state: str
    status: str
    clique_id: str
    cluster_uuid: str

    @property
    def up(self) -> bool:
        """Registered in a multi-node NVLink fabric (GB200/GB300 NVL racks)."""
        zero = not self.cluster_uuid.replace("0", "").replace("-", "").strip()
        return self.state == "Completed" and self.status == "Success" and not zero


@dataclass(frozen=True)
class Topo:
    """A GPU link matrix (`nvidia-smi topo -m` or rocm-smi's link types): GPU names, NIC names, cells."""

    gpus: tuple[str, ...]
    nics: tuple[str, ...]
    cells: dict[tuple[str, str], str]
    affinity: dict[str, tuple[str, str]] = field(default_factory=dict)
    nic_legend: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class HostTopology:
    """One host as detected: what the planner needs, and how each figure was found."""

    product: str
    gpu: str
    gpus_per_host: int
    nvlink_domain: int
    domain_basis: str
    memory_mib: int | None = None
    nics: tuple[Nic, ...] = ()
    internode_gbps: float | None = None
    nic_basis: str = ""
    numa: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class ClusterDescription:
    """The `--cluster`/explicit-flag form of a detected host, for COUNT such hosts."""

    gpu: str
    gpus_per_node: int
    nvlink_domain: int
    internode_gbps: float | None
    num_gpus: int
    shorthand: str | None

    def flags(self) -> str:
        """The explicit flags that describe this cluster to estimate/optimize/whatif."""
        parts = [f"--gpu {self.gpu}", f"--gpus {self.num_gpus}", f"--gpus-per-node {self.gpus_per_node}"]
        parts.append(f"--nvlink-domain {self.nvlink_domain}")
        if self.internode_gbps is not None:
            parts.append(f"--internode-gbps {self.internode_gbps:g}")
        return " ".join(parts)


# ---------------------------------------------------------------------------------------------- bounds

# Longest line a recorded file may hold: the widest real line, the `nvidia-smi topo -m` header of 8 GPUs
# and 18 NICs, is ~300 characters. Lines are checked before any pattern runs, so every match is on a short
# string (each pattern is also linear in its input: no nested or overlapping quantifiers).
MAX_LINE_CHARS = 4096
# Digits of one number: the largest real value, a VRAM size in bytes, has 12. int() of a run over 4300
# digits stops with a ValueError, and smaller huge runs are nonsense figures.
MAX_DIGITS = 30
# GPUs one host may list: real hosts hold 4 (GB200 tray) to 16 (DGX-2); NVML enumerates far fewer than
# 1024. Above it the file is corrupt or crafted (a million GPUs would also cost gigabytes of cells).
MAX_GPUS_PER_HOST = 1024
# Memory of one GPU: the largest shipped is 288 GB of HBM3e (B300, MI355X); 16 TiB is 50x that.
MAX_VRAM_BYTES = 16 * 2**40
MIB = 2**20
_INT = re.compile(r"[+-]?(\d+)")
_NUMBERISH = re.compile(r"[+-]?\d")
_DIGITS = re.compile(r"\d+")


def text_lines(text: str, source: str) -> list[str]:
    """The lines of a recorded file; a line longer than MAX_LINE_CHARS is a one-line error naming it."""
    lines = text.splitlines()
    if not lines or max(map(len, lines)) <= MAX_LINE_CHARS:
        return lines
    for n, line in enumerate(lines, 1):
        if len(line) > MAX_LINE_CHARS:
            raise DataError(
                f"{source} line {n}: {len(line)} characters, longer than the {MAX_LINE_CHARS} a tool's "
                "output line may be (not a recorded tool output?)"
            )
    return lines


def whole_number(text: str, where: str) -> int:
    """An integer of at most MAX_DIGITS digits; anything else is a one-line error naming `where`."""
    s = text.strip()
    m = _INT.fullmatch(s)
    if not m:
        raise DataError(f"{where}: {excerpt(s)!r} is not a whole number")
    if len(m.group(1)) > MAX_DIGITS:
        raise DataError(f"{where}: a {len(m.group(1))}-digit number (at most {MAX_DIGITS} digits)")
    return int(s)


def _vram_mib(text: str, unit: int, where: str) -> int:
    """A GPU memory size in MiB from `text` counted in `unit` bytes; zero, negative or > 16 TiB is refused."""
    value = whole_number(text, where)
    if not MIB <= value * unit <= MAX_VRAM_BYTES:
        raise DataError(f"{where}: {value} is impossible for one GPU's memory (1 MiB to 16 TiB)")
    return value * unit // MIB


def _count_gpus(count: int, source: str) -> None:
    if count > MAX_GPUS_PER_HOST:
        raise DataError(
            f"{source}: more than {MAX_GPUS_PER_HOST} GPUs on one host (real hosts hold 4 to 16); "
            "not a recorded tool output?"
        )


def _key_value(line: str) -> tuple[str, str]:
    """'  Key   : value  ' -> ('Key', 'value'); ('', '') for a line without a colon."""
    key, sep, value = line.partition(":")
    return (key.strip(), value.strip()) if sep else ("", "")


# ---------------------------------------------------------------------------------------------- GPU list


def _gpus_from_query(text: str) -> list[tuple[str, int | None]]:
    """`nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader,nounits` rows."""
    src = "nvidia-smi-query.csv"
    out: list[tuple[str, int | None]] = []
    for n, line in enumerate(text_lines(text, src), 1):
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) == 3 and cells[0].isdigit():
            cells = cells[1:]
        if len(cells) != 2 or not cells[0]:
            raise DataError(
                f"{src} line {n}: expected 'index, name, memory.total' (MiB), got {excerpt(line)!r}"
            )
        mem = cells[1].split()[0] if cells[1] else ""
        where = f"{src} line {n}: memory.total"
        out.append((cells[0], _vram_mib(mem, MIB, where) if _NUMBERISH.match(mem) else None))
        _count_gpus(len(out), src)
    return out


_Q_FB_TOTAL = re.compile(r"(\d+)\s*MiB")
_ENV_GPU = re.compile(r"GPU ([\d,]+): ")
_ROCM_GPU = re.compile(r"GPU\[(\d+)\]")


def _gpus_from_q(text: str) -> list[tuple[str, int | None]]:
    """`nvidia-smi -q`: each 'Product Name : X', and the 'Total : N MiB' line after each 'FB Memory Usage'."""
    src = "nvidia-smi-q.txt"
    names: list[tuple[str, int | None]] = []
    mems: list[int] = []
    after_fb = False
    for n, line in enumerate(text_lines(text, src), 1):
        key, value = _key_value(line)
        if key == "Product Name" and value:
            names.append((value, None))
            _count_gpus(len(names), src)
        elif after_fb and key == "Total" and (m := _Q_FB_TOTAL.match(value)):
            where = f"{src} line {n}: FB Memory Usage Total"
            mems.append(_vram_mib(m.group(1), MIB, where))
        if line.strip():
            after_fb = line.strip() == "FB Memory Usage"
    return [(name, mems[i] if i < len(mems) else None) for i, (name, _) in enumerate(names)]


def _gpus_from_env(text: str) -> list[tuple[str, int | None]]:
    """The 'GPU 0,1,2,3: NAME' lines of a sglang/vLLM environment report."""
    out: list[tuple[str, int | None]] = []
    for line in text_lines(text, "env.txt"):
        m = _ENV_GPU.match(line)
        name = line[m.end() :].strip() if m else ""
        if m and name:
            out.extend((name, None) for i in m.group(1).split(",") if i)
            _count_gpus(len(out), "env.txt")
    return out


def _gpus_from_rocm(text: str) -> list[tuple[str, int | None]]:
    """rocm-smi's 'GPU[i] : Card series: NAME' and 'GPU[i] : VRAM Total Memory (B): BYTES' lines."""
    src = "rocm-smi.txt"
    series: list[tuple[int, str]] = []
    vram: dict[int, int] = {}
    for n, line in enumerate(text_lines(text, src), 1):
        m = _ROCM_GPU.match(line)
        rest = line[m.end() :].strip() if m else ""
        if not m or not rest.startswith(":"):
            continue
        gpu = whole_number(m.group(1), f"{src} line {n}: GPU index")
        key, value = _key_value(rest[1:])
        if key in ("Card series", "Card Series") and value:
            series.append((gpu, value))
            _count_gpus(len(series), src)
        elif key == "VRAM Total Memory (B)" and _NUMBERISH.match(value):
            where = f"{src} line {n}: GPU[{gpu}] VRAM Total Memory (B)"
            vram[gpu] = _vram_mib(value, 1, where)
    return [(name, vram.get(i)) for i, name in series]


def gpu_list(files: Mapping[str, str]) -> tuple[list[tuple[str, int | None]], str]:
    """(product name, memory MiB) per GPU from the first file that lists them, and that file's name."""
    readers = (
        ("nvidia-smi-query.csv", _gpus_from_query),
        ("nvidia-smi-q.txt", _gpus_from_q),
        ("rocm-smi.txt", _gpus_from_rocm),
        ("env.txt", _gpus_from_env),
    )
    for name, read in readers:
        if name in files:
            gpus = read(files[name])
            if gpus:
                return gpus, name
    return [], ""


# ---------------------------------------------------------------------------------------------- matrices


def _split_columns(line: str) -> list[str]:
    """Device column names of a matrix header (the trailing 'CPU Affinity' etc. are dropped)."""
    cols = []
    for tok in line.split():
        if not _DEVICE.match(tok):
            break
        cols.append(tok)
    return cols


def parse_nvidia_topo(text: str, source: str) -> Topo:
    """The GPU/NIC matrix of `nvidia-smi topo -m`; rows may be missing or cut short (a pasted excerpt)."""
    lines = text_lines(text, source)
    start = next(
        (i for i, ln in enumerate(lines) if ln.split()[:1] == ["GPU0"] and "X" not in ln.split()), None
    )
    if start is None:
        raise DataError(f"{source}: no `nvidia-smi topo -m` header (a line of columns GPU0 GPU1 ...)")
    cols = _split_columns(lines[start])
    gpus = tuple(c for c in cols if c.startswith("GPU"))
    nics = tuple(c for c in cols if not c.startswith("GPU"))
    cells: dict[tuple[str, str], str] = {}
    affinity: dict[str, tuple[str, str]] = {}
    for ln in lines[start + 1 :]:
        toks = ln.split()
        if not toks or toks[0] not in cols:
            if toks[:1] == ["Legend:"]:
                break
            continue
        row, rest = toks[0], toks[1:]
        for col, cell in zip(cols, rest, strict=False):
            cells[(row, col)] = cell
        if row in gpus and len(rest) > len(cols) + 1:
            affinity[row] = (rest[len(cols)], rest[len(cols) + 1])
    legend = {}
    for ln in lines:  # the Legend's 'NIC Legend:' rows, '  NIC0: mlx5_0'
        key, value = _key_value(ln)
        if _NIC_KEY.fullmatch(key) and ln.lstrip().startswith(key + ":") and len(value.split()) == 1:
            legend[key] = value
    return Topo(gpus, nics, cells, affinity, legend)


def parse_rocm_topo(text: str) -> Topo | None:
    """rocm-smi's 'Link Type between two GPUs' matrix (XGMI or PCIE per pair); None if absent."""
    lines = text_lines(text, "rocm-smi.txt")
    at = next((i for i, ln in enumerate(lines) if "Link Type between two GPUs" in ln), None)
    if at is None:
        return None
    head = next((i for i in range(at + 1, len(lines)) if lines[i].split()[:1] == ["GPU0"]), None)
    if head is None:
        raise DataError("rocm-smi.txt: 'Link Type between two GPUs' has no GPU0 GPU1 ... header")
    gpus = tuple(_split_columns(lines[head]))
    cells: dict[tuple[str, str], str] = {}
    for ln in lines[head + 1 :]:
        toks = ln.split()
        if not toks or toks[0] not in gpus:
            break
        for col, cell in zip(gpus, toks[1:], strict=False):
            cells[(toks[0], col)] = "NV-XGMI" if cell == "XGMI" else cell
    return Topo(gpus, (), cells)


def _linked(cell: str) -> bool:
    return bool(_NVLINK_CELL.match(cell)) or cell == "NV-XGMI"


def link_groups(topo: Topo) -> list[set[str]]:
    """GPUs joined by NVLink/xGMI (any recorded cell, either direction), as connected groups."""
    parent = {g: g for g in topo.gpus}

    def root(g: str) -> str:
        while parent[g] != g:
            parent[g] = parent[parent[g]]
            g = parent[g]
        return g

    for (a, b), cell in topo.cells.items():
        if a in parent and b in parent and a != b and _linked(cell):
            parent[root(a)] = root(b)
    groups: dict[str, set[str]] = {}
    for g in topo.gpus:
        groups.setdefault(root(g), set()).add(g)
    return sorted(groups.values(), key=lambda s: (-len(s), sorted(s)))


# ---------------------------------------------------------------------------------------------- fabric, NICs


_FABRIC_KEYS = frozenset({"State", "Status", "CliqueId", "ClusterUUID"})
_FABRIC_SPAN = 600  # characters after a 'Fabric' header read for its fields (the section is ~250)


def parse_fabric(text: str) -> list[Fabric]:
    """Each GPU's Fabric section of `nvidia-smi -q` (State, Status, CliqueId, ClusterUUID)."""
    blocks: list[dict[str, str]] = []
    span = 0
    for line in text_lines(text, "nvidia-smi-q.txt"):
        if line.strip() == "Fabric":
            if not blocks or blocks[-1]:  # headers with no fields between them share one (empty) block
                blocks.append({})
            span = 0
            continue
        if blocks and span < _FABRIC_SPAN:
            key, value = _key_value(line[: _FABRIC_SPAN - span])
            if key in _FABRIC_KEYS:
                blocks[-1][key] = value
        span += len(line) + 1
    return [
        Fabric(v["State"], v.get("Status", ""), v.get("CliqueId", ""), v.get("ClusterUUID", ""))
        for v in blocks
        if "State" in v
    ]


_RATE = re.compile(r"\s*(\d+)(?:\.(\d+))?")


def _rate(text: str, source: str, name: str) -> float:
    m = _RATE.match(text)
    if not m:
        raise DataError(f"{source}: {name}: rate {excerpt(text)!r} is not a number of Gb/s")
    whole_number(m.group(1), f"{source}: {excerpt(name)}: rate")  # bounds the digits
    return float(m.group(0))


_PORT = re.compile(r"Port (\d+):")
_IB_KEYS = frozenset({"State", "Rate", "Link layer"})


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _ib_port(lines: list[str], at: int) -> tuple[dict[str, str], int]:
    """The 'Key: value' lines indented 2+ under an ibstat 'Port N:' line at `at`, and the index after them."""
    vals: dict[str, str] = {}
    i = at + 1
    while i < len(lines) and (not lines[i].strip() or _indent(lines[i]) >= 2):
        key, sep, value = lines[i].strip().partition(":")
        if sep and key in _IB_KEYS:
            vals[key] = value.strip()
        i += 1
    return vals, i


def parse_ibstat(text: str) -> list[Nic]:
    """`ibstat`: one Nic per CA port (State, Rate in Gb/s, Link layer)."""
    nics = []
    lines = text_lines(text, "ibstat.txt")
    name, i = None, 0
    while i < len(lines):
        line, i = lines[i], i + 1
        if line.startswith("CA '"):
            name = line[4:].split("'", 1)[0]
        m = _PORT.fullmatch(line.strip())
        if name is None or not m:
            continue
        vals, i = _ib_port(lines, i - 1)
        if "Rate" not in vals:
            raise DataError(
                f"ibstat.txt: CA {excerpt(name)!r} port {excerpt(m.group(1))} has no 'Rate:' line"
            )
        port = whole_number(m.group(1), f"ibstat.txt: CA {excerpt(name)!r} port")
        rate = _rate(vals["Rate"], "ibstat.txt", name)
        nics.append(Nic(name, port, rate, vals.get("Link layer", "?"), vals.get("State") == "Active"))
    return nics


def _sysfs_line(line: str) -> tuple[str, str, str, str, str] | None:
    """'DEVICE PORT rate=R link_layer=L state=S' -> its five fields, or None."""
    parts = line.split(" ", 2)
    if len(parts) != 3 or len(parts[0].split()) != 1 or not _DIGITS.fullmatch(parts[1]):
        return None
    if not parts[2].startswith("rate="):
        return None
    rate, sep1, tail = parts[2][5:].partition(" link_layer=")
    layer, sep2, state = tail.partition(" state=")
    if not (sep1 and sep2) or any(c.isspace() for c in layer):
        return None
    return parts[0], parts[1], rate, layer, state


def parse_sysfs_ib(text: str) -> list[Nic]:
    """The probe's sysfs lines 'DEVICE PORT rate=400 Gb/sec (4X NDR) link_layer=InfiniBand state=4: ACTIVE'."""
    src = "sysfs-infiniband.txt"
    nics = []
    for n, line in enumerate(text_lines(text, src), 1):
        if not line.strip():
            continue
        fields = _sysfs_line(line.strip())
        if fields is None:
            raise DataError(f"{src} line {n}: expected 'DEVICE PORT rate=... link_layer=... state=...'")
        name, port, rate, layer, state = fields
        port_no = whole_number(port, f"{src} line {n}: port")
        nics.append(Nic(name, port_no, _rate(rate, src, name), layer, "ACTIVE" in state))
    return nics


# ---------------------------------------------------------------------------------------------- resolving


def catalog_gpu(product: str) -> str:
    """The catalog name of a tool's product string ('NVIDIA H100 80GB HBM3' -> 'H100-SXM'); a GPU the
    catalog lacks is a one-line error naming the detected model and the closest catalog names."""
    from autopar.catalog.loader import get_gpu, gpu_catalog

    for pat, name in PRODUCT_PATTERNS:
        if pat.search(product):
            return name
    bare = re.sub(r"^(NVIDIA|AMD Instinct|AMD|Tesla)\s+", "", product.strip(), flags=re.I)
    try:
        return get_gpu(bare).name
    except UnknownNameError:
        pass
    names = [g.name for g in gpu_catalog().entries]
    # difflib is quadratic in the string's length: a name longer than any real one has no close match.
    short = len(bare) <= _MAX_NAME_CHARS
    close = (
        difflib.get_close_matches(bare.upper(), [n.upper() for n in names], n=3, cutoff=0.3) if short else []
    )
    shown = ", ".join(n for n in names if n.upper() in close) or "none close"
    raise DataError(
        f"detected GPU {excerpt(product)!r} is not in the GPU catalog (closest: {shown}); describe it with "
        "--gpu NAME or a --gpu-file, see `autopar gpus`"
    )


def _domain(topo: Topo | None, gpus: int, source: str) -> tuple[int, str, tuple[str, ...]]:
    """NVLink/xGMI domain within the host from the link matrix: (size, how it was found, notes)."""
    if topo is None:
        return 1, "no link matrix recorded (nvidia-smi topo -m / rocm-smi --showtopo): taken as 1", ()
    groups = link_groups(topo)
    size = len(groups[0]) if groups else 1
    notes: tuple[str, ...] = ()
    if groups and len(groups) > 1 and size > 1:
        alone = sorted(g for grp in groups[1:] for g in grp)
        notes = (f"{', '.join(alone)} not NVLinked to the largest group of {size} in {source}",)
    kind = "NVLink/xGMI" if size > 1 else "no NVLink/xGMI links (PCIe only)"
    return size, f"{kind} in {source}: largest linked group {size} of {gpus} GPUs", notes


def _rack_domain(gpu: str, host_domain: int, fabric: list[Fabric]) -> tuple[int, str] | None:
    """For a rack-scale GPU (GB200/GB300: catalog domain beyond one host) the domain across trays."""
    from autopar.catalog.loader import get_gpu

    spec = get_gpu(gpu)
    if (spec.scaleup_domain or 0) <= host_domain:
        return None
    if not fabric:
        return spec.scaleup_domain, (
            f"one {gpu} tray visible and no nvidia-smi -q Fabric section: the rack's NVLink domain "
            f"{spec.scaleup_domain} is inferred from the GPU model (NVL36 racks: 36)"
        )
    if all(f.up for f in fabric):
        clique = fabric[0].clique_id
        return spec.scaleup_domain, (
            f"NVLink fabric up (Fabric State Completed, clique {clique}); the clique spans trays this host "
            f"cannot count, so its size {spec.scaleup_domain} is the {gpu} rack's (NVL36 racks: 36)"
        )
    bad = next(f for f in fabric if not f.up)
    return host_domain, (
        f"NVLink fabric not up (State {bad.state}, Status {bad.status}, CliqueId {bad.clique_id}): "
        f"the domain is this tray's {host_domain} GPUs"
    )


def _nic_rate(nics: list[Nic], topo: Topo | None, gpus: int) -> tuple[float | None, str]:
    """Scale-out GB/s per GPU per direction: the rail NICs' line rate summed, over the GPUs, in bytes."""
    up = [n for n in nics if n.active]
    if not up:
        return None, "no active NIC port found (ibstat / sysfs): the GPU's catalog default is used"
    rails = set()
    if topo is not None and topo.nic_legend:
        for (row, col), cell in topo.cells.items():
            if row in topo.gpus and cell in GPU_NIC_PATHS and col in topo.nic_legend:
                rails.add(topo.nic_legend[col])
    chosen = [n for n in up if n.name in rails] or up
    basis = (
        "rail NICs (PIX/PXB to a GPU in nvidia-smi topo -m)" if len(chosen) < len(up) else "every active port"
    )
    total = sum(n.rate_gbps for n in chosen)
    layers = sorted({n.link_layer for n in chosen})
    gbps = total / gpus / BITS_PER_BYTE
    return gbps, (
        f"{len(chosen)} {'/'.join(layers)} port(s), {total:g} Gb/s in all ({basis}) / {gpus} GPUs / 8 bits "
        f"= {gbps:g} GB/s per GPU per direction"
    )


def _has_matrix(lines: list[str]) -> bool:
    """A `nvidia-smi topo -m` header: an indented line (or one after a blank line) starting with GPU0."""
    return any(
        _GPU0.match(ln.lstrip()) and (ln[:1].isspace() or (i > 0 and not lines[i - 1].strip()))
        for i, ln in enumerate(lines)
    )


def _topo_of(files: Mapping[str, str]) -> tuple[Topo | None, str]:
    for name in ("nvidia-smi-topo.txt", "env.txt"):
        if name in files and _has_matrix(text_lines(files[name], name)):
            return parse_nvidia_topo(files[name], name), name
    if "rocm-smi.txt" in files:
        return parse_rocm_topo(files["rocm-smi.txt"]), "rocm-smi.txt"
    return None, ""


def _nics_of(files: Mapping[str, str]) -> list[Nic]:
    if "ibstat.txt" in files:
        return parse_ibstat(files["ibstat.txt"])
    if "sysfs-infiniband.txt" in files:
        return parse_sysfs_ib(files["sysfs-infiniband.txt"])
    return []


def host_topology(files: Mapping[str, str]) -> HostTopology:
    """Everything the recorded outputs say about the host; one-line DataError when they cannot say it."""
    listed, list_source = gpu_list(files)
    topo, topo_source = _topo_of(files)
    if not listed:
        looked = "nvidia-smi-query.csv, nvidia-smi-q.txt, rocm-smi.txt (Card Series), env.txt (GPU N: NAME)"
        got = ", ".join(sorted(files)) or "no files"
        raise DataError(f"no GPU model found: looked in {looked}; got {got}")
    products = sorted({p for p, _ in listed})
    if len(products) > 1:
        raise DataError(
            f"{list_source}: mixed GPU models on one host ({', '.join(products)}); plan each separately"
        )
    gpus = len(listed)
    if topo is not None and topo.gpus and len(topo.gpus) != gpus:
        raise DataError(f"{list_source} lists {gpus} GPUs but {topo_source} has {len(topo.gpus)} (GPU0..)")
    gpu = catalog_gpu(products[0])
    domain, basis, notes = _domain(topo, gpus, topo_source)
    rack = _rack_domain(gpu, domain, parse_fabric(files.get("nvidia-smi-q.txt", "")))
    if rack is not None:
        domain, basis = rack
    nics = _nics_of(files)
    gbps, nic_basis = _nic_rate(nics, topo, gpus)
    numa = tuple(f"{g}: CPUs {c}, NUMA {n}" for g, (c, n) in (topo.affinity.items() if topo else ()))
    return HostTopology(
        product=products[0],
        gpu=gpu,
        gpus_per_host=gpus,
        nvlink_domain=domain,
        domain_basis=basis,
        memory_mib=listed[0][1],
        nics=tuple(nics),
        internode_gbps=gbps,
        nic_basis=nic_basis,
        numa=numa,
        sources=tuple(sorted(files)),
        notes=notes,
    )


def describe(host: HostTopology, hosts: int = 1) -> ClusterDescription:
    """The cluster of `hosts` such hosts, as flags and (when one matches) a `--cluster` shorthand."""
    from autopar.catalog.clusters import list_systems

    if hosts < 1:
        raise DataError(f"detect:COUNT: COUNT={hosts} must be at least 1 host")
    num = hosts * host.gpus_per_host
    shorthand = None
    for s in list_systems():
        if (s.gpu, s.gpus_per_node, s.nvlink_domain) == (host.gpu, host.gpus_per_host, host.nvlink_domain):
            if num % s.unit_gpus == 0:
                shorthand = f"{s.name}:{num // s.unit_gpus}"
            break
    return ClusterDescription(
        host.gpu, host.gpus_per_host, host.nvlink_domain, host.internode_gbps, num, shorthand
    )
