"""bench/scale_vs_fsdp2.py's smoke run: pythia-tiny, 2 ranks, 32 tokens, checkpointing on.

Both sides give a positive peak for the default variant, and the step_in_backward variant is either measured
or a row saying the engine refused its config (the opt-in may not exist yet), never a crash. The full-size run
is the bench's (docs/benchmarks.md, "Bytes per parameter at scale").
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "scale_vs_fsdp2.py"
COLUMNS = 9  # the main table's; the targets table has 5


def _number(cell: str) -> float:
    """The figure of a cell such as "0.082 (step)"."""
    return float(cell.split()[0])


def test_the_tiny_preset_gives_both_peaks_and_a_row_per_variant() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--model", "pythia-tiny", "--seq-len", "32", "--nproc", "2",
                           "--checkpointing", "on", "--zero-variants", "default,step_in_backward"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {cells[2]: cells for cells in ([cell.strip() for cell in line.split("|")[1:-1]]
                                          for line in done.stdout.splitlines() if line.startswith("| 2 | on |"))
            if len(cells) == COLUMNS}
    assert set(rows) == {"default", "step_in_backward"}, done.stdout
    default = rows["default"]
    zero_peak, fsdp2_peak, ratio, zero_states = (_number(default[3]), _number(default[4]), float(default[5]),
                                               _number(default[6]))
    assert zero_peak > 0 and fsdp2_peak > 0 and ratio > 0 and zero_states > 0, default
    assert float(default[8]) > 0, default  # FSDP2's model states
    opt_in = rows["step_in_backward"][3]
    assert opt_in.startswith("n/a (refused: ") or _number(opt_in) > 0, opt_in
