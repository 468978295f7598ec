#!/usr/bin/env python3
"""Mixed hostile load against an idemgate data plane, with sampling (bench/soak/run).

usage: load.py GW_PID DATA_PORT ADMIN_PORT UPSTREAM_PORT LOAD_SECONDS SETTLE_SECONDS OUT.json
Sends only to 127.0.0.1. Stops by itself after LOAD_SECONDS, then samples
for SETTLE_SECONDS more, prints what did not come back and exits 1 if
anything did not. SIGHUPs the gateway every 30 s while loading.
"""
import asyncio, json, os, random, re, socket, struct, subprocess, sys, time, uuid

import h2.config, h2.connection, h2.events, h2.exceptions, h2.settings

PID, PORT, ADMIN, UP = (int(x) for x in sys.argv[1:5])
LOAD_S, SETTLE_S = float(sys.argv[5]), float(sys.argv[6])
OUT = sys.argv[7]
TOKEN = os.environ.get("IDEMGATE_ADMIN_TOKEN", "soak-token")
HOST = "127.0.0.1"

tally = {}          # (route, label) -> n, answers the client read
sent = {}           # behaviour -> n
errors = {}         # unexpected things
completed = []      # (key, body) answered 201 new on charges/ok: replay pool
orphans = []        # (key, body, t) clients reset after sending whole request to slow
stop_at = 0.0
samples = []


def bump(d, k, n=1):
    d[k] = d.get(k, 0) + n


def rst(writer):
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.close()


async def read_response(reader, max_body=None):
    line = await reader.readline()
    if not line:
        raise ConnectionError("closed before status")
    status = int(line.split()[1])
    headers = {}
    while True:
        h = await reader.readline()
        if h in (b"\r\n", b"\n"):
            break
        if not h:
            raise ConnectionError("closed in head")
        k, _, v = h.decode("latin1").partition(":")
        headers[k.strip().lower()] = v.strip()
    body = b""
    if "chunked" in headers.get("transfer-encoding", ""):
        while True:
            size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass
                break
            body += await reader.readexactly(size)
            await reader.readexactly(2)
            if max_body and len(body) >= max_body:
                return status, headers, body, False
    elif "content-length" in headers:
        n = int(headers["content-length"])
        if max_body and n > max_body:
            body = await reader.readexactly(max_body)
            return status, headers, body, False
        body = await reader.readexactly(n)
    return status, headers, body, True


def head(method, path, key=None, body=b"", extra="", auth=None):
    auth = auth or f"tenant-{random.randint(1,3)}"
    h = f"{method} {path} HTTP/1.1\r\nHost: soak\r\nAuthorization: {auth}\r\n"
    if key:
        h += f"Idempotency-Key: {key}\r\n"
    if body or method in ("POST", "PATCH"):
        h += f"Content-Length: {len(body)}\r\nContent-Type: application/json\r\n"
    return (h + extra + "\r\n").encode()


def label(status, headers, body):
    rep = headers.get("idempotent-replayed")
    if rep == "true":
        return "replayed"
    code = ""
    if "problem" in headers.get("content-type", ""):
        try:
            code = json.loads(body).get("type", "").rsplit("/", 1)[-1]
        except Exception:
            code = "?"
    return f"{status}{':' + code if code else ''}{':new' if rep == 'false' else ''}"


async def request(method, path, key=None, body=b"", route="charges", auth=None):
    reader, writer = await asyncio.open_connection(HOST, PORT)
    try:
        h = head(method, path, key, body, auth=auth)
        writer.write(h + body)
        await writer.drain()
        status, headers, rbody, _ = await read_response(reader)
        bump(tally, (route, label(status, headers, rbody)))
        return status, headers, rbody
    finally:
        writer.close()


def jbody():
    return json.dumps({"amount": random.randint(1, 10**6), "pad": "x" * random.randint(0, 2000)}).encode()


# ---------------------------------------------------------------- behaviours
async def fresh():
    key, body = str(uuid.uuid4()), jbody()
    auth = f"tenant-{random.randint(1,3)}"
    s, h, _ = await request("POST", "/v1/charges/ok", key, body, auth=auth)
    if s == 201 and h.get("idempotent-replayed") == "false":
        completed.append((key, body, auth))
        if len(completed) > 5000:
            del completed[:1000]


async def keepalive_fresh():
    reader, writer = await asyncio.open_connection(HOST, PORT)
    try:
        for _ in range(random.randint(2, 6)):
            key, body = str(uuid.uuid4()), jbody()
            writer.write(head("POST", "/v1/charges/ok", key, body) + body)
            await writer.drain()
            s, h, b, _ = await read_response(reader)
            bump(tally, ("charges", label(s, h, b)))
    finally:
        writer.close()


async def replay():
    if not completed:
        return
    key, body, auth = random.choice(completed[-2000:])
    s, h, _ = await request("POST", "/v1/charges/ok", key, body, auth=auth)
    if not (s == 201 and h.get("idempotent-replayed") == "true"):
        bump(errors, f"replay-not-replayed:{s}")


async def mismatch():
    if not completed:
        return
    key, body, auth = random.choice(completed[-2000:])
    s, _, _ = await request("POST", "/v1/charges/ok", key, body + b" ", auth=auth)
    if s != 422:
        bump(errors, f"mismatch-not-422:{s}")


async def conflict():
    key, body = str(uuid.uuid4()), jbody()
    first = asyncio.create_task(request("POST", "/v1/charges/slow", key, body, auth="tenant-c"))
    await asyncio.sleep(0.3)
    s, _, _ = await request("POST", "/v1/charges/slow", key, body, auth="tenant-c")
    if s != 409:
        bump(errors, f"conflict-not-409:{s}")
    await first


async def waiters():
    key, body = str(uuid.uuid4()), jbody()
    tasks = [asyncio.create_task(request("POST", "/v1/orders/slow", key, body, route="orders", auth="tenant-w"))]
    await asyncio.sleep(0.1)
    tasks += [asyncio.create_task(request("POST", "/v1/orders/slow", key, body, route="orders", auth="tenant-w")) for _ in range(3)]
    # two waiters that vanish mid-wait
    for _ in range(2):
        r, w = await asyncio.open_connection(HOST, PORT)
        w.write(head("POST", "/v1/orders/slow", key, body, auth="tenant-w") + body)
        await w.drain()
        await asyncio.sleep(random.random() * 0.8)
        rst(w)
    res = await asyncio.gather(*tasks, return_exceptions=True)
    for r in res:
        if isinstance(r, Exception) or r[0] != 201:
            bump(errors, f"waiter:{r if isinstance(r, Exception) else r[0]}")


async def reset_mid_body():
    r, w = await asyncio.open_connection(HOST, PORT)
    body = jbody() + b" " * 500
    w.write(head("POST", random.choice(["/v1/charges/ok", "/v1/orders/ok"]), str(uuid.uuid4()), body) + body[: len(body) // 3])
    await w.drain()
    await asyncio.sleep(random.random() * 0.05)
    rst(w)


async def reset_mid_request():
    key, body = str(uuid.uuid4()), jbody()
    r, w = await asyncio.open_connection(HOST, PORT)
    w.write(head("POST", "/v1/charges/slow", key, body, auth="tenant-o") + body)
    await w.drain()
    await asyncio.sleep(0.2 + random.random() * 0.5)
    rst(w)
    orphans.append((key, body, time.time()))


async def orphan_retry():
    # a reset client's key is answered once its execution ends
    now = time.time()
    ready = [o for o in orphans if now - o[2] > 3]
    for o in ready[:5]:
        orphans.remove(o)
        s, h, _ = await request("POST", "/v1/charges/slow", o[0], o[1], auth="tenant-o")
        if not (s == 201 and h.get("idempotent-replayed") == "true"):
            bump(errors, f"orphan-not-replayed:{s}")


async def half_head():
    r, w = await asyncio.open_connection(HOST, PORT)
    w.write(b"POST /v1/charges/ok HTTP/1.1\r\nHost: soak\r\nIdempot")
    await w.drain()
    await asyncio.sleep(random.random() * 0.1)
    rst(w) if random.random() < 0.5 else w.close()


async def stream_cut():
    r, w = await asyncio.open_connection(HOST, PORT)
    w.write(head("GET", f"/stream/{uuid.uuid4()}"))
    await w.drain()
    _, _, _, whole = await read_response(r, max_body=random.randint(1, 400) * 1024)
    rst(w)


async def stream_whole():
    await request("GET", f"/stream/{uuid.uuid4()}", route="stream")


async def big():
    key, body = str(uuid.uuid4()), jbody()
    if random.random() < 0.5:
        await request("POST", "/v1/charges/big", key, body)
    else:
        r, w = await asyncio.open_connection(HOST, PORT)
        w.write(head("POST", "/v1/charges/big", key, body) + body)
        await w.drain()
        await read_response(r, max_body=10 * 1024)
        rst(w)


async def upstream_faults():
    kind = random.choice(["hang", "drop", "rst", "busy"])
    key, body = str(uuid.uuid4()), jbody()
    s, _, _ = await request("POST", f"/v1/charges/{kind}", key, body, auth="tenant-f")
    want = {"hang": 504, "drop": 502, "rst": 502, "busy": 429}[kind]
    if s != want:
        bump(errors, f"{kind}-{s}")
    if kind != "busy" and random.random() < 0.5:
        s, h, _ = await request("POST", f"/v1/charges/{kind}", key, body, auth="tenant-f")
        if not (s == want and h.get("idempotent-replayed") == "true"):
            bump(errors, f"{kind}-retry-{s}")


async def h2_client():
    """An h2c connection: several streams, some reset, then the client vanishes."""
    r, w = await asyncio.open_connection(HOST, PORT)
    conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    conn.initiate_connection()
    w.write(conn.data_to_send())
    streams = {}
    n = random.randint(3, 12)
    for _ in range(n):
        sid = conn.get_next_available_stream_id()
        kind = random.choice(["ok", "slow", "wait", "stream", "big"])
        key = str(uuid.uuid4())
        body = jbody()
        if kind == "stream":
            hdrs = [(":method", "GET"), (":path", f"/stream/{key}"), (":scheme", "http"), (":authority", "soak")]
            conn.send_headers(sid, hdrs, end_stream=True)
        else:
            path = {"ok": "/v1/charges/ok", "slow": "/v1/charges/slow", "wait": "/v1/orders/slow", "big": "/v1/charges/big"}[kind]
            hdrs = [(":method", "POST"), (":path", path), (":scheme", "http"), (":authority", "soak"),
                    ("idempotency-key", key), ("authorization", "tenant-h2"), ("content-length", str(len(body)))]
            conn.send_headers(sid, hdrs)
            if random.random() < 0.3:
                conn.send_data(sid, body[: len(body) // 2])   # mid-body; reset below
            else:
                conn.send_data(sid, body, end_stream=True)
        streams[sid] = kind
    w.write(conn.data_to_send())
    await w.drain()
    await asyncio.sleep(random.random() * 0.5)
    for sid in list(streams):
        if random.random() < 0.5:
            try:
                conn.reset_stream(sid, error_code=8)
            except h2.exceptions.H2Error:
                pass
    w.write(conn.data_to_send())
    await w.drain()
    # read a little, then vanish (no GOAWAY) half the time
    deadline = time.time() + random.random() * 2
    try:
        while time.time() < deadline:
            data = await asyncio.wait_for(r.read(65536), timeout=max(0.01, deadline - time.time()))
            if not data:
                break
            for ev in conn.receive_data(data):
                if isinstance(ev, h2.events.DataReceived):
                    conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            w.write(conn.data_to_send())
    except (asyncio.TimeoutError, h2.exceptions.H2Error, ConnectionError):
        pass
    if random.random() < 0.5:
        rst(w)
    else:
        conn.close_connection()
        w.write(conn.data_to_send())
        w.close()


async def admin_poll():
    async def get(path, port):
        r, w = await asyncio.open_connection(HOST, port)
        w.write(f"GET {path} HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n".encode())
        await w.drain()
        s, h, b, _ = await read_response(r)
        w.close()
        if s != 200:
            bump(errors, f"admin {path.split('?')[0]}:{s}")
        return b
    await get("/metrics", ADMIN)
    await get(random.choice(["/admin/keys/charges?state=in_flight&limit=1000", "/admin/keys/orders?limit=500",
                             "/admin/keys/charges?state=outcome_unknown&limit=100"]), ADMIN)


async def upstream_cuts():
    if random.random() < 0.5:
        try:
            await request("GET", f"/stream/cut/{uuid.uuid4()}", route="stream")
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            bump(tally, ("stream", "cut"))
    else:
        key, body = str(uuid.uuid4()), jbody()
        try:
            await request("POST", "/v1/charges/cutbig", key, body, auth="tenant-x")
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            bump(tally, ("charges", "cutbig-cut"))


async def slow_reader():
    r, w = await asyncio.open_connection(HOST, PORT, limit=1024)
    w.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    w.write(head("GET", f"/stream/{uuid.uuid4()}"))
    await w.drain()
    await asyncio.sleep(8)
    w.close()


async def pipelined_reset():
    r, w = await asyncio.open_connection(HOST, PORT)
    data = b""
    for _ in range(random.randint(2, 8)):
        body = jbody()
        data += head("POST", random.choice(["/v1/charges/ok", "/v1/orders/slow", "/v1/charges/slow"]), str(uuid.uuid4()), body) + body
    w.write(data)
    await w.drain()
    await asyncio.sleep(random.random() * 1.0)
    rst(w)


async def half_close():
    r, w = await asyncio.open_connection(HOST, PORT)
    key, body = str(uuid.uuid4()), jbody()
    w.write(head("POST", "/v1/charges/ok", key, body) + body)
    await w.drain()
    w.write_eof()
    s, h, b, _ = await read_response(r)
    bump(tally, ("charges", label(s, h, b)))
    w.close()


async def h2_stalled():
    """h2 client with a zero window that reads nothing for a while."""
    r, w = await asyncio.open_connection(HOST, PORT)
    conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    conn.local_settings = h2.settings.Settings(client=True, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
    conn.initiate_connection()
    for _ in range(4):
        sid = conn.get_next_available_stream_id()
        key = str(uuid.uuid4())
        if random.random() < 0.5:
            conn.send_headers(sid, [(":method", "GET"), (":path", f"/stream/{key}"), (":scheme", "http"), (":authority", "soak")], end_stream=True)
        else:
            body = jbody()
            conn.send_headers(sid, [(":method", "POST"), (":path", "/v1/charges/big"), (":scheme", "http"), (":authority", "soak"),
                                    ("idempotency-key", key), ("authorization", "tenant-h2s"), ("content-length", str(len(body)))])
            conn.send_data(sid, body, end_stream=True)
    w.write(conn.data_to_send())
    await w.drain()
    await asyncio.sleep(random.choice([1, 8]))
    rst(w)


if os.environ.get("EXTRA") not in (None, "", "0"):
    EXTRA_B = [(upstream_cuts, 2, 0.05), (slow_reader, 4, 0.0), (pipelined_reset, 2, 0.05), (half_close, 1, 0.02), (h2_stalled, 3, 0.0)]
else:
    EXTRA_B = []

BEHAVIOURS = EXTRA_B + [  # (fn, concurrent loops, pause between runs)
    (fresh, 8, 0.0), (keepalive_fresh, 2, 0.0), (replay, 3, 0.0), (mismatch, 1, 0.05),
    (conflict, 2, 0.0), (waiters, 3, 0.0), (reset_mid_body, 2, 0.02), (reset_mid_request, 2, 0.05),
    (orphan_retry, 1, 0.5), (half_head, 1, 0.05), (stream_cut, 2, 0.05), (stream_whole, 1, 0.2),
    (big, 1, 0.05), (upstream_faults, 3, 0.0), (h2_client, 3, 0.1), (admin_poll, 1, 2.0),
]


async def loop(fn, pause):
    while time.time() < stop_at:
        bump(sent, fn.__name__)
        try:
            await asyncio.wait_for(fn(), timeout=30)
        except (ConnectionError, asyncio.IncompleteReadError, OSError) as e:
            bump(errors, f"{fn.__name__}:{type(e).__name__}")
        except asyncio.TimeoutError:
            bump(errors, f"{fn.__name__}:timeout")
        if pause:
            await asyncio.sleep(pause)


# ---------------------------------------------------------------- sampling
def metrics_text():
    try:
        with socket.create_connection((HOST, ADMIN), timeout=5) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            data = b""
            while True:
                c = s.recv(65536)
                if not c:
                    break
                data += c
        return data.split(b"\r\n\r\n", 1)[1].decode()
    except OSError as e:
        return ""


def sample(phase):
    st = {}
    try:
        with open(f"/proc/{PID}/status") as f:
            for line in f:
                if line.startswith(("VmRSS", "Threads")):
                    k, v = line.split(":")
                    st[k] = int(v.split()[0])
        st["fds"] = len(os.listdir(f"/proc/{PID}/fd"))
    except OSError:
        st["dead"] = True
    ss = subprocess.run(["ss", "-tanp"], capture_output=True, text=True).stdout
    up_states, cli_states = {}, {}
    for line in ss.splitlines():
        if f"pid={PID}," not in line:
            continue
        parts = line.split()
        state, local, peer = parts[0], parts[3], parts[4]
        if peer.endswith(f":{UP}"):
            bump(up_states, state)
        elif local.endswith(f":{PORT}"):
            bump(cli_states, state)
    st["up"] = up_states
    st["cli"] = cli_states
    m = metrics_text()
    st["inflight"] = sum(float(x) for x in re.findall(r"^idemgate_inflight\{[^}]*\} (\S+)", m, re.M))
    st["rec_inflight"] = sum(float(x) for x in re.findall(r'^idemgate_records\{[^}]*state="in_flight"[^}]*\} (\S+)', m, re.M))
    st["reloads"] = {k: float(v) for k, v in re.findall(r'^idemgate_config_reloads_total\{result="(\w+)"\} (\S+)', m, re.M)}
    st["t"] = round(time.time() - t0, 1)
    st["phase"] = phase
    samples.append(st)
    print(json.dumps(st), flush=True)


async def sampler():
    while True:
        sample("load" if time.time() < stop_at else "settle")
        await asyncio.sleep(10)


async def reloader():
    while time.time() < stop_at:
        await asyncio.sleep(30)
        os.kill(PID, 1)


async def main():
    global stop_at, t0
    t0 = time.time()
    sample("baseline")
    stop_at = time.time() + LOAD_S
    samp = asyncio.create_task(sampler())
    rel = asyncio.create_task(reloader())
    tasks = [asyncio.create_task(loop(fn, p)) for fn, n, p in BEHAVIOURS for _ in range(n)]
    await asyncio.gather(*tasks)
    rel.cancel()
    await asyncio.sleep(SETTLE_S)
    samp.cancel()
    sample("final")
    m = metrics_text()
    req = {}
    for line in m.splitlines():
        if line.startswith("idemgate_requests_total{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
            v = float(line.rsplit(" ", 1)[1])
            if v:
                req[f"{labels['route']}/{labels['outcome']}"] = v
    out = {"sent": sent, "tally": {f"{r}/{l}": n for (r, l), n in sorted(tally.items())}, "errors": errors,
           "requests_total": req, "samples": samples, "orphans_left": len(orphans),
           "metrics_tail": [l for l in m.splitlines() if l.startswith(("idemgate_inflight", "idemgate_records{", "idemgate_unanswered", "idemgate_store_errors_total", "idemgate_cache_lookups", "idemgate_config_reloads", "idemgate_records_swept"))]}
    with open(OUT, "w") as f:
        json.dump(out, f, indent=1)
    sys.exit(verdict(out))


def verdict(out):
    base, last = out["samples"][0], out["samples"][-1]
    peak = max(s.get("VmRSS", 0) for s in out["samples"])
    print(f"sent: {json.dumps(out['sent'])}")
    print(f"clients read: {json.dumps(out['tally'])}")
    print(f"idemgate_requests_total: {json.dumps(out['requests_total'])}")
    print(f"baseline: rss {base.get('VmRSS')} kB, fds {base.get('fds')}, threads {base.get('Threads')}; "
          f"peak rss {peak} kB; after settling: rss {last.get('VmRSS')} kB, fds {last.get('fds')}, "
          f"threads {last.get('Threads')}, upstream connections {last.get('up')}, client connections {last.get('cli')}")
    bad = []
    if last.get("dead"):
        bad.append("the gateway is gone")
    if out["errors"]:
        bad.append(f"unexpected answers: {out['errors']}")
    if last.get("inflight") or last.get("rec_inflight"):
        bad.append(f"in flight after settling: gauge {last.get('inflight')}, records {last.get('rec_inflight')}")
    if any(k != "LISTEN" for k in last.get("cli", {})):
        bad.append(f"client connections left: {last['cli']}")
    if any("CLOSE" in k for s in out["samples"] for k in list(s.get("up", {})) + list(s.get("cli", {}))):
        bad.append("a connection sat in CLOSE-WAIT")
    # The store's own connections (Postgres pool, Redis) and idle upstream
    # connections (up to 90 s) may stay.
    kept = sum(last.get("up", {}).values()) + 20
    if last.get("fds", 0) > base.get("fds", 0) + kept:
        bad.append(f"open files {last.get('fds')} vs baseline {base.get('fds')}")
    print("FAIL: " + "; ".join(bad) if bad else "ok: back to baseline")
    return 1 if bad else 0


asyncio.run(main())
