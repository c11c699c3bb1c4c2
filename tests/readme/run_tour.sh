#!/usr/bin/env bash
# The README's tour, run as written: the ```sh blocks between <!-- tour --> and <!-- /tour -->,
# in an empty folder, with the build's moecomm first on PATH. Then what each step must have
# left behind is checked, so that a step that quietly does less fails too.
# usage: run_tour.sh README.md BIN_DIR WORK_DIR
set -euo pipefail
readme=$1 bin=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
awk '/<!-- tour -->/ {tour = 1} /<!-- \/tour -->/ {tour = 0}
     tour && /^```sh$/ {code = 1; next}
     tour && /^```$/ {code = 0; next}
     tour && code' "$readme" > "$work/tour.sh"
if [ ! -s "$work/tour.sh" ]; then
  echo "error: $readme: no \`\`\`sh blocks between <!-- tour --> and <!-- /tour -->"
  exit 1
fi
cd "$work"
export PATH="$bin:$PATH"
# Tests run as root on a 2-core machine: mpirun must be told both are fine.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
if ! bash -euo pipefail -x tour.sh > tour.log 2>&1; then
  cat tour.log
  echo "error: the README's tour failed (its last command is above; folder $work)"
  exit 1
fi
fail() {
  cat tour.log
  echo "error: the README's tour ran, but $1"
  exit 1
}
grep -q '"recommended"' plan.json || fail "plan.json has no recommendation"
grep -q '^recommended: ' tour.log || fail "plan printed no recommendation"
grep -q '<svg' step.svg || fail "sim wrote no SVG timeline"
grep -q 'token comm' step.svg || fail "the SVG names no token comm row"
# plan prices its rows by sim's simulation: the recommended row's time is sim's, to the digit.
planned_ms=$(python3 -c 'import json; p = json.load(open("plan.json"))
print("%.3f" % next(r for r in p["strategies"] if r["name"] == p["recommended"])["total_ms"])')
grep -q "^iteration $planned_ms ms" tour.log || fail "sim's step time differs from plan's $planned_ms ms"
grep -q '"moecomm-routing-trace"' routing-trace.json || fail "train wrote no routing trace"
grep -q 'model shape from the trace routing-trace.json' tour.log ||
  fail "place did not take the model from the trace"
grep -q 'lina' tour.log || fail "infer printed no lina variant"
echo "the README's tour ran: $(grep -c '^+ ' tour.log) commands"
