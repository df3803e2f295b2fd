"""Summarises a folded-stacks file (inferno-collapse-perf output): the functions that hold the
most samples themselves (self) and those with the most samples under them (total), as shares of
all samples. Usage: summary.py FILE.folded NAME [TOP]"""

import collections
import re
import sys

# Rust symbols carry a hash suffix (`::h0123abcd...`); generic arguments are shortened so one
# function is one line.
HASH = re.compile(r"::h[0-9a-f]{16}$")
GENERICS = re.compile(r"<[^<>]*>")


def name(frame: str) -> str:
    frame = HASH.sub("", frame)
    previous = None
    while previous != frame:
        previous, frame = frame, GENERICS.sub("<>", frame)
    return frame


def main() -> None:
    path, label = sys.argv[1], sys.argv[2]
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 15
    own, under = collections.Counter(), collections.Counter()
    total = 0
    with open(path, encoding="utf-8") as folded:
        for line in folded:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if not stack:
                continue
            samples = int(count)
            total += samples
            frames = [name(frame) for frame in stack.split(";")]
            own[frames[-1]] += samples
            for frame in set(frames):
                under[frame] += samples
    if total == 0:
        sys.exit(f"{path}: no samples")
    print(f"== {label}: {total} samples")
    for title, counter in (("self", own), ("total (self and callees)", under)):
        print(f"-- top {top} by {title}")
        for frame, samples in counter.most_common(top):
            print(f"{100 * samples / total:6.1f}%  {frame[:150]}")


if __name__ == "__main__":
    main()
