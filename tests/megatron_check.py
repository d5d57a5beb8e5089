"""Run Megatron-LM's own argument parser and validator on argument lists (Python 3.12, .venv-megatron).

Run by .venv-megatron/bin/python (scripts/megatron_venv.sh: megatron-core 0.19.0, whose wheel ships
megatron/training/arguments.py), not by the project's venv; tests/launch/test_megatron_parser.py calls it.

Input, a JSON list on stdin or in the file given as the only argument. Each item is an argv list (the words
after pretrain_gpt.py) or an object {"argv": [...], "world_size": N, "env": {...}, "capability": [9, 0]}:
world_size is what torchrun sets as WORLD_SIZE (default 1), env the variables the launch sets (autopar's
`env`, e.g. CUDA_DEVICE_MAX_CONNECTIONS), capability the GPU's compute capability (default Hopper, 9.0).
Output on stdout: a JSON list with one list of problems per item (empty = accepted). Each problem is the
exception Megatron raised and the Megatron source line that raised it.

What runs is what pretrain_gpt.py's start runs: parse_args(extra_args_provider=None) then
validate_args(args, {"tokenizer_type": "GPT2BPETokenizer"}) (pretrain_gpt.py `pretrain(...,
args_defaults={'tokenizer_type': 'GPT2BPETokenizer'})`; extra_args_provider is None without nvidia-modelopt).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import traceback
import types
from unittest import mock

# pretrain_gpt.py's args_defaults (see the docstring)
ARGS_DEFAULTS = {"tokenizer_type": "GPT2BPETokenizer"}
HOPPER = (9, 0)


def _where(exc: BaseException) -> str:
    """The innermost Megatron source line in the traceback ('megatron/training/arguments.py:1437')."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/megatron/" in f.filename]
    if not frames:
        return "?"
    f = frames[-1]
    return f"{f.filename[f.filename.rindex('/megatron/') + 1 :]}:{f.lineno}"


@contextlib.contextmanager
def _launch(world_size: int, env: dict[str, str], capability: tuple[int, int]):
    """The process environment torchrun would give rank 0, and the GPU Megatron asks CUDA about."""
    import torch

    saved = dict(os.environ)
    # torchrun's variables: parse_args reads RANK and WORLD_SIZE (arguments.py:143-144), and the in-process
    # restart group's default world size is WORLD_SIZE too (arguments.py:2436).
    os.environ.update({"RANK": "0", "WORLD_SIZE": str(world_size), **env})
    props = types.SimpleNamespace(major=capability[0], minor=capability[1])
    try:
        # No GPU here. validate_args asks CUDA for the device's compute capability in two places:
        # arguments.py:1339 `torch.cuda.get_device_capability()` (--moe-grouped-gemm needs >= 8), and
        # megatron/training/utils/common_utils.py:504 get_device_arch_version()
        # `torch.cuda.get_device_properties(torch.device("cuda:0")).major` (arguments.py:1414, 1444, 1484:
        # CUDA_DEVICE_MAX_CONNECTIONS before Blackwell, stream priorities from Blackwell on).
        with (
            mock.patch.object(torch.cuda, "get_device_capability", lambda *a, **k: capability),
            mock.patch.object(torch.cuda, "get_device_properties", lambda *a, **k: props),
        ):
            yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def problems(
    argv: list[str], world_size: int = 1, env: dict[str, str] | None = None, capability=HOPPER
) -> list[str]:
    """What Megatron's parse_args + validate_args raise for pretrain_gpt.py's argv (empty = accepted)."""
    from megatron.training.arguments import parse_args, validate_args

    err, out = io.StringIO(), io.StringIO()
    # stdout: validate_args prints every argument (_print_args); argparse writes its errors on stderr
    with (
        _launch(world_size, env or {}, tuple(capability)),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        try:
            with mock.patch.object(sys, "argv", ["pretrain_gpt.py", *argv]):  # parse_args reads sys.argv
                args = parse_args()
        except SystemExit:  # argparse's error(): usage and the message on stderr
            lines = err.getvalue().strip().splitlines() or ["exit"]
            return [f"parse_args: {lines[-1]}"]
        except Exception as e:  # an argument type function raising what argparse does not catch
            return [f"parse_args: {type(e).__name__}: {e} ({_where(e)})"]
        try:
            validate_args(args, dict(ARGS_DEFAULTS))
        except Exception as e:  # AssertionError mostly; ValueError, TypeError, ... are rejections too
            return [f"validate_args: {type(e).__name__}: {e} ({_where(e)})"]
    return []


def _check(item: list[str] | dict) -> list[str]:
    return problems(item) if isinstance(item, list) else problems(**item)


@contextlib.contextmanager
def _help_texts_read_once():
    """Speed only: parse_args builds Megatron's whole parser on every call, and each ArgumentGroupFactory
    (argument_utils.py:92) re-reads and re-parses its config dataclass's source for the help texts
    (argument_utils.py:233 _get_field_docstrings), ~0.1 s of the ~0.12 s a parse takes. Memoized per class:
    the same help texts, so the same parser."""
    from megatron.training.argument_utils import ArgumentGroupFactory

    original = ArgumentGroupFactory._get_field_docstrings
    seen: dict[type, dict[str, str]] = {}

    def once(self, cls: type) -> dict[str, str]:
        if cls not in seen:
            seen[cls] = original(self, cls)
        return dict(seen[cls])

    with mock.patch.object(ArgumentGroupFactory, "_get_field_docstrings", once):
        yield


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="?", help="JSON input (default: stdin)")
    opts = ap.parse_args()
    with open(opts.file) if opts.file else contextlib.nullcontext(sys.stdin) as f:
        items = json.load(f)
    # Megatron prints warnings (Apex missing, ...) on import: keep stdout for the answer
    real_stdout, sys.stdout = sys.stdout, sys.stderr
    try:
        with _help_texts_read_once():
            result = [_check(x) for x in items]
    finally:
        sys.stdout = real_stdout
    json.dump(result, sys.stdout)
    print()


if __name__ == "__main__":
    main()
