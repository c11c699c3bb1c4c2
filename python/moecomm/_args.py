"""The plain arguments of the public functions, checked before the C++ call: a wrong type, an
integer past the C++ parameter's range or a non-finite number raises :class:`moecomm.Error`
naming the argument, where pybind11 would raise a ``TypeError`` naming none (or take NaN)."""
from __future__ import annotations

import math
import numbers
from typing import Any, Optional

from ._moecomm import Error


def _kind(value: Any) -> str:
    return type(value).__name__


def integer(name: str, value: Any, bits: int = 32) -> int:
    """``value`` as an int of the C++ parameter's width (``bool`` is not an integer here)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise Error(f"{name}: must be an integer, got a {_kind(value)}")
    v = int(value)
    if not -(1 << (bits - 1)) <= v < 1 << (bits - 1):
        raise Error(f"{name}: {v} is out of range")
    return v


def optional_integer(name: str, value: Any, bits: int = 32) -> Optional[int]:
    return None if value is None else integer(name, value, bits)


def number(name: str, value: Any) -> float:
    """``value`` as a finite float."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise Error(f"{name}: must be a number, got a {_kind(value)}")
    try:
        x = float(value)
    except OverflowError:
        x = math.inf
    if not math.isfinite(x):
        raise Error(f"{name}: must be a finite number, got {value!r}")
    return x


def optional_number(name: str, value: Any) -> Optional[float]:
    return None if value is None else number(name, value)


def text(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise Error(f"{name}: must be a str, got a {_kind(value)}")
    return value


def optional_text(name: str, value: Any) -> Optional[str]:
    return None if value is None else text(name, value)


def flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise Error(f"{name}: must be True or False, got a {_kind(value)}")
    return value
