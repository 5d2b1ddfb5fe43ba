#!/usr/bin/env python3
"""Concurrent server-sent-event streams through the gateway (bench/run.sh; asyncio, stdlib only).

  sse_clients.py --port P --streams N --events E --out FILE [--path /sse/stream]

Opens N streams at once, each a GET that must answer 200 and deliver all E events ("data: " lines) and a
clean end of the chunked body. A stream is ok only then; anything else is counted by its reason. Writes
one JSON object to FILE: ok, failed, reasons, events received, time until every stream had its headers.
"""

import argparse
import asyncio
import json
import time

READ_TIMEOUT = 30  # a stream silent this long has failed (the upstream sends one event a second)


async def read_chunked(reader):
    """The decoded body of a chunked response."""
    body = bytearray()
    while True:
        size_line = await asyncio.wait_for(reader.readuntil(b"\r\n"), READ_TIMEOUT)
        size = int(size_line.split(b";")[0].strip(), 16)
        if size == 0:
            await asyncio.wait_for(reader.readuntil(b"\r\n"), READ_TIMEOUT)  # no trailers expected
            return bytes(body)
        body += await asyncio.wait_for(reader.readexactly(size + 2), READ_TIMEOUT)
        del body[-2:]


async def one(index, args, result, headers_at):
    writer = None
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", args.port), READ_TIMEOUT)
        writer.write(("GET %s/%d HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nAccept: text/event-stream\r\n\r\n"
                      % (args.path, index, args.port)).encode())
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT)
        headers_at.append(time.monotonic())
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        if status != 200:
            return "status %d" % status
        fields = {line.partition(b":")[0].strip().lower(): line.partition(b":")[2].strip() for line in lines[1:] if line}
        if fields.get(b"transfer-encoding", b"").lower() == b"chunked":
            body = await read_chunked(reader)
        elif b"content-length" in fields:
            body = await asyncio.wait_for(reader.readexactly(int(fields[b"content-length"])), READ_TIMEOUT)
        else:
            return "no framing"
        events = body.count(b"data: ")
        result["events"] += events
        return "ok" if events == args.events else "short stream"
    except asyncio.TimeoutError:
        return "timeout"
    except asyncio.IncompleteReadError:
        return "closed early"
    except (OSError, ValueError, IndexError) as error:
        return type(error).__name__
    finally:
        if writer:
            writer.close()


async def main(args):
    result = {"streams": args.streams, "events_expected": args.streams * args.events, "events": 0}
    headers_at = []
    started = time.monotonic()
    outcomes = await asyncio.gather(*[one(index, args, result, headers_at) for index in range(args.streams)])
    reasons = {}
    for outcome in outcomes:
        reasons[outcome] = reasons.get(outcome, 0) + 1
    result.update(ok=reasons.pop("ok", 0), reasons=reasons, seconds=round(time.monotonic() - started, 2),
                  all_headers_s=round(max(headers_at) - started, 2) if len(headers_at) == args.streams else None)
    result["failed"] = args.streams - result["ok"]
    with open(args.out, "w") as out:
        json.dump(result, out)
    print("sse: %(ok)d of %(streams)d streams ok, %(failed)d failed %(reasons)s, %(events)d of %(events_expected)d "
          "events, all headers after %(all_headers_s)s s, %(seconds)s s in all" % result)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--streams", type=int, default=2000)
    parser.add_argument("--events", type=int, default=12)
    parser.add_argument("--path", default="/sse/stream")
    parser.add_argument("--out", required=True)
    asyncio.run(main(parser.parse_args()))
