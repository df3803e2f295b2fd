#!/usr/bin/env bash
# Chaos test against real processes (issue 6): the suite (`a2a-mesh up`) plus a second search
# replica, 16 concurrent orchestrated queries for 60 s; midway the second replica is killed with
# SIGKILL and restarted. The load generator prints the share of SUCCESS/PARTIAL answers, late
# answers, errors without a body, latency, and how soon the restarted replica is back in rotation.
#
# Not part of `cargo test` (it takes a minute and fixed ports). Settings by environment:
#   CHAOS_PORT_BASE (18000: registry, +1 orchestrator, +2 search, +3 second search replica,
#   +10 entity extraction, +11 profile selection), CHAOS_SECONDS (60), CHAOS_CONCURRENCY (16),
#   CHAOS_DEADLINE_MS (15000), CHAOS_HEALTH_INTERVAL_MS (2000, the registry's poll interval),
#   CHAOS_PROFILE (release; `dev` for a debug build), CHAOS_SKIP_BUILD=1 to use binaries already
#   built (e.g. by `cargo test --workspace --no-run`, which builds them in the dev profile).
set -euo pipefail

cd "$(dirname "$0")/.."
base=${CHAOS_PORT_BASE:-18000}
seconds=${CHAOS_SECONDS:-60}
concurrency=${CHAOS_CONCURRENCY:-16}
deadline_ms=${CHAOS_DEADLINE_MS:-15000}
health_interval_ms=${CHAOS_HEALTH_INTERVAL_MS:-2000}
profile=${CHAOS_PROFILE:-release}
target_dir=${CARGO_TARGET_DIR:-target}
bin_dir="$target_dir/$([ "$profile" = dev ] && echo debug || echo "$profile")"

if [ -z "${CHAOS_SKIP_BUILD:-}" ]; then
    cargo build --profile "$profile" --bin a2a-mesh --example chaos_load
    cargo build --profile "$profile" -p search --bin search
fi
bin_dir=$(cd "$bin_dir" && pwd)

work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

registry_url="http://127.0.0.1:$base"
replica_port=$((base + 3))
start_replica() {
    "$bin_dir/search" --port "$replica_port" --name search-2 --registry-url "$registry_url" --data-dir "$work/search-2" \
        >>"$work/search-2.log" 2>&1 &
    replica_pid=$!
    pids+=("$replica_pid")
}

(
    cd "$work"
    MESH_REGISTRY_PORT=$base MESH_ORCHESTRATOR_PORT=$((base + 1)) MESH_SEARCH_PORT=$((base + 2)) \
        MESH_ENTITY_EXTRACTION_PORT=$((base + 10)) MESH_PROFILE_SELECTION_PORT=$((base + 11)) \
        MESH_REGISTRY_HEALTH_CHECK_INTERVAL_MS=$health_interval_ms \
        exec "$bin_dir/a2a-mesh" up >"$work/suite.log" 2>&1
) &
pids+=($!)

echo "waiting for the suite on $registry_url"
for _ in $(seq 1 300); do
    curl -sf "$registry_url/capabilities/search" >/dev/null 2>&1 && break
    sleep 0.2
done
start_replica
for _ in $(seq 1 300); do
    healthy=$(curl -sf "$registry_url/capabilities/search" | grep -o '"health_status":"healthy"' | wc -l || true)
    [ "$healthy" -ge 2 ] && break
    sleep 0.2
done
echo "two healthy search replicas; loading for ${seconds} s"

"$bin_dir/examples/chaos_load" --orchestrator-url "http://127.0.0.1:$((base + 1))" \
    --registry-url "$registry_url" --replica search-2 --replica-url "http://127.0.0.1:$replica_port" \
    --concurrency "$concurrency" --seconds "$seconds" --deadline-ms "$deadline_ms" >"$work/report.txt" &
load_pid=$!

sleep $((seconds / 2))
echo "SIGKILL search-2 (pid $replica_pid)"
kill -9 "$replica_pid"
sleep 3
echo "restarting search-2"
start_replica

wait "$load_pid"
cat "$work/report.txt"
echo "registry poll interval: ${health_interval_ms} ms"
