"""DeepSpeed 0.19.8's estimator on its docs' example: 2851M params, 32M largest layer, 8 GPUs on 1 node.

Recorded from DeepSpeed itself (deepspeed.runtime.zero.stage_1_and_2 and .stage3): the tables
its *_all_cold functions print, and what its estimate_zero*_model_states_mem_needs return.
"""

TOTAL_PARAMS = 2851e6
LARGEST_LAYER_PARAMS = 32e6
GPUS_PER_NODE = 8

# estimate_zero2_model_states_mem_needs(TOTAL_PARAMS, GPUS_PER_NODE, 1, cpu_offload): (CPU bytes, GPU bytes)
ZERO2_NEEDS = {True: (136_848_000_000, 5_702_000_000), False: (136_848_000_000, 12_116_750_000)}
# estimate_zero3_model_states_mem_needs(TOTAL_PARAMS, LARGEST_LAYER_PARAMS, GPUS_PER_NODE), defaults otherwise:
# (CPU bytes, GPU bytes, largest-layer bytes)
ZERO3_NEEDS = (76_977_000_000, 128_000_000, 128e6)

# DeepSpeed's docs give ZeRO-2 without offload as 15.93GB per GPU (4P + 16P/N); its code does not.
DOCS_ZERO2_GPU_GB = "15.93"

ZERO2_TABLE = """\
Estimated memory needed for params, optim states and gradients for a:
HW: Setup with 1 node, 8 GPUs per node.
SW: Model with 2851M total params.
  per CPU  |  per GPU |   Options
  127.45GB |   5.31GB | offload_optimizer=cpu 
  127.45GB |  11.28GB | offload_optimizer=none
"""

ZERO3_TABLE = """\
Estimated memory needed for params, optim states and gradients for a:
HW: Setup with 1 node, 8 GPUs per node.
SW: Model with 2851M total params, 32M largest layer params.
  per CPU  |  per GPU |   Options
   71.69GB |   0.12GB | offload_param=cpu , offload_optimizer=cpu , zero_init=1
  127.45GB |   0.12GB | offload_param=cpu , offload_optimizer=cpu , zero_init=0
   63.72GB |   0.78GB | offload_param=none, offload_optimizer=cpu , zero_init=1
  127.45GB |   0.78GB | offload_param=none, offload_optimizer=cpu , zero_init=0
    1.43GB |   6.09GB | offload_param=none, offload_optimizer=none, zero_init=1
  127.45GB |   6.09GB | offload_param=none, offload_optimizer=none, zero_init=0
"""


def table_figures(table: str) -> list[tuple[str, str]]:
    """(per CPU, per GPU) of each row of a recorded table, in GB as printed: [("127.45", "5.31"), ...]."""
    rows = [line.split("|") for line in table.splitlines() if line.count("|") == 2 and "GB |" in line]
    return [(cpu.strip().removesuffix("GB"), gpu.strip().removesuffix("GB")) for cpu, gpu, _ in rows]
