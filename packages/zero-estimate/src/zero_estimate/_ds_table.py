"""The table DeepSpeed's `estimate_zero{2,3}_model_states_mem_needs_all_*` functions print.

Kept byte for byte, except the offload device: DeepSpeed formats `OffloadDeviceEnum.cpu`
with `:4`, which printed "cpu " up to Python 3.10 and "OffloadDeviceEnum.cpu" since; we
print "cpu " as its docs show.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

_GIB = 2**30
_CPU = f"{'cpu':4}"


@dataclass(frozen=True)
class DsRow:
    """One row of a DeepSpeed estimate table: per-CPU and per-GPU bytes for one option set.

    offload_param and zero_init are None in the ZeRO-2 table, which has no such options.
    """

    cpu_bytes: int
    gpu_bytes: int
    offload_optimizer: str
    offload_param: str | None = None
    zero_init: bool | None = None

    def options(self) -> str:
        def device(name: str) -> str:
            return _CPU if name == "cpu" else name

        parts = []
        if self.offload_param is not None:
            parts.append(f"offload_param={device(self.offload_param)}")
        parts.append(f"offload_optimizer={device(self.offload_optimizer)}")
        if self.zero_init is not None:
            parts.append(f"zero_init={1 if self.zero_init else 0}")
        return ", ".join(parts)

    def line(self) -> str:
        return f" {self.cpu_bytes / _GIB:7.2f}GB | {self.gpu_bytes / _GIB:6.2f}GB | {self.options()}"

    def as_dict(self) -> dict[str, object]:
        return {key: value for key, value in asdict(self).items() if value is not None}


def render(num_nodes: int, num_gpus_per_node: int, software: str, rows: list[DsRow]) -> str:
    """The whole printed table, as DeepSpeed's two print() calls write it (without the final newline)."""
    nodes = "nodes" if num_nodes > 1 else "node"
    gpus = "GPUs" if num_gpus_per_node > 1 else "GPU"
    lines = [
        "Estimated memory needed for params, optim states and gradients for a:",
        f"HW: Setup with {num_nodes} {nodes}, {num_gpus_per_node} {gpus} per node.",
        f"SW: {software}",
        "  per CPU  |  per GPU |   Options",
    ]
    return "\n".join(lines + [row.line() for row in rows])


def millions(count: float) -> str:
    """DeepSpeed truncates to whole millions: 2851598336 -> "2851M"."""
    return f"{int(count / 1e6)}M"
