"""Lina's popularity-aware MoE inference (Lina Sec. 5.2).

Routing arrays hold expert ids, ``[iteration][layer][sample][token][k]`` (the shape of a
routing trace, README "Routing trace"), each in ``[0, experts)``, best choice first.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from . import _moecomm
from ._arrays import as_array
from ._moecomm import ReplicationPlan

__all__ = ["PopularityEstimator", "ReplicationPlan", "plan_replication", "fine_tune",
           "expert_counts", "device_loads"]

ArrayLike = Any  # numpy array, nested list, or torch tensor


class PopularityEstimator:
    """Expert-path profile of a routing history, and Lina's Eq. 1 estimate from it.

    Tokens are grouped by their path of top-1 experts over the last ``path_length`` layers;
    for each path the distribution of the next layer's experts is recorded. Unseen paths
    fall back to their longest suffix seen at least ``min_tokens`` times, then to the
    layer's marginal.

    Args:
        routing: iterations x layers x samples x tokens x top_k expert ids (at least 2
            layers).
        experts: experts per layer E.
        path_length: l, in [1, layers - 1].
        min_tokens: tokens a path needs before it is used.

    Raises:
        Error: a wrong shape or dtype, an expert id outside [0, experts), a bad path length.
    """

    def __init__(self, routing: ArrayLike, experts: int, path_length: int = 1,
                 min_tokens: int = 1) -> None:
        self._impl = _moecomm.PopularityEstimator(as_array(routing), experts, path_length,
                                                  min_tokens)

    @property
    def experts(self) -> int:
        """Experts per layer."""
        return self._impl.experts

    @property
    def top_k(self) -> int:
        """Experts per token in the profiled routing."""
        return self._impl.top_k

    @property
    def layers(self) -> int:
        """MoE layers of the profiled routing."""
        return self._impl.layers

    @property
    def path_length(self) -> int:
        """Experts of a token's path that select its profiled distribution."""
        return self._impl.path_length

    def estimate(self, batch: ArrayLike, layer: int, top_k: Optional[int] = None) -> np.ndarray:
        """Estimated popularity of layer ``layer + 1``'s experts for a batch (Lina Eq. 1).

        Args:
            batch: the batch's routing so far, layers x samples x tokens x top_k (layers
                0..``layer`` at least).
            layer: the layer whose gate just ran.
            top_k: experts of each path's distribution kept (default: the profile's top_k).

        Returns:
            float64 array of E shares of the layer's token-slots (sums to at most 1; 0 means
            no estimate).
        """
        return self._impl.estimate(as_array(batch), layer, top_k)

    def marginal(self, layer: int) -> np.ndarray:
        """Each expert's share of layer ``layer``'s token-slots over the whole profile."""
        return self._impl.marginal(layer)

    def plan(self, batch: ArrayLike, layer: int, devices: int,
             max_experts_per_device: int = 4) -> tuple[np.ndarray, ReplicationPlan]:
        """Phase one for layer ``layer + 1``: the estimate and the replication plan from it.

        The plan reports its max/mean device load under the estimate
        (``plan.max_over_mean``) beside plain EP's (``plan.ep_max_over_mean``).
        """
        popularity = self.estimate(batch, layer)
        return popularity, plan_replication(popularity, devices, max_experts_per_device)


def plan_replication(popularity: ArrayLike, devices: int,
                     max_experts_per_device: int = 4) -> ReplicationPlan:
    """Lina's phase one: replicas per expert in proportion to its popularity (n_e = N pop(e),
    Eq. 1) so that all ``devices * max_experts_per_device`` slots hold one (every expert on
    every device when there are fewer experts than slots), never two of an expert on one
    device, packed so that the most loaded device is as light as found (exact on at most 12
    slots). An expert's load is split evenly over its replicas.

    The plan's ``max_over_mean`` (max/mean device load under ``popularity``, 1 is balanced)
    and ``ep_max_over_mean`` (the same for plain EP) put the two side by side.

    Raises:
        Error: popularity negative, not finite or summing above 1; more experts than
        ``devices * max_experts_per_device``.
    """
    return _moecomm.plan_replication(as_array(popularity), devices, max_experts_per_device)


def fine_tune(phase_one: ReplicationPlan, estimated: ArrayLike, actual_counts: ArrayLike,
              top_k: int, devices: int,
              max_experts_per_device: int = 4) -> tuple[bool, ReplicationPlan]:
    """Lina's phase two, after the gate: keep ``phase_one`` when the estimated and actual
    top-2k experts agree, else re-plan from the actual counts the same way. The returned
    plan's ``max_over_mean`` and ``ep_max_over_mean`` are under the actual counts.

    Returns:
        ``(replanned, plan)``.
    """
    return _moecomm.fine_tune(phase_one, as_array(estimated), as_array(actual_counts), top_k,
                              devices, max_experts_per_device)


def expert_counts(layer_routing: ArrayLike, experts: int) -> np.ndarray:
    """Token-slots per expert of one layer's routing (samples x tokens x top_k ids)."""
    return _moecomm.expert_counts(as_array(layer_routing), experts)


def device_loads(plan: ReplicationPlan, counts: ArrayLike, devices: int) -> np.ndarray:
    """Token-slots each device processes under ``plan``, an expert's tokens split evenly
    over its replicas."""
    return _moecomm.device_loads(plan, as_array(counts), devices)
