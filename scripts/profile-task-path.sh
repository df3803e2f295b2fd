#!/usr/bin/env bash
# Where the task path's CPU time goes: runs the SendMessage benchmark's kit servers (A, durable
# in SQLite, and Am, tasks in memory) under load at one concurrency, samples each server process
# with `perf` while it is measured, and writes one flame graph per server with a summary of the
# hottest functions (by time spent in them, and by time spent under them).
#
#   scripts/profile-task-path.sh [OUT_DIR]       (default: target/profile-task-path)
#
# Environment: PROFILE_CONCURRENCY (16), PROFILE_SECONDS (15 per server), PROFILE_BENCH (a
# prebuilt send_message bench executable, e.g. to profile an older build beside a newer one;
# default: built here in release). Needs `perf` (Debian `linux-perf`; samples on the CPU clock,
# so machines without hardware counters work too) and inferno (`cargo install inferno`), whose
# tools it looks for on PATH and in ~/.cargo/bin. Runs by hand, not in CI.
set -euo pipefail
cd "$(dirname "$0")/.."

out="${1:-target/profile-task-path}"
concurrency="${PROFILE_CONCURRENCY:-16}"
seconds="${PROFILE_SECONDS:-15}"
# Samples per second per thread: enough for a stable summary in 15 s, small enough that the
# stacks copied for unwinding (8 KiB a sample) stay in the hundreds of megabytes.
frequency_hz=499
export PATH="$PATH:$HOME/.cargo/bin"

for tool in perf inferno-collapse-perf inferno-flamegraph; do
    command -v "$tool" >/dev/null || { echo "profile-task-path: $tool is missing (see the header)" >&2; exit 1; }
done

bench="${PROFILE_BENCH:-}"
if [ -z "$bench" ]; then
    bench="$(cargo bench -p mesh-agent-kit --bench send_message --no-run --message-format=json 2>/dev/null \
        | python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "send_message":
        print(m["executable"])')"
fi
[ -x "$bench" ] || { echo "profile-task-path: no bench executable at '$bench'" >&2; exit 1; }
mkdir -p "$out"

log="$out/bench.log"
"$bench" --servers Am --rounds 1 --seconds "$seconds" --concurrency "$concurrency" >"$log" 2>&1 &
bench_pid=$!
trap 'kill "$bench_pid" 2>/dev/null || true' EXIT
# The servers are started (and answered a first request) once the benchmark prints C's line.
for _ in $(seq 1 600); do
    grep -q "answers A's response" "$log" && break
    kill -0 "$bench_pid" 2>/dev/null || { cat "$log" >&2; exit 1; }
    sleep 0.1
done

recorders=()
for child in $(pgrep -P "$bench_pid"); do
    durability="$(tr '\0' '\n' </proc/"$child"/environ | sed -n 's/^SEND_MESSAGE_BENCH_TASK_DURABILITY=//p')"
    name="A-durable"
    [ "$durability" = memory ] && name="Am-memory"
    perf record -e cpu-clock -F "$frequency_hz" --call-graph dwarf -p "$child" -o "$out/$name.perf.data" \
        >/dev/null 2>&1 &
    recorders+=("$!:$name")
done
wait "$bench_pid"
trap - EXIT
for recorder in "${recorders[@]}"; do
    kill -INT "${recorder%%:*}" 2>/dev/null || true
done
wait

cat "$log"
for recorder in "${recorders[@]}"; do
    name="${recorder#*:}"
    perf script -i "$out/$name.perf.data" 2>/dev/null | inferno-collapse-perf >"$out/$name.folded"
    inferno-flamegraph --title "$name, SendMessage at c=$concurrency" <"$out/$name.folded" >"$out/$name.svg"
    python3 scripts/profile/summary.py "$out/$name.folded" "$name"
    echo "flame graph: $out/$name.svg"
done
