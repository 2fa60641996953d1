"""CPU optimizers with nothing to compile: DeepSpeed's CPU Adam, Adagrad and Lion constructors over
torch's fused and foreach CPU kernels. Each param (a sub-group chunk, for the engine) is one entry
in the tensor lists those kernels take, so a step is one kernel call per param group."""
from ._adagrad import CPUAdagrad
from ._adam import CPUAdam
from ._lion import CPULion

__all__ = ["CPUAdagrad", "CPUAdam", "CPULion"]
