"""Splits the CPU samples of given processes in a `perf record` file by component (the kernel's
network stack, its scheduling and wake-ups, page faults, the allocator, memcpy, hyper, serde,
the logs, tokio, axum and tower, the server's own crates, ...) and prints, per process, each
component's share and its microseconds per request, given the process's CPU per request.
Used by scripts/task-path-components.sh.

    python3 scripts/lib/perf_components.py PERF_DATA LABEL=PID=US_PER_REQUEST ...
"""
import collections
import re
import subprocess
import sys

# (component, pattern on the symbol) for kernel samples, first match wins.
KERNEL = [
    ("kernel: page faults", r"clear_page|page_fault|folio|handle_mm|anonymous|lru|memcg|zap_|rmqueue|get_page|alloc_pages|free_pages|mmap|munmap|madvise"),
    ("kernel: network", r"tcp|ip_|skb|sock|inet|net_|__dev|loopback|napi|sk_|nf_|dst_|copy_to_iter|copy_from_iter|datagram|softirq|netif"),
    ("kernel: scheduling, wake-ups", r"futex|schedule|switch|wake|sched|enqueue_task|dequeue|pick_|update_curr|ttwu|select_task|idle|tick|hrtimer|irq|spin|raw_"),
    ("kernel: epoll", r"epoll|ep_|poll"),
]
# (component, pattern on the start of the symbol) for user samples, first match wins.
USER = [
    ("allocator", r"_?mi_|__rust_(alloc|dealloc|realloc)|alloc::alloc"),
    ("tokio", r"tokio"),
    ("hyper, http", r"hyper|httparse|http::|http_body"),
    ("serde, serde_json", r"serde|.*(S|s)erialize"),
    ("logs: tracing, fmt", r"tracing|nu_ansi|core::fmt|.*fmt::|.*Write>::write|chrono"),
    ("axum, tower, futures", r"axum|tower|matchit|futures"),
    ("sqlite, sqlx", r"sqlite|sqlx|wal|pcache|pager|btree|vdbe"),
    ("metrics", r"metrics"),
    ("the server's own crates", r"mesh_|a2a|send_message"),
    ("clone, drop", r"alloc::|core::ptr::drop|.*Clone>::clone"),
    ("hashing, maps", r"hashbrown|foldhash|.*[Hh]ash"),
]


def component(symbol, dso):
    if "kernel" in dso:
        return next((name for name, pattern in KERNEL if re.search(pattern, symbol)), "kernel: other (syscalls, files)")
    if "libc" in dso:
        return "memcpy, memmove, memcmp" if "mem" in symbol else "libc, other"
    if "vdso" in dso:
        return "clock_gettime"
    symbol = symbol.lstrip("<&")
    return next((name for name, pattern in USER if re.match(pattern, symbol)), "other")


def main():
    data, processes = sys.argv[1], [arg.split("=") for arg in sys.argv[2:]]
    wanted = {pid: (label, float(us)) for label, pid, us in processes}
    samples = {pid: collections.Counter() for pid in wanted}
    script = subprocess.run(["perf", "script", "-i", data, "-F", "pid,ip,sym,dso"], capture_output=True, text=True, check=True)
    for line in script.stdout.splitlines():
        fields = line.split(None, 2)
        if len(fields) < 3 or fields[0] not in wanted:
            continue
        symbol, _, dso = fields[2].rpartition("(")
        samples[fields[0]][component(symbol.strip(), dso)] += 1
    labels = [wanted[pid][0] for pid in wanted]
    print("| component | " + " | ".join(f"{label} us/req" for label in labels) + " |")
    print("|---|" + "---:|" * len(labels))
    names = sorted({name for counter in samples.values() for name in counter},
                   key=lambda name: -sum(counter[name] / max(1, sum(counter.values())) for counter in samples.values()))
    for name in names:
        cells = []
        for pid in wanted:
            total = sum(samples[pid].values())
            cells.append(f"{wanted[pid][1] * samples[pid][name] / total:.1f}" if total else "-")
        print(f"| {name} | " + " | ".join(cells) + " |")
    print("| **all** (perf samples) | " + " | ".join(f"**{wanted[pid][1]:.1f}** ({sum(samples[pid].values())})" for pid in wanted) + " |")


if __name__ == "__main__":
    main()
