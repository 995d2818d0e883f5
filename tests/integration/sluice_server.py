"""Starts the real sluice-server on free loopback ports for the Python HTTP tests.

Every port is picked by the kernel (--grpc-port=0 --http-port=0 --metrics-port=0) and read back from
the server's log lines (grpc_port=N, http_port=N), as the C++ ServerProcess helper does.
"""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request


class SluiceServer:
    def __init__(self, server, models, extra_args=(), timeout_s=30):
        self._log = tempfile.NamedTemporaryFile(prefix="sluice_http_", suffix=".log", delete=False)
        args = [server, f"--model-repository={models}", "--grpc-address=127.0.0.1", "--grpc-port=0",
                "--http-address=127.0.0.1", "--http-port=0", "--metrics-port=0", *extra_args]
        self.process = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            text = self.log()
            if self.process.poll() is not None:
                raise RuntimeError(f"sluice-server exited during start-up:\n{text}")
            http = re.search(r"http_port=(\d+)", text)
            grpc = re.search(r"grpc_port=(\d+)", text)
            # "server started, not ready": start-up is done, but a model failed to load
            # (--strict-readiness, the default, keeps the server not ready then).
            started = "server ready" in text or "server started, not ready" in text
            if http and grpc and started:
                self.http_port = int(http.group(1))
                self.grpc_port = int(grpc.group(1))
                self.url = f"127.0.0.1:{self.http_port}"
                return
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"sluice-server did not get ready in time:\n{self.log()}")

    def log(self):
        with open(self._log.name, encoding="utf-8", errors="replace") as f:
            return f.read()

    def http_json(self, path):
        """GET `path` on the KServe HTTP port, decoded (raises on a non-2xx answer)."""
        with urllib.request.urlopen(f"http://{self.url}{path}", timeout=10) as response:
            return json.load(response)

    def metrics(self):
        """The Prometheus text of /metrics (its port read from the log: metrics_port=N)."""
        port = int(re.search(r"metrics_port=(\d+)", self.log()).group(1))
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            return response.read().decode()

    def served_precision(self, grpc_client, name):
        """The CPU precision serving `name` version 1 as the gRPC ModelConfig says it (issue 36),
        with what HTTP's config and /metrics' sluice_model_info label say; the three must agree,
        else an AssertionError names them."""
        over_grpc = grpc_client.get_model_config(name).config.parameters["precision"].string_value
        config = self.http_json(f"/v2/models/{name}/config")
        over_http = config.get("parameters", {}).get("precision", {})
        labels = re.findall(rf'^sluice_model_info\{{model="{re.escape(name)}",version="1",'
                            r'precision="(\w+)"\} 1$', self.metrics(), re.MULTILINE)
        if over_http.get("string_value") != over_grpc or labels != [over_grpc]:
            raise AssertionError(f"{name}: ModelConfig says precision {over_grpc!r} over gRPC, "
                                 f"{over_http!r} over HTTP; /metrics labels {labels}")
        return over_grpc

    def alive(self):
        return self.process.poll() is None

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.returncode != 0:
            # A failed stop (a sanitizer's exit 66, a crash, a hang) is only diagnosable with the
            # server's own words: keep them in the test's output before the log goes.
            sys.stderr.write(f"sluice-server exited {self.process.returncode}; its log:\n"
                             f"{self.log()[-20000:]}\n")
        os.unlink(self._log.name)
        return self.process.returncode
