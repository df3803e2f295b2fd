# Sourced by the load scripts (overload.sh, slowloris.sh): runs the kit's echo agent on a port
# with a task store in a temporary folder, and waits until it answers its health probe.
#
# start_echo_agent PORT BIN_DIR [VAR=VALUE ...]: starts "$BIN_DIR/echo_agent" with the given
# extra environment; sets $agent (its process id) and $data (the temporary folder), and removes
# both when the calling script exits.
start_echo_agent() {
    local port=$1 bin_dir=$2
    shift 2
    data=$(mktemp -d)
    env MESH_ECHO_TASK_STORE_URL="sqlite://$data/tasks.db" RUST_LOG=warn "$@" "$bin_dir/echo_agent" --port "$port" &
    agent=$!
    trap 'kill "$agent" 2>/dev/null || true; rm -rf "$data"' EXIT
    for _ in $(seq 50); do
        curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    echo "the echo agent did not answer on port $port"
    return 1
}
