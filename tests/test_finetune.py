"""LoRA (perf/finetune.py) and Megatron's account-for-embedding/loss inference in run records."""

from __future__ import annotations

from autopar.calibration.records import _account_options
from autopar.perf.finetune import adapter_params_per_layer, weight_grad_gemms
from autopar.specs import ModelSpec, Workload

LLAMA3_70B = ModelSpec(
    name="l70", layers=80, hidden=8192, ffn_hidden=28672, heads=64, kv_heads=8, vocab=128256
)


def test_adapter_params_llama3_70b_by_hand() -> None:
    # rank 32 x [(8192 + 80*128) + (64*128 + 8192) + (8192 + 2*28672) + (28672 + 8192)] = 32 x 137216
    assert adapter_params_per_layer(LLAMA3_70B, 32) == 32 * 137216


def test_frozen_base_weights_skip_wgrad() -> None:
    assert weight_grad_gemms(Workload(seq_len=4096, global_batch=32)) == 2
    assert weight_grad_gemms(Workload(seq_len=4096, global_batch=32, finetune="lora")) == 1


def test_lora_drops_grads_and_optimizer_states() -> None:
    from autopar.catalog import get_gpu
    from autopar.perf.estimate import estimate
    from autopar.specs import ClusterSpec, Strategy

    cluster = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=8)
    s = Strategy(
        tp=2, pp=4, sp=True, zero=1, micro_batch=1, recompute="none", vpp=20, pp_schedule="interleaved"
    )
    full = estimate(LLAMA3_70B, cluster, Workload(seq_len=4096, global_batch=32), s)
    lora = estimate(LLAMA3_70B, cluster, Workload(seq_len=4096, global_batch=32, finetune="lora"), s)
    assert lora.memory.weights == full.memory.weights
    # adapters are 80 x 4.39M / 70.6B = 0.5% of the parameters
    assert lora.memory.grads < 0.01 * full.memory.grads
    assert lora.memory.optimizer < 0.01 * full.memory.optimizer
    assert lora.step_time_s < full.step_time_s


def test_account_options_from_virtual_stage_count() -> None:
    assumed: list[str] = []
    assert _account_options(126, 16, 8, assumed) == {"pp_account_embedding": True, "pp_account_loss": True}
    assert assumed and "126 + 2 = 128" in assumed[0]
    # Megatron-Bridge's 405B recipe at VP4: 128 units over 64 virtual stages, 2 each (issue 11 item 3);
    # without the options Megatron would reject 126 layers over 64 virtual stages.
    both = {"pp_account_embedding": True, "pp_account_loss": True}
    assert _account_options(126, 16, 4, []) == both
    assert _account_options(126, 16, 1, []) == both  # 128 / 16 = 8 per stage
    assert _account_options(127, 16, 4, []) == {"pp_account_embedding": True, "pp_account_loss": False}
    assert _account_options(126, 16, 4, [], "torchtitan") == {}  # torchtitan splits modules its own way
    assert _account_options(80, 4, 20, []) == {}  # even split: no option
    assert _account_options(125, 16, 4, []) == {}  # neither + 1 nor + 2 splits: left to validation
