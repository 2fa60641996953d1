"""`zero report`: what zero sees in this environment, modelled on DeepSpeed's ds_report."""
from ._build import build_report

__all__ = ["build_report"]
