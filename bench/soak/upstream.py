#!/usr/bin/env python3
"""The soak's upstream (bench/soak/run): HTTP/1.1 keep-alive, behaviour chosen by path.

/.../ok       201 small JSON after 0-20 ms
/.../slow     201 after 1.5 s
/.../hang     sleeps 10 s (past the gateway's timeout)
/.../drop     reads the request, closes without answering
/.../rst      reads the request, resets the connection
/.../big      201 with 256 KiB (over max_stored_response), in chunks
/.../busy     429 (a release status)
/stream/...   GET: 2 MiB chunked, slowly
/stream/cut/  GET: up to 512 KiB chunked, then a close or a reset mid-body
/.../cutbig   201 announcing 256 KiB, 100,000 bytes sent, then a close
Counts executions per path kind to stdout at exit (SIGTERM).
"""
import asyncio, json, os, random, signal, socket, struct, sys

PORT = int(sys.argv[1])
counts = {}


async def read_body(reader, headers):
    te = headers.get("transfer-encoding", "")
    if "chunked" in te:
        body = b""
        while True:
            line = await reader.readline()
            size = int(line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass
                return body
            body += await reader.readexactly(size)
            await reader.readexactly(2)
    n = int(headers.get("content-length", "0") or 0)
    return await reader.readexactly(n) if n else b""


async def handle(reader, writer):
    try:
        while True:
            line = await reader.readline()
            if not line:
                return
            method, target, _ = line.decode("latin1").split(" ", 2)
            headers = {}
            while True:
                h = await reader.readline()
                if h in (b"\r\n", b"\n", b""):
                    break
                k, _, v = h.decode("latin1").partition(":")
                headers[k.strip().lower()] = v.strip()
            body = await read_body(reader, headers)
            kind = target.rstrip("/").split("/")[-1].split("?")[0]
            if target.startswith("/stream"):
                kind = "stream"
            counts[kind] = counts.get(kind, 0) + 1
            if kind == "drop":
                writer.close()
                return
            if kind == "rst":
                sock = writer.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                writer.close()
                return
            if kind == "hang":
                await asyncio.sleep(10)
                writer.close()
                return
            if kind == "stream" and "cut" in target:
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ntransfer-encoding: chunked\r\n\r\n")
                chunk = os.urandom(64 * 1024)
                for _ in range(random.randint(0, 8)):
                    writer.write(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
                    await writer.drain()
                sock = writer.get_extra_info("socket")
                if random.random() < 0.5:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                writer.close()
                return
            if kind == "cutbig":
                writer.write(b"HTTP/1.1 201 Created\r\ncontent-length: 262144\r\n\r\n" + os.urandom(100000))
                await writer.drain()
                writer.close()
                return
            if kind == "stream":
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ntransfer-encoding: chunked\r\n\r\n")
                chunk = os.urandom(64 * 1024)
                for _ in range(32):
                    writer.write(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
                    await writer.drain()
                    await asyncio.sleep(0.01)
                writer.write(b"0\r\n\r\n")
                await writer.drain()
                continue
            if kind == "big":
                payload = os.urandom(256 * 1024)
                writer.write(b"HTTP/1.1 201 Created\r\ncontent-type: application/octet-stream\r\ncontent-length: %d\r\n\r\n" % len(payload))
                writer.write(payload)
                await writer.drain()
                continue
            if kind == "slow":
                await asyncio.sleep(1.5)
            elif kind == "ok":
                await asyncio.sleep(random.random() * 0.02)
            status = "429 Too Many Requests" if kind == "busy" else "201 Created"
            out = json.dumps({"n": counts[kind], "len": len(body), "key": headers.get("idempotency-key")}).encode()
            writer.write(b"HTTP/1.1 %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % (status.encode(), len(out)) + out)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError, ValueError):
        pass
    finally:
        try:
            writer.close()
        except Exception:
            pass


async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", PORT, backlog=1024)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    async with server:
        await stop.wait()
    print(json.dumps(counts), flush=True)


asyncio.run(main())
