"""Integer quantities that carry their own formula, so --explain prints exactly what was computed.

    p = Q.var("P", 6857302016); n = Q.var("N", 4)
    q = 2 * p.per(n)
    q.symbols, q.numbers, q.value  ->  "2 * ceil(P/N)", "2 * ceil(6,857,302,016/4)", 3428651008
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

_ADD, _MUL, _ATOM = 1, 2, 3
# For a Q built from a sum written out: a product wraps it in parentheses.
SUM_PRECEDENCE = _ADD


class Q:
    __slots__ = ("value", "symbols", "numbers", "_precedence")

    def __init__(self, value: int, symbols: str, numbers: str, precedence: int = _ATOM) -> None:
        self.value = value
        self.symbols = symbols
        self.numbers = numbers
        self._precedence = precedence

    @classmethod
    def var(cls, symbol: str, value: int) -> Q:
        return cls(value, symbol, f"{value:,}")

    @classmethod
    def const(cls, value: int) -> Q:
        return cls(value, f"{value:,}", f"{value:,}")

    def __add__(self, other: Q | int) -> Q:
        other = _q(other)
        return self._join(other, " + ", self.value + other.value, _ADD, wrap_right_at=_ADD - 1)

    def __sub__(self, other: Q | int) -> Q:
        other = _q(other)
        return self._join(other, " - ", self.value - other.value, _ADD, wrap_right_at=_ADD)

    def __mul__(self, other: Q | int) -> Q:
        other = _q(other)
        return self._join(other, " * ", self.value * other.value, _MUL, wrap_right_at=_ADD)

    def __rmul__(self, other: int) -> Q:
        return _q(other) * self

    def per(self, parts: Q) -> Q:
        """This split into `parts` equal partitions, rounded up (ZeRO pads the last one)."""
        value = -(-self.value // parts.value)
        (top_s, top_n), (bottom_s, bottom_n) = _wrapped(self, _MUL), _wrapped(parts, _MUL)
        return Q(value, f"ceil({top_s}/{bottom_s})", f"ceil({top_n}/{bottom_n})")

    def _join(self, other: Q, op: str, value: int, precedence: int, wrap_right_at: int) -> Q:
        left_s, left_n = _wrapped(self, precedence - 1)
        right_s, right_n = _wrapped(other, wrap_right_at)
        return Q(value, left_s + op + right_s, left_n + op + right_n, precedence)


def smallest(*quantities: Q) -> Q:
    return _call("min", min, quantities)


def largest(*quantities: Q) -> Q:
    return _call("max", max, quantities)


def _call(name: str, pick: Callable[[Iterable[int]], int], quantities: tuple[Q, ...]) -> Q:
    value = pick(q.value for q in quantities)
    symbols = ", ".join(q.symbols for q in quantities)
    numbers = ", ".join(q.numbers for q in quantities)
    return Q(value, f"{name}({symbols})", f"{name}({numbers})")


def _q(value: Q | int) -> Q:
    return value if isinstance(value, Q) else Q.const(value)


def _wrapped(q: Q, at_or_below: int) -> tuple[str, str]:
    if q._precedence <= at_or_below:
        return f"({q.symbols})", f"({q.numbers})"
    return q.symbols, q.numbers
