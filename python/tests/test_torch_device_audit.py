"""moecomm.torch.MoELayer, SampleMovingMoE and GradSync keep to the input's device, checked on 4 gloo
processes on CPU by torch_device_audit.py's audit, which plays the part of a second device:
one forward, backward and GradSync.step per case make no op that mixes the input's device
with host tensors, give no host tensor to a collective, read device tensors back only where
the host needs them, and compute what they compute without the audit."""
from __future__ import annotations

import pytest

from conftest import require

torch = require("torch")

import torch_device_audit as audit  # noqa: E402


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return audit.run_all(str(tmp_path_factory.mktemp("torch_device_audit")))


def test_audit_catches_the_bug_class(results):
    """In the same processes, the audit reports a host index into a device tensor, a host
    tensor given to a collective and numpy() of a device tensor."""
    for rank, res in enumerate(results):
        got = res["control"]
        assert "error" not in got, f"rank {rank}: {got.get('error')}"
        assert got["violations"] == [
            "outside moecomm: __getitem__ mixes device and host tensors (device (4,), host (2,))",
            "outside moecomm: host tensor (1,) given to torch.distributed.all_reduce",
            "outside moecomm: numpy() of a device tensor"], f"rank {rank}"


@pytest.mark.parametrize("case", [c[0] for c in audit.CASES + audit.LAYER_CASES])
def test_step_stays_on_the_device(results, case):
    for rank, res in enumerate(results):
        got = res["cases"][case]
        assert "error" not in got, f"rank {rank}: {got.get('error')}"
        assert got["violations"] == [], f"rank {rank} {case}: " + "\n".join(got["violations"])
        # The audit saw the step (backward and GradSync's hooks included) and did not change
        # what it computed: output, ids and gradients equal to an unaudited run's.
        assert got["calls"] > 0 and got["collectives"] > 0
        assert got["same"], f"rank {rank} {case}: the audited step differs"


@pytest.mark.parametrize("case", audit.CASES, ids=[c[0] for c in audit.CASES])
def test_host_reads_per_step(results, case):
    """SampleMovingMoE reads device tensors back twice per layer: the EP group's [B, S]
    (checked before the counts' AllGather is sized) and the gathered counts (the A2As' split
    sizes and the placement problem, in the AllGather's unpack). GradSync, the collectives and
    the rest of the step read none (host syncs on a GPU)."""
    blocks = case[5]
    for rank, res in enumerate(results):
        got = res["cases"][case[0]]
        assert "error" not in got, f"rank {rank}: {got.get('error')}"
        ours = {k: n for k, n in got["syncs"].items()
                if k.startswith(("netmoe.py", "grad_sync.py", "collectives.py"))}
        assert ours == {"netmoe.py:counts_allgather tolist": blocks,
                        "netmoe.py:unpack cpu": blocks}, f"rank {rank}"


@pytest.mark.parametrize("case", [c[0] for c in audit.LAYER_CASES])
def test_layer_host_reads_per_step(results, case):
    """MoELayer reads device tensors back once per layer and step: the EP group's counts
    (every index of the token path is computed from them on the host); its backward, the
    token path's collectives and GradSync read none. (The construction's settings check,
    fingerprint.py, reads its AllGather once; HybridEP's SR codec picks its top-k by the
    device's type, on a CPU with kthvalue and nonzero, which wait for nothing there: its
    GPU form is tested on CPU by test_torch_sr_codec.py.)"""
    for rank, res in enumerate(results):
        got = res["cases"][case]
        assert "error" not in got, f"rank {rank}: {got.get('error')}"
        step = {k: n for k, n in got["syncs"].items()
                if not k.startswith(("fingerprint.py", "hybrid.py:_top_indices"))}
        assert step == {"layer.py:_layout cpu": 2}, f"rank {rank}: {got['syncs']}"
