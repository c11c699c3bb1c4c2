"""moecomm.torch.profile_cluster on 4 gloo processes: one level on one host, one level per
node boundary when the ranks are split into nodes (node: count 2, the whole node's
bandwidth; gpu: count 2), a cluster that moecomm simulates on, and a clear error for a node
size that does not divide the world."""
from __future__ import annotations

import pytest

from conftest import require

torch = require("torch")

import torch_profile_cluster as tpc  # noqa: E402


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return tpc.run_all(str(tmp_path_factory.mktemp("profile_cluster")))


def test_one_host_is_one_level(results):
    for res in results:
        assert "error" not in res["one_host"], res["one_host"].get("error")
        levels = res["one_host"]["levels"]
        assert [(l["name"], l["count"]) for l in levels] == [("proc", 4)]


def test_one_level_per_node_boundary(results):
    for res in results:
        assert "error" not in res["two_nodes"], res["two_nodes"].get("error")
        levels = res["two_nodes"]["levels"]
        assert [(l["name"], l["count"]) for l in levels] == [("node", 2), ("gpu", 2)]
        for level in levels:
            assert level["bandwidth_GBps"] > 0 and level["latency_us"] >= 0
    # Every rank returns the slowest rank's fit: one cluster.
    assert all(res["two_nodes"]["levels"] == results[0]["two_nodes"]["levels"]
               for res in results)


def test_the_cluster_simulates(results):
    for res in results:
        assert "error" not in res["simulated"], res["simulated"].get("error")
        assert res["simulated"]["ms"] > 0


def test_a_node_size_must_divide_the_world(results):
    for res in results:
        assert "ranks_per_node must divide the world size 4, got 3" in res["bad"]
