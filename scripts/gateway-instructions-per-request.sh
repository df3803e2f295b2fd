#!/usr/bin/env bash
# Instructions the gateway spends per relayed SendMessage, counted by valgrind's callgrind (the
# count hardly moves with what else runs on the machine, unlike requests per second). Runs the
# gateway_relay benchmark's servers: its kit echo agent and its registry natively, and its
# gateway role under callgrind, twice, relaying FEW then
# MANY blocking SendMessage requests sent one at a time with a user's bearer token; prints
# (instructions(MANY) - instructions(FEW)) / (MANY - FEW), so start-up cancels out, and keeps
# the MANY run's callgrind file for callgrind_annotate.
#
#   scripts/gateway-instructions-per-request.sh [BENCH_EXE ...]
#
# Each BENCH_EXE is a gateway_relay bench executable (default: built here in release), e.g. an
# older build beside a newer one. Environment: FEW (300), MANY (1300), KEEP_DIR (where the
# callgrind files are kept; default a new temporary directory). Needs valgrind and python3; the
# requests come from scripts/lib/send_messages.py.
# Runs by hand, not in CI.
set -euo pipefail
cd "$(dirname "$0")/.."

few="${FEW:-300}"
many="${MANY:-1300}"
. scripts/lib/callgrind.sh
select_benches gateway gateway_relay "$@"
work="$(mktemp -d)"
keep="${KEEP_DIR:-$(mktemp -d -t gateway-callgrind.XXXXXX)}"
mkdir -p "$keep"
pids=()
trap 'for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; rm -rf "$work"' EXIT
# The bench's secret: the requests carry a user's token signed with it.
export HS256_SECRET=gateway-bench-secret-of-32-bytes-at-least

# The instructions one gateway run took to relay COUNT requests (start-up included).
instructions() {
    local bench="$1" count="$2" tag="$3"
    local out="$keep/callgrind.$tag.$count.out"
    GATEWAY_BENCH_SERVE=kit "$bench" >"$work/kit" 2>/dev/null &
    local kit=$!
    pids+=("$kit")
    GATEWAY_BENCH_SERVE=registry "$bench" >"$work/registry" 2>/dev/null &
    local registry=$!
    pids+=("$registry")
    local kit_addr registry_addr
    kit_addr="$(first_line "$work/kit")"
    registry_addr="$(first_line "$work/registry")"
    env GATEWAY_BENCH_SERVE=gateway GATEWAY_BENCH_UPSTREAMS="kit=http://$kit_addr" GATEWAY_BENCH_REGISTRY="$registry_addr" \
        valgrind --tool=callgrind --callgrind-out-file="$out" "$bench" >"$work/gateway" 2>/dev/null &
    local gateway=$!
    pids+=("$gateway")
    python3 scripts/lib/send_messages.py "$(first_line "$work/gateway")" "$count" /agents/kit/
    stop_counted "$gateway"
    kill "$kit" "$registry" 2>/dev/null || true
    wait "$kit" "$registry" 2>/dev/null || true
    : >"$work/kit"
    : >"$work/registry"
    : >"$work/gateway"
    total_instructions "$out"
}

echo "| build | instructions per relayed SendMessage |"
echo "|---|---:|"
index=0
for bench in "${benches[@]}"; do
    index=$((index + 1))
    first="$(instructions "$bench" "$few" "$index")"
    second="$(instructions "$bench" "$many" "$index")"
    echo "| $bench | $(( (second - first) / (many - few) )) |"
done
echo "callgrind files (callgrind_annotate --inclusive=yes FILE): $keep"
