"""Our per-copy model: the stage contracts of DESIGN.md, offload, LoRA, activations and phases."""
from __future__ import annotations

import pytest
from zero_plugins import Category
from zero_estimate import (
    Cluster,
    EstimateError,
    LoraSpec,
    Training,
    TransformerShape,
    ZeroSettings,
    estimate,
    from_numbers,
    from_preset,
)

P = 1_000_000  # small enough that every bucket holds the whole model: min(RB, P) = P
N = 4
MODEL = from_numbers(P, largest_layer_params=100_000)
FOUR_GPUS = Cluster(gpus_per_node=N)


def _gpu(stage: int, phase: str, **zero) -> dict[str, int]:
    return estimate(MODEL, FOUR_GPUS, Training(), ZeroSettings(stage=stage, **zero)).by_category("gpu", phase)


@pytest.mark.parametrize(
    ("stage", "params", "master"),
    # stage 3 keeps no 16-bit partition of trainable params: its gathers cast the fp32 master
    [(0, 2 * P, 4 * P), (1, 2 * P, 4 * P // N), (2, 2 * P, 4 * P // N), (3, 0, 4 * P // N)],
)
def test_model_states_after_init_follow_the_stage_contracts(stage, params, master):
    after_init, step = _gpu(stage, "init"), _gpu(stage, "step")
    assert after_init.get("param.partition", 0) + after_init.get("param.persistent", 0) == params
    assert after_init["optim.master"] == master  # the fp32 master: 4 bytes of Adam's 12
    # torch makes the optimizer's state inside the first step: none after init, then Adam's m and v (8 of
    # the 12 bytes) and a 4-byte step count for the one master tensor counts give
    assert "optim.state" not in after_init
    assert step["optim.master"] + step["optim.state"] == 3 * master + 4


# stage 3 reduces straight into fp32 partitions, which the step reads in place
@pytest.mark.parametrize(("stage", "grads"), [(0, 2 * P), (1, 2 * P), (2, 2 * P // N), (3, 4 * P // N)])
def test_gradients_are_whole_below_stage_2_and_a_partition_from_stage_2(stage, grads):
    backward = _gpu(stage, "backward")
    # the ledger's names: whole grads are grad.full, a rank's slice grad.partition
    assert backward["grad.full" if stage < 2 else "grad.partition"] == grads
    assert ("grad.partition" if stage < 2 else "grad.full") not in backward
    if stage < 2:  # stages 0-1 reduce in place, in the whole gradients: no bucket of their own
        assert "grad.bucket" not in backward
    else:
        assert backward["grad.bucket"] == 2 * P  # reduce_bucket_size bounds it; this model is smaller


def test_the_optimizer_steps_on_an_fp32_copy_of_the_grads_and_stage_1_2_all_gather_in_place():
    step, backward = _gpu(2, "step"), _gpu(2, "backward")
    assert step["optim.grad"] == 4 * P // N and "optim.grad" not in backward
    # torch's foreach AdamW holds sqrt(v) for every stepped element during the step (the ledger's `other`)
    assert step["other"] == 4 * P // N and "other" not in backward
    # the engine all-gathers the updated partitions in place: no communication buffer, no `comm` category
    assert "comm" not in {category.value for category in Category}
    assert "grad.bucket" not in step


def test_step_temporaries_follow_torchs_optimizer_implementation():
    from zero_estimate._partitions import master_tensor_numels

    spec = from_numbers(3_000_000, largest_layer_params=1_000_000)  # bare counts: no layout
    layered = from_preset("bert-large")  # laid out module by module: the master tensors are known

    def other(model, impl, stage=1, **zero):
        result = estimate(model, FOUR_GPUS, Training(optimizer_impl=impl), ZeroSettings(stage=stage, **zero))
        return result.by_category("gpu", "step").get("other", 0)

    stepped = 3_000_000 // N
    assert other(spec, "foreach") == 4 * stepped  # sqrt(v) of every stepped element at once
    assert other(spec, "fused") == 0  # the fused kernels make no parameter-sized temporaries
    assert other(spec, "single-tensor") == 8 * stepped  # bare counts: one master tensor, sqrt(v) and quotient
    tensors = master_tensor_numels(layered, ZeroSettings(stage=1, reduce_bucket_size=5_000_000), N)
    assert tensors is not None and len(tensors) > 1
    expected = max(4 * previous + 8 * size for previous, size in zip([0, *tensors], tensors))
    assert other(layered, "single-tensor", reduce_bucket_size=5_000_000) == expected
    assert expected < other(layered, "foreach", reduce_bucket_size=5_000_000) * 3  # per tensor, not per model
    with pytest.raises(EstimateError, match="optimizer_impl"):
        Training(optimizer_impl="vectorized")


def test_partitions_round_up_as_zero_pads_the_last_rank():
    tiny = estimate(from_numbers(10), FOUR_GPUS, Training(), ZeroSettings(stage=3))
    assert tiny.by_category("gpu", "init")["optim.master"] == 4 * 3  # ceil(10/4) params of 4 bytes
    frozen = estimate(from_numbers(10, trainable_params=0), FOUR_GPUS, Training(), ZeroSettings(stage=3))
    assert frozen.by_category("gpu", "init")["param.partition"] == 2 * 3  # frozen params keep a 16-bit partition


def test_overlap_comm_doubles_the_reduce_bucket_when_the_model_spans_buckets():
    # The engine frees a bucket's buffer once its collective is waited for, at the next bucket's launch; with
    # overlap_comm that collective runs while the next bucket fills, so two buffers are alive.
    quarter = P // 4
    assert _gpu(2, "backward", reduce_bucket_size=quarter)["grad.bucket"] == 2 * quarter
    assert _gpu(2, "backward", reduce_bucket_size=quarter, overlap_comm=True)["grad.bucket"] == 2 * 2 * quarter
    assert _gpu(3, "backward", reduce_bucket_size=quarter)["grad.bucket"] == 2 * 2 * quarter  # on by default at 3
    # a model that is one bucket has nothing to overlap
    assert _gpu(2, "backward", overlap_comm=True)["grad.bucket"] == 2 * P


def test_stage_3_gathers_the_largest_layer_plus_prefetch_held_to_max_live():
    gathered = _gpu(3, "forward", stage3_prefetch_bucket_size=50_000, stage3_max_live_parameters=120_000)
    assert gathered["param.gathered"] == 2 * 120_000  # min(live, L + prefetch) = 120k, above L = 100k
    assert _gpu(3, "forward", stage3_max_live_parameters=0)["param.gathered"] == 2 * 100_000  # never below L
    assert "param.gathered" not in _gpu(3, "step")


def test_frozen_params_carry_no_grads_or_optimizer_state():
    lora = from_numbers(P, trainable_params=P // 10)
    backward = estimate(lora, FOUR_GPUS, Training(), ZeroSettings(stage=2)).by_category("gpu", "backward")
    assert backward["param.persistent"] == 2 * P
    assert backward["grad.partition"] == 2 * (P // 10) // N
    assert backward["optim.master"] + backward["optim.state"] == 12 * (P // 10) // N + 4  # + Adam's step count


def test_cpu_offload_moves_master_state_and_fp32_grads_to_the_host_and_pins_only_the_grads():
    result = estimate(MODEL, FOUR_GPUS, Training(), ZeroSettings(stage=2, offload_optimizer="cpu"))
    gpu = result.by_category("gpu", "step")
    assert not {"optim.master", "optim.state", "grad.partition", "optim.grad"} & set(gpu)
    # per GPU's process, as the ledger counts: one reduce bucket (P <= reduce_bucket_size), so one shard
    host = result.by_category("host", "step", per_rank=True)
    assert host == {"optim.master": 4 * P // N, "optim.state": 8 * P // N + 4}  # Adam's step count: 4 B a tensor
    pinned = result.by_category("host.pinned", "step", per_rank=True)
    assert pinned == {"grad.partition": -(-4 * P // N // 4096) * 4096}  # whole pages
    assert result.total("pinned", "step") == N * pinned["grad.partition"]  # a node holds one per GPU
    assert result.total("cpu", "step") == N * (sum(host.values()) + pinned["grad.partition"])
    unpinned = estimate(MODEL, FOUR_GPUS, Training(), ZeroSettings(stage=2, offload_optimizer="cpu", pin_memory=False))
    assert unpinned.total("pinned", "step") == 0
    assert unpinned.by_category("host", "step", per_rank=True)["grad.partition"] == 4 * P // N  # not rounded


def test_param_offload_and_nvme_put_partitions_on_their_devices():
    def blocks(nbytes: int) -> int:  # swap files and buffers take whole 4 KiB blocks (O_DIRECT)
        return -(-nbytes // 4096) * 4096

    shard = P // N  # one sub-group (sub_group_size 1e9) and one unit: bare counts
    zero = ZeroSettings(stage=3, offload_optimizer="nvme", offload_param="nvme", param_max_in_cpu=shard - 1)
    result = estimate(MODEL, FOUR_GPUS, Training(), zero)
    nvme = result.by_category("nvme", "init")
    # Adam's m and v are a file each; the step count stays in host memory
    assert nvme == {"param.partition": N * blocks(2 * shard), "optim.master": N * blocks(4 * shard),
                    "optim.state": N * 2 * blocks(4 * shard)}
    assert result.by_category("host", "init", per_rank=True)["optim.state"] == 4
    swap = result.by_category("host.pinned", "init")["swap.buffer"]
    assert swap == N * (5 * blocks(2 * shard) + 4 * blocks(4 * shard))  # param buffers + optimizer sub-group buffers
    assert "param.partition" not in result.by_category("gpu", "init")
    # within max_in_cpu (the default 1e9), the partition stays in host memory and no param buffers are made
    kept = estimate(MODEL, FOUR_GPUS, Training(), ZeroSettings(stage=3, offload_optimizer="nvme", offload_param="nvme"))
    assert "param.partition" not in kept.by_category("nvme", "init")
    pinned = kept.by_category("host.pinned", "init", per_rank=True)
    # both pinned in whole pages, here 4 KiB as the blocks
    assert pinned["param.partition"] == blocks(2 * shard) and pinned["swap.buffer"] == 4 * blocks(4 * shard)


def test_fp32_training_has_no_master_copy_and_four_byte_params():
    result = estimate(MODEL, FOUR_GPUS, Training(precision="fp32"), ZeroSettings(stage=1)).by_category("gpu", "step")
    assert "optim.master" not in result
    assert result["param.persistent"] == 4 * P and result["grad.full"] == 4 * P


@pytest.mark.parametrize(("optimizer", "state_bytes"), [("adam", 8), ("sgd-momentum", 4), ("sgd", 0)])
def test_optimizer_state_bytes_per_param(optimizer, state_bytes):
    result = estimate(MODEL, FOUR_GPUS, Training(optimizer=optimizer), ZeroSettings(stage=1))
    step_count = 4 if optimizer == "adam" else 0  # Adam's 4-byte step per master tensor (one from counts)
    assert result.by_category("gpu", "step").get("optim.state", 0) == state_bytes * P // N + step_count
    assert "optim.state" not in result.by_category("gpu", "init")  # made by the first step


def test_adafactor_keeps_rows_plus_columns_and_needs_shapes():
    spec = from_preset("gpt2-xl")
    result = estimate(spec, Cluster(), Training(optimizer="adafactor"), ZeroSettings(stage=0))
    assert result.by_category("gpu", "step")["optim.state"] == 4 * spec.factored_state_elements()
    assert spec.factored_state_elements() < spec.total_params // 100
    with pytest.raises(EstimateError, match="optimizer: adafactor's state depends on the parameter shapes"):
        estimate(MODEL, FOUR_GPUS, Training(optimizer="adafactor"), ZeroSettings(stage=1))


SHAPE = TransformerShape(num_layers=2, hidden_size=64, num_heads=4, vocab_size=100)
S, B = 32, 2


def _activations(phase: str = "forward", shape: TransformerShape = SHAPE, **training) -> int:
    result = estimate(from_numbers(P, shape=shape), Cluster(), Training(seq_len=S, micro_batch=B, **training))
    return result.by_category("gpu", phase)["activations"]


def test_activations_follow_korthikanti_34_sbh_plus_the_scores_eager_attention_keeps():
    linear = S * B * 64 * 34  # Korthikanti et al.'s 34sbh per layer, in 16 bits, dropout masks included
    # Per attention score (a*s*s*b of them) eager attention keeps the softmax in fp32 (4 B) and its 16-bit
    # cast (2 B); attention dropout adds a 1-byte mask and the dropped 16-bit copy: 9 B where the paper,
    # whose softmax is 16-bit, counts 5. A shape from counts alone does not say, so dropouts are counted.
    scores = 4 * S * S * B
    layer = linear + 9 * scores
    # The 16-bit logits; at the loss also Hugging Face's fp32 copy of them and its fp32 log-softmax.
    logits = S * B * 100 * (2 + 4 + 4)
    assert _activations(attention="eager") == 2 * layer + logits
    # a fused kernel (SDPA, the default, and flash) keeps an fp32 logsumexp per query and head instead
    assert _activations() == _activations(attention="flash") == 2 * (linear + 4 * 4 * S * B) + logits
    assert _activations(checkpointing="selective", attention="eager") == 2 * linear + logits
    # full checkpointing: the inputs, and one layer rebuilt while it runs (with its fp32 scores while its softmax
    # runs), or the loss: here the layer is larger
    checkpointed = _activations(checkpointing="full", attention="eager")
    assert layer > logits and checkpointed == 2 * (2 * S * B * 64) + layer + 4 * scores
    # fp32: 4-byte values (the 1-byte dropout masks of the paper's 34 stay 1 byte: 2 * 32 + 2), the softmax
    # (4 B), the mask and the dropped copy (1 + 4 B); no logits copy
    assert _activations(precision="fp32", attention="eager") == 2 * (66 * S * B * 64 + 9 * scores) + S * B * 100 * (4 + 4)
    # A model that drops nothing out (Pythia, Llama) keeps neither the masks nor the dropped copy.
    no_dropout = TransformerShape(2, 64, 4, 100, attention_dropout=False, hidden_dropout=False)
    assert _activations(shape=no_dropout, attention="eager") == 2 * (32 * S * B * 64 + 6 * scores) + logits
    # Backward starts with the saved log-softmax, the nll's fp32 gradient and the log-softmax's fp32 input
    # gradient; the logits are gone (a model whose gradients are smaller than that start, so backward peaks
    # there: _instants.py).
    small = estimate(from_numbers(10_000, shape=SHAPE), Cluster(), Training(seq_len=S, micro_batch=B, attention="eager"))
    assert small.by_category("gpu", "backward")["activations"] == 2 * layer + S * B * 100 * (4 + 4 + 4)
    # With 1M params the gradients at the end of backward outweigh every activation: backward peaks there,
    # when backward has freed the activations.
    large = estimate(from_numbers(P, shape=SHAPE), Cluster(), Training(seq_len=S, micro_batch=B))
    assert "activations" not in large.by_category("gpu", "backward")


def test_activations_live_only_in_forward_and_backward_and_no_stage_shrinks_them():
    per_stage = set()
    for stage in range(4):
        result = estimate(from_numbers(P, shape=SHAPE), FOUR_GPUS, Training(), ZeroSettings(stage=stage))
        per_stage.add(result.by_category("gpu", "backward")["activations"])
        assert "activations" not in result.by_category("gpu", "init")
        assert "activations" not in result.by_category("gpu", "step")
    assert len(per_stage) == 1


def test_every_line_uses_a_ledger_category_and_explains_itself():
    result = estimate(from_preset("llama-2-7b"), Cluster(8), Training(), ZeroSettings(stage=3, offload_optimizer="cpu"))
    assert {line.category for line in result.lines} <= set(Category)
    master = next(line for line in result.lines if line.category == "optim.master")
    # S: this rank's shards of llama's 227 units and small-param bucket, each padded to 8 ranks
    assert (master.location, master.formula, master.numbers) == ("host", "4 * S", "4 * 842,301,952")
    assert master.bytes == 4 * 842_301_952  # per GPU's process


def test_pythia_lora_stage_3_holds_less_after_init_but_more_in_forward_without_memory_efficient_linear():
    # The DeepSpeed report (docs/memory-model-examples.md): fp16, LoRA rank 128, 4 GPUs, ~1200 tokens.
    spec = from_preset("pythia-6.9b", lora=LoraSpec(128))
    training = Training(precision="fp16", seq_len=1200)
    zero = {"stage3_param_persistence_threshold": 10_000, "stage3_max_live_parameters": 30_000_000}
    stage2 = estimate(spec, FOUR_GPUS, training, ZeroSettings(stage=2, **zero))
    stage3 = estimate(spec, FOUR_GPUS, training, ZeroSettings(stage=3, memory_efficient_linear=False, **zero))
    fixed = estimate(spec, FOUR_GPUS, training, ZeroSettings(stage=3, **zero))
    assert stage3.total("gpu", "init") < stage2.total("gpu", "init") / 3
    assert stage3.total("gpu", "forward") > stage2.total("gpu", "forward")
    assert fixed.total("gpu", "forward") < stage2.total("gpu", "forward") * 0.7
    held = stage3.by_category("gpu", "forward")["param.gathered"]
    # Every linear weight, frozen bases included, but those of layer 0 that read the block's input: with the
    # embeddings frozen that input needs no gradient, so F.linear saves no weight there (_held.py).
    first_layer = 4096 * 3 * 4096 + 4096 * 16384  # query_key_value and the parallel MLP's dense_h_to_4h
    assert held == 2 * (spec.linear_weight_params(above=10_000) - first_layer)
    # autograd keeps them into backward, where the engine files them as held
    assert stage3.by_category("gpu", "backward")["param.gathered.held"] == held


def test_learned_positions_bound_the_sequence_length():
    assert estimate(from_preset("gpt2-xl")).seq_len == 1024
    with pytest.raises(EstimateError, match="seq_len: 2048 is longer than the 1024 positions gpt2-xl has learned"):
        estimate(from_preset("gpt2-xl"), training=Training(seq_len=2048))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: ZeroSettings(stage=4), "stage: must be 0, 1, 2 or 3 (got 4)"),
        (lambda: ZeroSettings(stage=0, offload_optimizer="cpu"), "offload_optimizer: offloading the optimizer needs"),
        (lambda: ZeroSettings(stage=2, offload_param="cpu"), "offload_param: offloading params needs ZeRO stage 3"),
        (lambda: ZeroSettings(stage=3, offload_param="disk"), "offload_param: unknown value 'disk'"),
        (lambda: Training(precision="fp8"), "precision: unknown value 'fp8'; choose from: fp32, bf16, fp16"),
        (lambda: Training(micro_batch=0), "micro_batch: must be at least 1 (got 0)"),
        (lambda: Cluster(gpus_per_node=0), "gpus_per_node: must be at least 1 (got 0)"),
        (lambda: from_numbers(-5), "total_params: must be at least 1 (got -5)"),
        (lambda: from_numbers(10, largest_layer_params=20), "largest_layer_params: 20 is more than the 10 total"),
    ],
)
def test_bad_settings_name_the_setting_and_the_allowed_values(make, message):
    with pytest.raises(EstimateError) as raised:
        make()
    assert message in str(raised.value)


def test_step_in_backward_holds_one_unit_gradient_and_nothing_at_the_step():
    from zero_estimate import from_preset
    from zero_estimate._partitions import master_tensor_numels
    from zero_estimate._states import state_lines

    # full checkpointing: the model states weigh more of the peak than the activations
    spec, training = from_preset("pythia-1.4b"), Training(checkpointing="full")
    normal, opted = (estimate(spec, FOUR_GPUS, training, ZeroSettings(stage=3, step_in_backward=flag))
                     for flag in (False, True))
    assert "grad.partition" not in opted.by_category("gpu", "step")
    assert "other" not in opted.by_category("gpu", "step"), "the step's temporaries come in backward, per unit"
    assert opted.peak("gpu")[1] < normal.peak("gpu")[1]
    # before the peak instants are chosen: one unit's fp32 gradient during backward, not the partition's
    lines, _ = state_lines(spec, FOUR_GPUS, training, ZeroSettings(stage=3, step_in_backward=True))
    (grads,) = [line for line in lines if line.category == "grad.partition"]
    largest = max(master_tensor_numels(spec, ZeroSettings(stage=3), N) or [0])
    assert (grads.bytes, grads.phases) == (4 * largest, ("backward",))
    step = normal.by_category("gpu", "step")
    assert opted.total("gpu", "step") == normal.total("gpu", "step") - step["grad.partition"] - step["other"]
    with pytest.raises(EstimateError, match="step_in_backward"):
        ZeroSettings(stage=2, step_in_backward=True)
