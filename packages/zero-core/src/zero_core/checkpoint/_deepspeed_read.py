"""A DeepSpeed ZeRO checkpoint (stages 1-3, as DeepSpeed 0.19.8 writes it), read parameter by parameter.

One tag directory (`global_step<N>/`) holds `mp_rank_00_model_states.pt` (stage 3: one
`zero_pp_rank_<r>_mp_rank_00_model_states.pt` per rank) and one
`[bf16_]zero_pp_rank_<r>_mp_rank_00_optim_states.pt` per data-parallel rank. Every rank's
optimizer file holds, per flat group, its partition of the fp32 master and of each
optimizer state tensor (Adam's exp_avg, exp_avg_sq); the model states file names the
parameters of each flat group in order (`param_shapes`). The layouts (as zero_to_fp32.py
and the ZeRO optimizers' state_dict() define them):

- stages 1-2 (and BF16_Optimizer): one flat group per param group; its parameters lie one
  after the other (each followed by `param_alignment_paddings` elements, where saved), the
  whole padded to a multiple of the world size and cut into equal partitions, rank r's
  being the r-th. The fp32 partitions are saved without the trailing padding (ZeRO) or with
  it (BF16_Optimizer); the state tensors with it. Concatenated over ranks, in rank order,
  they are the flat group from its first element either way.
- stage 3: one flat group per sub-group; each parameter is cut into `ceil(numel / world)`
  elements per rank (the last padded), and a rank's flat group is its pieces of the
  sub-group's parameters one after the other.

Files are memory-mapped: a parameter's tensors are read when it is asked for, so no more
than one parameter's worth is ever assembled in memory.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from zero_plugins import ZeroError

from ._deepspeed_pickle import attributes, enum_value, load_file
from ._publish import DESCRIPTION

MODEL_STATES = "mp_rank_00_model_states.pt"
STAGE3_MODEL_STATES = "zero_pp_rank_{rank}_mp_rank_00_model_states.pt"
_OPTIM_FILE = re.compile(r"^(bf16_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_?optim_states\.pt$")
_UNSUPPORTED_FILES = {
    re.compile(r"^expp_rank_\d+_.*optim_states\.pt$|^(layer_\d+_)?expert_\d+_.*model_states\.pt$"):
        "mixture-of-experts checkpoints",
    re.compile(r"^layer_\d+-model_\d+-model_states\.pt$"): "pipeline-parallel checkpoints",
    re.compile(r"^mp_rank_(?!00_)\d+_model_states\.pt$"): "tensor-parallel (mp_rank > 0) checkpoints",
}


def is_deepspeed_checkpoint(directory: Path) -> bool:
    """A DeepSpeed tag directory: its model states file is there, and no zero description."""
    return not (directory / DESCRIPTION).exists() and (
        (directory / MODEL_STATES).is_file() or (directory / STAGE3_MODEL_STATES.format(rank=0)).is_file())


@dataclass
class Param:
    """Where a trainable parameter's fp32 values lie in its flat group."""

    name: str
    shape: list[int]
    flat: int  # the flat group (stages 1-2: param group; stage 3: sub-group)
    offset: int  # stages 1-2: first element in the flat group; stage 3: first element in each rank's partition

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass
class Flat:
    """One flat group: every rank's partition of the fp32 master and of each optimizer state tensor."""

    group: int  # the param group it belongs to
    master: list[torch.Tensor]  # per rank
    states: dict[str, list[torch.Tensor]] = field(default_factory=dict)  # name -> per rank, as long as master's
    step: Any = None


class DeepSpeedCheckpoint:
    """What the converter needs of one DeepSpeed tag directory; tensors come memory-mapped, per parameter."""

    def __init__(self, directory: Path, trust_checkpoint: bool = False) -> None:
        self.directory = directory
        self._trust = trust_checkpoint
        for pattern, what in _UNSUPPORTED_FILES.items():
            found = sorted(p.name for p in directory.iterdir() if pattern.match(p.name))
            if found:
                raise ZeroError(f"{directory} is one of DeepSpeed's {what} ({found[0]}); only data-parallel ZeRO "
                                "checkpoints (stages 1-3) can be imported")
        for folder, what in (("offloaded_tensors", "optimizer state offloaded to NVMe (kept in swap files)"),
                             ("zero", "universal checkpoints (ds_to_universal.py's output)")):
            if (directory / folder).is_dir():
                raise ZeroError(f"{directory} holds {what}, which cannot be imported; import a checkpoint saved "
                                "without NVMe optimizer offload, or the one the universal checkpoint was made from")
        stage3_file = directory / STAGE3_MODEL_STATES.format(rank=0)
        self.model_states: dict[str, Any] = load_file(stage3_file if stage3_file.is_file() else directory / MODEL_STATES,
                                                      trust_checkpoint=trust_checkpoint)
        optim_files = self._optim_files()
        self.world_size = len(optim_files)
        self._optim = [load_file(path, trust_checkpoint=trust_checkpoint)["optimizer_state_dict"]
                       for path in optim_files]
        first = self._optim[0]
        stage = enum_value(first.get("zero_stage", 1))  # BF16_Optimizer (stage 1) saves no stage
        self.stage = int(stage) if isinstance(stage, int) else 1
        counts = first.get("partition_count", self.world_size)
        if max(counts if isinstance(counts, list) else [counts]) != self.world_size:
            raise ZeroError(f"{directory} has {self.world_size} optimizer files but was saved by {counts} ranks: "
                            "a rank's file is missing (or a stale one from another run is there)")
        module: dict[str, Any] = self.model_states.get("module") or {}
        self.module = module
        self.buffer_names: list[str] = list(self.model_states.get("buffer_names") or [])
        self.shared: dict[str, str] = dict(self.model_states.get("shared_params") or {})
        self.flats: list[Flat] = []
        self.param_groups: list[dict[str, Any]] = []
        self.params: list[Param] = []
        if self.stage == 3:
            self._read_stage3()
        else:
            self._read_stage12()
        self.compute_dtype = self._compute_dtype()
        self.frozen = self._frozen()
        if not self.params and not self.frozen:
            raise ZeroError(f"{directory} holds no weights: its model states name no parameters (trainable or frozen), "
                            "so importing it would make an empty checkpoint; pass the tag directory of a complete "
                            "DeepSpeed save")
        self._rank_model_states: dict[int, dict[str, Any]] = {0: self.model_states}

    # --- files ---
    def _optim_files(self) -> list[Path]:
        found: dict[bool, dict[int, Path]] = {True: {}, False: {}}
        for path in self.directory.iterdir():
            match = _OPTIM_FILE.match(path.name)
            if match is None:
                continue
            if int(match.group(3)) != 0:
                raise ZeroError(f"{path} is a tensor-parallel rank's file (mp_rank {match.group(3)}); only data-"
                                "parallel ZeRO checkpoints can be imported")
            found[match.group(1) is not None][int(match.group(2))] = path
        files = found[True] or found[False]
        if not files:
            raise ZeroError(f"{self.directory} has no *_optim_states.pt files: only ZeRO checkpoints (stages 1-3) "
                            "can be imported (a stage-0 DeepSpeed checkpoint keeps its optimizer elsewhere)")
        missing = [rank for rank in range(max(files) + 1) if rank not in files]
        if missing:
            raise ZeroError(f"{self.directory} lacks the optimizer file of rank {missing[0]}")
        return [files[rank] for rank in range(len(files))]

    # --- stages 1-2 ---
    def _read_stage12(self) -> None:
        shapes: list[dict[str, Any]] = list(self.model_states.get("param_shapes") or [])
        for index, names in enumerate(shapes):
            flat = Flat(index, [sd["single_partition_of_fp32_groups"][index].reshape(-1) for sd in self._optim])
            base = self._optim[0]["base_optimizer_state"]
            if isinstance(base, dict):  # the torch optimizer's state_dict: one flat tensor per param group
                group = base["param_groups"][index]
                self.param_groups.append({k: v for k, v in group.items() if k != "params"})
                states = [sd["base_optimizer_state"]["state"].get(group["params"][0], {}) for sd in self._optim]
            else:  # elastic_checkpoint: the states of each group, unpadded; hyperparameters are not saved
                self.param_groups.append({})
                states = [sd["base_optimizer_state"][index] for sd in self._optim]
            self._add_states(flat, states, self._optim[0].get("base_optimizer_state_step"))
            self.flats.append(flat)
            saved_paddings = self._optim[0].get("param_alignment_paddings")  # absent from BF16_Optimizer's
            paddings = list(saved_paddings[index]) if saved_paddings else []
            offset = 0
            for position, (name, shape) in enumerate(names.items()):
                param = Param(name, [int(s) for s in shape], index, offset)
                self.params.append(param)
                offset += param.numel + (paddings[position] if position < len(paddings) else 0)
            available = sum(part.numel() for part in flat.master)
            if offset > available:
                raise ZeroError(f"{self.directory}: param group {index}'s parameters need {offset} elements, its "
                                f"fp32 partitions hold {available}; the model states and optimizer files disagree")

    # --- stage 3 ---
    def _read_stage3(self) -> None:
        base = self._optim[0]["optimizer_state_dict"]
        group_of: dict[int, int] = {}
        for group_index, group in enumerate(base["param_groups"]):
            self.param_groups.append({k: v for k, v in group.items() if k != "params"})
            for index in group["params"]:
                group_of[index] = group_index
        shapes: list[dict[str, Any]] = list(self.model_states.get("param_shapes") or [])
        for index, names in enumerate(shapes):
            flat = Flat(group_of.get(index, 0), [sd["fp32_flat_groups"][index].reshape(-1) for sd in self._optim])
            self._add_states(flat, [sd["optimizer_state_dict"]["state"].get(index, {}) for sd in self._optim], None)
            self.flats.append(flat)
            offset = 0
            for name, shape in names.items():
                param = Param(name, [int(s) for s in shape], index, offset)
                self.params.append(param)
                offset += math.ceil(param.numel / self.world_size)
            for rank, part in enumerate(flat.master):
                if part.numel() != offset:
                    raise ZeroError(f"{self.directory}: rank {rank}'s sub-group {index} holds {part.numel()} "
                                    f"elements, its parameters' partitions {offset}; the files disagree")

    def _add_states(self, flat: Flat, states: list[dict[str, Any]], saved_step: Any) -> None:
        for name, value in states[0].items():
            if name == "step":  # a float32 tensor, as torch's and zero's optimizers keep it (DeepSpeedCPUAdam: an int)
                flat.step = _step_tensor(value)
            elif isinstance(value, torch.Tensor) and value.dim() >= 1:
                parts = [state[name].reshape(-1)[: master.numel()] for state, master in zip(states, flat.master)]
                if all(part.numel() == master.numel() for part, master in zip(parts, flat.master)):
                    flat.states[name] = parts
        if flat.step is None and saved_step is not None:
            flat.step = _step_tensor(saved_step)

    # --- what the converter asks for ---
    def master(self, param: Param) -> torch.Tensor:
        return self._gather(self.flats[param.flat].master, param)

    def state(self, name: str, param: Param) -> torch.Tensor:
        return self._gather(self.flats[param.flat].states[name], param)

    def state_names(self) -> list[str]:
        return sorted({name for flat in self.flats for name in flat.states})

    def steps(self) -> list[Any]:
        """Per param group, the optimizer's step count (that of its first flat group holding one)."""
        steps: list[Any] = [None] * len(self.param_groups)
        for flat in self.flats:
            if flat.group < len(steps) and steps[flat.group] is None:
                steps[flat.group] = flat.step
        return steps

    def loss_scaler(self) -> dict[str, Any]:
        scaler = attributes(self._optim[0].get("loss_scaler"))
        state: dict[str, Any] = {"cur_scale": float(scaler.get("cur_scale", 1.0))}
        if scaler.get("dynamic"):
            state.update(cur_hysteresis=scaler.get("cur_hysteresis", scaler.get("delayed_shift", 1)),
                         cur_iter=scaler.get("cur_iter", 0), last_overflow_iter=scaler.get("last_overflow_iter", -1))
        return state

    def model(self, param: Param) -> torch.Tensor:
        """The compute-dtype weights: the module's (stages 1-2), or the fp32 master's cast (stage 3 saves none)."""
        saved = self.module.get(param.name)
        if isinstance(saved, torch.Tensor) and saved.numel() == param.numel:
            return saved.reshape(-1)
        return self.master(param).to(self.compute_dtype)

    def _gather(self, parts: list[torch.Tensor], param: Param) -> torch.Tensor:
        numel = param.numel
        if self.stage == 3:
            size = math.ceil(numel / self.world_size)
            return torch.cat([part[param.offset : param.offset + size] for part in parts])[:numel]
        pieces, start = [], 0
        for part in parts:
            lo, hi = max(param.offset, start), min(param.offset + numel, start + part.numel())
            if lo < hi:
                pieces.append(part[lo - start : hi - start])
            start += part.numel()
        return torch.cat(pieces) if len(pieces) != 1 else pieces[0]

    # --- model-level facts ---
    def _compute_dtype(self) -> torch.dtype:
        for param in self.params:
            saved = self.module.get(param.name)
            if isinstance(saved, torch.Tensor) and saved.is_floating_point():
                return saved.dtype
        config = self.model_states.get("ds_config") or {}
        if (config.get("bf16") or config.get("bfloat16") or {}).get("enabled"):
            return torch.bfloat16
        return torch.float16 if (config.get("fp16") or {}).get("enabled") else torch.float32

    def _frozen(self) -> dict[str, tuple[list[int], torch.Tensor | None]]:
        """Parameters no optimizer steps: name -> (shape, flat 16-bit weights, or None where they come in pieces)."""
        trainable = {param.name for param in self.params}
        skip = trainable | set(self.buffer_names) | set(self.shared)
        shapes = self.model_states.get("frozen_param_shapes")
        frozen: dict[str, tuple[list[int], torch.Tensor | None]] = {}
        if shapes is None:  # stage 1 saves no frozen shapes: the module holds them whole
            for name, value in self.module.items():
                if name not in skip and isinstance(value, torch.Tensor):
                    frozen[name] = (list(value.shape), value.reshape(-1))
            return frozen
        for name, shape in shapes.items():
            saved = self.module.get(name)
            numel = math.prod(int(s) for s in shape)
            whole = saved.reshape(-1) if isinstance(saved, torch.Tensor) and saved.numel() == numel else None
            frozen[name] = ([int(s) for s in shape], whole)
        return frozen

    def frozen_weights(self, name: str) -> torch.Tensor:
        shape, whole = self.frozen[name]
        if whole is not None:
            return whole
        pieces = []  # stage 3: every rank's model states file holds its partition of each frozen parameter
        for rank in range(self.world_size):
            if rank not in self._rank_model_states:
                self._rank_model_states[rank] = load_file(self.directory / STAGE3_MODEL_STATES.format(rank=rank),
                                                          trust_checkpoint=self._trust)
            pieces.append(self._rank_model_states[rank]["frozen_param_fragments"][name].reshape(-1))
        return torch.cat(pieces)[: math.prod(shape)]


def _step_tensor(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone().float()
    return torch.tensor(float(value)) if isinstance(value, (int, float)) else value
