#!/usr/bin/env bash
# Line coverage of the workspace's tests (cargo-llvm-cov, source-based coverage), per crate and per
# file. A signal of where tests are thin, not a goal: a line run by a test is not a line a test
# checks (scripts/mutants.sh measures that).
#
# Runs by hand, not in CI: the instrumented build of the whole workspace and its test run take tens
# of minutes on two cores.
#
# Usage: scripts/coverage.sh [PACKAGE ...]   (default: the whole workspace)
#        scripts/coverage.sh --add PACKAGE ...  after adding tests to these packages: runs their
#                                            tests and counts them with the last run's (valid
#                                            while only tests changed since: a changed function
#                                            counts only what ran since), so a file's figure
#                                            stays that of the whole workspace's tests
#        scripts/coverage.sh --report        the tables of the last run again, without running tests
# With packages, only their tests run, and only their files are in the tables.
#
# Reading it: per crate, then per file from the least covered up, "covered/lines" counts the lines
# that hold code (blank lines, comments and declarations without code are not counted) and how
# many of them ran at least once in any test: a crate's lines run by another crate's tests count
# (the registry's tests run much of mesh-protocol). The unit tests beside the code (`mod tests`)
# are lines of their file and nearly all run, so a file's figure is a little higher than its
# non-test code's; the files of tests/, benches/ and examples/ and the build scripts are left out.
# Doc tests are not counted (that needs a nightly toolchain). A process killed by a test (SIGKILL)
# writes no coverage, so the chaos tests' killed replicas count nothing. The HTML report
# (OUT/html/index.html) shows each file's lines, red where no test ran them.
#
# The real parts (PostgreSQL, the Kafka broker, SciFact, the embedding model, the virtualenvs,
# Prometheus, chromium) are found as the tests find them, from the same environment variables that
# .ci/run exports: without them their tests skip and their code counts as not run. With CI=true a
# missing part fails its test instead. The tables are printed even when tests failed; the exit
# status is then non-zero.
#
# Needs cargo-llvm-cov and llvm-cov/llvm-profdata of rustc's LLVM major version; this script gets
# them: the rustup llvm-tools component when it is installed, else Debian's llvm-N (apt-get, as
# root), and cargo-llvm-cov (crates.io) installed into COVERAGE_TOOLS.
# Settings by environment:
#   COVERAGE_TOOLS      where cargo-llvm-cov is installed (default ~/.cache/a2a-mesh/tools)
#   COVERAGE_OUT        where the reports are written (default ~/.cache/a2a-mesh/coverage)
#   CARGO_TARGET_DIR    as for cargo; the instrumented build goes in its llvm-cov-target/ (default
#                       ~/.cache/a2a-mesh/coverage/target: debug test binaries take gigabytes)
#   LLVM_COV, LLVM_PROFDATA  the LLVM tools to use, instead of finding them
#   COVERAGE_ARGS       more arguments for cargo llvm-cov's test run (e.g. "--test chat" with --add
#                       runs only that test target of the package)
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
base=${HOME}/.cache/a2a-mesh
tools=${COVERAGE_TOOLS:-$base/tools}
out=${COVERAGE_OUT:-$base/coverage}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$base/coverage/target}
# Pinned: its options and report format are what this script reads.
llvm_cov_version=0.9.1
# Test files, benchmarks, examples and build scripts are not code under test.
ignore_re='(^|/)(tests|benches|examples)/|(^|/)build\.rs$'

fail() {
    echo "coverage.sh: $*" >&2
    exit 2
}

mode=run
case "${1:-}" in
--report | --add)
    mode=${1#--}
    shift
    ;;
esac
packages=("$@")
[ $mode != add ] || [ ${#packages[@]} -gt 0 ] || fail "--add needs the packages whose tests to run"

# --- LLVM tools of rustc's LLVM major version (profiles of another version cannot be read).
llvm_major=$(rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')
[ -n "$llvm_major" ] || fail "cannot read rustc's LLVM version from rustc -vV"
sysroot_tools=$(rustc --print sysroot)/lib/rustlib/$(rustc -vV | sed -n 's/^host: //p')/bin
if [ -z "${LLVM_COV:-}" ] && [ -z "${LLVM_PROFDATA:-}" ] && [ -x "$sysroot_tools/llvm-cov" ]; then
    : # the rustup llvm-tools component: cargo-llvm-cov finds it itself
else
    if [ -z "${LLVM_COV:-}" ] && ! [ -x "/usr/bin/llvm-cov-$llvm_major" ]; then
        [ "$(id -u)" = 0 ] || fail "llvm-cov $llvm_major is missing: install llvm-$llvm_major (apt-get, as root) or the rustup llvm-tools component, or set LLVM_COV and LLVM_PROFDATA"
        echo "== installing Debian's llvm-$llvm_major (llvm-cov, llvm-profdata)"
        # Another apt run (a CI run's) may hold the lock: wait for it rather than fail.
        apt_get() { DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=900 "$@"; }
        apt_get install -y "llvm-$llvm_major" || { apt_get update && apt_get install -y "llvm-$llvm_major"; } ||
            fail "cannot install llvm-$llvm_major with apt-get (rustc $(rustc -V | cut -d' ' -f2) needs LLVM $llvm_major's llvm-cov and llvm-profdata)"
    fi
    export LLVM_COV=${LLVM_COV:-/usr/bin/llvm-cov-$llvm_major}
    export LLVM_PROFDATA=${LLVM_PROFDATA:-/usr/bin/llvm-profdata-$llvm_major}
    for tool in "$LLVM_COV" "$LLVM_PROFDATA"; do
        [ -x "$tool" ] || fail "$tool is not an executable"
    done
fi

# --- cargo-llvm-cov, outside the clone.
export PATH=$tools/bin:$PATH
if [ "$(cargo-llvm-cov llvm-cov --version 2>/dev/null)" != "cargo-llvm-cov $llvm_cov_version" ]; then
    echo "== installing cargo-llvm-cov $llvm_cov_version into $tools"
    cargo install --quiet --locked --root "$tools" --version "$llvm_cov_version" cargo-llvm-cov ||
        fail "cannot install cargo-llvm-cov $llvm_cov_version (is crates.io reachable?)"
fi

# --- the tests, instrumented.
selection=(--workspace)
if [ ${#packages[@]} -gt 0 ]; then
    selection=()
    for package in "${packages[@]}"; do
        selection+=(--package "$package")
    done
fi
mkdir -p "$out"
status=0
if [ $mode != report ]; then
    # Only the profiles of this run (with --add, of the last one too): --no-report keeps the
    # artifacts, so a second run rebuilds only what changed.
    [ $mode = add ] || cargo llvm-cov clean --profraw-only
    echo "== tests of ${packages[*]:-the workspace}, instrumented (target $CARGO_TARGET_DIR/llvm-cov-target)"
    cargo llvm-cov --no-report --no-fail-fast "${selection[@]}" ${COVERAGE_ARGS:-} || status=$?
    [ $status = 0 ] || echo "== tests failed (status $status): the tables below count what ran"
fi

# --- the reports: every file of the workspace, as every test binary built ran it (a package's
# files count the other packages' tests too), then the tables of the selected packages.
cargo llvm-cov report --workspace --ignore-filename-regex "$ignore_re" --html --output-dir "$out" >/dev/null
cargo llvm-cov report --workspace --ignore-filename-regex "$ignore_re" --json --summary-only \
    --output-path "$out/coverage.json"
cargo metadata --no-deps --format-version 1 >"$out/metadata.json"
python3 - "$out" "${packages[@]}" <<'PY' | tee "$out/summary.txt"
"""Line coverage per crate and per file, from llvm-cov's JSON summary and the workspace's crates."""
import json
import sys
from collections import defaultdict
from pathlib import Path

out, selected = Path(sys.argv[1]), set(sys.argv[2:])
metadata = json.loads((out / "metadata.json").read_text())
root = Path(metadata["workspace_root"])
# Each file belongs to the crate with the deepest directory holding it (the root crate holds all).
crates = sorted(
    ((Path(p["manifest_path"]).parent, p["name"]) for p in metadata["packages"]),
    key=lambda crate: len(crate[0].parts),
    reverse=True,
)
files = defaultdict(list)
for entry in json.loads((out / "coverage.json").read_text())["data"][0]["files"]:
    path = Path(entry["filename"])
    crate = next((name for directory, name in crates if path.is_relative_to(directory)), None)
    if crate and (not selected or crate in selected):
        lines = entry["summary"]["lines"]
        files[crate].append((str(path.relative_to(root)), lines["covered"], lines["count"]))


def percent(covered, count):
    return 100.0 * covered / count if count else 100.0


rows = [(crate, sum(f[1] for f in fs), sum(f[2] for f in fs)) for crate, fs in files.items()]
print(f"{'crate':<22} {'lines':>7} {'covered':>7} {'line %':>7}")
for crate, covered, count in sorted(rows, key=lambda r: percent(r[1], r[2])):
    print(f"{crate:<22} {count:>7} {covered:>7} {percent(covered, count):>6.1f}%")
covered, count = sum(r[1] for r in rows), sum(r[2] for r in rows)
print(f"{'total':<22} {count:>7} {covered:>7} {percent(covered, count):>6.1f}%")
print()
print(f"{'file (least covered first)':<64} {'covered/lines':>13} {'line %':>7}")
every = [f for fs in files.values() for f in fs]
for name, covered, count in sorted(every, key=lambda f: (percent(f[1], f[2]), -f[2])):
    print(f"{name:<64} {f'{covered}/{count}':>13} {percent(covered, count):>6.1f}%")
PY
echo "== per line: $out/html/index.html; these tables: $out/summary.txt"
exit $status
