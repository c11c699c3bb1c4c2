#!/usr/bin/env python3
"""The extension of a -DMOECOMM_PYTHON_ONLY=ON build without LEMON, CBC and NLopt
(tests/python_only/check_without_libraries.cmake builds it and runs this file with PYTHONPATH
naming that build's python/ folder; pytest does not collect it). What needs a missing library
raises moecomm.Error naming it and its Debian package; the rest works: the flow and km
placement solvers, the plan table (the fsmoe row on its defaults, with the reason), simulate,
and MoELayer on 4 gloo ranks against the reference MoE of the torch tests (torch_cases.py)."""
from __future__ import annotations

import sys
import tempfile

import numpy as np

import moecomm
import torch_cases
from torch_spawn import assert_matches_reference

# FSMoE with every knob it plans given: it needs no planning, hence no NLopt. At module level:
# the spawned ranks import this file again and look the case up by name.
torch_cases.CASES.append(("fsmoe-given", "base=fsmoe,chunks_fwd=3,chunks_bwd=2,grad_partitions=2",
                          "ep=4", None, "gshard", None, "gelu", 2))

LEMON = "needs LEMON, which this build lacks (install liblemon-dev and rebuild)"
CBC = "needs COIN-OR CBC, which this build lacks (install coinor-libcbc-dev and rebuild)"
NLOPT = "needs NLopt, which this build lacks (install libnlopt-cxx-dev and rebuild)"
FSMOE = f"plan: planning strategy fsmoe's chunks_fwd, chunks_bwd, grad_partitions {NLOPT}"
failures: list[str] = []


def check(ok: bool, what: str) -> None:
    print(("ok      " if ok else "FAILED  ") + what, flush=True)
    if not ok:
        failures.append(what)


def raises(fn, message: str, what: str) -> None:
    try:
        fn()
    except moecomm.Error as e:
        check(str(e) == message, f"{what}: {e}" if str(e) == message else
              f"{what}: says {e!r}, expected {message!r}")
        return
    except Exception as e:  # the wrong type is a failure too
        check(False, f"{what}: raised {type(e).__name__}: {e}, not moecomm.Error")
        return
    check(False, f"{what}: raised nothing")


def placement() -> None:
    rng = np.random.default_rng(3)
    num = rng.integers(0, 50, size=(16, 8))
    expert_device = np.arange(8) % 4
    missing = {"ilp": CBC, "lemon-ns": LEMON, "lemon-cs": LEMON, "lemon-cap": LEMON}
    check(moecomm.place.solvers() == ["flow", "km", *missing], "every solver is still listed")
    for solver, reason in missing.items():
        message = f"place: solver '{solver}' {reason}"
        raises(lambda: moecomm.place.solve(num, expert_device, 2, solver=solver), message,
               f"place.solve(solver={solver!r})")
        raises(lambda: moecomm.place.SamplePlacer(expert_device, 2, solver=solver), message,
               f"SamplePlacer(solver={solver!r})")
        raises(lambda: moecomm.place.assign([[1, 2], [3, 4]], [1, 1], solver=solver), message,
               f"place.assign(solver={solver!r})")
    flow = moecomm.place.solve(num, expert_device, 2, solver="flow")
    km = moecomm.place.solve(num, expert_device, 2, solver="km")
    check(flow.inter_node_tokens == km.inter_node_tokens and flow.inter_node_tokens > 0,
          f"flow and km place alike ({flow.inter_node_tokens} inter-node tokens)")
    bins, cost, _ = moecomm.place.assign([[5, 1], [1, 5], [2, 2]], [2, 1], solver="km")
    check(list(bins) == [1, 0, 0] and cost == 4, f"km assigns exactly ({list(bins)}, {cost})")


def planning() -> None:
    # The table keeps an fsmoe row (simulated on the named defaults, as for any method the
    # planner skips) whose notes say why; the other rows are planned as usual.
    plan = moecomm.plan()
    fsmoe = plan.row("fsmoe")
    why = f"the planner skipped fsmoe ({NLOPT})"
    check(len(fsmoe.notes) == 3 and all(n.endswith(why) for n in fsmoe.notes) and
          fsmoe.model_estimate is None, f"plan table's fsmoe row: {fsmoe.notes}")
    lina = plan.row("lina")
    check(lina.model_estimate is not None and lina.total_ms > 0,
          f"plan table's lina row is planned ({lina.total_ms:.3f} ms)")
    raises(lambda: moecomm.simulate(strategy="fsmoe"), FSMOE, "simulate(strategy='fsmoe')")
    given = moecomm.simulate(strategy="base=fsmoe,chunks=2,grad_partitions=2")
    check(given.iteration_ms > 0, f"simulate(fsmoe with every knob given): {given.iteration_ms:.3f} ms")


def torch_layer() -> None:
    # Planned strategies of each paper but FSMoE's, FSMoE with its knobs given, and FSMoE
    # planned (the error on every rank).
    runs = ["baseline", "lina", "monta-o2", "hier-a2a", "hybridep-d2"]
    with tempfile.TemporaryDirectory() as d:
        results = torch_cases.run_all(d, runs + ["fsmoe-given", "fsmoe"])
    for case in runs + ["fsmoe-given"]:
        try:
            for rank, res in enumerate(results):
                assert_matches_reference(res[case], rank, case)
            check(True, f"MoELayer {case} on 4 gloo ranks equals the reference")
        except AssertionError as e:
            check(False, f"MoELayer {case}: {e}")
    last = {res["fsmoe"].get("error", "no error").strip().splitlines()[-1] for res in results}
    check(last == {f"moecomm.Error: {FSMOE}"}, f"MoELayer(strategy='fsmoe') on every rank: {last}")


if __name__ == "__main__":
    placement()
    planning()
    torch_layer()
    print(f"{len(failures)} failed" if failures else "all passed")
    sys.exit(1 if failures else 0)
