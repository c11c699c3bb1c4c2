"""moecomm from Python: the planner, the simulator, NetMoE's sample placement and Lina's
popularity estimator, on the same C++ code as the ``moecomm`` command.

>>> import moecomm
>>> moecomm.plan().recommended        # doctest: +SKIP
'fsmoe'

Errors in what you pass raise :class:`moecomm.Error` (a ``ValueError``) with the message the
command line prints after ``error:``.
"""
from __future__ import annotations

import os as _os
from typing import Any, Mapping, Optional, Union

# An installed package carries the presets beside itself; a build tree reads them from the
# source tree the extension was compiled for. An explicit MOECOMM_DATA_DIR wins in both.
_PACKAGE_DATA = _os.path.join(_os.path.dirname(__file__), "data")
if _os.path.isdir(_PACKAGE_DATA) and not _os.environ.get("MOECOMM_DATA_DIR"):
    _os.environ["MOECOMM_DATA_DIR"] = _PACKAGE_DATA

from . import _args, _moecomm  # noqa: E402
from ._moecomm import Error, Plan, PlanRow, SearchStats, SimResult  # noqa: E402
from . import infer, place  # noqa: E402

Error.__module__ = "moecomm"  # raised as moecomm.Error, where users catch it

__all__ = ["Error", "Plan", "PlanRow", "SearchStats", "SimResult", "plan", "simulate",
           "place", "infer", "presets"]
__version__ = "0.1.0"

#: A model or cluster: a preset name (see :func:`presets`), a path to a JSON file, or a dict
#: in the file's format (README "Files"). None takes the command line's default.
Config = Union[str, "_os.PathLike[str]", Mapping[str, Any], None]
#: Parallel sizes: ``"dp=2,tp=8,ep=2"``, ``{"dp": 2, "tp": 8, "ep": 2}``, or None (the
#: model's own on its testbed, else derived).
Parallel = Union[str, Mapping[str, Any], None]


def plan(model: Config = None, cluster: Config = None, parallel: Parallel = None, *,
         seq_len: Optional[int] = None, micro_batch: Optional[int] = None, layers: int = 1,
         budget_s: float = 0.8, zero: int = 1, recompute: str = "selective") -> Plan:
    """Recommend a strategy, as ``moecomm plan --json`` does.

    Every method (baseline EP, hierarchical A2A, MoNTA O1-O3, FSMoE, Lina, HybridEP) gets its
    knobs from its paper's model and is priced by simulating one training step; a search over
    the knobs follows for ``budget_s`` seconds (0: the method rows only).

    Args:
        model: model preset, JSON file or dict (default ``fsmoe-mixtral-22b``).
        cluster: cluster preset, JSON file or dict (default: the model's own testbed).
        parallel: parallel sizes (default: the model's own on its testbed, else derived).
        seq_len, micro_batch: override the model's.
        layers: MoE blocks per simulated step, 1-64.
        budget_s: wall-clock seconds the plan may take.
        zero: ZeRO stage (0-3) of the memory estimate.
        recompute: ``"none"``, ``"selective"`` or ``"full"`` for the memory estimate.

    Returns:
        A :class:`Plan`: ``rows`` (one :class:`PlanRow` per method, then ``searched``),
        ``recommended`` (a row name), ``best`` (that row), ``to_dict()`` (the JSON object).

    Raises:
        Error: a bad model, cluster, parallel size or option. The C++ work runs without the
        GIL.
    """
    # 0 stands for "the model's" in the binding: an explicit 0 is refused, as the CLI does.
    for name, v in (("seq_len", seq_len), ("micro_batch", micro_batch)):
        if _args.optional_integer(name, v, 64) == 0:
            raise Error(f"{name}: must be at least 1 (or None: the model's)")
    return _moecomm.plan(model, cluster, parallel, seq_len or 0, micro_batch or 0,
                         _args.integer("layers", layers), _args.number("budget_s", budget_s),
                         _args.integer("zero", zero), _args.text("recompute", recompute))


def simulate(model: Config = None, cluster: Config = None, parallel: Parallel = None,
             strategy: str = "baseline", *, layers: Optional[int] = None,
             micro_batches: Optional[int] = None, pp_schedule: Optional[str] = None,
             zero: Optional[int] = None, compute_efficiency: Optional[float] = None,
             completion_tolerance: float = _moecomm.DEFAULT_COMPLETION_TOLERANCE,
             fairness: Optional[str] = None, routing: str = "auto", locality: float = 0.9,
             trace: bool = False) -> SimResult:
    """Simulate one training step of a strategy, as ``moecomm sim --json`` does.

    Args:
        model, cluster, parallel: as :func:`plan`.
        strategy: a method name (``baseline``, ``hier-a2a``, ``monta-o1``..``monta-o3``,
            ``fsmoe``, ``lina``, ``hybridep``, ``netmoe``) or knobs such as
            ``"base=fsmoe,chunks_fwd=4"`` (a :class:`PlanRow`'s ``strategy`` re-runs the row);
            the tunable knobs left out come from the planner.
        layers: transformer blocks over all pipeline stages, at most the model's (None: one
            per stage and virtual stage).
        micro_batches: micro-batches per step, the gradients synchronized once (None: the
            model's ``micro_batches``, else 1).
        pp_schedule: ``"gpipe"``, ``"1f1b"`` or ``"interleaved:V"`` (None: the strategy's
            ``pp_schedule`` knob, 1f1b by default).
        zero: ZeRO stage 0-3 (None: the strategy's ``zero`` knob).
        compute_efficiency: share of the device's peak flop/s compute reaches (None: the
            cluster device's).
        completion_tolerance: the flow network's completion tolerance, in [0, 0.1].
        fairness: ``"per-collective"`` or ``"per-flow"`` link sharing (None: the cluster's
            ``fairness``, per-collective when it has none).
        routing: ``"uniform"``, ``"synthetic"`` (with ``locality``) or ``"auto"``
            (synthetic for ``placement=netmoe``, else uniform).
        locality: synthetic routing's share of a sample's tokens on its preferred experts.
        trace: also return the Chrome trace (``SimResult.trace``, a dict to ``json.dump``).

    Returns:
        A :class:`SimResult`: ``iteration_ms``, ``forward_ms``, ``backward_ms``,
        ``bytes_by_level`` (outermost level first, names in ``level_names``), ``ops``,
        ``busiest_links``, ``strategy`` and ``trace``.

    Raises:
        Error: a bad input or a strategy the layout cannot run. Runs without the GIL.
    """
    # 0.0 stands for "the device's" in the binding: an explicit 0 is out of range.
    if _args.optional_number("compute_efficiency", compute_efficiency) == 0:
        raise Error("compute_efficiency: must be in [0.01, 1] (or None: the device's)")
    # So do 0 layers and micro-batches, and zero -1.
    for name, value, least in (("layers", layers, 1), ("micro_batches", micro_batches, 1),
                               ("zero", zero, 0)):
        if value is not None and _args.integer(name, value) < least:
            raise Error(f"{name}: must be at least {least}, got {value}")
    return _moecomm.simulate(
        model, cluster, parallel, _args.text("strategy", strategy),
        0 if layers is None else _args.integer("layers", layers),
        float(compute_efficiency or 0.0),
        _args.number("completion_tolerance", completion_tolerance),
        _args.optional_text("fairness", fairness) or "", _args.text("routing", routing),
        _args.number("locality", locality), _args.flag("trace", trace),
        0 if micro_batches is None else _args.integer("micro_batches", micro_batches),
        _args.optional_text("pp_schedule", pp_schedule) or "",
        -1 if zero is None else _args.integer("zero", zero))


def presets(kind: str) -> list[str]:
    """The shipped preset names of ``kind``: ``"models"`` or ``"clusters"``."""
    if kind not in ("models", "clusters"):
        raise Error(f'presets: kind must be "models" or "clusters", got "{kind}"')
    return _moecomm.presets(kind)
