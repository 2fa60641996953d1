"""The torch dtype of each ds_config and placement-plan dtype name."""
from __future__ import annotations

import torch

COMPUTE_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
