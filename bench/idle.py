#!/usr/bin/env python3
"""Idle keep-alive connections against the gateway (bench/run.sh; stdlib only).

  idle.py --port P --pid PID --count N --path /pass/items/1 --out FILE

Opens N connections, each sends one GET and reads its response, then stays open and silent. With all of
them open: the gateway's VmRSS / VmHWM / thread count from /proc, and a request on a fresh connection (its
status). Then counts how many of the N the gateway still holds open. Writes one JSON object to FILE.
"""

import argparse
import asyncio
import json
import time

OPEN_CONCURRENCY = 256  # connects in flight at once: stays inside the listen backlog


def proc_status(pid):
    values = {}
    with open("/proc/%d/status" % pid) as status:
        for line in status:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM", "Threads"):
                values[key] = int(rest.split()[0])
    return {"rss_mib": round(values["VmRSS"] / 1024, 1), "peak_rss_mib": round(values["VmHWM"] / 1024, 1),
            "threads": values["Threads"]}


async def one_request(port, path, close):
    """(reader, writer, status) after one full response; status 0 if it failed."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 10)
    connection = "close" if close else "keep-alive"
    writer.write(("GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: %s\r\n\r\n" % (path, port, connection)).encode())
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    await asyncio.wait_for(reader.readexactly(length), 10)
    return reader, writer, status


async def main(args):
    before = proc_status(args.pid)
    held, failures = [], {}
    gate = asyncio.Semaphore(OPEN_CONCURRENCY)

    async def open_one():
        async with gate:
            try:
                reader, writer, status = await one_request(args.port, args.path, close=False)
                if status == 200:
                    held.append((reader, writer))
                    return
                failures["status %d" % status] = failures.get("status %d" % status, 0) + 1
                writer.close()
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError, IndexError) as error:
                failures[type(error).__name__] = failures.get(type(error).__name__, 0) + 1

    started = time.monotonic()
    await asyncio.gather(*[open_one() for _ in range(args.count)])
    open_seconds = time.monotonic() - started
    await asyncio.sleep(args.settle)
    during = proc_status(args.pid)
    try:
        _, writer, fresh_status = await one_request(args.port, args.path, close=True)
        writer.close()
    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError, IndexError) as error:
        fresh_status = type(error).__name__
    await asyncio.sleep(0.5)  # lets the event loop see any close by the gateway
    still_open = sum(1 for reader, _ in held if not reader.at_eof())
    result = {"count": args.count, "opened": len(held), "failures": failures, "open_seconds": round(open_seconds, 2),
              "before": before, "idle": during, "fresh_status": fresh_status, "still_open": still_open}
    for _, writer in held:
        writer.close()
    with open(args.out, "w") as out:
        json.dump(result, out)
    print("idle: %(opened)d of %(count)d connections open in %(open_seconds)s s, gateway RSS" % result,
          before["rss_mib"], "->", during["rss_mib"], "MiB,", during["threads"], "threads; fresh request:",
          fresh_status, "; still open:", still_open)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--pid", type=int, required=True)
    parser.add_argument("--count", type=int, default=10000)
    parser.add_argument("--path", default="/pass/items/1")
    parser.add_argument("--settle", type=float, default=2.0)
    parser.add_argument("--out", required=True)
    asyncio.run(main(parser.parse_args()))
