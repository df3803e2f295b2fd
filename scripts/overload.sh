#!/usr/bin/env bash
# Overload test of one agent (issue 12), run by hand, not in CI: the kit's echo agent, then the
# `overload` example measuring its sustainable rate and offering 10x that over 2,000 connections
# for 60 s. Passes when every answer is a 2xx, or a 503/429 with Retry-After and the JSON error
# body, accepted requests finish within their deadline, the agent serves normally 1 s after, and
# its resident memory stays under OVERLOAD_RSS_MAX_MB.
#
# Settings by environment: OVERLOAD_PORT (19001), OVERLOAD_SECONDS (60), OVERLOAD_CONNECTIONS
# (2000), OVERLOAD_FACTOR (10), OVERLOAD_RSS_MAX_MB (256), OVERLOAD_PROFILE (release; `dev` for
# the debug build), OVERLOAD_SKIP_BUILD=1 to use binaries already built. The machine needs a file
# descriptor limit above twice the connections (`ulimit -n`).
set -euo pipefail

cd "$(dirname "$0")/.."
port=${OVERLOAD_PORT:-19001}
seconds=${OVERLOAD_SECONDS:-60}
connections=${OVERLOAD_CONNECTIONS:-2000}
factor=${OVERLOAD_FACTOR:-10}
rss_max_mb=${OVERLOAD_RSS_MAX_MB:-256}
profile=${OVERLOAD_PROFILE:-release}
target_dir=${CARGO_TARGET_DIR:-target}
bin_dir="$target_dir/$([ "$profile" = dev ] && echo debug || echo "$profile")/examples"

if [ -z "${OVERLOAD_SKIP_BUILD:-}" ]; then
    cargo build --profile "$profile" -p mesh-agent-kit --example echo_agent --example overload
fi
ulimit -n "$(( connections * 2 + 1024 ))" 2>/dev/null || echo "cannot raise the file descriptor limit ($(ulimit -n))"

. scripts/lib/echo-agent.sh
start_echo_agent "$port" "$bin_dir"

# Resident memory of the agent, sampled every 200 ms while the load runs.
rss_log="$data/rss"
( while kill -0 "$agent" 2>/dev/null; do awk '/VmRSS/ {print $2}' "/proc/$agent/status" >>"$rss_log"; sleep 0.2; done ) &
sampler=$!

status=0
"$bin_dir/overload" --url "http://127.0.0.1:$port" --connections "$connections" --seconds "$seconds" \
    --factor "$factor" || status=$?
kill "$sampler" 2>/dev/null || true

rss_peak_kb=$(sort -n "$rss_log" | tail -1)
echo "agent resident memory: peak $(( rss_peak_kb / 1024 )) MB (bound ${rss_max_mb} MB)"
if [ "$(( rss_peak_kb / 1024 ))" -ge "$rss_max_mb" ]; then
    echo "FAIL: resident memory above the bound"
    status=1
fi
[ "$status" -eq 0 ] && echo "PASS" || echo "FAIL"
exit "$status"
