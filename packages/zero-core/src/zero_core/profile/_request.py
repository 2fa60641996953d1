"""What `zero profile` runs: the model, the ds_config, and the settings (stage, memory_efficient_linear) to try."""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from zero_plugins import DEFAULT_ATTENTION, AttentionKind


@dataclass(frozen=True)
class Setting:
    """One run: a ZeRO stage, and at stage 3 optionally memory_efficient_linear (None: the config's)."""

    stage: int
    memory_efficient_linear: bool | None = None

    @property
    def label(self) -> str:
        if self.memory_efficient_linear is None:
            return f"stage {self.stage}"
        return f"stage {self.stage}, memory_efficient_linear {str(self.memory_efficient_linear).lower()}"

    def as_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "memory_efficient_linear": self.memory_efficient_linear}


@dataclass(frozen=True)
class DryRunTarget:
    """`--dry-run`: the device one rank stands for, its memory, and the ranks traced."""

    device: str  # "cuda" or "cpu"
    total_memory: int  # bytes of one device (--device-memory)
    ranks: tuple[int, ...]  # traced: rank 0, and the last rank, whose partitions hold the padding

    def as_dict(self) -> dict[str, Any]:
        return {"device": self.device, "device_memory": self.total_memory, "traced_ranks": list(self.ranks)}


@dataclass(frozen=True)
class ProfileRequest:
    """Everything the ranks need; picklable, so the spawned ranks get it whole."""

    model_name: str
    model_config: dict[str, Any]
    ds_config: dict[str, Any]
    settings: tuple[Setting, ...]
    nproc: int
    micro_batch: int
    seq_len: int
    steps: int
    lora_rank: int | None = None
    # Hugging Face's gradient checkpointing of every layer (model.activation_checkpointing_enable()); the
    # estimate is then asked for full checkpointing.
    gradient_checkpointing: bool = False
    attention: AttentionKind = DEFAULT_ATTENTION  # --attention: the model's attention kernel
    seed: int = 0
    timeout: float = 900.0
    notes: tuple[str, ...] = field(default=())
    dry_run: DryRunTarget | None = None

    @property
    def target_device(self) -> str | None:
        """The device a dry run stands for (None: a real run, on this machine's accelerator)."""
        return self.dry_run.device if self.dry_run is not None else None

    def config_for(self, setting: Setting) -> dict[str, Any]:
        """The ds_config with the setting's stage and flag, and the micro-batch, put in."""
        config = copy.deepcopy(self.ds_config)
        zero = config.setdefault("zero_optimization", {})
        zero["stage"] = setting.stage
        if setting.memory_efficient_linear is not None:
            zero["memory_efficient_linear"] = setting.memory_efficient_linear
        config["train_micro_batch_size_per_gpu"] = self.micro_batch
        # load_config has checked it: a whole number, or "auto"/absent, which DeepSpeed reads as 1.
        accumulation = config.get("gradient_accumulation_steps")
        accumulation = int(accumulation) if isinstance(accumulation, (int, float)) else 1
        config["train_batch_size"] = self.micro_batch * accumulation * self.nproc
        return config

    @property
    def precision(self) -> str:
        if self.ds_config.get("bf16", {}).get("enabled"):
            return "bf16"
        return "fp16" if self.ds_config.get("fp16", {}).get("enabled") else "fp32"
