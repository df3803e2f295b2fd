#!/usr/bin/env bash
# The registry at scale (issue #16), run by hand, not in CI: the `registry_scale` bench once with
# one registry over SQLite (the reference) and once with REGISTRY_SCALE_REPLICAS registries sharing
# a fresh PostgreSQL database on the server of MESH_TEST_POSTGRES_URL (created and dropped by the
# bench). Each run takes about (rounds + 1.5) health intervals plus the lookup windows: about 3
# minutes with the defaults. Extra arguments go to both runs (e.g. `--interval-ms 20000`).
#
# Settings by environment: MESH_TEST_POSTGRES_URL (postgres://postgres@127.0.0.1:5432/test),
# REGISTRY_SCALE_REPLICAS (3). The simulated agents hold one listener each and every registry a
# connection to each: the file descriptor limit must exceed about 2 x agents x (replicas + 1).
set -euo pipefail

cd "$(dirname "$0")/.."
replicas=${REGISTRY_SCALE_REPLICAS:-3}
ulimit -n 20000 2>/dev/null || echo "cannot raise the file descriptor limit ($(ulimit -n))"

cargo bench -p registry --bench registry_scale -- --replicas 1 "$@"
echo
cargo bench -p registry --bench registry_scale -- --replicas "$replicas" --postgres "$@"
