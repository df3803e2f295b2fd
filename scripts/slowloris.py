"""Slowloris against one server (issue 34), run by scripts/slowloris.sh: holds IDLE connections
that send nothing and HALF connections that send a request head one byte at a time and never
finish it, and reports how long the server took to close each. Loopback only, bounded in count
and time: it stops after --seconds whatever the server does.

Each connection the server closes is replaced by a new one, so the count holds for the whole run.
Prints one JSON line: {"idle": {...}, "half": {...}} with, for each kind, the connections opened,
closed by the server, still open at the end (those opened within the last header timeout are
expected there), and the close times' p50/p99/max in seconds.
"""

import argparse
import asyncio
import json
import time


async def hold(host, port, kind, drip_interval_s, deadline, closes, opened):
    """Holds one connection of `kind` and, each time the server closes it, opens the next, as a
    slowloris keeps its count up, until the deadline."""
    while time.monotonic() < deadline:
        try:
            reader, writer = await asyncio.open_connection(host, port)
        except OSError:
            await asyncio.sleep(drip_interval_s)
            continue
        opened[kind] += 1
        started = time.monotonic()
        if kind == "half":
            writer.write(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        try:
            while time.monotonic() < deadline:
                if kind == "half":
                    writer.write(b"a")
                    await writer.drain()
                try:
                    data = await asyncio.wait_for(reader.read(1024), timeout=drip_interval_s)
                except asyncio.TimeoutError:
                    continue
                if not data:
                    closes[kind].append(time.monotonic() - started)
                    break
        except (ConnectionError, OSError):
            closes[kind].append(time.monotonic() - started)
        finally:
            writer.close()


def summary(opened, times):
    times = sorted(times)
    pick = lambda q: round(times[min(len(times) - 1, int(q * len(times)))], 2) if times else None
    return {"opened": opened, "closed_by_server": len(times), "still_open": opened - len(times),
            "close_s_p50": pick(0.5), "close_s_p99": pick(0.99), "close_s_max": round(times[-1], 2) if times else None}


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--idle", type=int, default=2000)
    parser.add_argument("--half", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=40)
    parser.add_argument("--drip-interval-s", type=float, default=2.0)
    args = parser.parse_args()
    assert args.host.startswith("127.") or args.host in ("localhost", "::1"), "loopback only"
    deadline = time.monotonic() + args.seconds
    closes = {"idle": [], "half": []}
    opened = {"idle": 0, "half": 0}
    tasks = [hold(args.host, args.port, kind, args.drip_interval_s, deadline, closes, opened)
             for kind, count in (("idle", args.idle), ("half", args.half)) for _ in range(count)]
    await asyncio.gather(*tasks)
    print(json.dumps({kind: summary(opened[kind], closes[kind]) for kind in closes}))


asyncio.run(main())
