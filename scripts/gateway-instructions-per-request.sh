#!/usr/bin/env bash
# Instructions the gateway spends per relayed SendMessage, counted by valgrind's callgrind (the
# count hardly moves with what else runs on the machine, unlike requests per second). Runs the
# gateway_relay benchmark's servers: its kit echo agent natively, and its gateway role (the
# gateway with the registry beside it, in one process) under callgrind, twice, relaying FEW then
# MANY blocking SendMessage requests sent one at a time with a user's bearer token; prints
# (instructions(MANY) - instructions(FEW)) / (MANY - FEW), so start-up cancels out, and keeps
# the MANY run's callgrind file for callgrind_annotate.
#
#   scripts/gateway-instructions-per-request.sh [BENCH_EXE ...]
#
# Each BENCH_EXE is a gateway_relay bench executable (default: built here in release), e.g. an
# older build beside a newer one. Environment: FEW (300), MANY (1300), KEEP_DIR (where the
# callgrind files are kept; default a new temporary directory). Needs valgrind and python3.
# Runs by hand, not in CI.
set -euo pipefail
cd "$(dirname "$0")/.."

few="${FEW:-300}"
many="${MANY:-1300}"
command -v valgrind >/dev/null || { echo "gateway-instructions-per-request: valgrind is missing" >&2; exit 1; }

benches=("$@")
if [ "${#benches[@]}" -eq 0 ]; then
    benches=("$(cargo bench -p gateway --bench gateway_relay --no-run --message-format=json 2>/dev/null \
        | python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "gateway_relay":
        print(m["executable"])')")
fi
work="$(mktemp -d)"
keep="${KEEP_DIR:-$(mktemp -d -t gateway-callgrind.XXXXXX)}"
mkdir -p "$keep"
pids=()
trap 'for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; rm -rf "$work"' EXIT

# Sends COUNT blocking SendMessage requests over one connection with a bearer token signed with
# the bench's secret, and checks every answer.
cat >"$work/drive.py" <<'PY'
import base64, hashlib, hmac, http.client, json, sys, time, uuid
SECRET = b"gateway-bench-secret-of-32-bytes-at-least"
def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=")
now = int(time.time())
claims = {"sub": "bench", "tenant": "acme", "roles": ["user"], "exp": now + 3600, "nbf": now}
signing = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode()) + b"." + b64(json.dumps(claims).encode())
token = (signing + b"." + b64(hmac.new(SECRET, signing, hashlib.sha256).digest())).decode()
host, port = sys.argv[1].rsplit(":", 1)
count = int(sys.argv[2])
connection = http.client.HTTPConnection(host, int(port), timeout=60)
for i in range(count):
    message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "hello a2a"}]}
    body = json.dumps({"jsonrpc": "2.0", "id": i, "method": "SendMessage", "params": {"message": message}})
    headers = {"content-type": "application/json", "A2A-Version": "1.0", "authorization": "Bearer " + token}
    connection.request("POST", "/agents/kit/", body, headers)
    response = connection.getresponse()
    answer = response.read()
    if response.status != 200 or b"TASK_STATE_COMPLETED" not in answer:
        sys.exit(f"request {i}: {response.status} {answer[:300]!r}")
PY

# Waits for the first line a server prints (its address) in file $1.
address_in() {
    for _ in $(seq 1 1200); do [ -s "$1" ] && break; sleep 0.1; done
    head -1 "$1"
}

# The instructions one gateway run took to relay COUNT requests (start-up included).
instructions() {
    local bench="$1" count="$2" tag="$3" out="$keep/callgrind.$3.$2.out"
    GATEWAY_BENCH_SERVE=kit "$bench" >"$work/kit" 2>/dev/null &
    local kit=$!
    pids+=("$kit")
    local kit_addr
    kit_addr="$(address_in "$work/kit")"
    env GATEWAY_BENCH_SERVE=gateway GATEWAY_BENCH_UPSTREAMS="kit=http://$kit_addr" \
        valgrind --tool=callgrind --callgrind-out-file="$out" "$bench" >"$work/gateway" 2>/dev/null &
    local gateway=$!
    pids+=("$gateway")
    python3 "$work/drive.py" "$(address_in "$work/gateway")" "$count"
    # The first signal starts the gateway's graceful stop, the second ends it: callgrind writes
    # its counts as the process exits.
    kill -INT "$gateway"
    sleep 1
    kill -TERM "$gateway" 2>/dev/null || true
    wait "$gateway" || true
    kill "$kit" 2>/dev/null || true
    wait "$kit" 2>/dev/null || true
    : >"$work/kit"
    : >"$work/gateway"
    awk '/^(summary|totals):/ {print $2; exit}' "$out"
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
