import json
import subprocess
import os

import pytest

import moecomm
from conftest import cli_error, moecomm_binary

# budget_s=0: the method rows only, so every call takes well under a second.
FAST = dict(budget_s=0)


def test_default_plan_recommends_one_of_its_rows():
    p = moecomm.plan(**FAST)
    names = [r.name for r in p.rows]
    assert p.recommended in names
    assert p.best.name == p.recommended
    assert p.rows[0].name == "baseline"
    assert p.model == "fsmoe-mixtral-22b"
    for r in p.rows:
        assert r.total_ms > 0 and r.forward_ms > 0 and r.backward_ms > 0
        assert r.strategy.startswith("name=") or "=" in r.strategy


def test_rows_match_the_json_object():
    p = moecomm.plan("netmoe-moe-gpt-s", **FAST)
    d = p.to_dict()
    assert d["recommended"] == p.recommended
    assert [s["name"] for s in d["strategies"]] == [r.name for r in p.rows]
    for s, r in zip(d["strategies"], p.rows):
        assert s["total_ms"] == pytest.approx(r.total_ms)
        assert s["strategy"] == r.strategy
        assert s["parallel"] == r.parallel
        assert s["params"] == r.params
        assert s["model_estimate"] == r.model_estimate
    assert p.parallel["ep"] == d["parallel"]["ep"]
    assert p.search.candidates == d["search"]["candidates"]


def test_same_rows_as_the_command_line():
    binary = moecomm_binary()
    out = subprocess.run([binary, "plan", "--model", "netmoe-moe-gpt-s", "--budget-s", "0",
                          "--json"], capture_output=True, text=True, check=True).stdout
    cli = json.loads(out)
    p = moecomm.plan("netmoe-moe-gpt-s", **FAST)
    assert cli["recommended"] == p.recommended
    assert [(s["name"], s["strategy"]) for s in cli["strategies"]] == \
        [(r.name, r.strategy) for r in p.rows]
    for s, r in zip(cli["strategies"], p.rows):
        assert s["total_ms"] == pytest.approx(r.total_ms, rel=1e-9)


def test_model_and_cluster_as_dicts_equal_the_presets():
    from conftest import SOURCE_DIR
    model = json.loads((SOURCE_DIR / "data/models/netmoe-moe-gpt-s.json").read_text())
    cluster = json.loads((SOURCE_DIR / "data/clusters/netmoe-a800-4x8.json").read_text())
    by_name = moecomm.plan("netmoe-moe-gpt-s", "netmoe-a800-4x8", "dp=32,ep=32", **FAST)
    by_dict = moecomm.plan(model, cluster, {"dp": 32, "ep": 32}, **FAST)
    by_path = moecomm.plan(SOURCE_DIR / "data/models/netmoe-moe-gpt-s.json",
                           str(SOURCE_DIR / "data/clusters/netmoe-a800-4x8.json"), "dp=32,ep=32",
                           **FAST)
    for other in (by_dict, by_path):
        assert other.recommended == by_name.recommended
        assert [r.total_ms for r in other.rows] == [r.total_ms for r in by_name.rows]


def test_row_lookup():
    p = moecomm.plan(**FAST)
    assert p.row("baseline").name == "baseline"
    with pytest.raises(moecomm.Error, match="plan: no row named nosuch"):
        p.row("nosuch")


def test_malformed_model_dict_raises_error_naming_the_key():
    assert issubclass(moecomm.Error, ValueError)
    with pytest.raises(moecomm.Error) as e:
        moecomm.plan({"name": "m", "hidden": "wide"}, **FAST)
    assert str(e.value).startswith("model: ")
    with pytest.raises(moecomm.Error, match="model"):
        moecomm.plan(42, **FAST)
    with pytest.raises(moecomm.Error, match="model: name: a set is not a JSON value"):
        moecomm.plan({"name": {1, 2}}, **FAST)


def test_bad_model_file_has_the_command_lines_message(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "m", "hidden": -3}')
    with pytest.raises(moecomm.Error) as e:
        moecomm.plan(str(bad), **FAST)
    assert str(e.value).startswith(str(bad))
    assert str(e.value) == cli_error("plan", "--model", str(bad), "--budget-s", "0")


def test_unknown_preset_lists_the_presets():
    with pytest.raises(moecomm.Error, match='model "nosuch": no such preset or file'):
        moecomm.plan("nosuch", **FAST)
    assert "netmoe-moe-gpt-s" in moecomm.presets("models")
    assert "netmoe-a800-4x8" in moecomm.presets("clusters")
    with pytest.raises(moecomm.Error):
        moecomm.presets("gpus")


def test_bad_options():
    with pytest.raises(moecomm.Error, match="parallel"):
        moecomm.plan(parallel="dp=3,tp=5", **FAST)
    with pytest.raises(moecomm.Error, match="parallel: .*nodes"):
        moecomm.plan(parallel="nodes=2", **FAST)
    with pytest.raises(moecomm.Error, match="layers"):
        moecomm.plan(layers=0, **FAST)
    with pytest.raises(moecomm.Error, match="zero"):
        moecomm.plan(zero=4, **FAST)
    with pytest.raises(moecomm.Error, match="recompute"):
        moecomm.plan(recompute="some", **FAST)
    with pytest.raises(moecomm.Error, match="^budget_s: "):  # the Python name, not the flag
        moecomm.plan(budget_s=-1)
