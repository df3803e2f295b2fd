#!/usr/bin/env bash
# Instructions the agent kit's server spends per SendMessage, counted by valgrind's callgrind:
# unlike requests per second on this 2-core machine, the count hardly moves with what else runs,
# so a change of a few percent in the task path shows. Runs the send_message benchmark's echo
# agent (its re-executed server, tasks in memory unless DURABILITY says otherwise) under
# callgrind twice, answering FEW then MANY blocking SendMessage requests one at a time, and
# prints (instructions(MANY) - instructions(FEW)) / (MANY - FEW): start-up cancels out.
#
#   scripts/instructions-per-request.sh [BENCH_EXE ...]
#
# Each BENCH_EXE is a send_message bench executable (default: built here in release), e.g. an
# older build beside a newer one, measured one after the other in the same run. Environment:
# DURABILITY (memory; durable takes a SQLite file in a temporary directory), FEW (500), MANY
# (2500). Needs valgrind (Debian `valgrind`) and python3. Runs by hand, not in CI.
set -euo pipefail
cd "$(dirname "$0")/.."

durability="${DURABILITY:-memory}"
few="${FEW:-500}"
many="${MANY:-2500}"
. scripts/lib/callgrind.sh
select_benches mesh-agent-kit send_message "$@"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The instructions one server run took to answer COUNT requests (start-up included).
instructions() {
    local bench="$1" count="$2" out="$work/callgrind.$2.out" store=()
    if [ "$durability" = durable ]; then
        store=(SEND_MESSAGE_BENCH_TASK_STORE="sqlite://$work/tasks-$count.db")
    else
        store=(SEND_MESSAGE_BENCH_TASK_DURABILITY="$durability")
    fi
    env SEND_MESSAGE_BENCH_SERVE=agent-kit "${store[@]}" \
        valgrind --tool=callgrind --callgrind-out-file="$out" "$bench" >"$work/addr" 2>/dev/null &
    local server=$!
    python3 scripts/lib/send_messages.py "$(first_line "$work/addr")" "$count"
    stop_counted "$server"
    : >"$work/addr"
    total_instructions "$out"
}

echo "| build | durability | instructions per SendMessage |"
echo "|---|---|---:|"
for bench in "${benches[@]}"; do
    first="$(instructions "$bench" "$few")"
    second="$(instructions "$bench" "$many")"
    echo "| $bench | $durability | $(( (second - first) / (many - few) )) |"
done
