"""Megatron-Core's EP all-to-all overlap applies only where TransformerConfig accepts it (layouts.ep_overlap_applies):
EP > 1, no full recompute and no "moe" recompute module, and with PP > 1 the interleaved schedule. Elsewhere
the requested overlap is neither priced nor written into the launch; the array model agrees with the scalar one.
Source: Megatron-LM core_v0.17.1 / core_v0.18.2 / core_v0.19.0 megatron/core/transformer/transformer_config.py,
`if self.overlap_moe_expert_parallel_comm:` block."""

from __future__ import annotations

import numpy as np
import pytest

from autopar.catalog import get_gpu, get_model
from autopar.layouts import ep_overlap_applies, ep_overlap_note
from autopar.perf import estimate
from autopar.perf.vector import estimate_columns
from autopar.search import build_space
from autopar.specs import ClusterSpec, Strategy, Workload

MODEL = get_model("Qwen3-30B-A3B")
CLUSTER = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=16)


def _wl(overlap: bool, framework: str = "megatron") -> Workload:
    return Workload(seq_len=4096, global_batch=64, moe_ep_overlap=overlap, framework=framework)


@pytest.mark.parametrize(
    ("ep", "pp", "vpp", "rec", "applies"),
    [
        (8, 1, 1, "none", True),
        (8, 2, 2, "selective", True),
        (8, 2, 1, "none", False),  # PP without virtual stages
        (8, 1, 1, "full", False),  # full recompute
        (1, 1, 1, "none", False),  # no expert parallelism: nothing to overlap
        (8, 1, 1, "sel:layernorm+moe_act", True),  # moe_act is not the "moe" module
    ],
)
def test_megatron_rules(ep: int, pp: int, vpp: int, rec: str, applies: bool) -> None:
    assert ep_overlap_applies("megatron", True, ep, pp, vpp, rec) is applies
    assert ep_overlap_applies("megatron", False, ep, pp, vpp, rec) is False
    assert bool(ep_overlap_note("megatron", True, ep, pp, vpp, rec)) is (ep > 1 and not applies)
    # no other stack ships the overlap
    assert ep_overlap_applies("torchtitan", True, ep, pp, vpp, rec) is False


@pytest.mark.parametrize(
    "strategy",
    [
        Strategy(tp=1, pp=1, ep=8, micro_batch=1, recompute="full", zero=1),
        Strategy(tp=1, pp=2, vpp=1, ep=8, micro_batch=1, recompute="none", zero=1),
    ],
)
def test_refused_overlap_is_not_priced(strategy: Strategy) -> None:
    on = estimate(MODEL, CLUSTER, _wl(True), strategy)
    off = estimate(MODEL, CLUSTER, _wl(False), strategy)
    assert on.step_time_s == off.step_time_s and on.time.ep_comm == off.time.ep_comm


def test_accepted_overlap_hides_the_all_to_all() -> None:
    s = Strategy(tp=1, pp=2, vpp=2, pp_schedule="interleaved", ep=8, micro_batch=1, recompute="none", zero=1)
    on = estimate(MODEL, CLUSTER, _wl(True), s)
    off = estimate(MODEL, CLUSTER, _wl(False), s)
    assert off.time.ep_comm > 0 and on.time.ep_comm < off.time.ep_comm


def test_arrays_equal_the_scalar_model_with_overlap_requested() -> None:
    wl = _wl(True)
    space = build_space(MODEL, CLUSTER, wl)
    seen: set[tuple[bool, bool, str]] = set()
    for block in space.column_blocks(4096):
        vest = estimate_columns(MODEL, CLUSTER, wl, block.columns)
        for i in range(0, len(block.columns), 7):
            s = space.point(block.start + i).strategy
            e = estimate(MODEL, CLUSTER, wl, s, check=False)
            k = s.knobs()
            seen.add((s.pp > 1, k.vpp > 1, k.recompute))
            assert vest.tokens_per_s_per_gpu[i] == pytest.approx(e.tokens_per_s_per_gpu, rel=1e-9)
    # the sample covers the cases the rule separates
    assert {(True, False), (True, True), (False, False)} <= {(a, b) for a, b, _ in seen}
    assert {"full", "none"} <= {r for _, _, r in seen}
    assert np.isfinite(vest.tokens_per_s_per_gpu).all()


@pytest.mark.parametrize(
    ("gpu", "n", "backend"), [("H100-SXM", 16, "deepep"), ("GB200", 72, "hybridep")]
)  # fmt: skip
def test_launch_writes_what_the_estimate_priced(gpu: str, n: int, backend: str) -> None:
    from autopar.launch.schema import VERSIONS, check_megatron
    from autopar.launch.settings import launch_settings

    cluster = ClusterSpec(gpu=get_gpu(gpu), num_gpus=n if gpu == "H100-SXM" else 64)
    wl = Workload(seq_len=4096, global_batch=64, moe_ep_overlap=True, moe_dispatcher="flex")
    ok = Strategy(tp=1, pp=2, vpp=2, pp_schedule="interleaved", ep=8, micro_batch=1, recompute="none", zero=1)
    ls = launch_settings(MODEL, cluster, wl, ok)
    args = ls.megatron_args
    assert "--moe-token-dispatcher-type flex" in args and f"--moe-flex-dispatcher-backend {backend}" in args
    assert "--overlap-moe-expert-parallel-comm" in args
    for version in VERSIONS["megatron"]:
        assert check_megatron(args, version, list(ls.placeholders)) == []
    refused = launch_settings(MODEL, cluster, wl, ok.model_copy(update={"recompute": "full"}))
    assert "--overlap-moe-expert-parallel-comm" not in refused.megatron_args
    assert any("refuses --overlap-moe-expert-parallel-comm with recompute=full" in x for x in refused.notes)


def test_launch_default_dispatcher_is_alltoall_without_overlap() -> None:
    from autopar.launch.settings import launch_settings

    s = Strategy(tp=1, pp=1, ep=8, micro_batch=1, recompute="none", zero=1)
    args = launch_settings(MODEL, CLUSTER, _wl(False), s).megatron_args
    assert "--moe-token-dispatcher-type alltoall" in args
    assert not any(a.startswith(("--overlap-moe", "--moe-flex")) for a in args)


def test_overlap_on_a_stack_without_it_is_an_error() -> None:
    from typer.testing import CliRunner

    from autopar.cli import app

    base = ["estimate", "--model", "Qwen3-30B-A3B", "--gpu", "H100-SXM", "--gpus", "8", "--seq-len", "4096"]
    r = CliRunner().invoke(
        app, [*base, "--global-batch", "64", "--moe-ep-overlap", "--framework", "torchtitan"]
    )
    assert r.exit_code == 2 and r.output.count("\n") == 1
    assert "--moe-ep-overlap applies to --framework megatron" in r.output and "torchtitan has no" in r.output
