#!/usr/bin/env bash
# Runs the A2A conformance kit (a2aproject/a2a-tck, branch 1.0-dev) against our example agent
# over JSON-RPC, HTTP+JSON and gRPC, then prints passed/failed/skipped counts per requirement level
# and transport, read from the kit's own report files (reports/compatibility.json,
# junitreport.xml, by scripts/tck/report.py), and, over every variant together, each requirement
# that no variant ran on a transport, with the kit's reason for skipping it.
# The kit runs its tests of a capability only when the card declares it, so each variant of the
# agent (shared/tck-agent --variant) shows it one more:
#   standard            streams, push notifications, no extended card, no required extension
#   extended-card       an authenticated extended card, opened by a token: the kit has no option
#                       for credentials, so scripts/tck/tck_bearer.py (a pytest plugin) makes
#                       every request of the kit carry it
#   required-extension  requires urn:a2a:tck:required-extension, which the kit never activates:
#                       only its required-extension tests (CORE-CAP-004, level must) are run, as
#                       every other call is refused by design
#   no-streaming        says streaming: false; the streaming methods are refused (one test of the
#                       kit is deselected: see below)
#   no-push-notifications  offers no push notifications; their config methods are refused
#
# The kit is fetched, never committed. Get it once, beside this clone:
#   git clone --branch 1.0-dev https://github.com/a2aproject/a2a-tck.git ../a2a-tck
# A read-only kit (the shared folder's copy) is copied to TCK_COPY_DIR first, as the kit writes
# its reports (and the script its virtualenv) into its own folder.
#
# Through the gateway (--gateway, or TCK_GATEWAY=1): a registry and the gateway are started too
# (open, on loopback), each agent is registered with the registry by its card's URL alone, and
# the kit runs against the agent's route on the gateway, http://127.0.0.1:TCK_GATEWAY_PORT/agents/NAME,
# which serves the agent's card with its JSON-RPC and HTTP+JSON interfaces pointed at the
# gateway. The gateway relays no gRPC, so the kit's transports are jsonrpc,http_json unless
# TCK_TRANSPORTS says otherwise. The kit calls as an open gateway's anonymous caller: not an
# admin, so ListTasks answers only the tasks created through the gateway for its tenant (here,
# every task the kit created); and the gateway never forwards a caller's credential (the
# extended-card variant's token does not reach the agent).
#
# Usage: scripts/tck.sh [--gateway] [AGENT_URL]
# Settings by environment:
#   TCK_DIR            the kit's checkout (default ../a2a-tck, else ../shared/a2a-tck, else
#                      /work/tck)
#   TCK_COPY_DIR       where a read-only kit is copied (default ~/.cache/a2a-mesh/a2a-tck; copied
#                      again when the kit's PINNED.txt changes)
#   TCK_PYTHON         a Python with the kit installed; without it a virtualenv is made at
#                      TCK_VENV (default $TCK_DIR/.venv) with `pip install -e $TCK_DIR`
#   TCK_AGENT_URL      an agent already running (also the first argument): nothing is started,
#                      and it is run as the one variant it is (TCK_VARIANTS is not read)
#   TCK_AGENT_CMD      the command that starts the agent, `{port}` replaced by TCK_PORT and
#                      `{variant}` by the variant (default: cargo run --release -p mesh-tck-agent --
#                      --port {port} --variant {variant})
#   TCK_VARIANTS       the variants to run, each against its own agent ("standard"; all of them:
#                      "standard extended-card required-extension no-streaming
#                      no-push-notifications")
#   TCK_EXTENDED_CARD_TOKEN the extended-card variant's token (default: a random one)
#   TCK_PORT           port of the started agent (18790)
#   TCK_START_TIMEOUT_S how long to wait for its agent card (900: covers a cold release build)
#   TCK_TRANSPORTS     the kit's --transport (jsonrpc,http_json,grpc)
#   TCK_LEVELS         levels to run, one kit run each ("must"; e.g. "must should may")
#   TCK_REPORTS_DIR    where each level's reports are copied (default: a new temporary dir)
#   TCK_GATEWAY        1: run through the gateway (as --gateway)
#   TCK_REGISTRY_CMD   with the gateway: the command that starts the registry, `{port}` and
#                      `{data}` (a folder for its database) replaced (default: cargo run --release
#                      -p registry -- --port {port} --database-url sqlite://{data}/registry.db)
#   TCK_GATEWAY_CMD    with the gateway: the command that starts it, `{port}` and `{config}` (its
#                      configuration file) replaced (default: cargo run --release -p gateway --
#                      --port {port} --config {config})
#   TCK_REGISTRY_PORT, TCK_GATEWAY_PORT  their ports (18791, 18792)
# Exits non-zero when a MUST requirement fails (or the MUST run itself fails), in any variant.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

gateway=${TCK_GATEWAY:-0}
if [ "${1:-}" = --gateway ]; then
    gateway=1
    shift
fi

tck_dir=${TCK_DIR:-}
if [ -z "$tck_dir" ]; then
    for candidate in "$repo/../a2a-tck" "$repo/../shared/a2a-tck" /work/tck; do
        if [ -f "$candidate/run_tck.py" ]; then
            tck_dir=$candidate
            break
        fi
    done
fi
if [ -z "$tck_dir" ] || [ ! -f "$tck_dir/run_tck.py" ]; then
    echo "the conformance kit is not there (TCK_DIR=${tck_dir:-unset}); get it with:" >&2
    echo "  git clone --branch 1.0-dev https://github.com/a2aproject/a2a-tck.git $repo/../a2a-tck" >&2
    exit 2
fi
tck_dir=$(cd "$tck_dir" && pwd)
# Read-only: not writable by us, or (root writes anywhere) without its owner's write bit.
if [ ! -w "$tck_dir" ] || [ -n "$(find "$tck_dir" -maxdepth 0 ! -perm -u+w)" ]; then
    copy=${TCK_COPY_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/a2a-mesh/a2a-tck}
    if [ ! -f "$copy/PINNED.txt" ] || ! cmp -s "$tck_dir/PINNED.txt" "$copy/PINNED.txt"; then
        echo "== copying the read-only kit $tck_dir to $copy"
        rm -rf "$copy"
        mkdir -p "$(dirname "$copy")"
        cp -R "$tck_dir" "$copy"
        chmod -R u+w "$copy"
    fi
    tck_dir=$copy
fi
if branch=$(git -C "$tck_dir" rev-parse --abbrev-ref HEAD 2>/dev/null) && [ "$branch" != 1.0-dev ]; then
    echo "warning: $tck_dir is on branch $branch, not 1.0-dev" >&2
fi

python=${TCK_PYTHON:-}
if [ -z "$python" ]; then
    venv=${TCK_VENV:-$tck_dir/.venv}
    if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import tck, pytest_html' 2>/dev/null; then
        echo "== installing the kit into $venv"
        python3 -m venv "$venv"
        "$venv/bin/pip" install --quiet --disable-pip-version-check -e "$tck_dir"
    fi
    python=$venv/bin/python
fi

port=${TCK_PORT:-18790}
if [ "$gateway" = 1 ]; then
    transports=${TCK_TRANSPORTS:-jsonrpc,http_json}
else
    transports=${TCK_TRANSPORTS:-jsonrpc,http_json,grpc}
fi
levels=${TCK_LEVELS:-must}
variants=${TCK_VARIANTS:-standard}
start_timeout_s=${TCK_START_TIMEOUT_S:-900}
reports=${TCK_REPORTS_DIR:-$(mktemp -d -t tck-reports.XXXXXX)}
mkdir -p "$reports"
extended_card_token=${TCK_EXTENDED_CARD_TOKEN:-$("$python" -c 'import secrets; print(secrets.token_hex(24))')}

agent_pid=
stop_agent() {
    if [ -n "$agent_pid" ]; then
        # The agent runs in its own session: end the whole group (cargo and the example it runs).
        kill -TERM -- "-$agent_pid" 2>/dev/null || true
        for _ in $(seq 1 50); do
            kill -0 "$agent_pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL -- "-$agent_pid" 2>/dev/null || true
        agent_pid=
    fi
}
# The registry and the gateway (with --gateway), started once for every variant.
front_pids=()
stop_all() {
    stop_agent
    local pid
    for pid in "${front_pids[@]}"; do
        kill -TERM -- "-$pid" 2>/dev/null || true
    done
    for pid in "${front_pids[@]}"; do
        for _ in $(seq 1 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL -- "-$pid" 2>/dev/null || true
    done
    front_pids=()
}
trap stop_all EXIT
trap 'exit 130' INT TERM

# Runs `$2` in a session of its own, logging to $3, until $4 answers; $1 names it.
start_front() {
    local name=$1 cmd=$2 log=$3 ready_url=$4
    echo "== starting the $name: $cmd (log: $log)"
    setsid bash -c "exec $cmd" >"$log" 2>&1 &
    local pid=$!
    front_pids+=("$pid")
    await_answer "$name" "$pid" "$ready_url" "$log"
}

# Waits until `url` answers, failing when process `pid` (the `name`, logging to `log`) exits first
# or `start_timeout_s` passes.
await_answer() {
    local name=$1 pid=$2 url=$3 log=$4
    local waited_s=0
    until curl -fs -o /dev/null "$url"; do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "the $name exited before answering; its log ends with:" >&2
            tail -n 20 "$log" >&2
            exit 1
        fi
        if [ "$waited_s" -ge "$start_timeout_s" ]; then
            echo "no answer from the $name at $url after ${start_timeout_s}s" >&2
            exit 1
        fi
        sleep 1
        waited_s=$((waited_s + 1))
    done
}

# Starts the registry and the gateway in front of it; sets $registry_url and $gateway_url.
start_gateway() {
    local registry_port=${TCK_REGISTRY_PORT:-18791} gateway_port=${TCK_GATEWAY_PORT:-18792}
    registry_url="http://127.0.0.1:$registry_port"
    gateway_url="http://127.0.0.1:$gateway_port"
    mkdir -p "$reports/registry"
    local default_registry='cargo run --release -p registry -- --port {port} --database-url sqlite://{data}/registry.db'
    local cmd=${TCK_REGISTRY_CMD:-$default_registry}
    cmd=${cmd//"{port}"/$registry_port}
    cmd=${cmd//"{data}"/$reports/registry}
    start_front registry "$cmd" "$reports/registry.log" "$registry_url/health/ready"
    # The agents run on loopback, which the gateway reaches only when allowed; each variant's
    # agent comes back on the same port with another card, which the gateway reads afresh.
    printf 'registry_url = "%s"\nupstream_allowed_networks = ["127.0.0.0/8"]\nagent_cache_ms = 0\n' \
        "$registry_url" >"$reports/gateway.toml"
    local default_gateway='cargo run --release -p gateway -- --port {port} --config {config}'
    cmd=${TCK_GATEWAY_CMD:-$default_gateway}
    cmd=${cmd//"{port}"/$gateway_port}
    cmd=${cmd//"{config}"/$reports/gateway.toml}
    start_front gateway "$cmd" "$reports/gateway.log" "$gateway_url/health/ready"
}

# Registers the agent at $url with the registry by its card's URL alone, and points $url at the
# agent's route on the gateway once the gateway serves its card there.
through_gateway() {
    local card_url="$url/.well-known/agent-card.json"
    local name path
    name=$(curl -fsS "$card_url" | "$python" -c 'import json, sys; print(json.load(sys.stdin)["name"])')
    curl -fsS -o /dev/null -X POST "$registry_url/register" -H 'content-type: application/json' \
        -d "{\"agent_card_url\": \"$card_url\"}"
    path=$("$python" -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$name")
    url="$gateway_url/agents/$path"
    local waited_s=0
    until curl -fs -o /dev/null "$url/.well-known/agent-card.json"; do
        if [ "$waited_s" -ge 30 ]; then
            echo "the gateway does not serve the card of $name at $url" >&2
            exit 1
        fi
        sleep 1
        waited_s=$((waited_s + 1))
    done
    echo "== $name registered; the kit runs against $url"
}

# Starts the agent as variant $1 and waits for its card; sets $url.
start_agent() {
    local variant=$1
    url="http://127.0.0.1:$port"
    local default_cmd='cargo run --release -p mesh-tck-agent -- --port {port} --variant {variant}'
    local cmd=${TCK_AGENT_CMD:-$default_cmd}
    cmd=${cmd//"{port}"/$port}
    cmd=${cmd//"{variant}"/$variant}
    local agent_log="$reports/$variant/agent.log"
    echo "== starting the agent: $cmd (log: $agent_log)"
    local agent_env=()
    if [ "$variant" = extended-card ]; then
        agent_env=("MESH_TCK_EXTENDED_CARD_TOKEN=$extended_card_token")
    fi
    env "${agent_env[@]}" setsid bash -c "exec $cmd" >"$agent_log" 2>&1 &
    agent_pid=$!
    await_answer agent "$agent_pid" "$url/.well-known/agent-card.json" "$agent_log"
}

given_url=${1:-${TCK_AGENT_URL:-}}
if [ -n "$given_url" ]; then
    variants=given
fi

if [ "$gateway" = 1 ]; then
    start_gateway
fi

status=0
for variant in $variants; do
    mkdir -p "$reports/$variant"
    if [ "$variant" = given ]; then
        url=$given_url
    else
        start_agent "$variant"
    fi
    if [ "$gateway" = 1 ]; then
        through_gateway
    fi
    echo "== variant $variant: agent at $url; kit at $tck_dir ($(git -C "$tck_dir" rev-parse --short HEAD 2>/dev/null || echo '?'))"
    # What the kit needs besides the card to test this variant (see the top of this file).
    kit_args=()
    kit_env=()
    variant_levels=$levels
    case $variant in
        extended-card)
            kit_args=(-p tck_bearer)
            kit_env=("PYTHONPATH=$repo/scripts/tck" "TCK_BEARER_TOKEN=$extended_card_token")
            ;;
        no-streaming)
            # The kit's HTTP_JSON-SSE-001 test reads the body of the refused stream after closing
            # it (httpx.ResponseNotRead) instead of skipping: a fault of the kit. The standard
            # variant, which streams, judges that requirement.
            kit_args=(--deselect tests/compatibility/core_operations/test_transport_behavior.py::TestRestStreaming::test_streaming_content_type)
            ;;
        required-extension)
            kit_args=(-k TestCapabilityExtensionRequired)
            case " $levels " in
                *" must "*) variant_levels=must ;;
                *) variant_levels= ;;
            esac
            ;;
    esac
    for level in $variant_levels; do
        echo "== run_tck.py --level $level --transport $transports ${kit_args[*]}"
        rm -rf "$tck_dir/reports"
        set +e
        (cd "$tck_dir" && env "${kit_env[@]}" "$python" run_tck.py --sut-host "$url" --transport "$transports" \
            --level "$level" -- "${kit_args[@]}") >"$reports/$variant/console-$level.log" 2>&1
        kit_status=$?
        set -e
        grep -E '^[0-9]+ (passed|failed|skipped)|(passed|failed|skipped|deselected).* in [0-9.]+s' \
            "$reports/$variant/console-$level.log" | tail -n 1 || true
        if [ ! -f "$tck_dir/reports/compatibility.json" ]; then
            echo "the kit wrote no report; its output ends with:" >&2
            tail -n 30 "$reports/$variant/console-$level.log" >&2
            status=1
            continue
        fi
        cp -r "$tck_dir/reports" "$reports/$variant/$level"
        if [ "$level" = must ] && [ "$kit_status" -ne 0 ]; then
            status=1
        fi
    done
    stop_agent
done

echo "== counts (reports in $reports)"
for variant in $variants; do
    echo "== variant $variant"
    "$python" "$repo/scripts/tck/report.py" variant "$reports/$variant" $levels || status=1
done
if [ "$variants" != given ]; then
    # A requirement one variant skips for the capability it lacks is run by another: what no
    # variant ran is what is left to explain.
    echo "== every variant together"
    "$python" "$repo/scripts/tck/report.py" union "$reports" $variants -- $levels || status=1
fi
exit "$status"
