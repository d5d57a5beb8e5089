"""Launch settings for a strategy: Megatron-LM args, torchtitan TOML, DeepSpeed JSON, torchrun + SLURM.

settings.py assembles them (`launch_settings`); megatron.py, torchtitan.py, deepspeed.py and slurm.py write
each framework's file; split.py places layers on pipeline stages; schema.py loads the vendored framework
schemas (autopar/data/launch_schemas/) they are checked against; labels.py reads a strategy label back.
The package needs only the specs, layouts and the performance model's pipeline/CP rules (import layer just
above perf). Imports are lazy so that reading a label does not load the writers.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FRAMEWORKS", "LaunchSettings", "launch_settings", "parse_strategy_label", "target_versions"]

_WHERE = {
    "FRAMEWORKS": "autopar.launch.settings",
    "LaunchSettings": "autopar.launch.settings",
    "launch_settings": "autopar.launch.settings",
    "target_versions": "autopar.launch.settings",
    "parse_strategy_label": "autopar.launch.labels",
}


def __getattr__(name: str) -> Any:
    """Import the public names on first use."""
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'autopar.launch' has no attribute '{name}'")
