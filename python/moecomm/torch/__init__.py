"""moecomm for PyTorch: an MoE layer that runs moecomm's schedules on torch.distributed.

>>> layer = moecomm.torch.MoELayer(512, 2048, 16, strategy="fsmoe", parallel="ep=4")  # doctest: +SKIP
>>> sync = moecomm.torch.GradSync([layer], dense=other_params)                      # doctest: +SKIP

See the README's "moecomm.torch" section.
"""
from .grad_sync import GradSync
from .layer import MoELayer, default_cluster
from .netmoe import SampleMovingMoE, SampleMovingOutput
from .report import format_op_times, op_times, profile_cluster

__all__ = ["MoELayer", "SampleMovingMoE", "SampleMovingOutput", "GradSync", "default_cluster",
           "profile_cluster", "op_times", "format_op_times"]
