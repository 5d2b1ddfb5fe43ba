#!/usr/bin/env python3
"""The server-sent-events upstream of bench/run.sh (asyncio, stdlib only): holds thousands of streams.

  sse_upstream.py --port P --events N --interval S

GET /sse/…  200, text/event-stream, chunked: N events ("data: tick i"), one every S seconds, then the end.
GET /stats  {"active": streams open now, "peak": most open at once, "served": finished, "aborted": cut}.
Anything else: 200 "ok". HTTP/1.1 keep-alive, so the gateway's upstream connections are reused.
"""

import argparse
import asyncio
import json

stats = {"active": 0, "peak": 0, "served": 0, "aborted": 0}


async def stream(writer, events, interval):
    stats["active"] += 1
    stats["peak"] = max(stats["peak"], stats["active"])
    try:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        for index in range(events):
            data = b"data: tick %d\n\n" % index
            writer.write(b"%x\r\n%s\r\n" % (len(data), data))
            await writer.drain()
            await asyncio.sleep(interval)
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        stats["served"] += 1
    except (OSError, asyncio.CancelledError):
        stats["aborted"] += 1
        raise
    finally:
        stats["active"] -= 1


def answer(writer, body, content_type=b"text/plain"):
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s" % (content_type, len(body), body))


async def handle(reader, writer, events, interval):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            path = head.split(b" ", 2)[1]
            if path.startswith(b"/sse/"):
                await stream(writer, events, interval)
            elif path == b"/stats":
                answer(writer, json.dumps(stats).encode(), b"application/json")
            else:
                answer(writer, b"ok\n")
            await writer.drain()
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, IndexError):
        pass
    finally:
        writer.close()


async def main(args):
    server = await asyncio.start_server(lambda r, w: handle(r, w, args.events, args.interval),
                                        "127.0.0.1", args.port, backlog=4096)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--events", type=int, default=12)
    parser.add_argument("--interval", type=float, default=1.0)
    asyncio.run(main(parser.parse_args()))
