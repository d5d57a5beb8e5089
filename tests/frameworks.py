"""Feed autopar's launch files to the frameworks' own code (torchtitan, DeepSpeed) on CPU.

Each checker returns the problems the framework raised (empty = accepted). They run the framework's
parsing and validation code, not autopar's schema copies: torchtitan's ConfigManager, its model
registry (TrainSpec, flavor, update_from_config), ParallelDims, the pipeline stage validation of
pipeline_llm and the async-TP check; DeepSpeed's DeepSpeedConfig under a fake process group of the
launch's world size, with the mpu the training script passes when AutoTP is on. Where the framework
only checks a rule inside a function that needs real devices (the trainer's batch identity, the
parallelize functions' sequence divisor), the one-line rule is restated here with its source line.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import typing
from pathlib import Path
from unittest import mock

# Values torchtitan needs on the command line (the TOML leaves them to the user; autopar says so).
TORCHTITAN_CLI = ["--optimizer.lr", "3e-4", "--lr_scheduler.warmup_steps", "100", "--training.steps", "10"]


class _Reached(Exception):
    """Raised by the stubbed pipeline_module_split: pipeline_llm's checks all passed."""


def _type_problems(obj: object, path: str = "") -> list[str]:
    """Every JobConfig field whose value does not fit torchtitan's own annotation (the TOML path
    bypasses tyro's type conversion, so a wrong type would only fail deep in the trainer)."""
    import typeguard

    out: list[str] = []
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            out += _type_problems(value, f"{path}{f.name}.")
            continue
        try:
            typeguard.check_type(value, hints[f.name])
        except typeguard.TypeCheckError as e:
            out.append(f"{path}{f.name} = {value!r}: {e}")
    return out


def _pipeline_problems(cfg, parallel_dims, spec, model_args) -> list[str]:
    """torchtitan's own pipeline checks: pipelining support, pipeline_llm's stage-count validation
    (run up to the module split), the schedule's micro-batch divisibility and the stage FQNs."""
    from torch.distributed.pipelining.schedules import PipelineScheduleSingle
    from torchtitan.distributed import pipeline_parallel as ttpp

    if spec.pipelining_fn is None:  # Trainer.__init__ raises the same
        return [f"{cfg.model.name} does not support pipelining"]
    seen: dict[str, object] = {}

    def split(model, pp_mesh, schedule, device, names):
        seen["names"] = names
        raise _Reached

    dims = mock.Mock(pp=parallel_dims.pp, get_mesh=lambda name: None)
    try:
        with mock.patch.object(ttpp, "pipeline_module_split", split):
            ttpp.pipeline_llm(None, dims, cfg, "cpu", model_args, None, None)
    except _Reached:
        pass
    except (ValueError, AssertionError) as e:
        return [f"pipeline_llm: {e}"]
    out = []
    names = seen["names"]
    stages = len(names)
    if stages % parallel_dims.pp:  # pipeline_module_split._get_stage_indices
        out.append(f"{stages} stages not divisible by pp={parallel_dims.pp}")
    # pipeline_llm checks stages per rank against the schedule only for layers_per_stage; the same rule for
    # explicit module lists (a single-stage schedule runs the first of its stages only)
    single = issubclass(
        ttpp.get_schedule_class(cfg.parallelism.pipeline_parallel_schedule), PipelineScheduleSingle
    )
    per_rank = stages // parallel_dims.pp
    if (single and per_rank != 1) or (not single and per_rank < 2):
        out.append(f"{per_rank} stages per rank with schedule {cfg.parallelism.pipeline_parallel_schedule}")
    # build_pipeline_schedule: local batch must split into pipeline micro-batches
    if cfg.training.local_batch_size % cfg.parallelism.pipeline_parallel_microbatch_size:
        out.append("local_batch_size not divisible by pipeline_parallel_microbatch_size")
    # every module named once, and only modules torchtitan's own splitter would name for this model
    valid = {n for part in ttpp.generate_llm_fqn_per_model_part(1, model_args.n_layers, 0, 0) for n in part}
    flat = [n for part in names for n in part]
    if sorted(flat) != sorted(valid):
        out.append(f"stage modules {sorted(set(flat) ^ valid)[:5]} missing, extra or repeated")
    return out


def _converter_problems(cfg) -> list[str]:
    """Converters torchtitan has registered (ModelConvertersContainer looks each name up), and the check
    MXLinearConverter.__init__ makes before it needs a Blackwell GPU (components/quantization/mx.py)."""
    import torchtitan.components.quantization  # noqa: F401  (registers the converters)
    from torchtitan.protocols.model_converter import _registry_model_converter_cls as registry

    out = [f"model converter {c!r} is not registered" for c in cfg.model.converters if c not in registry]
    compiled = cfg.compile.enable and "model" in cfg.compile.components
    if (
        "quantize.linear.mx" in cfg.model.converters
        and compiled
        and cfg.parallelism.tensor_parallel_degree > 1
    ):
        out.append("TP not yet supported with torch.compile for mxfp8")
    return out


def torchtitan_config(toml_text: str, tmp: Path, *cli: str):
    """torchtitan's JobConfig for the TOML, parsed by its ConfigManager with the values the user sets."""
    from torchtitan.config import ConfigManager

    path = tmp / "job.toml"
    path.write_text(toml_text)
    return ConfigManager().parse_args(["--job.config_file", str(path), *TORCHTITAN_CLI, *cli])


def torchtitan_problems(toml_text: str, world: int, tmp: Path) -> list[str]:
    """What torchtitan's own code rejects in this job config for `world` ranks."""
    import torch
    from torchtitan.distributed.parallel_dims import ParallelDims
    from torchtitan.distributed.tensor_parallel import maybe_enable_async_tp
    from torchtitan.protocols.train_spec import get_train_spec

    try:
        cfg = torchtitan_config(toml_text, tmp)
        typed = _type_problems(cfg)
        if typed:
            return typed
        spec = get_train_spec(cfg.model.name)
        model_args = copy.deepcopy(spec.model_args[cfg.model.flavor])  # KeyError: unknown flavor
        model_args.update_from_config(cfg)
        p = cfg.parallelism
        dims = ParallelDims(
            dp_replicate=p.data_parallel_replicate_degree,
            dp_shard=p.data_parallel_shard_degree,
            cp=p.context_parallel_degree,
            tp=p.tensor_parallel_degree,
            pp=p.pipeline_parallel_degree,
            ep=p.expert_parallel_degree,
            etp=p.expert_tensor_parallel_degree,
            world_size=world,
        )
        flag = torch._inductor.config._micro_pipeline_tp
        try:
            maybe_enable_async_tp(cfg, None)
        finally:
            torch._inductor.config._micro_pipeline_tp = flag
    except (
        ValueError,
        KeyError,
        TypeError,
        AssertionError,
        NotImplementedError,
        RuntimeError,
        SystemExit,
    ) as e:
        return [f"{type(e).__name__}: {e}"]
    out = _converter_problems(cfg)
    batch = dims.dp_replicate * dims.dp_shard  # the "batch" mesh (ParallelDims.build_mesh)
    if cfg.training.global_batch_size % (cfg.training.local_batch_size * batch):  # train.py, Trainer.__init__
        out.append(f"global batch {cfg.training.global_batch_size} % (local x {batch} data-parallel) != 0")
    if cfg.training.seq_len % dims.seq_len_divisor:  # the parallelize functions' first assertion
        out.append(f"seq_len {cfg.training.seq_len} not divisible by {dims.seq_len_divisor} (TP x 2 CP)")
    if dims.pp > 1:
        out += _pipeline_problems(cfg, dims, spec, model_args)
    return out


class _DataParallelMpu:
    """The mpu a DeepSpeed training script with AutoTP passes to deepspeed.initialize (tensor-parallel
    groups of autotp_size): DeepSpeedConfig only asks it for the data-parallel world size."""

    def __init__(self, dp: int) -> None:
        self.dp = dp

    def get_data_parallel_world_size(self) -> int:
        return self.dp


@contextlib.contextmanager
def fake_world(world: int):
    """torch.distributed initialised with the fake backend as rank 0 of `world` ranks, and DeepSpeed's
    comm layer on it (without building DeepSpeed's shared-memory C++ op, which a config check never uses)."""
    import importlib

    import deepspeed
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    ds_torch = importlib.import_module("deepspeed.comm.torch")  # the module, not the `torch` it imports
    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    try:
        with mock.patch.object(ds_torch, "build_shm_op", lambda: None):
            deepspeed.init_distributed(dist_backend="fake", auto_mpi_discovery=False)
        yield
    finally:
        dist.destroy_process_group()


def deepspeed_problems(json_text: str, world: int) -> list[str]:
    """What DeepSpeedConfig rejects in this ds_config for `world` GPUs (call inside fake_world(world))."""
    from deepspeed.runtime.config import DeepSpeedConfig

    cfg = json.loads(json_text)
    tp = cfg.get("tensor_parallel", {}).get("autotp_size", 1)
    mpu = _DataParallelMpu(world // tp) if tp > 1 else None
    try:
        got = DeepSpeedConfig(cfg, mpu=mpu)
    except Exception as e:  # pydantic ValidationError, AssertionError, ValueError: all rejections
        return [f"{type(e).__name__}: {e}"]
    if got.world_size != world // tp:
        return [f"DeepSpeed counted {got.world_size} data-parallel ranks, expected {world // tp}"]
    return []
