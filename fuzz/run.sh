#!/usr/bin/env bash
# Runs each libFuzzer harness of BUILD for SECONDS (make fuzz, make fuzz-smoke), in chunks of
# at most FUZZ_CHUNK seconds, each growing the harness's corpus in BUILD/corpus/NAME, seeded
# from data/, tests/data and fuzz/seeds. Crashes are written to BUILD/crashes/ and make it
# fail; each one belongs in the GoogleTest suite once fixed.
# Usage: fuzz/run.sh BUILD SECONDS [NAME...]   (default: every harness)
set -euo pipefail
build=$1
seconds=$2
shift 2
names=("$@")
((${#names[@]})) || names=(cluster model parallel strategy counts trace profile nccl_tests)
chunk=${FUZZ_CHUNK:-300}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$build/crashes"

seed() {  # seed NAME FILE...: copies the files that exist into NAME's corpus
  local dir=$build/corpus/$1
  shift
  mkdir -p "$dir"
  for f in "$@"; do [ -f "$f" ] && cp -n "$f" "$dir/"; done
  return 0
}
seed cluster "$root"/data/clusters/*.json "$root"/tests/data/rt/*.json
seed model "$root"/data/models/*.json
seed counts "$root"/tests/data/place/*.json "$root"/fuzz/seeds/counts/*
seed trace "$root"/fuzz/seeds/trace/*
seed parallel "$root"/fuzz/seeds/parallel/*
seed strategy "$root"/fuzz/seeds/strategy/*
seed profile
seed nccl_tests "$root"/tests/data/nccl_tests/*.txt

status=0
for name in "${names[@]}"; do
  bin=$build/fuzz/fuzz_$name
  [ -x "$bin" ] || { echo "fuzz: $bin not built" >&2; exit 2; }
  dict=()
  [ -f "$root/fuzz/dicts/$name.dict" ] && dict=(-dict="$root/fuzz/dicts/$name.dict")
  left=$seconds runs=0 start=$(date +%s)
  while ((left > 0)); do
    now=$((left < chunk ? left : chunk))
    log=$build/crashes/$name.log
    # -max_len: traces and clusters need room; -timeout: one input may take 10 s at most.
    if ! "$bin" "${dict[@]}" -max_total_time="$now" -max_len=65536 -timeout=10 \
        -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$build/crashes/$name-" \
        "$build/corpus/$name" >"$log" 2>&1; then
      echo "fuzz_$name: FAILED (see $log and $build/crashes/$name-*)"
      grep -m5 -E "ERROR|fuzz property failed|Assertion" "$log" || tail -20 "$log"
      status=1
      break
    fi
    runs=$((runs + $(sed -n 's/^stat::number_of_executed_units: *//p' "$log")))
    left=$((left - now))
  done
  ((status)) && continue
  echo "fuzz_$name: $runs executions in $(($(date +%s) - start)) s," \
    "$(ls "$build/corpus/$name" | wc -l) inputs in the corpus, no crash"
done
exit $status
