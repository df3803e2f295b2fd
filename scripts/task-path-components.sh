#!/usr/bin/env bash
# Where each SendMessage server's CPU time goes, by component, in microseconds per request: runs
# the send_message benchmark (A, which it always measures, and the servers COMPONENTS_SERVERS
# names) for one round at one concurrency under `perf record -a`, then splits each server
# process's samples by component (scripts/lib/perf_components.py) and scales them by the CPU per
# request the benchmark measured for it over its window. The load generator's own CPU per
# request is in the benchmark's table beside it.
#
#   scripts/task-path-components.sh [BENCH_EXE]
#
# Environment: COMPONENTS_SERVERS (Am,R,C), COMPONENTS_CONCURRENCY (16), COMPONENTS_SECONDS (5).
# Needs `perf` (Debian `linux-perf`; samples on the CPU clock, so machines without hardware
# counters work too) and python3. Runs by hand, not in CI.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/callgrind.sh

servers="${COMPONENTS_SERVERS:-Am,R,C}"
concurrency="${COMPONENTS_CONCURRENCY:-16}"
seconds="${COMPONENTS_SECONDS:-5}"
command -v perf >/dev/null || { echo "task-path-components: perf is missing (see the header)" >&2; exit 1; }
bench="${1:-$(bench_executable mesh-agent-kit send_message)}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

perf record -a -F 999 -o "$work/perf.data" -- "$bench" --servers "$servers" --concurrency "$concurrency" \
    --rounds 1 --seconds "$seconds" >"$work/table" 2>"$work/cells"
cat "$work/cells" "$work/table" | grep -E '^round|^\| server|^\|---\|---:|^\| [A-Z]'
# Each cell's line names its server's process; the table gives its CPU per request.
processes="$(python3 - "$work/cells" "$work/table" <<'PY'
import re, sys
cells = open(sys.argv[1]).read()
table = open(sys.argv[2]).read()
for label, pid in re.findall(r"round \d+, c=\s*\d+, (.+?)\s*:.*\(process (\d+)\)", cells):
    row = next((line for line in table.splitlines() if line.startswith(f"| {label} |")), None)
    if row:
        print(f"{label}={pid}={row.split('|')[6].strip()}")
PY
)"
mapfile -t processes <<<"$processes"
python3 scripts/lib/perf_components.py "$work/perf.data" "${processes[@]}"
