"""NetMoE's dynamic sample placement (NetMoE Sec. 3.2, Algorithm 1).

At every MoE layer l, samples may move between devices inside the gather all-to-all so that
gather(l) + scatter(l+1) send fewer tokens over slow links. Two stages, each an exact
assignment: stage 1 (Eq. 6/10) puts samples on nodes, I/N each, minimising inter-node
tokens; stage 2 (Eq. 7) puts each node's samples on its devices.

``num`` is always a samples x experts integer array (numpy, list, or torch tensor): the
tokens each sample sends to each expert in gather(l) + scatter(l+1).
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from . import _args, _moecomm
from ._arrays import as_array
from ._moecomm import Placement

__all__ = ["Placement", "SamplePlacer", "AsyncSamplePlacer", "solve", "solvers",
           "node_stage_problem", "assign"]

ArrayLike = Any  # numpy array, nested list, or torch tensor


def solvers() -> list[str]:
    """The exact assignment solvers: ``flow`` (default), ``km`` (NetMoE's Kuhn-Munkres),
    ``ilp`` (CBC), ``lemon-ns``, ``lemon-cs``, ``lemon-cap`` (LEMON)."""
    return _moecomm.assignment_solvers()


def _layout(devices_per_node: Any, devices: Any, solver: Any) -> tuple[int, Optional[int], str]:
    """The plain arguments of a layout, checked (moecomm.Error naming the argument)."""
    return (_args.integer("devices_per_node", devices_per_node),
            _args.optional_integer("devices", devices), _args.text("solver", solver))


class _GridPlacer:
    """What both placers share: the device grid and the solver (``self._impl``)."""

    _impl: Any

    @property
    def nodes(self) -> int:
        """Nodes N of the device grid."""
        return self._impl.nodes

    @property
    def devices_per_node(self) -> int:
        """Devices per node."""
        return self._impl.devices_per_node

    @property
    def solver(self) -> str:
        """The assignment solver's name."""
        return self._impl.solver


class SamplePlacer(_GridPlacer):
    """Two-stage placement for a fixed expert layout, solved when called.

    Args:
        expert_device: the device of each expert (1-D integers, length E).
        devices_per_node: devices per node (the innermost level's size).
        devices: total devices (default: the smallest multiple of ``devices_per_node``
            holding every expert's device).
        solver: see :func:`solvers`.

    Raises:
        Error: a negative or out-of-range device, a bad solver name.
    """

    def __init__(self, expert_device: ArrayLike, devices_per_node: int,
                 devices: Optional[int] = None, solver: str = "flow") -> None:
        self._impl = _moecomm.SamplePlacer(as_array(expert_device), *_layout(devices_per_node,
                                                                             devices, solver))

    @property
    def expert_device(self) -> np.ndarray:
        """The device of each expert."""
        return self._impl.expert_device

    def place(self, num: ArrayLike) -> Placement:
        """Solve both stages for the counts ``num`` (samples x experts) and return the
        :class:`Placement`; runs without the GIL.

        Raises:
            Error: ``num`` not 2-D, not integer, with a column count other than the number
            of experts, negative, or with fewer samples than devices.
        """
        return self._impl.place(as_array(num))


class AsyncSamplePlacer(_GridPlacer):
    """NetMoE Algorithm 1 in a training loop: :meth:`submit` the counts right after layer
    l's gate, run the scatter and the experts, :meth:`collect` before the gather.

    The solve runs on one long-lived C++ thread that never takes the GIL, so the Python
    training loop runs meanwhile. Arguments as :class:`SamplePlacer`.
    """

    def __init__(self, expert_device: ArrayLike, devices_per_node: int,
                 devices: Optional[int] = None, solver: str = "flow") -> None:
        self._impl = _moecomm.AsyncSamplePlacer(as_array(expert_device),
                                                *_layout(devices_per_node, devices, solver))

    def submit(self, num: ArrayLike) -> None:
        """Start solving for ``num`` (samples x experts) in the background.

        Raises:
            Error: bad counts (as :meth:`SamplePlacer.place`), or the previous submission
            was not collected.
        """
        self._impl.submit(as_array(num))

    def collect(self) -> Placement:
        """Wait for the submitted solve (without the GIL) and return its :class:`Placement`;
        ``wait_us`` says how long this call blocked.

        Raises:
            Error: nothing was submitted, or the solve failed.
        """
        return self._impl.collect()


def solve(num: ArrayLike, expert_device: ArrayLike, devices_per_node: int,
          solver: str = "flow", devices: Optional[int] = None) -> Placement:
    """One two-stage placement, as ``moecomm place --counts`` solves it.

    Args:
        num: samples x experts token counts of gather(l) + scatter(l+1).
        expert_device, devices_per_node, devices, solver: as :class:`SamplePlacer`.

    Returns:
        The :class:`Placement`: ``sample_device``, ``inter_node_tokens``,
        ``intra_node_tokens`` and ``solve_us`` (both stages, in C++).

    Raises:
        Error: bad counts or layout, naming the argument and the entry.
    """
    return SamplePlacer(expert_device, devices_per_node, devices, solver).place(num)


def node_stage_problem(num: ArrayLike, expert_device: ArrayLike, devices_per_node: int,
                       devices: Optional[int] = None) -> tuple[np.ndarray, np.ndarray]:
    """Stage 1's assignment problem (NetMoE Eq. 8): ``cost[i, n]``, the tokens of sample i
    that cross nodes if it sits on node n, and each node's capacity (samples)."""
    return _moecomm.node_stage_problem(as_array(num), as_array(expert_device),
                                       *_layout(devices_per_node, devices, "flow")[:2])


def assign(cost: ArrayLike, capacity: Sequence[int] | np.ndarray,
           solver: str = "flow") -> tuple[np.ndarray, int, float]:
    """Solve one assignment problem exactly: each row to one bin, bin b holding
    ``capacity[b]`` rows, minimum summed ``cost[row, bin]``.

    Returns:
        ``(bin_of, cost, solve_us)``: each row's bin, the optimum, and the solver's own time
        in microseconds.

    Raises:
        Error: a bad shape or capacity, or a cost past the range the solver sums exactly
        (``|cost| <= 2^58 / (rows + bins + 1)``; less for ``ilp`` and ``lemon-cs``), checked
        before it runs.
    """
    return _moecomm.assign(as_array(cost), as_array(capacity), _args.text("solver", solver))
