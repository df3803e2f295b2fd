#!/usr/bin/env bash
# Retention at scale (issue 12), run by hand, not in CI: a million finished tasks past their time
# to live (plus a thousand fresh ones) written to a SQLite task store, then purged; prints the
# time taken and the database size before and after. RETENTION_TASKS (1000000),
# RETENTION_PROFILE (release; `dev` for the debug build).
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${RETENTION_PROFILE:-release}
cargo run --profile "$profile" -p mesh-tasks --example retention_load -- --tasks "${RETENTION_TASKS:-1000000}"
