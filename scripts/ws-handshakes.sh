#!/usr/bin/env bash
# The UI agent under many WebSocket handshakes (issue #34, by hand, not in CI): `a2a-mesh up` on
# loopback, then WS_COUNT handshakes naming the orchestrator on as many distinct `instance`
# values (the `ws_handshakes` example; WS_OWN_INSTANCE=1: all on the instance it runs on, to fill
# the socket places instead), every accepted socket held open until all were tried, then closed. Reports what they left: the bus topics and docmem conversations (read from the
# suite's SQLite file), the open sockets and bus participants (the UI agent's /health), and the
# suite process's CPU over WS_CPU_SECONDS, measured before the handshakes and again
# WS_IDLE_SECONDS after the last socket closed. Goals: everything bounded by the caps, and idle.
#
# Settings by environment: WS_PORT_BASE (18300: registry, +1 orchestrator, +2 search,
# +10 entity extraction, +11 profile selection, +20 UI agent), WS_COUNT (2000), WS_IDLE_SECONDS
# (10), WS_CPU_SECONDS (5), WS_PROFILE (dev; `release` for an optimized build), WS_SKIP_BUILD=1 to
# use binaries already built, WS_BINARY to measure another `a2a-mesh` build (e.g. an older one).
# Needs sqlite3 and a file descriptor limit above twice WS_COUNT.
set -euo pipefail

cd "$(dirname "$0")/.."
base=${WS_PORT_BASE:-18300}
count=${WS_COUNT:-2000}
idle_seconds=${WS_IDLE_SECONDS:-10}
cpu_seconds=${WS_CPU_SECONDS:-5}
profile=${WS_PROFILE:-dev}
target_dir=${CARGO_TARGET_DIR:-target}
bin_dir="$target_dir/$([ "$profile" = dev ] && echo debug || echo "$profile")"

if [ -z "${WS_SKIP_BUILD:-}" ]; then
    cargo build --profile "$profile" --bin a2a-mesh --example ws_handshakes
fi
bin_dir=$(cd "$bin_dir" && pwd)
binary=${WS_BINARY:-$bin_dir/a2a-mesh}
ulimit -n "$(( count * 2 + 1024 ))" 2>/dev/null || echo "cannot raise the file descriptor limit ($(ulimit -n))"

work=$(mktemp -d)
suite=""
cleanup() {
    [ -n "$suite" ] && kill "$suite" 2>/dev/null && wait "$suite" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

ui_url="http://127.0.0.1:$((base + 20))"
(
    cd "$work"
    MESH_REGISTRY_PORT=$base MESH_ORCHESTRATOR_PORT=$((base + 1)) MESH_SEARCH_PORT=$((base + 2)) \
        MESH_ENTITY_EXTRACTION_PORT=$((base + 10)) MESH_PROFILE_SELECTION_PORT=$((base + 11)) \
        MESH_UI_AGENT_PORT=$((base + 20)) MESH_SEARCH_DENSE__ENABLED=false RUST_LOG=warn \
        exec "$binary" up >"$work/suite.log" 2>&1
) &
suite=$!

echo "waiting for the suite (UI agent on $ui_url)"
for _ in $(seq 1 600); do
    healthy=$(curl -sf "http://127.0.0.1:$base/stats" | grep -o '"healthy_agents":[0-9]*' | cut -d: -f2 || true)
    [ "${healthy:-0}" -ge 4 ] && curl -sf "$ui_url/health" >/dev/null 2>&1 && break
    sleep 0.2
done

# CPU of the suite's process over WS_CPU_SECONDS, in percent of one core.
cpu_percent() {
    local ticks_per_s before after
    ticks_per_s=$(getconf CLK_TCK)
    before=$(awk '{print $14 + $15}' "/proc/$suite/stat")
    sleep "$cpu_seconds"
    after=$(awk '{print $14 + $15}' "/proc/$suite/stat")
    awk -v d="$((after - before))" -v hz="$ticks_per_s" -v s="$cpu_seconds" 'BEGIN {printf "%.1f", 100 * d / hz / s}'
}
counts() {
    local topics roots bus
    topics=$(sqlite3 "$work/data/bus.db" "SELECT COUNT(*) FROM bus_topics")
    roots=$(sqlite3 "$work/data/bus.db" "SELECT COUNT(*) FROM docmem_nodes WHERE parent_id IS NULL")
    bus=$(curl -sf "$ui_url/health" | grep -o '"bus":{[^}]*}' || true)
    echo "  bus topics: $topics, docmem conversations: $roots, UI agent: ${bus:-no /health}"
}

echo "before: CPU $(cpu_percent)% over ${cpu_seconds} s"
counts
"$bin_dir/examples/ws_handshakes" --url "$ui_url" --agent orchestrator --count "$count" \
    ${WS_OWN_INSTANCE:+--own-instance}
echo "right after the last socket closed:"
counts
sleep "$idle_seconds"
echo "${idle_seconds} s after: CPU $(cpu_percent)% over ${cpu_seconds} s"
counts
