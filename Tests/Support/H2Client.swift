import Foundation

/// Python's `h2` package (Debian `python3-h2`, in the Makefile's packages) driving raw HTTP/2 against the gateway: the scenarios a
/// well-behaved client plays (an SSE stream, one stream left unread beside another) and the known attacks. Each
/// prints one line per observation; `run` returns them. Over TLS (ALPN h2, checked against `caFile`) or h2c.
public enum H2Client {
    public static var isAvailable: Bool { (try? Command.run("python3", ["-c", "import h2"]).status) == 0 }

    /// `mode`: sse, stall, rapid_reset, ping_flood, settings_flood, continuation_flood, partial_headers, header_bomb, get, hosts,
    /// burst (`arguments`: the number of streams), targets (`arguments`: the request targets, a GET each). Other modes may
    /// be given `arguments` [seconds]: played again on new connections until that time is up (an attack kept up).
    public static func run(_ mode: String, port: Int, caFile: String?, path: String = "/", arguments: [String] = [],
                           timeout: TimeInterval = 30) throws -> [String] {
        let result = try Command.run("python3", ["-c", script, mode, String(port), caFile ?? "-", path] + arguments, timeout: timeout)
        return result.output.split(separator: "\n").map(String.init)
    }

    static let script = #"""
import socket, ssl, struct, sys, time
import h2.connection, h2.config, h2.events, h2.settings

mode, port, ca, path = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]

def connect():
    # A new connection with the client's preface sent; times are counted from before its handshake.
    global sock, conn, start
    start = time.time()
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    if ca != "-":
        context = ssl.create_default_context(cafile=ca)
        context.set_alpn_protocols(["h2"])
        sock = context.wrap_socket(raw, server_hostname="localhost")
        assert sock.selected_alpn_protocol() == "h2", sock.selected_alpn_protocol()
    else:
        sock = raw
    conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())

connect()

def request(target, extra=(), end_stream=True):
    sid = conn.get_next_available_stream_id()
    conn.send_headers(sid, [(":method", "GET"), (":path", target), (":scheme", "https"), (":authority", "localhost")] + list(extra),
                      end_stream=end_stream)
    sock.sendall(conn.data_to_send())
    return sid

def pump(handle, until):
    # Reads events until `until()` holds, the connection ends or 20 s pass.
    deadline = time.time() + 20
    while not until() and time.time() < deadline:
        try:
            data = sock.recv(65536)
        except socket.timeout:
            continue
        except (ConnectionResetError, ssl.SSLError, OSError):
            print("closed", flush=True)
            return
        if not data:
            print("closed", flush=True)
            return
        try:
            events = conn.receive_data(data)
        except Exception as error:
            print("client-error", type(error).__name__, flush=True)
            return
        for event in events:
            if isinstance(event, h2.events.ConnectionTerminated):
                print("goaway", event.error_code, flush=True)
                return
            handle(event)
        out = conn.data_to_send()
        if out:
            try:
                sock.sendall(out)
            except OSError:
                print("closed", flush=True)
                return

state = {"done": False}

def flood(send_one, count):
    # Sends `count` frames as fast as the socket takes them, reading what comes back in between.
    sock.settimeout(0.001)
    for i in range(count):
        send_one(i)
        try:
            sock.sendall(conn.data_to_send())
        except OSError:
            print("closed", flush=True)
            return
        try:
            data = sock.recv(65536)
            if not data:
                print("closed", flush=True)
                return
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.ConnectionTerminated):
                    print("goaway", event.error_code, flush=True)
                    return
        except (socket.timeout, ssl.SSLWantReadError):
            pass
        except OSError:
            print("closed", flush=True)
            return
    sock.settimeout(10)
    pump(lambda event: None, lambda: False)

def play():
    if mode == "get":
        sid = request(path)
        body = bytearray()
        def handle(event):
            if isinstance(event, h2.events.ResponseReceived):
                print("status", dict(event.headers)[":status"], flush=True)
            elif isinstance(event, h2.events.DataReceived):
                body.extend(event.data)
                conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, (h2.events.StreamEnded, h2.events.StreamReset)):
                state["done"] = True
        pump(handle, lambda: state["done"])
        print("body", len(body), round(time.time() - start, 3), flush=True)
        print("settings", conn.remote_settings.max_concurrent_streams, conn.remote_settings.initial_window_size, flush=True)

    elif mode == "sse":
        sid = request(path)
        def handle(event):
            if isinstance(event, h2.events.DataReceived):
                conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                for line in event.data.decode().split("\n"):
                    if line.startswith("data:"):
                        print("event", round(time.time() - start, 3), line[5:].strip(), flush=True)
            elif isinstance(event, h2.events.StreamEnded):
                state["done"] = True
            elif isinstance(event, h2.events.StreamReset):
                print("reset", event.error_code, flush=True)
                state["done"] = True
        pump(handle, lambda: state["done"])
        print("end", round(time.time() - start, 3), flush=True)

    elif mode == "stall":
        # Stream A is never given window (its bytes are credited to the connection only); stream B is read normally.
        a = request(path)
        b = request("/echo/b")
        got = {a: 0, b: 0}
        ended = set()
        def handle(event):
            if isinstance(event, h2.events.DataReceived):
                got[event.stream_id] += len(event.data)
                if event.stream_id == a:
                    if event.flow_controlled_length:
                        conn.increment_flow_control_window(event.flow_controlled_length)
                else:
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                ended.add(event.stream_id)
                if event.stream_id == b:
                    print("b-done", got[b], round(time.time() - start, 3), flush=True)
            elif isinstance(event, h2.events.StreamReset):
                ended.add(event.stream_id)
                print("reset", "a" if event.stream_id == a else "b", event.error_code, got[event.stream_id], round(time.time() - start, 3), flush=True)
        pump(handle, lambda: a in ended and b in ended)

    elif mode == "rapid_reset":
        def one(i):
            sid = conn.get_next_available_stream_id()
            conn.send_headers(sid, [(":method", "GET"), (":path", path), (":scheme", "https"), (":authority", "localhost")], end_stream=True)
            conn.reset_stream(sid, error_code=8)
        flood(one, 5000)

    elif mode == "ping_flood":
        flood(lambda i: conn.ping(struct.pack(">Q", i)), 5000)

    elif mode == "settings_flood":
        flood(lambda i: conn.update_settings({h2.settings.SettingCodes.MAX_FRAME_SIZE: 16384 + (i % 2)}), 5000)

    elif mode == "continuation_flood":
        # HEADERS without END_HEADERS, then CONTINUATION frames that never end the block (raw frames: h2 will not).
        block = conn.encoder.encode([(":method", "GET"), (":path", "/"), (":scheme", "https"), (":authority", "localhost")])
        frame = lambda kind, flags, payload: struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", 1) + payload
        filler = conn.encoder.encode([("x-filler", "a" * 100)])
        sock.sendall(frame(0x1, 0, block))
        sock.settimeout(0.01)
        for i in range(10000):
            try:
                sock.sendall(frame(0x9, 0, filler))
            except OSError:
                break
        sock.settimeout(10)
        pump(lambda event: None, lambda: False)

    elif mode == "partial_headers":
        # A header block begun (HEADERS without END_HEADERS) and never finished: the connection is stuck until closed.
        # The server's SETTINGS acknowledged first: nothing else may be sent once the block is open.
        conn.receive_data(sock.recv(65536))
        sock.sendall(conn.data_to_send())
        block = conn.encoder.encode([(":method", "GET"), (":path", "/"), (":scheme", "https"), (":authority", "localhost")])
        sock.sendall(struct.pack(">I", len(block))[1:] + bytes([0x1, 0]) + struct.pack(">I", 1) + block)
        try:
            while sock.recv(65536):
                pass
            print("closed", flush=True)
        except OSError:
            print("closed", flush=True)
        print("after", round(time.time() - start, 3), flush=True)

    elif mode == "burst":
        # More streams at once than the server's SETTINGS allow, sent after they are acknowledged (h2's own check of the
        # peer's limit bypassed). Prints each stream's outcome: "stream <id> status <code>" then "stream <id> ended", or
        # "stream <id> reset <error code> <seconds>".
        count = int(sys.argv[5])
        def settled(event):
            if isinstance(event, h2.events.RemoteSettingsChanged):
                state["done"] = True
        pump(settled, lambda: state["done"])
        class Unlimited(h2.connection.H2Connection):
            open_outbound_streams = property(lambda self: 0)
        conn.__class__ = Unlimited
        for i in range(count):
            sid = conn.get_next_available_stream_id()
            conn.send_headers(sid, [(":method", "GET"), (":path", path), (":scheme", "https"), (":authority", "localhost")], end_stream=True)
        sock.sendall(conn.data_to_send())
        ended = set()
        def handle(event):
            if isinstance(event, h2.events.ResponseReceived):
                print("stream", event.stream_id, "status", dict(event.headers)[":status"], flush=True)
            elif isinstance(event, h2.events.DataReceived):
                conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                ended.add(event.stream_id)
                print("stream", event.stream_id, "ended", round(time.time() - start, 3), flush=True)
            elif isinstance(event, h2.events.StreamReset):
                ended.add(event.stream_id)
                print("stream", event.stream_id, "reset", int(event.error_code), round(time.time() - start, 3), flush=True)
        pump(handle, lambda: len(ended) == count)

    elif mode == "hosts":
        # Host beside :authority — the same, another, the same twice — then Host alone; one request after another.
        conn.config.validate_outbound_headers = False  # h2 itself refuses the disagreeing ones
        cases = [[(":authority", "localhost"), ("host", "localhost")], [(":authority", "localhost"), ("host", "other.example")],
                 [(":authority", "localhost"), ("host", "localhost"), ("host", "localhost")], [("host", "localhost")]]
        def handle(event):
            if isinstance(event, h2.events.ResponseReceived):
                print("status", dict(event.headers)[":status"], flush=True)
            elif isinstance(event, h2.events.DataReceived):
                conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamReset):
                print("reset", int(event.error_code), flush=True)
                state["done"] = True
            elif isinstance(event, h2.events.StreamEnded):
                state["done"] = True
        for extra in cases:
            sid = conn.get_next_available_stream_id()
            conn.send_headers(sid, [(":method", "GET"), (":path", path), (":scheme", "https")] + extra, end_stream=True)
            sock.sendall(conn.data_to_send())
            state["done"] = False
            pump(handle, lambda: state["done"])

    elif mode == "targets":
        # One request per target given, sent as it is (h2 itself refuses some): its status and body, or its reset.
        conn.config.validate_outbound_headers = False
        for target in sys.argv[5:]:
            request(target)
            answer = {"status": None, "body": bytearray()}
            def handle(event):
                if isinstance(event, h2.events.ResponseReceived):
                    answer["status"] = dict(event.headers)[":status"]
                elif isinstance(event, h2.events.DataReceived):
                    answer["body"].extend(event.data)
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.StreamReset):
                    print("reset", int(event.error_code), flush=True)
                    state["done"] = True
                elif isinstance(event, h2.events.StreamEnded):
                    print("status", answer["status"], answer["body"].decode(), flush=True)
                    state["done"] = True
            state["done"] = False
            pump(handle, lambda: state["done"])

    elif mode == "header_bomb":
        # One 4 KB header repeated: HPACK sends it once, then an index per repeat; decoded it is far over the limit.
        sid = request(path, [("x-bomb", "b" * 4000)] * 200)
        def handle(event):
            if isinstance(event, h2.events.ResponseReceived):
                print("status", dict(event.headers)[":status"], flush=True)
            elif isinstance(event, (h2.events.StreamEnded, h2.events.StreamReset)):
                state["done"] = True
        pump(handle, lambda: state["done"])
        request("/echo/after")
        state["done"] = False
        pump(handle, lambda: state["done"])

# Any mode but burst may be played again and again on new connections for `seconds` (an attack kept up).
seconds = float(sys.argv[5]) if len(sys.argv) > 5 and mode not in ("burst", "targets") else 0
until = time.time() + seconds
play()
while time.time() < until:
    connect()
    state["done"] = False
    play()
"""#
}
