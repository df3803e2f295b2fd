# Sourced by the instruction-count scripts (instructions-per-request.sh,
# gateway-instructions-per-request.sh).

# bench_executable PACKAGE BENCH: builds the release benchmark BENCH of PACKAGE (without running
# it) and prints its executable's path.
bench_executable() {
    local package=$1 bench=$2
    cargo bench -p "$package" --bench "$bench" --no-run --message-format=json 2>/dev/null \
        | python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == sys.argv[1]:
        print(m["executable"])' "$bench"
}

# select_benches PACKAGE BENCH [EXE ...]: sets the array `benches` to the executables given, or
# else to BENCH of PACKAGE built here in release; stops the script when valgrind is missing.
select_benches() {
    command -v valgrind >/dev/null || { echo "$(basename "$0"): valgrind is missing" >&2; exit 1; }
    local package=$1 bench=$2
    shift 2
    benches=("$@")
    if [ "${#benches[@]}" -eq 0 ]; then
        benches=("$(bench_executable "$package" "$bench")")
    fi
}

# first_line FILE: waits (up to two minutes) until FILE holds a line, a server's address, and
# prints it.
first_line() {
    for _ in $(seq 1 1200); do [ -s "$1" ] && break; sleep 0.1; done
    head -1 "$1"
}

# stop_counted PID: stops a server running under callgrind. The first signal starts its graceful
# stop, the second ends it; callgrind writes its counts as the process exits.
stop_counted() {
    kill -INT "$1"
    sleep 1
    kill -TERM "$1" 2>/dev/null || true
    wait "$1" || true
}

# total_instructions FILE: the instruction total of a callgrind output file.
total_instructions() {
    awk '/^(summary|totals):/ {print $2; exit}' "$1"
}
