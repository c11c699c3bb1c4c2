"""Array inputs: numpy arrays, lists, or torch tensors (read through ``.numpy()``, no copy
for a CPU tensor)."""
from __future__ import annotations

from typing import Any

import numpy as np


def as_array(x: Any) -> Any:
    """Return ``x`` as something ``numpy.asarray`` reads without copying where possible.

    A torch tensor is detached and read through ``.numpy()``, which shares the CPU tensor's
    memory (a CUDA tensor is first copied to the host: the solvers run on the CPU).
    Everything else is passed through; the C++ side checks shape and dtype and raises
    :class:`moecomm.Error` naming the argument.
    """
    if isinstance(x, np.ndarray):
        return x
    numpy = getattr(x, "numpy", None)
    if callable(numpy) and hasattr(x, "detach"):
        t = x.detach()
        if getattr(t, "is_cuda", False):
            t = t.cpu()
        return t.numpy()
    return x
