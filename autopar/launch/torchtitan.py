"""torchtitan TOML job config for a model, workload and strategy.

Sections and keys: pytorch/torchtitan torchtitan/config/job_config.py at the targeted tag (the
schema in autopar/data/launch_schemas/ records the commit); model names and flavors:
torchtitan/models/<name>/__init__.py. Tests parse every generated file with tomllib and check it
against that schema and the trainer's own layout rules (autopar.launch.schema).
"""

from __future__ import annotations

import json

from autopar.knobs import implied_schedule
from autopar.launch.megatron import CHECKPOINT_INTERVAL
from autopar.launch.schema import load_schema, schema_source
from autopar.launch.split import strategy_split, torchtitan_split
from autopar.layouts import STACKS, ep_overlap_note, family_rules, stack_notes, stack_rules
from autopar.specs import ClusterSpec, ModelSpec, Strategy, Workload
from autopar.text import one_line

# autopar catalog model -> torchtitan (model name, flavor) with the same architecture.
TORCHTITAN_MODELS: dict[str, tuple[str, str]] = {
    "Llama-3-8B": ("llama3", "8B"),
    "Llama-3.1-8B": ("llama3", "8B"),
    "Llama-3-70B": ("llama3", "70B"),
    "Llama-3.1-70B": ("llama3", "70B"),
    "Llama-3.1-405B": ("llama3", "405B"),
    "DeepSeek-V2": ("deepseek_v3", "236B"),
    "DeepSeek-V3": ("deepseek_v3", "671B"),
    "Qwen3-8B": ("qwen3", "8B"),
    "Qwen3-30B-A3B": ("qwen3", "30B-A3B"),
    "Qwen3-235B-A22B": ("qwen3", "235B-A22B"),
    "GPT-OSS-20B": ("gpt_oss", "20b"),
    "GPT-OSS-120B": ("gpt_oss", "120b"),
}


def torchtitan_model(model: ModelSpec, version: str) -> tuple[str, str] | None:
    """The torchtitan (name, flavor) of this model in that release, or None."""
    hit = TORCHTITAN_MODELS.get(model.name)
    if hit is None:
        return None
    name, flavor = hit
    return hit if flavor in load_schema("torchtitan", version)["models"].get(name, []) else None


def _toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return json.dumps(str(v))


def _data_parallel(s: Strategy) -> tuple[int, int, str, list[str]]:
    """(replicate, shard, fsdp_reshard_after_forward, notes) for the strategy's ZeRO stage."""
    if s.zero == 3 and s.dp_shard:  # HSDP: FSDP2 over dp_shard ranks, replicated across (ParallelDims)
        etp = s.expert_tp if s.ep > 1 else 1
        if s.ep == 1 or (s.dp_shard * s.cp * s.tp) % (s.ep * etp) == 0:
            return s.dp // s.dp_shard, s.dp_shard, "default", []
        # torchtitan's ParallelDims folds EP into dp_shard*cp*tp, so the expert groups bound the shard degree
        return (
            1,
            s.dp,
            "default",
            [f"torchtitan folds ep={s.ep} into the FSDP shard mesh: full FSDP, not HSDP"],
        )
    if s.zero in (1, 2):
        note = ["torchtitan has no ZeRO-1; FSDP2 with reshard_after_forward=never is the nearest"] * (
            s.zero == 1
        )
        return 1, s.dp, "never", note
    if s.zero == 0:
        if s.tp * s.pp * s.cp == 1 and s.ep == 1:
            return s.dp, 1, "default", []
        # ParallelDims: experts shard over dp_shard*cp*tp, and DDP needs a 1-D mesh
        note = "torchtitan's DDP path needs a 1-D mesh without EP; the config uses FSDP2 (never reshard)"
        return 1, s.dp, "never", [note]
    return 1, s.dp, "default", []


# CP variant -> torchtitan [parallelism] context_parallel_rotate_method: "alltoall" passes K/V shards round the
# ring (the p2p form), "allgather" gathers them (the Llama 3 form); Ulysses and hierarchical CP have none.
_CP_ROTATE = {"p2p": "alltoall", "allgather": "allgather"}


def _parallelism(model: ModelSpec, workload: Workload, s: Strategy) -> tuple[dict[str, object], list[str]]:
    rep, shard, reshard, notes = _data_parallel(s)
    par: dict[str, object] = {
        "data_parallel_replicate_degree": rep,
        "data_parallel_shard_degree": shard,
        "fsdp_reshard_after_forward": reshard,
        "tensor_parallel_degree": s.tp,
        "pipeline_parallel_degree": s.pp,
        "context_parallel_degree": s.cp,
    }
    if s.tp > 1 and not s.sp:
        notes.append("torchtitan always applies sequence parallelism together with TP")
    if workload.tp_comm_overlap and s.tp > 1:
        par["enable_async_tensor_parallel"] = True  # only effective with [compile] enabled (added below)
    notes += stack_notes("torchtitan", s)  # the capability table (layouts.STACKS) the search also reads
    if s.cp > 1:
        rotate = _CP_ROTATE.get(s.cp_comm)
        if rotate is None:
            notes.append(f"cp_comm={s.cp_comm}: this config runs the ring (p2p) instead")
        par["context_parallel_rotate_method"] = rotate or "alltoall"
    ships = STACKS["torchtitan"].schedules
    if s.pp > 1 and s.pp_schedule not in ships:
        notes.append(f"pp_schedule={s.pp_schedule}: this config runs 1F1B instead")
    if s.pp > 1:
        par["pipeline_parallel_schedule"] = ships.get(s.pp_schedule) or ships[implied_schedule(s.vpp)]
        par["pipeline_parallel_microbatch_size"] = s.micro_batch
        par.update(torchtitan_split(model.layers, s.pp, s.vpp, _label_split(model.layers, s)))
    if model.is_moe:
        par["expert_parallel_degree"] = s.ep
        par["expert_tensor_parallel_degree"] = s.expert_tp if s.ep > 1 else 1
    return par, notes


def _dispatch(model: ModelSpec, workload: Workload, s: Strategy, version: str, notes: list[str]) -> dict:
    """The flex (DeepEP) dispatcher the estimate priced: [parallelism] expert_parallel_comm_backend = "deepep"
    where the release has it (v0.2.1 on); a note where it does not, and for an EP overlap torchtitan lacks."""
    if not (model.is_moe and s.ep > 1):
        return {}
    if workload.moe_ep_overlap:  # written by `launch --framework all`: the search ran on megatron
        notes.append(ep_overlap_note("torchtitan", True, s.ep, s.pp, s.vpp or 1, str(s.recompute)))
    if workload.moe_dispatcher != "flex":
        return {}
    fields = load_schema("torchtitan", version)["sections"].get("parallelism", {})
    if "deepep" in fields.get("expert_parallel_comm_backend", {}).get("choices", ()):
        return {"expert_parallel_comm_backend": "deepep"}
    notes.append(
        f"moe_dispatcher=flex: torchtitan {version} has no DeepEP backend (expert_parallel_comm_backend, "
        "from v0.2.1); this config runs its standard all-to-all"
    )
    return {}


def _label_split(layers: int, s: Strategy) -> tuple[int, ...] | None:
    """Layers per stage of the strategy's own uneven split (first/last stages, account-for options), or None
    for the most even one (also with virtual stages: Megatron interleaves even chunks only)."""
    uneven = s.pp_first_layers is not None or s.pp_last_layers is not None
    if s.vpp > 1 or not (uneven or s.pp_account_embedding or s.pp_account_loss):
        return None
    split = strategy_split(layers, s)
    counts = split.layers_per_rank if split is not None else ()
    # a split Megatron rejects (layers left over, --allow-uneven) keeps torchtitan's even one
    return counts if len(counts) == s.pp and sum(counts) == layers else None


# Workload.fp8_recipe (what the estimate assumed) -> torchtitan v0.2.2 (converter, its config section, recipe
# name): torchtitan/components/quantization/float8.py registers quantize.linear.float8 (torchao Float8Linear
# recipes tensorwise, rowwise, rowwise_with_gw_hp: config/job_config.py Float8Linear.recipe_name) and mx.py
# quantize.linear.mx (MXLinear, recipe mxfp8_cublas). torchao has no delayed scaling: tensorwise (dynamic, i.e.
# current scaling) runs instead, with a note.
TORCHTITAN_FP8: dict[str, tuple[str, str, str]] = {
    "delayed": ("quantize.linear.float8", "quantize.linear.float8", "tensorwise"),
    "current": ("quantize.linear.float8", "quantize.linear.float8", "tensorwise"),
    "rowwise": ("quantize.linear.float8", "quantize.linear.float8", "rowwise"),
    "mxfp8": ("quantize.linear.mx", "quantize.linear.mx", "mxfp8_cublas"),
}


# torchtitan's defaults train on its bundled test data and tokenizer (job_config.py Training.dataset "c4_test",
# Model.hf_assets_path "./tests/assets/tokenizer"), silently. The TOML names values that stop the run saying
# what to set: hf_datasets/text_datasets.py _validate_dataset raises "Dataset <name> is not supported" and
# components/tokenizer.py HuggingFaceTokenizer "Tokenizer path '<path>' does not exist".
UNSET_DATASET = "SET --training.dataset (a torchtitan.hf_datasets name) and --training.dataset_path"
UNSET_TOKENIZER = "SET --model.hf_assets_path (your Hugging Face tokenizer folder)"


def _data_and_checkpoint() -> tuple[dict[str, object], dict[str, object], dict[str, object]]:
    """([model], [training], [checkpoint]) entries: data and tokenizer to set, checkpoints every
    CHECKPOINT_INTERVAL steps into dump_folder/checkpoint (torchtitan loads the latest one on restart)."""
    return (
        {"hf_assets_path": UNSET_TOKENIZER},
        {"dataset": UNSET_DATASET},
        {"enable": True, "folder": "checkpoint", "interval": CHECKPOINT_INTERVAL},
    )


def _fp8(
    workload: Workload, s: Strategy, notes: list[str]
) -> tuple[list[str], dict[str, dict[str, object]], bool]:
    """(converters, {section: body}, compile the model?) for the workload's FP8 recipe."""
    if workload.precision != "fp8":
        return [], {}, False
    converter, section, recipe = TORCHTITAN_FP8[workload.fp8_recipe]
    if workload.fp8_recipe == "delayed":
        notes.append(
            "torchtitan (torchao) has no delayed FP8 scaling: the config runs tensorwise current scaling"
        )
    # quantize.linear.mx: "TP not yet supported with torch.compile for mxfp8" (mx.py MXLinearConverter)
    compile_ok = not (converter == "quantize.linear.mx" and s.tp > 1)
    return [converter], {section: {"recipe_name": recipe}}, compile_ok


def torchtitan_unsupported(model: ModelSpec, s: Strategy, version: str) -> str | None:
    """Why torchtitan cannot run this model/strategy as configured, or None."""
    if torchtitan_model(model, version) is None:
        known = load_schema("torchtitan", version)["models"]
        listed = "; ".join(f"{n}: {', '.join(f for f in fl if 'debug' not in f)}" for n, fl in known.items())
        return (
            f"torchtitan {version} has no built-in model matching {model.name} (models: {listed}); "
            "register a TrainSpec for it and set [model] name/flavor"
        )
    # the limits the torchtitan search reads too (layouts.FAMILY_LIMITS, Stack.expert_tp_any)
    etp = [] if not model.is_moe else stack_rules("torchtitan", ep=s.ep, etp=s.expert_tp, tp=s.tp)
    rec = stack_rules("torchtitan", recompute=s.recompute or "none")  # Megatron's recompute modules
    refused = [v.message for v in (*family_rules("torchtitan", model, pp=s.pp, cp=s.cp), *etp, *rec)]
    return "; ".join(refused) or None


def torchtitan_toml(
    model: ModelSpec, cluster: ClusterSpec, workload: Workload, s: Strategy, header: str, version: str
) -> tuple[str, list[str]]:
    """The TOML job config and notes (call torchtitan_unsupported first)."""
    name, flavor = torchtitan_model(model, version) or ("", "")
    par, notes = _parallelism(model, workload, s)
    par.update(_dispatch(model, workload, s, version, notes))
    local = workload.global_batch // s.dp if s.pp > 1 else s.micro_batch
    training: dict[str, object] = {
        "local_batch_size": local,
        "global_batch_size": workload.global_batch,
        "seq_len": workload.seq_len,
        "mixed_precision_param": "bfloat16",
    }
    if workload.token_budget:
        training["steps"] = -(-int(workload.token_budget) // workload.tokens_per_step)
    data_model, data_training, checkpoint = _data_and_checkpoint()
    training.update(data_training)
    model_sec: dict[str, object] = {"name": name, "flavor": flavor, **data_model}
    sections: list[tuple[str, dict[str, object]]] = [("job", {"description": header}), ("model", model_sec)]
    sections += [("lr_scheduler", {"decay_type": "cosine"}), ("training", training), ("parallelism", par)]
    sections.append(("checkpoint", checkpoint))
    ac: dict[str, object] = {"mode": s.recompute}
    if s.recompute == "selective":
        ac["selective_ac_option"] = "op"
    sections.append(("activation_checkpoint", ac))
    converters, quant, fp8_compile = _fp8(workload, s, notes)
    if converters:
        model_sec["converters"] = converters
        sections += list(quant.items())
    async_tp = bool(par.get("enable_async_tensor_parallel"))
    if async_tp and workload.precision == "fp8" and not fp8_compile:
        del par["enable_async_tensor_parallel"]  # async TP needs compile, which mxfp8 with TP cannot take
        notes.append("mxfp8 with TP runs without torch.compile in torchtitan, so without async TP")
        async_tp = False
    if fp8_compile or async_tp:
        sections.append(("compile", {"enable": True, "components": ["model", "loss"]}))
    out = [
        "# " + one_line(f"torchtitan job config generated by autopar: {header}"),
        f"# Targets torchtitan {version}: {schema_source('torchtitan', version)},",
        "# torchtitan/config/job_config.py. Set on the command line (no default is assumed):",
        "#   --optimizer.lr LR --lr_scheduler.warmup_steps N"
        + ("" if workload.token_budget else " --training.steps N"),
        "#   --training.dataset NAME --training.dataset_path PATH --model.hf_assets_path TOKENIZER_DIR",
    ]
    for sec, body in sections:
        out.append(f"\n[{sec}]")
        out += [f"{k} = {_toml_value(v)}" for k, v in body.items()]
    return "\n".join(out) + "\n", notes
