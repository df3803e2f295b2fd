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
command -v valgrind >/dev/null || { echo "instructions-per-request: valgrind is missing" >&2; exit 1; }

benches=("$@")
if [ "${#benches[@]}" -eq 0 ]; then
    benches=("$(cargo bench -p mesh-agent-kit --bench send_message --no-run --message-format=json 2>/dev/null \
        | python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "send_message":
        print(m["executable"])')")
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# Sends COUNT blocking SendMessage requests over one connection and checks every answer.
cat >"$work/drive.py" <<'EOF'
import http.client, json, sys, uuid
host, port = sys.argv[1].rsplit(":", 1)
count = int(sys.argv[2])
connection = http.client.HTTPConnection(host, int(port), timeout=60)
for i in range(count):
    message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "hello a2a"}]}
    body = json.dumps({"jsonrpc": "2.0", "id": i, "method": "SendMessage", "params": {"message": message}})
    connection.request("POST", "/", body, {"content-type": "application/json", "A2A-Version": "1.0"})
    response = connection.getresponse()
    answer = response.read()
    if response.status != 200 or b"TASK_STATE_COMPLETED" not in answer:
        sys.exit(f"request {i}: {response.status} {answer[:200]!r}")
EOF

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
    for _ in $(seq 1 600); do [ -s "$work/addr" ] && break; sleep 0.1; done
    python3 "$work/drive.py" "$(head -1 "$work/addr")" "$count"
    # The first signal starts the agent's graceful stop, the second ends it: callgrind writes
    # its counts as the process exits.
    kill -INT "$server"
    sleep 1
    kill -TERM "$server" 2>/dev/null || true
    wait "$server" || true
    : >"$work/addr"
    awk '/^(summary|totals):/ {print $2; exit}' "$out"
}

echo "| build | durability | instructions per SendMessage |"
echo "|---|---|---:|"
for bench in "${benches[@]}"; do
    first="$(instructions "$bench" "$few")"
    second="$(instructions "$bench" "$many")"
    echo "| $bench | $durability | $(( (second - first) / (many - few) )) |"
done
