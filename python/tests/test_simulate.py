import pytest

import moecomm
from conftest import moecomm_binary


def test_baseline_step():
    r = moecomm.simulate("netmoe-moe-gpt-s", strategy="baseline")
    assert r.iteration_ms > 0
    assert r.forward_ms > 0 and r.backward_ms > 0
    assert r.level_names == ["node", "gpu"]
    assert len(r.bytes_by_level) == 2 and r.bytes_by_level[0] > 0
    assert r.bytes_by_level_name["node"] == r.bytes_by_level[0]
    assert r.ranks == 32
    assert r.routing is None and r.trace is None
    assert "a2a" in " ".join(r.ops) or r.ops
    assert r.strategy.startswith("name=baseline")


def test_a_plan_row_reruns_with_its_strategy():
    p = moecomm.plan("netmoe-moe-gpt-s", budget_s=0)
    row = p.row("hier-a2a")
    r = moecomm.simulate("netmoe-moe-gpt-s", parallel=row.parallel, strategy=row.strategy)
    assert r.iteration_ms == pytest.approx(row.total_ms, rel=1e-9)


def test_chrome_trace_on_request():
    r = moecomm.simulate("netmoe-moe-gpt-s", strategy="baseline", trace=True)
    events = r.trace["traceEvents"]
    assert any(e["ph"] == "X" for e in events)


def test_netmoe_routes_synthetic_traffic():
    home = moecomm.simulate("netmoe-moe-gpt-s", strategy="baseline", routing="synthetic")
    placed = moecomm.simulate("netmoe-moe-gpt-s", strategy="netmoe")
    assert placed.routing["placement"] == "netmoe"
    assert home.routing["placement"] == "none"
    assert placed.routing["dispatch_inter_node_MB"] < home.routing["dispatch_inter_node_MB"]


def test_bad_inputs():
    with pytest.raises(moecomm.Error, match="strategy"):
        moecomm.simulate(strategy="fastest")
    with pytest.raises(moecomm.Error, match="routing: placement=netmoe"):
        moecomm.simulate("netmoe-moe-gpt-s", strategy="netmoe", routing="uniform")
    with pytest.raises(moecomm.Error, match="fairness"):
        moecomm.simulate(fairness="fair")
    with pytest.raises(moecomm.Error, match="layers"):
        moecomm.simulate(layers=0)
    with pytest.raises(moecomm.Error, match="cluster"):
        moecomm.simulate(cluster={"name": "c", "levels": []})


def test_same_step_as_the_command_line():
    import json
    import os
    import subprocess
    binary = moecomm_binary()
    for strategy in ("monta-o2", "lina"):
        out = subprocess.run([binary, "sim", "--model", "netmoe-moe-gpt-s", "--strategy",
                              strategy, "--json"], capture_output=True, text=True,
                             check=True).stdout
        cli = json.loads(out)
        r = moecomm.simulate("netmoe-moe-gpt-s", strategy=strategy)
        assert r.strategy == cli["strategy"]
        assert r.strategy_notes == cli["strategy_notes"]
        # The command prints figures to 12 significant digits and bytes whole.
        assert r.iteration_ms == pytest.approx(cli["iteration_ms"], rel=1e-11)
        assert r.bytes_by_level == pytest.approx(cli["bytes_by_level"], rel=1e-12)


def test_fairness_defaults_to_the_clusters():
    import json
    import os
    path = os.path.join(os.path.dirname(__file__), "..", "..", "data", "clusters",
                        "netmoe-a800-2x8.json")
    with open(path) as f:
        cluster = json.load(f)
    # Two blocks: a block's gradient AllReduce shares links with the other block's A2As.
    def step(**fairness):
        return moecomm.simulate("netmoe-moe-gpt-s", cluster, layers=2, **fairness).iteration_ms
    per_collective = step()
    cluster["fairness"] = "per-flow"
    per_flow = step()
    assert per_flow == step(fairness="per-flow")
    assert per_flow != per_collective
    assert step(fairness="per-collective") == per_collective


def test_a_whole_step_of_micro_batches_through_the_pipeline():
    # netmoe-moe-gpt-s on its 32-rank testbed, split in 2 stages of 4 blocks each.
    one = moecomm.simulate("netmoe-moe-gpt-s", parallel="pp=2,ep=8", layers=8)
    four = moecomm.simulate("netmoe-moe-gpt-s", parallel="pp=2,ep=8", layers=8, micro_batches=4)
    gpipe = moecomm.simulate("netmoe-moe-gpt-s", parallel="pp=2,ep=8", layers=8,
                             micro_batches=4, pp_schedule="gpipe")
    assert "pp_schedule=1f1b" in four.strategy and "pp_schedule=gpipe" in gpipe.strategy
    # Four micro-batches fill the pipeline: more than one, less than four separate steps.
    assert one.iteration_ms < four.iteration_ms < 4 * one.iteration_ms
    assert gpipe.schedule_ops == four.schedule_ops
    with pytest.raises(moecomm.Error, match="micro_batches"):
        moecomm.simulate(micro_batches=0)
    with pytest.raises(moecomm.Error, match="pp_schedule"):
        moecomm.simulate(pp_schedule="zigzag")
    with pytest.raises(moecomm.Error, match="layers"):
        moecomm.simulate("netmoe-moe-gpt-s", layers=1000)
