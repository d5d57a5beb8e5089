"""Framework versions autopar's launch settings target, and validators against their vendored schemas.

The schemas in autopar/data/launch_schemas/ were extracted from each framework's source at a
recorded tag and commit by scripts/extract_launch_schemas.py (key names, types, choices; no code
copied). The validators check a generated file the way the framework would read it: every key or
flag known, every value of the right type and among the choices, plus the framework's own layout
rules that decide whether a run starts (restated, with their source, in autopar.launch.split
and below).
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import Any

from autopar.errors import SpecError
from autopar.knobs import MEGATRON_RECOMPUTE_MODULES
from autopar.launch.split import torchtitan_stage_count

# framework -> supported versions, the default (the newest release in the stored sources) first.
VERSIONS: dict[str, tuple[str, ...]] = {
    "megatron": ("core_v0.19.0", "core_v0.18.2", "core_v0.17.1"),
    "torchtitan": ("v0.2.2", "v0.2.1", "v0.2.0"),
    "deepspeed": ("v0.19.5", "v0.18.9"),
}
# torchrun/SLURM wrap Megatron-LM (and torchtitan), so they follow the Megatron version.
PLACEHOLDER = re.compile(r'^"?\$\{?([A-Z_][A-Z0-9_]*)(?::[^}]*)?\}?"?$')
# torch.distributed.pipelining schedule names torchtitan accepts (pytorch torch/distributed/
# pipelining/schedules.py get_schedule_class); the single-stage ones take one stage per rank.
TT_SINGLE_STAGE = ("1F1B", "GPipe")
TT_MULTI_STAGE = ("Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV")


def resolve_version(framework: str, version: str | None) -> str:
    """The version to target: the given one if supported, else the default (newest)."""
    known = VERSIONS[framework]
    if version is None:
        return known[0]
    if version not in known:
        raise SpecError(f"framework_version={version!r} for {framework}: supported {', '.join(known)}")
    return version


@cache
def load_schema(framework: str, version: str) -> dict[str, Any]:
    """The vendored schema of one framework version (repo, ref, commit and keys)."""
    name = f"{framework}-{version}.json"
    text = resources.files("autopar.data").joinpath("launch_schemas", name).read_text(encoding="utf-8")
    return json.loads(text)


def schema_source(framework: str, version: str) -> str:
    """'repo @ ref (commit)' for headers and citations."""
    s = load_schema(framework, version)
    return f"{s['repo']} {s['ref']} (commit {s['commit'][:12]})"


# --------------------------------------------------------------------------- Megatron-LM


def _check_value(flag: str, spec: dict[str, Any], words: list[str], placeholders: set[str]) -> list[str]:
    action = spec.get("action")
    if action in ("store_true", "store_false"):
        return [f"{flag} takes no value (got {' '.join(words)})"] if words else []
    nargs = spec.get("nargs")
    if not words:
        return [] if nargs in ("?", "*") else [f"{flag} needs a value"]
    if nargs is None and len(words) > 1:
        return [f"{flag} takes one value (got {' '.join(words)})"]
    out: list[str] = []
    for w in words:
        m = PLACEHOLDER.match(w)
        if m:
            if m[1] not in placeholders:
                out.append(f"{flag} {w}: placeholder ${m[1]} is not declared")
            continue
        out += _typed(flag, spec, w)
    return out


def _typed(flag: str, spec: dict[str, Any], w: str) -> list[str]:
    t, choices = spec.get("type"), spec.get("choices")
    try:
        v: Any = {"int": int, "float": float}.get(t or "", str)(w)
    except ValueError:
        return [f"{flag} {w}: not a {t}"]
    if isinstance(choices, list) and v not in choices and w not in map(str, choices):
        return [f"{flag} {w}: not one of {choices}"]
    return []


def parse_megatron_args(args: Sequence[str]) -> dict[str, list[str]]:
    """'--flag v1 v2' entries -> {flag: [values]}."""
    out: dict[str, list[str]] = {}
    for entry in args:
        words = shlex.split(entry, posix=False)
        out[words[0]] = words[1:]
    return out


def check_megatron(args: Sequence[str], version: str, placeholders: Sequence[str] = ()) -> list[str]:
    """Problems Megatron-LM's argument parser or validate_args would raise for these arguments."""
    known = load_schema("megatron", version)["arguments"]
    problems: list[str] = []
    seen: dict[str, str] = {}
    for entry in args:
        words = shlex.split(entry, posix=False)
        flag = words[0]
        spec = known.get(flag)
        if spec is None:
            problems.append(f"unknown Megatron-LM argument {flag}")
            continue
        if spec["dest"] in seen:
            problems.append(f"{flag} repeats {seen[spec['dest']]}")
        seen[spec["dest"]] = flag
        problems += _check_value(flag, spec, words[1:], set(placeholders))
    return problems + _megatron_rules(parse_megatron_args(args))


def _int(a: dict[str, list[str]], flag: str, default: int | None = None) -> int | None:
    v = a.get(flag)
    return int(v[0]) if v else default


def _megatron_rules(a: dict[str, list[str]]) -> list[str]:
    """Layout rules of validate_args / TransformerConfig.__post_init__ (core_v0.19.0), restated."""
    out: list[str] = []
    layers, pp = _int(a, "--num-layers", 0) or 0, _int(a, "--pipeline-model-parallel-size", 1) or 1
    lpv, vpr = (
        _int(a, "--num-layers-per-virtual-pipeline-stage"),
        _int(a, "--num-virtual-stages-per-pipeline-rank"),
    )
    first, last = (
        _int(a, "--decoder-first-pipeline-num-layers"),
        _int(a, "--decoder-last-pipeline-num-layers"),
    )
    emb = "--account-for-embedding-in-pipeline-split" in a
    loss = "--account-for-loss-in-pipeline-split" in a
    if "--pipeline-model-parallel-layout" in a:
        others = [lpv, vpr, first, last, emb or None, loss or None]
        return out + _layout_rule(a["--pipeline-model-parallel-layout"][0].strip("'\""), layers, pp, others)
    if lpv is not None and vpr is not None:
        out.append(
            "only one of --num-layers-per-virtual-pipeline-stage / --num-virtual-stages-per-pipeline-rank"
        )
    if (first or last) and (emb or loss):
        out.append("first/last pipeline num layers exclude account-for-embedding/loss")
    total = layers + emb + loss
    vpp = vpr
    if lpv is not None:
        if first or last:
            out.append("uneven stages need --num-virtual-stages-per-pipeline-rank")
        if total % pp or (total // pp) % lpv:
            return out + [f"{total} layers do not split into pp={pp} stages of {lpv}-layer virtual stages"]
        vpp = total // pp // lpv
    vpp = vpp if vpp and vpp > 1 else None
    if first is not None or last is not None:
        rest, mid = layers - (first or 0) - (last or 0), pp - (first is not None) - (last is not None)
        for name, n in (("first", first), ("last", last)):
            if n is not None and (n <= 0 or (vpp and n % vpp)):
                out.append(f"{name}-stage layers {n} must be > 0 and a multiple of vpp={vpp}")
        if bool(rest) != bool(mid) or (mid and rest % mid) or (mid and vpp and (rest // mid) % vpp):
            out.append(f"{rest} middle layers do not split over {mid} middle stages (vpp={vpp})")
    elif total % pp or (vpp and (total // pp) % vpp):
        out.append(f"{total} layers (with embedding/loss accounted) do not split over pp={pp} x vpp={vpp}")
    if vpp and pp < 2:
        out.append("interleaving needs pp > 1")
    if "--sequence-parallel" in a and (_int(a, "--tensor-model-parallel-size", 1) or 1) == 1:
        out.append("--sequence-parallel with tensor-model-parallel-size 1")
    if "--tp-comm-overlap" in a and "--sequence-parallel" not in a:
        out.append("--tp-comm-overlap needs --sequence-parallel")
    return out + _recompute_modules_rule(a) + _optimizer_rules(a) + _dispatcher_rule(a)


def _optimizer_rules(a: dict[str, list[str]]) -> list[str]:
    """validate_args (arguments.py:1803-1807 at core_v0.19.0, 1496-1500 at core_v0.17.1): CPU offload needs the
    precision-aware optimizer; OptimizerConfig.__post_init__ (optimizer_config.py:430-436): that needs the
    distributed optimizer, which --use-megatron-fsdp turns on itself."""
    out = []
    if "--optimizer-cpu-offload" in a and "--use-precision-aware-optimizer" not in a:
        out.append("--optimizer-cpu-offload needs --use-precision-aware-optimizer")
    sharded = "--use-distributed-optimizer" in a or "--use-megatron-fsdp" in a
    if "--use-precision-aware-optimizer" in a and not sharded:
        out.append(
            "--use-precision-aware-optimizer needs --use-distributed-optimizer (or --use-megatron-fsdp)"
        )
    return out


def _dispatcher_rule(a: dict[str, list[str]]) -> list[str]:
    """MoEFlexTokenDispatcher (token_dispatcher.py:1770 at core_v0.19.0, 1365 at core_v0.17.1): DeepEP needs
    expert TP (default: tensor-model-parallel-size) x expert-model-parallel-size > 1."""
    flex = a.get("--moe-token-dispatcher-type") == ["flex"]
    deepep = flex and a.get("--moe-flex-dispatcher-backend") == ["deepep"]
    etp = _int(a, "--expert-tensor-parallel-size", _int(a, "--tensor-model-parallel-size", 1)) or 1
    ep = _int(a, "--expert-model-parallel-size", 1) or 1
    return (
        ["--moe-flex-dispatcher-backend deepep needs expert tp x ep > 1"] if deepep and etp * ep == 1 else []
    )


def _recompute_modules_rule(a: dict[str, list[str]]) -> list[str]:
    """TransformerConfig.__post_init__ (core_v0.17.1 to core_v0.19.0): every --recompute-modules entry among the
    allowed modules; Megatron reads them only with --recompute-granularity selective."""
    mods = a.get("--recompute-modules")
    if mods is None:
        return []
    bad = [m for m in mods if m not in MEGATRON_RECOMPUTE_MODULES]
    out = [f"--recompute-modules {m}: not one of {', '.join(MEGATRON_RECOMPUTE_MODULES)}" for m in bad]
    if a.get("--recompute-granularity") != ["selective"]:
        out.append("--recompute-modules needs --recompute-granularity selective")
    return out


def _layout_rule(layout: str, layers: int, pp: int, others: list[object]) -> list[str]:
    """validate_args + PipelineParallelLayerLayout.validate_layer_layout (core_v0.19.0), restated."""
    out = []
    if any(x is not None for x in others):
        out.append("--pipeline-model-parallel-layout excludes the other pipeline-split options")
    stages = layout.replace(",", "").split("|")
    flat = "".join(stages)
    if len(stages) % pp:
        out.append(f"layout has {len(stages)} stages, not a multiple of pp={pp}")
    if not flat.startswith("E") or not flat.endswith("L") or flat.count("E") != 1 or flat.count("L") != 1:
        out.append("layout must start with one E (embedding) and end with one L (loss)")
    if flat.count("t") != layers:
        out.append(f"layout has {flat.count('t')} decoder layers, the model {layers}")
    if set(flat) - set("EtL"):
        out.append(f"layout has unknown layer types {sorted(set(flat) - set('EtL'))}")
    return out


# --------------------------------------------------------------------------- torchtitan


def _tt_type_ok(annotation: str, v: Any) -> bool:
    """Whether a TOML value fits a job_config.py annotation."""
    alts = [x.strip() for x in _split_union(annotation)]
    for t in alts:
        if t == "None":
            continue
        if t.startswith("Literal["):
            return True  # checked against choices
        if t == "bool" and isinstance(v, bool):
            return True
        if t == "int" and isinstance(v, int) and not isinstance(v, bool):
            return True
        if t == "float" and isinstance(v, (int, float)) and not isinstance(v, bool):
            return True
        if t == "str" and isinstance(v, str):
            return True
        if t.startswith("list[") and isinstance(v, list):
            return all(_tt_type_ok(t[5:-1], x) for x in v)
    return False


def _split_union(annotation: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in annotation:
        depth += ch == "["
        depth -= ch == "]"
        if ch == "|" and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return [*parts, cur]


def _flatten(doc: dict[str, Any], prefix: str = "") -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    leaves = {k: v for k, v in doc.items() if not isinstance(v, dict)}
    if prefix:
        out[prefix] = leaves
    for k, v in doc.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else k))
    return out


def check_torchtitan(text: str, version: str, num_gpus: int, layers: int) -> list[str]:
    """Problems torchtitan's JobConfig parsing and trainer set-up would raise for this TOML."""
    schema = load_schema("torchtitan", version)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        return [f"not valid TOML: {e}"]
    problems: list[str] = []
    for section, body in _flatten(doc).items():
        fields = schema["sections"].get(section)
        if fields is None:
            problems.append(f"unknown torchtitan section [{section}]")
            continue
        for key, v in body.items():
            f = fields.get(key)
            if f is None:
                problems.append(f"unknown key {key} in [{section}]")
            elif not _tt_type_ok(f["annotation"], v):
                problems.append(f"[{section}] {key} = {v!r} does not fit {f['annotation']}")
            elif "choices" in f and any(x not in f["choices"] for x in (v if isinstance(v, list) else [v])):
                problems.append(f"[{section}] {key} = {v!r} not one of {f['choices']}")  # list[Literal]: each
    return problems + _torchtitan_rules(doc, schema, num_gpus, layers)


def _torchtitan_rules(doc: dict[str, Any], schema: dict[str, Any], world: int, layers: int) -> list[str]:
    """ParallelDims._validate, the trainer's batch checks and the pipeline split (v0.2.2), restated."""
    out: list[str] = []
    model, par, tr = doc.get("model", {}), doc.get("parallelism", {}), doc.get("training", {})
    name, flavor = model.get("name", "llama3"), model.get("flavor", "debugmodel")
    if flavor not in schema["models"].get(name, []):
        out.append(f"[model] {name}/{flavor} is not a registered torchtitan model flavor")
    if "debug" in str(flavor):
        out.append("[model] flavor is a debug model")
    rep, shard = par.get("data_parallel_replicate_degree", 1), par.get("data_parallel_shard_degree", -1)
    tp, pp, cp = (
        par.get(k, 1)
        for k in ("tensor_parallel_degree", "pipeline_parallel_degree", "context_parallel_degree")
    )
    if shard == -1:
        shard = world // (rep * cp * tp * pp)
    if rep * shard * cp * tp * pp != world:
        out.append(f"dp_replicate*dp_shard*cp*tp*pp = {rep * shard * cp * tp * pp} != world size {world}")
    ep, etp = par.get("expert_parallel_degree", 1), par.get("expert_tensor_parallel_degree", 1)
    if ep > 1 and (etp not in (1, tp) or (shard * cp * tp) % (etp * ep)):
        out.append(f"expert parallel ep={ep} etp={etp} does not fit dp_shard*cp*tp={shard * cp * tp}")
    local, gbs = tr.get("local_batch_size", 8), tr.get("global_batch_size", -1)
    if gbs > 0 and gbs % (local * rep * shard):
        out.append(
            f"global_batch_size {gbs} is not a multiple of local_batch_size*dp = {local * rep * shard}"
        )
    if pp > 1:
        sched = par.get("pipeline_parallel_schedule", "1F1B")
        single = sched in TT_SINGLE_STAGE
        if sched not in TT_SINGLE_STAGE + TT_MULTI_STAGE:
            out.append(f"unknown pipeline schedule {sched}")
        stages = torchtitan_stage_count(layers, pp, single, par)
        if stages % pp or (single and stages != pp) or (not single and stages // pp < 2):
            out.append(f"{stages} pipeline stages do not fit pp={pp} with schedule {sched}")
        mb = par.get("pipeline_parallel_microbatch_size", 1)
        if local % mb:
            out.append(f"local_batch_size {local} is not a multiple of the micro-batch {mb}")
    return out


# --------------------------------------------------------------------------- DeepSpeed


def check_deepspeed(text: str, version: str, num_gpus: int, model_parallel: int = 1) -> list[str]:
    """Problems DeepSpeed's config parsing (pydantic sections, extra keys forbidden) would raise."""
    schema = load_schema("deepspeed", version)
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as e:
        return [f"not valid JSON: {e}"]
    out = [f"unknown DeepSpeed key {k}" for k in cfg if k not in schema["top_level_keys"]]
    for section, spec in schema["sections"].items():
        body = cfg.get(section)
        if not isinstance(body, dict):
            continue
        names = {n for f, e in spec["fields"].items() for n in (f, e.get("alias")) if n}
        out += [f"unknown key {k} in {section} ({spec['class']})" for k in body if k not in names]
    dp = num_gpus // model_parallel
    tb, mb, ga = (
        cfg.get(k)
        for k in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
    )
    if None not in (tb, mb, ga) and tb != mb * ga * dp:
        out.append(f"train_batch_size {tb} != micro {mb} x accumulation {ga} x data-parallel {dp}")
    stage = cfg.get("zero_optimization", {}).get("stage", 0)
    if stage not in (0, 1, 2, 3):
        out.append(f"zero_optimization.stage {stage} not in 0..3")
    return out
