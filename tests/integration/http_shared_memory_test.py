"""Shared-memory tensors over HTTP (issue 16) with Triton's own client: tritonclient.http and
tritonclient.utils.shared_memory (PyPI tritonclient[http], pinned in
tests/python-requirements.txt) against the real sluice-server. The regions are made by
tritonclient's shared-memory utilities (shm_open + mmap in its libcshm), exactly as a Triton user
makes them; the requests are what tritonclient sends for set_shared_memory(). Both directions,
mixed with binary and JSON tensors, the register/status/unregister endpoints, the errors a client
sees, and unregister during load. The gRPC side is shared_memory_integration_test.cc.

Run by CTest with the test-reference virtual environment's python (SLUICE_TEST_PYTHON).
"""

import argparse
import base64
import http.client
import json
import os
import re
import sys
import threading
import time
import unittest

import numpy as np
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluice_server import SluiceServer  # noqa: E402

ARGS = None


def metric(server, series):
    """The value of one series on the server's /metrics."""
    port = int(re.search(r"metrics_port=(\d+)", server.log()).group(1))
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{series} not in /metrics")


class HttpSharedMemoryTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = SluiceServer(ARGS.server, ARGS.models,
                                  extra_args=["--shared-memory-max-regions=8"])
        cls.client = httpclient.InferenceServerClient(url=cls.server.url, connection_timeout=10,
                                                      network_timeout=20)
        cls.handles = []

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        code = cls.server.stop()
        if code != 0:
            raise AssertionError(f"sluice-server exited {code}")

    def setUp(self):
        self.created = []

    def tearDown(self):
        self.client.unregister_system_shared_memory()
        for handle in self.created:
            shm.destroy_shared_memory_region(handle)

    def region(self, name, byte_size):
        key = f"/sluice_http_{os.getpid()}_{name}"
        handle = shm.create_shared_memory_region(name, key, byte_size)
        self.created.append(handle)
        return key, handle

    def post(self, path, body):
        conn = http.client.HTTPConnection("127.0.0.1", self.server.http_port, timeout=10)
        conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        data = response.read().decode()
        conn.close()
        return response.status, data

    def test_server_metadata_lists_the_extensions(self):
        extensions = self.client.get_server_metadata()["extensions"]
        self.assertIn("system_shared_memory", extensions)
        self.assertIn("cuda_shared_memory", extensions)

    def test_simple_both_directions(self):
        # Triton's simple_http_shm_client, step for step.
        in_key, in_handle = self.region("input_data", 128)
        out_key, out_handle = self.region("output_data", 128)
        input0 = np.arange(16, dtype=np.int32).reshape(1, 16)
        input1 = np.full((1, 16), -3, dtype=np.int32)
        shm.set_shared_memory_region(in_handle, [input0])
        shm.set_shared_memory_region(in_handle, [input1], offset=64)
        self.client.register_system_shared_memory("input_data", in_key, 128)
        self.client.register_system_shared_memory("output_data", out_key, 128)
        status = self.client.get_system_shared_memory_status()
        self.assertEqual(sorted(r["name"] for r in status), ["input_data", "output_data"])
        one = self.client.get_system_shared_memory_status("input_data")
        self.assertEqual(one, [{"name": "input_data", "key": in_key, "offset": 0,
                                "byte_size": 128}])

        inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"),
                  httpclient.InferInput("INPUT1", [1, 16], "INT32")]
        inputs[0].set_shared_memory("input_data", 64)
        inputs[1].set_shared_memory("input_data", 64, offset=64)
        outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=True),
                   httpclient.InferRequestedOutput("OUTPUT1", binary_data=True)]
        outputs[0].set_shared_memory("output_data", 64)
        outputs[1].set_shared_memory("output_data", 64, offset=64)
        result = self.client.infer("simple", inputs, outputs=outputs)

        out0 = result.get_output("OUTPUT0")
        self.assertEqual(out0["parameters"]["shared_memory_region"], "output_data")
        self.assertEqual(out0["parameters"]["shared_memory_byte_size"], 64)
        self.assertNotIn("data", out0)
        self.assertEqual(result.get_output("OUTPUT1")["parameters"]["shared_memory_offset"], 64)
        got0 = shm.get_contents_as_numpy(out_handle, np.int32, [1, 16])
        got1 = shm.get_contents_as_numpy(out_handle, np.int32, [1, 16], offset=64)
        np.testing.assert_array_equal(got0, input0 + input1)
        np.testing.assert_array_equal(got1, input0 - input1)
        self.assertEqual(metric(self.server, 'sluice_shared_memory_regions{kind="system"}'), 2)

    def test_mixed_with_binary_and_json(self):
        # INPUT0 from shared memory, INPUT1 as JSON; OUTPUT0 into shared memory, OUTPUT1 binary.
        key, handle = self.region("mixed", 4096)
        input0 = (np.arange(16, dtype=np.int32) * 11).reshape(1, 16)
        input1 = np.arange(16, dtype=np.int32).reshape(1, 16)
        shm.set_shared_memory_region(handle, [input0], offset=512)
        self.client.register_system_shared_memory("mixed", key, 4096)
        inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"),
                  httpclient.InferInput("INPUT1", [1, 16], "INT32")]
        inputs[0].set_shared_memory("mixed", 64, offset=512)
        inputs[1].set_data_from_numpy(input1, binary_data=False)
        outputs = [httpclient.InferRequestedOutput("OUTPUT0"),
                   httpclient.InferRequestedOutput("OUTPUT1", binary_data=True)]
        outputs[0].set_shared_memory("mixed", 64, offset=1024)
        result = self.client.infer("simple", inputs, outputs=outputs)
        self.assertNotIn("data", result.get_output("OUTPUT0"))
        self.assertEqual(result.get_output("OUTPUT0")["parameters"]["shared_memory_offset"], 1024)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), input0 - input1)
        np.testing.assert_array_equal(
            shm.get_contents_as_numpy(handle, np.int32, [1, 16], offset=1024), input0 + input1)

    def test_identity_fp32_round_trip(self):
        n = 1 << 18  # 1 MiB of FP32
        key, handle = self.region("ident", 2 * 4 * n)
        data = np.random.default_rng(7).standard_normal((1, n)).astype(np.float32)
        shm.set_shared_memory_region(handle, [data])
        self.client.register_system_shared_memory("ident", key, 2 * 4 * n)
        inp = httpclient.InferInput("INPUT0", [1, n], "FP32")
        inp.set_shared_memory("ident", 4 * n)
        out = httpclient.InferRequestedOutput("OUTPUT0")
        out.set_shared_memory("ident", 4 * n, offset=4 * n)
        self.client.infer("identity", [inp], outputs=[out])
        np.testing.assert_array_equal(
            shm.get_contents_as_numpy(handle, np.float32, [1, n], offset=4 * n), data)

    def expect_error(self, fn, status, text):
        with self.assertRaises(InferenceServerException) as caught:
            fn()
        self.assertIn(text, caught.exception.message())
        if status is not None:
            self.assertEqual(str(caught.exception.status()), str(status))

    def test_registration_errors(self):
        key, _ = self.region("r", 4096)
        self.expect_error(lambda: self.client.register_system_shared_memory(
            "r", "/sluice_missing_key_for_test", 64), 404, "no shared-memory object has that key")
        for bad in ["/dev/shm/x", "/../etc/passwd", "noslash", "/.."]:
            self.expect_error(lambda: self.client.register_system_shared_memory("r", bad, 64),
                              400, "is not a POSIX shared-memory name")
        self.expect_error(lambda: self.client.register_system_shared_memory(
            "r", key, 200, offset=4000), 400, "runs past its 4096 bytes")
        self.client.register_system_shared_memory("r", key, 4096)
        self.expect_error(lambda: self.client.register_system_shared_memory("r", key, 64),
                          409, "'r' is already registered")
        self.expect_error(lambda: self.client.unregister_system_shared_memory("never"), 404,
                          "no system shared-memory region named 'never'")
        self.expect_error(lambda: self.client.get_system_shared_memory_status("never"), 404,
                          "no system shared-memory region named 'never'")
        # The bound on regions (--shared-memory-max-regions=8).
        for i in range(7):
            self.client.register_system_shared_memory(f"r{i}", key, 64)
        self.expect_error(lambda: self.client.register_system_shared_memory("r8", key, 64), 429,
                          "--shared-memory-max-regions")
        # Malformed bodies.
        status, body = self.post("/v2/systemsharedmemory/region/x/register", {"key": key})
        self.assertEqual(status, 400)
        self.assertIn("'byte_size' is missing", body)
        status, body = self.post("/v2/systemsharedmemory/region/x/register",
                                 {"key": key, "byte_size": -1})
        self.assertEqual(status, 400)
        # CUDA on a CPU-only server: refused, saying why.
        status, body = self.post("/v2/cudasharedmemory/region/g/register", {
            "raw_handle": {"b64": base64.b64encode(bytes(64)).decode()}, "device_id": 0,
            "byte_size": 64})
        self.assertEqual(status, 400)
        self.assertIn("on the CPU", body)
        self.assertEqual(self.client.get_cuda_shared_memory_status(), [])

    def test_inference_errors(self):
        key, handle = self.region("small", 96)
        self.client.register_system_shared_memory("small", key, 96)
        inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"),
                  httpclient.InferInput("INPUT1", [1, 16], "INT32")]
        inputs[0].set_shared_memory("small", 64)
        inputs[1].set_shared_memory("small", 64, offset=64)  # runs past 96 bytes
        self.expect_error(lambda: self.client.infer("simple", inputs), 400,
                          "input 'INPUT1' in shared-memory region 'small' (96 bytes): offset 64 + "
                          "byte size 64 runs past its 96 bytes")
        inputs[1].set_shared_memory("nope", 64)
        self.expect_error(lambda: self.client.infer("simple", inputs), 400,
                          "input 'INPUT1': no shared-memory region named 'nope'")
        inputs[1].set_shared_memory("small", 32)
        self.expect_error(lambda: self.client.infer("simple", inputs), 400,
                          "16 INT32 elements need 64 bytes")
        # Output region too small for the result.
        in_key, in_handle = self.region("in", 128)
        self.client.register_system_shared_memory("in", in_key, 128)
        inputs[0].set_shared_memory("in", 64)
        inputs[1].set_shared_memory("in", 64, offset=64)
        out = httpclient.InferRequestedOutput("OUTPUT0")
        out.set_shared_memory("small", 32)
        self.expect_error(lambda: self.client.infer("simple", inputs, outputs=[out]), 400,
                          "output 'OUTPUT0' is 64 bytes (shape [1,16] INT32) but its "
                          "shared_memory_byte_size in region 'small' is only 32")

    def test_unregister_during_load(self):
        n = 1 << 18
        in_key, in_handle = self.region("load_in", 4 * n)
        out_key, out_handle = self.region("load_out", 4 * 4 * n)
        data = np.arange(n, dtype=np.float32).reshape(1, n)
        shm.set_shared_memory_region(in_handle, [data])
        self.client.register_system_shared_memory("load_in", in_key, 4 * n)
        self.client.register_system_shared_memory("load_out", out_key, 4 * 4 * n)
        stop = threading.Event()
        counts = {"ok": 0, "refused": 0, "wrong": []}
        lock = threading.Lock()

        def load(c):
            client = httpclient.InferenceServerClient(url=self.server.url, network_timeout=20)
            inp = httpclient.InferInput("INPUT0", [1, n], "FP32")
            inp.set_shared_memory("load_in", 4 * n)
            out = httpclient.InferRequestedOutput("OUTPUT0")
            out.set_shared_memory("load_out", 4 * n, offset=c * 4 * n)
            for _ in range(100):
                if stop.is_set():
                    break
                shm.set_shared_memory_region(out_handle, [np.zeros((1, n), np.float32)],
                                             offset=c * 4 * n)
                try:
                    client.infer("identity", [inp], outputs=[out])
                    got = shm.get_contents_as_numpy(out_handle, np.float32, [1, n],
                                                    offset=c * 4 * n)
                    with lock:
                        counts["ok"] += 1
                        if not np.array_equal(got, data):
                            counts["wrong"].append("values")
                except InferenceServerException as e:
                    with lock:
                        if "no shared-memory region named" in e.message():
                            counts["refused"] += 1
                        else:
                            counts["wrong"].append(e.message())
            client.close()

        threads = [threading.Thread(target=load, args=(c,)) for c in range(4)]
        for t in threads:
            t.start()
        cycles = 0
        until = time.monotonic() + 3
        while time.monotonic() < until:
            self.client.unregister_system_shared_memory("load_in")
            self.client.unregister_system_shared_memory("load_out")
            time.sleep(0.002)
            self.client.register_system_shared_memory("load_in", in_key, 4 * n)
            self.client.register_system_shared_memory("load_out", out_key, 4 * 4 * n)
            time.sleep(0.01)
            cycles += 1
        stop.set()
        for t in threads:
            t.join()
        self.assertEqual(counts["wrong"], [])
        self.assertGreater(counts["ok"], 0)
        print(f"unregister during load (HTTP): {counts['ok']} answered, {counts['refused']} "
              f"refused, {cycles} cycles")
        self.client.unregister_system_shared_memory()
        deadline = time.monotonic() + 5
        while metric(self.server, "sluice_shared_memory_mapped_bytes") != 0 and \
                time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertEqual(metric(self.server, "sluice_shared_memory_mapped_bytes"), 0)
        self.assertEqual(metric(self.server, "sluice_shared_memory_draining_regions"), 0)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--models", required=True)
    parser.add_argument("--source")
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
