"""CPU optimizers with DeepSpeed's CPU Adam, Adagrad and Lion constructors, over a fused one-pass C++
op (csrc/cpu_optim.cpp, built with ninja on first use) or torch's fused and foreach CPU kernels
where it is off or cannot build (see _native). Each param (a sub-group chunk, for the engine) is
one entry in the lists a kernel takes, so a step is one kernel call per param group and dtype."""
from ._adagrad import CPUAdagrad
from ._adam import CPUAdam
from ._lion import CPULion
from ._native import KERNEL_ENV, build_cpu_optimizer_op, cpu_optimizer_op_state

__all__ = ["CPUAdagrad", "CPUAdam", "CPULion", "KERNEL_ENV", "build_cpu_optimizer_op", "cpu_optimizer_op_state"]
