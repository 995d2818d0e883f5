#!/usr/bin/env python3
"""Raw HTTP/2 clients against the real sluice-server (issue 17, items 2, 5 and 9).

Speaks gRPC by hand over the `h2` package (pinned in tests/python-requirements.txt), so it can do
what no gRPC library does: send gzip bombs, HEADERS + RST_STREAM floods, and read every frame the
server sends, frames on closed streams included.

  h2_attack_test.py --server BIN --case compressed|compressed-allowed|rapid-reset|deadline-frames

Each case starts its own server on a free loopback port, asserts, prints its figures, and exits
0 (passed) or 1 (failed, saying why).
"""

import argparse
import gzip
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import zlib

import h2.config
import h2.connection
import h2.events
import hpack
import hyperframe.frame

SERVICE = "/inference.GRPCInferenceService/"


# --- protobuf by hand (the venv has no protobuf; these messages are small) -----------------------
def varint(value):
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field(number, wire_type, payload):
    key = varint((number << 3) | wire_type)
    if wire_type == 2:
        return key + varint(len(payload)) + payload
    return key + payload


def infer_request(model, input_name, shape, raw):
    """ModelInferRequest{model_name, inputs[{name, datatype FP32, shape}], raw_input_contents}."""
    tensor = field(1, 2, input_name.encode()) + field(2, 2, b"FP32")
    tensor += field(3, 2, b"".join(varint(d) for d in shape))
    return field(1, 2, model.encode()) + field(5, 2, tensor) + field(7, 2, raw)


def grpc_frame(message, compressed=False):
    return struct.pack(">BI", 1 if compressed else 0, len(message)) + message


# --- the server -----------------------------------------------------------------------------------
class Server:
    def __init__(self, binary, args, repository=None):
        self.log_path = tempfile.mktemp(prefix="sluice-h2-", suffix=".log")
        argv = [binary, "--grpc-address=127.0.0.1", "--grpc-port=0", "--http-address=127.0.0.1",
                "--http-port=0", "--metrics-port=0"]
        if repository:
            argv.append("--model-repository=" + repository)
        self.log = open(self.log_path, "w")
        self.process = subprocess.Popen(argv + args, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        self.port = 0
        while time.time() < deadline:
            text = self.text()
            match = re.search(r"grpc_port=(\d+)", text)
            if match and "server ready" in text:
                self.port = int(match.group(1))
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.02)
        raise RuntimeError("sluice-server did not start:\n" + self.text())

    def text(self):
        with open(self.log_path) as f:
            return f.read()

    def rss(self):
        with open("/proc/%d/status" % self.process.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    def stop(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.log.close()
        os.unlink(self.log_path)


# --- an HTTP/2 connection that also records every frame the server sends ---------------------------
class Connection:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.h2.initiate_connection()
        self.h2.increment_flow_control_window(1 << 30)
        self.raw = bytearray()
        # (type name, stream id, flags, headers or None, time, hyperframe frame) in arrival order
        self.frames = []
        self.decoder = hpack.Decoder()
        self.events = []
        self.h2_failed = None
        self.closed = False
        self.flush()

    def flush(self):
        data = self.h2.data_to_send()
        if data:
            self.sock.sendall(data)

    def pump(self, timeout):
        """Reads what arrives within `timeout` s; returns False once the server closed."""
        self.sock.settimeout(timeout if timeout > 0 else 0.001)
        try:
            data = self.sock.recv(1 << 20)
        except (socket.timeout, BlockingIOError):
            return True
        except (ConnectionResetError, BrokenPipeError):
            self.closed = True
            return False
        if not data:
            self.closed = True
            return False
        self._record(data)
        self._receive(data)
        return True

    def _receive(self, data):
        """Hands what arrived to h2 (events kept) and acknowledges received DATA, as a client that
        reads its answers does; a subclass that reads differently overrides this."""
        if self.h2_failed is None:
            try:
                for event in self.h2.receive_data(data):
                    self.events.append(event)
                    if isinstance(event, h2.events.DataReceived):
                        self.h2.acknowledge_received_data(event.flow_controlled_length,
                                                          event.stream_id)
                self.flush()
            except Exception as error:  # a frame h2's state machine refuses: keep the record
                self.h2_failed = error

    def _record(self, data):
        self.raw += data
        while len(self.raw) >= 9:
            frame, length = hyperframe.frame.Frame.parse_frame_header(memoryview(self.raw[:9]))
            if len(self.raw) < 9 + length:
                return
            frame.parse_body(memoryview(self.raw[9:9 + length]))
            del self.raw[:9 + length]
            headers = None
            if isinstance(frame, hyperframe.frame.HeadersFrame):
                # Every header block goes through one decoder, in order, as HPACK requires.
                headers = dict((k.decode() if isinstance(k, bytes) else k,
                                v.decode() if isinstance(v, bytes) else v)
                               for k, v in self.decoder.decode(bytes(frame.data)))
            self.frames.append((type(frame).__name__, frame.stream_id, set(frame.flags), headers,
                                time.time(), frame))

    def pump_for(self, seconds):
        end = time.time() + seconds
        while time.time() < end and self.pump(max(0.01, end - time.time())):
            pass

    def send_message(self, stream_id, data, end_stream=True):
        """Sends `data` on the stream as flow control allows."""
        offset = 0
        while offset < len(data):
            window = min(self.h2.local_flow_control_window(stream_id),
                         self.h2.max_outbound_frame_size)
            if window <= 0:
                if not self.pump(1.0):
                    return False
                continue
            chunk = data[offset:offset + window]
            offset += len(chunk)
            self.h2.send_data(stream_id, chunk, end_stream=end_stream and offset == len(data))
            self.flush()
        if not data and end_stream:
            self.h2.end_stream(stream_id)
            self.flush()
        return True

    def call(self, method, message, extra_headers=(), compressed=False):
        stream_id = self.h2.get_next_available_stream_id()
        headers = [(":method", "POST"), (":scheme", "http"), (":path", SERVICE + method),
                   (":authority", "127.0.0.1"), ("content-type", "application/grpc"),
                   ("te", "trailers")] + list(extra_headers)
        self.h2.send_headers(stream_id, headers)
        self.flush()
        self.send_message(stream_id, grpc_frame(message, compressed))
        return stream_id

    def status(self, stream_id, timeout=5.0):
        """grpc-status of the stream (from its trailers or a trailers-only answer), or None."""
        end = time.time() + timeout
        while time.time() < end:
            for event in self.events:
                if isinstance(event, (h2.events.TrailersReceived, h2.events.ResponseReceived)) \
                        and event.stream_id == stream_id:
                    headers = dict(event.headers)
                    if "grpc-status" in headers:
                        return int(headers["grpc-status"]), headers.get("grpc-message", "")
                if isinstance(event, h2.events.StreamReset) and event.stream_id == stream_id:
                    return None, "reset (error code %s)" % event.error_code
            if not self.pump(0.05) and self.closed:
                break
        return None, "no status"

    def close(self):
        self.sock.close()


def fail(message):
    print("FAILED: " + message)
    sys.exit(1)


def live(port):
    """A ServerLive call over a new connection: its grpc-status."""
    connection = Connection(port)
    status = connection.status(connection.call("ServerLive", b""))
    connection.close()
    return status[0]


# --- item 2 ---------------------------------------------------------------------------------------
def gzip_of_zeros(mebibytes):
    """gzip of `mebibytes` MiB of zero bytes, built without holding them (about 1 KiB per MiB)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = bytes(1 << 20)
    out = [compressor.compress(chunk) for _ in range(mebibytes)]
    out.append(compressor.flush())
    return b"".join(out)


def case_compressed(args):
    """By default a gzip request is refused before it is inflated."""
    server = Server(args.server, [])
    try:
        bomb = gzip_of_zeros(64)
        before = server.rss()
        connection = Connection(server.port)
        stream = connection.call("ModelInfer", bomb, [("grpc-encoding", "gzip")], compressed=True)
        code, message = connection.status(stream)
        connection.pump_for(0.3)
        growth = server.rss() - before
        print("gzip bomb: %d bytes compressed (64 MiB inflated): status %s '%s', server RSS "
              "growth %.1f MiB" % (len(bomb), code, message, growth / 2**20))
        if code != 12:
            fail("a gzip request must be refused UNIMPLEMENTED (12), got %s '%s'" % (code, message))
        if growth > 32 << 20:
            fail("the server inflated the message (RSS +%.1f MiB)" % (growth / 2**20))
        if live(server.port) != 0:
            fail("the server does not answer after the gzip request")
    finally:
        server.stop()


def case_compressed_allowed(args):
    """With --grpc-allow-compressed-requests, small gzip requests work and bombs are refused
    before they inflate past --grpc-max-inflated-message-bytes."""
    server = Server(args.server, ["--grpc-allow-compressed-requests=true",
                                  "--grpc-max-inflated-message-bytes=67108864"])
    try:
        connection = Connection(server.port)
        request = infer_request("identity", "INPUT0", [1, 4], struct.pack("<4f", 1, 2, 3, 4))
        stream = connection.call("ModelInfer", gzip.compress(request), [("grpc-encoding", "gzip")],
                                 compressed=True)
        code, message = connection.status(stream)
        print("small gzip request: status %s '%s'" % (code, message))
        if code != 0:
            fail("a small gzip request must be served when compression is allowed")
        bomb = gzip_of_zeros(256)
        before = server.rss()
        stream = connection.call("ModelInfer", bomb, [("grpc-encoding", "gzip")], compressed=True)
        code, message = connection.status(stream)
        connection.pump_for(0.3)
        growth = server.rss() - before
        print("gzip bomb: %d bytes compressed (256 MiB inflated): status %s '%s', server RSS "
              "growth %.1f MiB" % (len(bomb), code, message, growth / 2**20))
        if code != 8:
            fail("the bomb must be refused RESOURCE_EXHAUSTED (8), got %s '%s'" % (code, message))
        if growth > 80 << 20:
            fail("the server inflated past its bound (RSS +%.1f MiB)" % (growth / 2**20))
    finally:
        server.stop()


# --- item 5 ---------------------------------------------------------------------------------------
def case_rapid_reset(args):
    """HEADERS + RST_STREAM pairs on one connection, as fast as the client can send them."""
    pairs = args.pairs
    server = Server(args.server, args.server_args)
    try:
        start_rss = server.rss()
        worst = 0
        closed_every_time = True
        for round_number in range(args.rounds):
            largest, closed = rapid_reset_round(server, pairs, round_number)
            worst = max(worst, largest - start_rss)
            closed_every_time = closed_every_time and closed
        print("rapid reset: %d rounds of %d pairs: largest RSS growth %.1f MiB" %
              (args.rounds, pairs, worst / 2**20))
        if live(server.port) != 0:
            fail("the server does not answer after the flood")
        if args.max_growth_mib and worst > args.max_growth_mib << 20:
            fail("RSS grew %.1f MiB (bound %d MiB)" % (worst / 2**20, args.max_growth_mib))
        if args.expect_closed and not closed_every_time:
            fail("the server kept a connection that reset %d streams" % pairs)
    finally:
        server.stop()


def rapid_reset_round(server, pairs, round_number):
    """One connection's flood; returns the largest RSS seen."""
    if True:
        before = server.rss()
        connection = Connection(server.port)
        headers = [(":method", "POST"), (":scheme", "http"), (":path", SERVICE + "ModelInfer"),
                   (":authority", "127.0.0.1"), ("content-type", "application/grpc"),
                   ("te", "trailers")]
        # Frames built by hand (h2's state machine is far slower than the attack): one header
        # block, HPACK literals without indexing so that every stream can reuse the same bytes,
        # then HEADERS (END_HEADERS) + RST_STREAM (CANCEL) per stream, in batches.
        block = hpack.Encoder().encode(
            [hpack.HeaderTuple(k, v) if False else hpack.NeverIndexedHeaderTuple(k, v)
             for k, v in headers])
        first = connection.h2.get_next_available_stream_id()
        stalled = False
        start = time.time()
        sent = 0
        batch = []
        for i in range(pairs):
            stream_id = first + 2 * i
            batch.append(struct.pack(">I", len(block))[1:] + b"\x01\x04" +
                         struct.pack(">I", stream_id) + block)
            batch.append(b"\x00\x00\x04\x03\x00" + struct.pack(">II", stream_id, 8))
            if len(batch) >= 400 or i == pairs - 1:
                connection.sock.settimeout(5)
                try:
                    connection.sock.sendall(b"".join(batch))
                except (BrokenPipeError, ConnectionResetError):
                    connection.closed = True
                    break
                except socket.timeout:
                    stalled = True  # the server stopped reading the connection for 5 s
                    break
                sent += len(batch) // 2
                batch = []
                connection.pump(0)
                if connection.closed:
                    break
        elapsed = time.time() - start
        peak = server.rss()
        if not connection.closed:
            # The server reads the flood after the client has sent it; on a loaded machine (or
            # under TSan) that takes more than the half second an idle one needs. Waiting up to
            # 5 s costs nothing when the server closes (pump_for returns at the close).
            connection.pump_for(5.0)
        goaway = sum(1 for f in connection.frames if f[0] == "GoAwayFrame")
        after = server.rss()
        print("rapid reset: %d pairs in %.2f s; server RSS growth %.1f MiB right after, %.1f MiB "
              "after the wait; GOAWAY frames %d; connection closed by server: %s; server stopped "
              "reading: %s" % (sent, elapsed, (peak - before) / 2**20, (after - before) / 2**20,
                               goaway, connection.closed, stalled))
        time.sleep(1.0)
        settled = server.rss()
        print("  round %d: RSS %.1f MiB 1 s after that" % (round_number, settled / 2**20))
        closed = connection.closed
        connection.close()
        return max(peak, after, settled), closed


# --- item 9 ---------------------------------------------------------------------------------------
def case_deadline_frames(args):
    """Calls whose deadline expires in the server: each stream must end once, and the server must
    send nothing on it afterwards."""
    repository = tempfile.mkdtemp(prefix="sluice-h2-repo-")
    os.makedirs(os.path.join(repository, "held", "1"))
    with open(os.path.join(repository, "held", "config.pbtxt"), "w") as f:
        f.write("""
backend: "identity"
max_batch_size: 1024
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
dynamic_batching {
  max_queue_delay_microseconds: 60000000
  default_queue_policy { max_queue_size: 100000 }
}
""")
    server = Server(args.server, [], repository=repository)
    try:
        connection = Connection(server.port)
        request = infer_request("held", "IN", [1, 1], struct.pack("<f", 1.0))
        streams = []
        sent_at = time.time()
        for _ in range(args.streams):
            streams.append(connection.call("ModelInfer", request, [("grpc-timeout", "200m")]))
        connection.pump_for(1.5)
        bad = []
        codes = {}
        for stream in streams:
            frames = [f for f in connection.frames if f[1] == stream]
            ends = [i for i, f in enumerate(frames)
                    if (f[0] == "HeadersFrame" and "END_STREAM" in f[2]) or f[0] == "RstStreamFrame"]
            trailers = sum(1 for f in frames if f[0] == "HeadersFrame" and "END_STREAM" in f[2])
            resets = sum(1 for f in frames if f[0] == "RstStreamFrame")
            after_end = len(frames) - 1 - ends[0] if ends else 0
            code = None
            for f in frames:
                if f[3] and "grpc-status" in f[3]:
                    code = int(f[3]["grpc-status"])
                    break
            codes[code] = codes.get(code, 0) + 1
            if trailers != 1 or resets > 0 or after_end > 0:
                bad.append((stream, [(f[0], (f[3] or {}).get("grpc-status"),
                                     (f[3] or {}).get("grpc-message"),
                                     "+%.0f ms" % ((f[4] - sent_at) * 1000)) for f in frames]))
        print("deadline frames: %d streams, grpc-status counts %s, %d with frames after their end "
              "(or no single end)" % (len(streams), codes, len(bad)))
        for stream, frames in bad[:3]:
            print("  stream %d: %s" % (stream, frames))
        if codes.get(4, 0) != len(streams):
            fail("every call must end DEADLINE_EXCEEDED (4)")
        if bad:
            fail("%d of %d streams got frames after their end (RFC 9113 5.1)" %
                 (len(bad), len(streams)))
    finally:
        server.stop()
        shutil.rmtree(repository)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", required=True)
    parser.add_argument("--case", required=True,
                        choices=["compressed", "compressed-allowed", "rapid-reset",
                                 "deadline-frames"])
    parser.add_argument("--pairs", type=int, default=10000, help="rapid-reset: pairs to send")
    parser.add_argument("--rounds", type=int, default=1, help="rapid-reset: floods, one "
                        "connection each")
    parser.add_argument("--max-growth-mib", type=int, default=0,
                        help="rapid-reset: fail if the server's RSS grows more")
    parser.add_argument("--expect-closed", action="store_true",
                        help="rapid-reset: fail unless the server closes the connection")
    parser.add_argument("--streams", type=int, default=20, help="deadline-frames: calls")
    parser.add_argument("--server-arg", dest="server_args", action="append", default=[])
    args = parser.parse_args()
    {"compressed": case_compressed, "compressed-allowed": case_compressed_allowed,
     "rapid-reset": case_rapid_reset, "deadline-frames": case_deadline_frames}[args.case](args)
    print("passed")


if __name__ == "__main__":
    main()
