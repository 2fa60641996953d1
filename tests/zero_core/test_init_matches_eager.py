"""zero_core.Init builds exactly the weights eager construction builds.

- Hugging Face models (GPT-2, GPT-NeoX, Llama, BERT, T5) initialise their weights in
  `post_init`, after their submodules were built and partitioned; plain module trees
  re-initialise built children (`nn.init.*`, `.data` writes, indexing, `.data = ...`, a
  copy between two modules' weights), tie weights after building, or initialise in
  `reset_parameters`. Built under `Init` on 2 ranks whose random seeds differ, every model
  gathers to the state dict that rank 0's seed gives an eagerly built one, bit for bit.
- Gathering for that initialisation keeps at most one module whole at a time: no rank ever
  holds the whole model, and a plain tree peaks at its largest module plus the shards.
- The first loss of a stage-3 bf16 GPT-2 run is the same with and without `Init`.
- Units are named after their modules' paths; changes Init cannot carry out fail with the
  parameter's path and the fix.
"""
from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn
from zero_plugins import ZeroError

from engine_helpers import module_numels

SEED = 1234
HIDDEN = 32
VOCAB = 100
CONFIG = {"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 3,
                                                                       "stage3_param_persistence_threshold": 0}}
TRAIN_CONFIG = {**CONFIG, "bf16": {"enabled": True}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(HIDDEN)
        self.up = nn.Linear(HIDDEN, 2 * HIDDEN)
        self.down = nn.Linear(2 * HIDDEN, HIDDEN)


class Tree(nn.Module):
    """Re-initialises its children after they were built, in the ways user code does."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN, padding_idx=0)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.proj = nn.Linear(HIDDEN, HIDDEN)
        self.head = nn.Linear(HIDDEN, HIDDEN)
        nn.init.normal_(self.embed.weight, std=0.02)
        self.embed.weight.data[self.embed.padding_idx].zero_()
        for block in self.blocks:
            nn.init.xavier_uniform_(block.up.weight)  # reads the weight's dim() and size()
            nn.init.zeros_(block.up.bias)
            block.down.weight.data.normal_(mean=0.0, std=0.01)
            block.down.bias.data.fill_(0.1)
        self.proj.bias.data = torch.full_like(self.proj.bias, 0.5)
        self.head.weight.data.copy_(self.proj.weight.data)  # head's .data is taken before proj is gathered


class Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.body = nn.Linear(HIDDEN, HIDDEN)
        self.head = nn.Linear(HIDDEN, VOCAB, bias=False)
        self.head.weight = self.embed.weight
        nn.init.normal_(self.head.weight, std=0.02)  # the shared weight, through the other module


class Scale(nn.Module):
    """Initialises in reset_parameters, as torch's own layers do."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(HIDDEN, HIDDEN))
        self.gain = nn.Parameter(torch.empty(HIDDEN))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.orthogonal_(self.weight)
        nn.init.uniform_(self.gain, 0.5, 1.5)


class Resettable(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = Scale()
        self.second = Scale()
        self.out = nn.Linear(HIDDEN, HIDDEN)
        for module in self.children():  # and again once built, as a re-initialisation helper does
            module.reset_parameters()


def build(name: str) -> nn.Module:
    import transformers as hf

    small = {"vocab_size": VOCAB, "bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0}
    layers = {"hidden_size": HIDDEN, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 2 * HIDDEN,
              "max_position_embeddings": 16, **small}
    builders = {
        "gpt2": lambda: hf.GPT2LMHeadModel(hf.GPT2Config(n_embd=HIDDEN, n_layer=2, n_head=2, n_positions=16, **small)),
        "gpt_neox": lambda: hf.GPTNeoXForCausalLM(hf.GPTNeoXConfig(**layers)),
        "llama": lambda: hf.LlamaForCausalLM(hf.LlamaConfig(num_key_value_heads=1, **layers)),
        "bert": lambda: hf.BertForMaskedLM(hf.BertConfig(**layers)),
        "t5": lambda: hf.T5ForConditionalGeneration(hf.T5Config(d_model=HIDDEN, d_kv=16, d_ff=2 * HIDDEN, num_layers=2,
                                                                  num_heads=2, decoder_start_token_id=0, **small)),
        "tree": Tree,
        "tied": Tied,
        "reset_parameters": Resettable,
    }
    return builders[name]()


HUGGING_FACE = ["gpt2", "gpt_neox", "llama", "bert", "t5"]
ARCHITECTURES = [*HUGGING_FACE, "tree", "tied", "reset_parameters"]


def gpt2_for_training() -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(n_embd=128, n_layer=2, n_head=4, vocab_size=1000, n_positions=64,
                                      bos_token_id=0, eos_token_id=0))


def _first_loss(rank: int, with_init: bool) -> float:
    import zero_core

    torch.manual_seed(SEED + rank)  # initialize starts every rank from rank 0's weights, Init as well
    if with_init:
        with zero_core.Init(config_dict_or_path=TRAIN_CONFIG):
            model = gpt2_for_training()
    else:
        model = gpt2_for_training()
    engine, _, _, _ = zero_core.initialize(model=model, config=TRAIN_CONFIG)
    ids = torch.randint(0, 1000, (2, 32), generator=torch.Generator().manual_seed(rank))
    loss = engine(input_ids=ids, labels=ids).loss.item()
    engine.destroy()
    return loss


def _run(rank: int, world_size: int) -> dict[str, Any]:
    import zero_core
    from zero_core import StorageTracker

    states, peaks, numels = {}, {}, {}
    unit_names: set[str] = set()
    for name in ARCHITECTURES:
        torch.manual_seed(SEED + rank)  # ranks draw different weights: Init keeps rank 0's, as initialize does
        with StorageTracker() as tracker:
            with zero_core.Init(config=CONFIG):
                model = build(name)
        peaks[name] = tracker.peak_bytes("cpu")
        with zero_core.GatheredParameters(list(model.parameters())):
            built = {key: value.clone() for key, value in model.state_dict().items()}
        if name == "gpt2":
            unit_names = {unit.name for p in model.parameters() if (unit := p._zero_unit) is not None}
        torch.manual_seed(SEED)
        eager = build(name)
        states[name] = (built, eager.state_dict())
        numels[name] = module_numels(eager)
    losses = {with_init: _first_loss(rank, with_init) for with_init in (True, False)}
    return {"states": states, "peaks": peaks, "numels": numels, "losses": losses, "unit_names": unit_names}


@pytest.fixture(scope="module")
def results() -> list[dict[str, Any]]:
    from multirank import run_ranks

    return run_ranks(_run, 2, timeout=180)


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_init_builds_the_eager_weights(results: list[dict[str, Any]], name: str) -> None:
    for rank, result in enumerate(results):
        built, eager = result["states"][name]
        assert built.keys() == eager.keys()
        for key, value in eager.items():
            assert torch.equal(built[key], value), f"rank {rank}: {key}"


def test_init_holds_one_module_whole_at_a_time(results: list[dict[str, Any]]) -> None:
    for result in results:
        for name in HUGGING_FACE:
            whole = sum(result["numels"][name]) * 4
            assert result["peaks"][name] < whole * 3 // 4, f"{name}: no rank ever holds the whole model"
        numels = result["numels"]["tree"]  # no library temporaries here: the exact bound
        assert result["peaks"]["tree"] <= max(numels) * 4 + sum(-(-n // 2) for n in numels) * 4


def test_first_loss_is_the_same_with_and_without_init(results: list[dict[str, Any]]) -> None:
    for result in results:
        assert result["losses"][True] == result["losses"][False]


def test_units_are_named_after_their_modules(results: list[dict[str, Any]]) -> None:
    assert {"transformer.wte", "transformer.h.0.attn.c_attn", "transformer.h.1.mlp.c_proj"} <= results[0]["unit_names"]


class Reshaping(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block()])
        self.blocks[0].up.weight.data = torch.zeros(3, 3)


def test_changing_a_built_parameters_shape_is_an_error(solo_process_group: None) -> None:
    import zero_core

    with pytest.raises(ZeroError, match=r"setting blocks\.0\.up\.weight\.data to a torch.float32 tensor of shape "
                                        r"\(3, 3\), but blocks\.0\.up\.weight is partitioned as torch.float32 \(64, 32\)"
                                        r" .* build the module with its final shape"):
        with zero_core.Init(config=CONFIG):
            Reshaping()


def test_a_tensor_kept_across_a_new_gather_is_an_error(solo_process_group: None) -> None:
    import zero_core

    with zero_core.Init(config=CONFIG):
        block = Block()
        kept = block.up.weight.data
        nn.init.zeros_(block.down.weight)  # up's unit is stored and freed; `kept` still holds its values
        nn.init.ones_(block.up.weight)  # gathered again and changed: `kept` is outdated
        with pytest.raises(ZeroError, match=r"a tensor taken from up\.weight .* is used after up\.weight was "
                                            r"gathered again"):
            kept.sum()
