"""The model and GPU a run record describes: its architecture cells (else the catalog entry it names),
its block style and MoE fields, and its GPU (Grand Teton's 96 GB H100 where the notes say so).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from autopar.calibration.records.cells import cell, int_cell
from autopar.calibration.records.columns import ARCH_COLUMNS
from autopar.calibration.records.stack_columns import StackKnobs
from autopar.errors import AutoparError, DataError
from autopar.specs import GPUSpec, ModelSpec

# The dataset README: torchtitan's H100 rows ran on Meta's Grand Teton H100 (96 GB HBM2e, 500 W).
_GRAND_TETON_MARKERS = ("96gb hbm2e", "grand teton")


# The cells _build_model reads: rows agreeing on them describe the same model.
_MODEL_CELLS = (
    "model",
    *ARCH_COLUMNS,
    "kv_heads",
    "experts",
    "vocab",
    "head_dim",
    "topk",
    "shared_experts",
    "moe_ffn_hidden",
    "dropout_stated",  # the `dropout` stack column, validated (StackKnobs.dropout): None when silent
    "tied_stated",  # the `tied_embeddings` stack column, likewise
)


def model_from_row(row: Mapping[str, Any], knobs: StackKnobs, assumed: list[str]) -> ModelSpec:
    """The row's model; built once per distinct model cells (a batch repeats them row after row)."""
    said = {"dropout_stated": knobs.dropout, "tied_stated": knobs.tied_embeddings}
    cells = tuple(said[c] if c in said else cell(row, c) for c in _MODEL_CELLS)
    try:
        hash(cells)
    except TypeError:  # an unhashable cell (a list from JSONL): build it uncached, it errors as before
        return _build_model({**row, **said}, assumed)
    model, notes = _model_from_cells(cells)
    assumed.extend(notes)
    return model


@functools.lru_cache(maxsize=256)
def _model_from_cells(cells: tuple[Any, ...]) -> tuple[ModelSpec, tuple[str, ...]]:
    assumed: list[str] = []
    model = _build_model(dict(zip(_MODEL_CELLS, cells, strict=True)), assumed)
    return model, tuple(assumed)


def _catalog_model(name: str) -> ModelSpec | None:
    """The catalog entry of that name, if any (the catalog is optional here)."""
    try:
        from autopar.catalog import get_model

        return get_model(name)
    except (AutoparError, ImportError):
        return None


def _build_model(row: Mapping[str, Any], assumed: list[str]) -> ModelSpec:
    name = str(cell(row, "model") or "unnamed")
    have_arch = all(cell(row, c) is not None for c in ARCH_COLUMNS)
    catalog_model = _catalog_model(name)
    if not have_arch:
        if catalog_model is None:
            missing = [c for c in ARCH_COLUMNS if cell(row, c) is None]
            raise DataError(
                f"model '{name}' is not in the catalog and columns {', '.join(missing)} are empty"
            )
        assumed.append(f"architecture from catalog entry '{catalog_model.name}'")
        return catalog_model
    layers, hidden, ffn, heads = (int_cell(row, c) for c in ARCH_COLUMNS)
    vocab = int_cell(row, "vocab")
    if vocab is None:
        vocab = catalog_model.vocab if catalog_model else 51200
        assumed.append(f"vocab={vocab}")
    activation, tied, norm, dropout = _block_style(catalog_model, ffn, hidden, assumed)
    stated_dropout, stated_tied = row.get("dropout_stated"), row.get("tied_stated")
    if stated_dropout is not None and stated_dropout != dropout:
        dropout = bool(stated_dropout)
        assumed.append(f"dropout={str(dropout).lower()} (column 'dropout')")
    if stated_tied is not None and stated_tied != tied:
        tied = bool(stated_tied)
        assumed.append(f"tied_embeddings={str(tied).lower()} (column 'tied_embeddings')")
    fields: dict[str, Any] = dict(
        name=name,
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=int_cell(row, "kv_heads"),
        head_dim=int_cell(row, "head_dim"),
        ffn_hidden=ffn,
        vocab=vocab,
        activation=activation,
        tied_embeddings=tied,
        norm=norm,
        dropout=dropout,
    )
    return ModelSpec(**fields, **_moe_fields(row, ffn, catalog_model))


def _block_style(
    catalog_model: ModelSpec | None, ffn: int | None, hidden: int | None, assumed: list[str]
) -> tuple[str, bool, str, bool]:
    """(activation, tied embeddings, norm, dropout): the catalog entry's, else guessed from the FFN
    ratio (4*hidden: GPT-style GeLU, tied, LayerNorm; otherwise SwiGLU, RMSNorm), noted as assumed."""
    if catalog_model is not None:
        m = catalog_model
        return m.activation, m.tied_embeddings, m.norm, m.dropout
    gelu = ffn == 4 * hidden
    activation = "gelu" if gelu else "swiglu"
    assumed.append(f"activation={activation}, tied_embeddings={gelu} (ffn {'=' if gelu else '!='} 4*hidden)")
    return activation, gelu, ("layernorm" if gelu else "rmsnorm"), False


def _moe_fields(row: Mapping[str, Any], ffn: int | None, catalog_model: ModelSpec | None) -> dict[str, Any]:
    """The MoE fields of a row with experts (and the catalog's MLA/dense-layer fields for an MoE entry)."""
    experts = int_cell(row, "experts") or 0
    if not experts:
        return {}
    fields: dict[str, Any] = dict(
        experts=experts,
        topk=int_cell(row, "topk") or 2,
        shared_experts=int_cell(row, "shared_experts") or 0,
        moe_ffn_hidden=int_cell(row, "moe_ffn_hidden") or ffn,
    )
    if catalog_model is not None and catalog_model.is_moe:
        m = catalog_model
        fields.update(
            dense_layers=m.dense_layers,
            q_lora_rank=m.q_lora_rank,
            kv_lora_rank=m.kv_lora_rank,
            qk_nope_head_dim=m.qk_nope_head_dim,
            qk_rope_head_dim=m.qk_rope_head_dim,
            v_head_dim=m.v_head_dim,
        )
    return fields


def gpu_from_row(row: Mapping[str, Any], assumed: list[str]) -> GPUSpec:
    from autopar.catalog import get_gpu

    name = cell(row, "gpu")
    if name is None:
        raise DataError("column 'gpu' is empty")
    notes = str(cell(row, "notes") or "").lower()
    if str(name).lower().startswith("h100") and any(mk in notes for mk in _GRAND_TETON_MARKERS):
        assumed.append("gpu=H100-SXM-96GB-500W (notes: Grand Teton 96 GB HBM2e, 500 W)")
        return get_gpu("H100-SXM-96GB-500W")
    return get_gpu(str(name))
