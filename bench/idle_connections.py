"""idle_connections.py: what idle keep-alive connections cost an HTTP server (issue 21's library
choice, docs/performance.md). Opens N keep-alive connections to http://127.0.0.1:PORT (one request
each, then silent), then times a fresh client's request and reads the server's thread count from
/proc. Run against sluice's HTTP port (Boost.Beast/Asio) and its metrics port (civetweb, through
prometheus-cpp, a worker thread per connection).

  python3 bench/idle_connections.py --pid PID --port PORT --path /v2/health/live --idle 64
"""
import argparse
import http.client
import socket
import time


def threads(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return -1


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--path", default="/")
    p.add_argument("--idle", type=int, default=64)
    p.add_argument("--timeout", type=float, default=5.0)
    p.add_argument("--partial", action="store_true",
                   help="the idle clients send half a request line and stop (a slow client)")
    a = p.parse_args()
    before = threads(a.pid)
    idle = []
    for _ in range(a.idle):
        s = socket.create_connection(("127.0.0.1", a.port), timeout=a.timeout)
        if a.partial:
            s.sendall(f"GET {a.path} HT".encode())
        else:
            s.sendall(f"GET {a.path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            try:
                s.recv(65536)
            except socket.timeout:
                pass
        idle.append(s)
    time.sleep(0.2)
    during = threads(a.pid)
    start = time.monotonic()
    try:
        c = http.client.HTTPConnection("127.0.0.1", a.port, timeout=a.timeout)
        c.request("GET", a.path)
        status = c.getresponse().status
    except Exception as e:  # noqa: BLE001 - the measurement is whether it answers
        status = f"no answer ({type(e).__name__})"
    elapsed_ms = (time.monotonic() - start) * 1000
    kind = "half-sent requests" if a.partial else "idle keep-alive connections"
    print(f"port {a.port}: threads {before} -> {during} with {a.idle} {kind}; "
          f"a new client's GET {a.path}: {status} in {elapsed_ms:.1f} ms")
    for s in idle:
        s.close()


if __name__ == "__main__":
    main()
