"""The memory categories: the one list of names that the engine's ledger, the estimator and the reports share.

Each member is a `str` whose value is the name written in reports and JSON ("optim.master"), so a
member compares and hashes equal to its name; code names a category only through this enum.
docs/ledger.md describes each one.
"""
from __future__ import annotations

from enum import Enum


class Category(str, Enum):
    PARAM_PARTITION = "param.partition"
    PARAM_GATHERED = "param.gathered"
    PARAM_GATHERED_HELD = "param.gathered.held"
    PARAM_PERSISTENT = "param.persistent"
    MODULE_BUFFERS = "module.buffers"
    GRAD_FULL = "grad.full"
    GRAD_PARTITION = "grad.partition"
    GRAD_BUCKET = "grad.bucket"
    OPTIM_MASTER = "optim.master"
    OPTIM_GRAD = "optim.grad"
    OPTIM_STATE = "optim.state"
    SWAP_BUFFER = "swap.buffer"
    COMM_STAGING = "comm.staging"
    ACTIVATIONS = "activations"
    OTHER = "other"

    def __str__(self) -> str:  # the name as written in reports, on every Python (3.12 changed Enum's format)
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @classmethod
    def named(cls, name: str) -> Category:
        """The category called `name`; a ValueError listing the known names for any other."""
        try:
            return cls(name)
        except ValueError:
            known = ", ".join(member.value for member in cls)
            raise ValueError(f"unknown memory category {name!r}; known: {known}") from None


# Storages the engine did not allocate itself, seen only while tracking.
UNOWNED_CATEGORIES = frozenset({Category.ACTIVATIONS, Category.OTHER})
