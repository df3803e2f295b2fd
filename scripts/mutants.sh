#!/usr/bin/env bash
# Mutation testing (cargo-mutants) of the crates where a silent bug costs most: each mutant (an
# operator flipped, a function body replaced by a default...) is built and the crate's tests run
# against it; a mutant no test fails on is a change a regression could make unseen.
#
# Runs by hand, not in CI: on two cores a crate takes one to several hours. The mutants that are
# equivalent or worth leaving are excluded, each with its reason, in .cargo/mutants.toml.
#
# Usage: scripts/mutants.sh [PACKAGE ...]   (default: the six below; the agent kit's crates,
#        mesh-agent-kit, mesh-a2a-server and mesh-server, whose runs take longest, by name)
#        scripts/mutants.sh --score         print the scores of the last runs only
# What is mutated is the committed HEAD, checked out in a worktree of its own (mutated in place
# there, so this checkout can be edited meanwhile and builds stay incremental between runs).
# Settings by environment:
#   MUTANTS_TREE        that worktree (default ~/.cache/a2a-mesh/mutants/tree)
#   MUTANTS_TARGET_DIR  its target directory (default ~/.cache/a2a-mesh/mutants/target)
#   MUTANTS_OUT         where each package's mutants.out is kept (default ~/.cache/a2a-mesh/mutants/out)
#   MUTANTS_ARGS        more arguments for cargo mutants (e.g. "--file shared/protocol/src/envelope.rs";
#                       "--iterate" tests only what the last run missed, and its score then counts
#                       only those: a package's score is a whole run's)
#   CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER  the linker; by default, when mold is installed, cc
#                       linking with mold (each mutant of the kit links five test binaries and a
#                       binary, each against the whole dependency tree). Changing it rebuilds the
#                       target directory.
#   MESH_TEST_POSTGRES_URL  as for the tests (default postgres://postgres@127.0.0.1:5432/test when
#                       a server answers there): without it the PostgreSQL halves of the stores'
#                       tests skip, and their mutants would look missed
# Exits non-zero when a package scores under 90% of viable mutants caught.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
base=${HOME}/.cache/a2a-mesh/mutants
tree=${MUTANTS_TREE:-$base/tree}
out=${MUTANTS_OUT:-$base/out}
export CARGO_TARGET_DIR=${MUTANTS_TARGET_DIR:-$base/target}
# The goal of the test-strength issue: at least this share of viable mutants caught.
score_min_percent=90
default_packages="mesh-protocol mesh-client registry search mesh-rank mesh-tasks"

score() {
    python3 - "$out" "$score_min_percent" "$@" <<'PY'
"""Caught / (caught + missed + timed out) per package, from each run's outcomes.json."""
import json
import sys
from collections import Counter
from pathlib import Path

out, least, packages = Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
under = 0
for package in packages:
    outcomes = out / package / "mutants.out" / "outcomes.json"
    if not outcomes.exists():
        print(f"{package:<14} no run recorded ({outcomes})")
        continue
    counts = Counter(
        o["summary"] for o in json.loads(outcomes.read_text())["outcomes"] if o["scenario"] != "Baseline"
    )
    caught, missed, timeout, unviable = (counts[k] for k in ("CaughtMutant", "MissedMutant", "Timeout", "Unviable"))
    viable = caught + missed + timeout
    # A mutant that hangs the tests is caught by the timeout: the tests did not pass.
    percent = 100.0 * (caught + timeout) / viable if viable else 100.0
    under += percent < least
    print(f"{package:<14} {percent:5.1f}% caught  (caught {caught}, timed out {timeout}, missed {missed}, "
          f"unviable {unviable})")
    missed_file = out / package / "mutants.out" / "missed.txt"
    if missed and missed_file.exists():
        for line in missed_file.read_text().splitlines():
            print(f"    missed: {line}")
sys.exit(1 if under else 0)
PY
}

if [ "${1:-}" = --score ]; then
    shift
    score ${@:-$default_packages}
    exit
fi
packages=${*:-$default_packages}

command -v cargo-mutants >/dev/null || {
    echo "cargo-mutants is not installed: cargo install cargo-mutants --locked" >&2
    exit 2
}
if [ -z "${MESH_TEST_POSTGRES_URL:-}" ] && pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
    export MESH_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test
fi
# The tests look for SciFact beside the checkout they are built from, which the worktree is not:
# point them at this checkout's (the same default as theirs).
if [ -z "${MESH_SCIFACT_DIR:-}" ] && [ -f "$repo/../shared/data/scifact/corpus.jsonl" ]; then
    export MESH_SCIFACT_DIR="$repo/../shared/data/scifact"
fi

mkdir -p "$base" "$out"
if [ -z "${CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER:-}" ] && command -v mold >/dev/null; then
    printf '#!/bin/sh\nexec cc -fuse-ld=mold "$@"\n' > "$base/cc-mold"
    chmod +x "$base/cc-mold"
    export CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER="$base/cc-mold"
fi
if [ -d "$tree/.git" ] || [ -f "$tree/.git" ]; then
    git -C "$tree" checkout --quiet --detach --force "$(git -C "$repo" rev-parse HEAD)"
    git -C "$tree" clean --quiet -fdx
else
    git -C "$repo" worktree add --quiet --detach "$tree" HEAD
fi
echo "== mutating $(git -C "$tree" log --oneline -1) in $tree (target $CARGO_TARGET_DIR)"

# Which tests judge a package's mutants: its own, and for the agent kit's crates the kit's (the
# integration tests on real servers that serve their code) and the conformance agent's (the one
# binary whose tests start it as a process and stop it with a signal). `--tests` builds no
# examples and runs no doctests: the kit's crates have none, and examples only cost build time.
tests_of() {
    case $1 in
        mesh-agent-kit) echo "--test-package=mesh-agent-kit,mesh-tck-agent --cargo-arg=--tests" ;;
        mesh-a2a-server | mesh-server)
            echo "--test-package=$1,mesh-agent-kit,mesh-tck-agent --cargo-arg=--tests" ;;
        *) echo "" ;;
    esac
}

for package in $packages; do
    echo "== $package"
    set +e
    # The config file (.cargo/mutants.toml) is read from the tree: its exclusions and profile.
    (cd "$tree" && cargo mutants --in-place --package "$package" --output "$out/$package" $(tests_of "$package") \
        ${MUTANTS_ARGS:-})
    set -e
done
echo "== scores"
score $packages
