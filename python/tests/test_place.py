import threading
import time

import numpy as np
import pytest

import moecomm
from moecomm import place
from conftest import require


def test_solve_beats_home_placement(netmoe_instance):
    num, expert_device, g = netmoe_instance
    p = place.solve(num, expert_device, g)
    assert p.sample_device.dtype == np.int64 and p.sample_device.shape == (128,)
    # I/J samples per device (NetMoE's equal shares).
    assert np.bincount(p.sample_device, minlength=32).tolist() == [4] * 32
    home = np.repeat(np.arange(32), 4)
    node = expert_device // g
    crossing_home = sum(num[i][node != home[i] // g].sum() for i in range(128))
    assert p.inter_node_tokens <= crossing_home
    crossing = sum(num[i][node != p.sample_device[i] // g].sum() for i in range(128))
    assert crossing == p.inter_node_tokens
    assert p.solve_us > 0 and p.wait_us == 0


def test_every_solver_reaches_the_same_optimum(netmoe_instance):
    num, expert_device, g = netmoe_instance
    flow = place.solve(num, expert_device, g)
    for solver in ("km", "lemon-ns", "lemon-cs", "lemon-cap"):
        p = place.solve(num, expert_device, g, solver=solver)
        assert p.inter_node_tokens == flow.inter_node_tokens, solver
        # Stage 2 starts from whichever stage-1 optimum a solver picks among ties, so only
        # stage 1's objective is the same for all.
        assert sorted(np.bincount(p.sample_device, minlength=32)) == [4] * 32, solver
    assert "flow" in place.solvers()


def test_async_placer_equals_one_shot(netmoe_instance):
    num, expert_device, g = netmoe_instance
    one_shot = place.solve(num, expert_device, g)
    placer = place.AsyncSamplePlacer(expert_device, g)
    assert placer.nodes == 4 and placer.devices_per_node == 8 and placer.solver == "flow"
    for _ in range(3):  # the worker thread is reused layer after layer
        placer.submit(num)
        got = placer.collect()
        np.testing.assert_array_equal(got.sample_device, one_shot.sample_device)
        assert got.inter_node_tokens == one_shot.inter_node_tokens
        assert got.intra_node_tokens == one_shot.intra_node_tokens
        assert got.solve_us > 0 and got.wait_us >= 0


def test_async_solve_overlaps_python(netmoe_instance):
    """collect() waits without the GIL: a Python thread keeps running meanwhile."""
    num, expert_device, g = netmoe_instance
    placer = place.AsyncSamplePlacer(expert_device, g, solver="km")  # O(I^3): milliseconds
    ticks = []
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            ticks.append(time.perf_counter())

    t = threading.Thread(target=spin)
    t.start()
    placer.submit(np.tile(num, (3, 1)))
    start = time.perf_counter()
    got = placer.collect()
    end = time.perf_counter()
    stop.set()
    t.join()
    assert got.wait_us > 0
    # Python's switch interval is 5 ms: a collect() holding the GIL would leave no tick
    # inside its wait.
    assert sum(start < x < end for x in ticks) > 10


def test_sync_placer_and_stage_pieces(netmoe_instance):
    num, expert_device, g = netmoe_instance
    placer = place.SamplePlacer(expert_device, g, solver="lemon-ns")
    p = placer.place(num.tolist())  # lists are arrays too
    cost, capacity = place.node_stage_problem(num, expert_device, g)
    assert cost.shape == (128, 4) and capacity.tolist() == [32] * 4
    bins, optimum, us = place.assign(cost, capacity)
    assert optimum == p.inter_node_tokens and us > 0
    assert np.bincount(bins, minlength=4).tolist() == [32] * 4


def test_torch_tensors_are_read_without_copies(netmoe_instance):
    torch = require("torch")
    num, expert_device, g = netmoe_instance
    counts = torch.from_numpy(num)
    p = place.solve(counts, torch.from_numpy(expert_device), g)
    assert p.inter_node_tokens == place.solve(num, expert_device, g).inter_node_tokens
    # The array the extension reads is the tensor's own memory.
    from moecomm._arrays import as_array
    assert as_array(counts).__array_interface__["data"][0] == counts.data_ptr()
    placer = place.AsyncSamplePlacer(torch.arange(64) // 2, g)
    placer.submit(counts)
    assert placer.collect().inter_node_tokens == p.inter_node_tokens


def test_bad_num_shape_and_dtype(netmoe_instance):
    num, expert_device, g = netmoe_instance
    with pytest.raises(moecomm.Error, match=r"num: must be a 2-D array \(samples x experts\), "
                                            r"got shape \(8192,\)"):
        place.solve(num.ravel(), expert_device, g)
    with pytest.raises(moecomm.Error, match="num: must hold integers, got dtype float64"):
        place.solve(num.astype(np.float64), expert_device, g)
    with pytest.raises(moecomm.Error, match="num: has 63 columns, expected one per expert"):
        place.solve(num[:, :63], expert_device, g)
    with pytest.raises(moecomm.Error, match="num: 16 samples cannot fill 32 devices"):
        place.solve(num[:16], expert_device, g)
    bad = num.copy()
    bad[3, 5] = -1
    with pytest.raises(moecomm.Error, match=r"num\[3\]\[5\]: token count -1 is negative"):
        place.solve(bad, expert_device, g)
    placer = place.AsyncSamplePlacer(expert_device, g)
    with pytest.raises(moecomm.Error, match="num: must hold integers"):
        placer.submit(num.astype(np.float32))


def test_expert_id_out_of_range(netmoe_instance):
    num, expert_device, g = netmoe_instance
    bad = expert_device.copy()
    bad[7] = -2
    with pytest.raises(moecomm.Error, match=r"expert_device\[7\]: device -2 is negative"):
        place.solve(num, bad, g)
    with pytest.raises(moecomm.Error, match=r"expert_device\[7\]: device 40 is outside \[0, 32\)"):
        bad[7] = 40
        place.solve(num, bad, g, devices=32)
    with pytest.raises(moecomm.Error, match="devices_per_node"):
        place.solve(num, expert_device, 0)
    with pytest.raises(moecomm.Error, match="solver"):
        place.solve(num, expert_device, g, solver="greedy")


def test_async_protocol_errors(netmoe_instance):
    num, expert_device, g = netmoe_instance
    placer = place.AsyncSamplePlacer(expert_device, g)
    with pytest.raises(moecomm.Error):
        placer.collect()
    placer.submit(num)
    with pytest.raises(moecomm.Error):
        placer.submit(num)
    placer.collect()
