"""Triton's own HTTP client (tritonclient.http, PyPI tritonclient[http], pinned in
tests/python-requirements.txt) against sluice's KServe v2 HTTP/REST front end: health, metadata,
configuration, statistics, the repository index, load/unload, and inference on simple, identity and
mlp with binary and JSON tensors, gzip/deflate bodies both ways, and the errors a client sees.
The statistics of a model with a tokenizer (its `<model>/tokenizer` entry) are also read with
tritonclient.grpc, Triton's gRPC client.

Run by CTest with the test-reference virtual environment's python (SLUICE_TEST_PYTHON).
"""

import argparse
import gzip
import http.client
import json
import os
import shutil
import sys
import tempfile
import unittest
import zlib

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluice_server import SluiceServer  # noqa: E402

ARGS = None


class TritonHttpClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = SluiceServer(ARGS.server, ARGS.models)
        cls.client = httpclient.InferenceServerClient(url=cls.server.url, connection_timeout=10,
                                                      network_timeout=10)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        code = cls.server.stop()
        if code != 0:
            raise AssertionError(f"sluice-server exited {code}")

    def test_health_and_metadata(self):
        self.assertTrue(self.client.is_server_live())
        self.assertTrue(self.client.is_server_ready())
        self.assertTrue(self.client.is_model_ready("simple"))
        self.assertTrue(self.client.is_model_ready("simple", "1"))
        self.assertFalse(self.client.is_model_ready("simple", "3"))
        self.assertFalse(self.client.is_model_ready("nope"))
        server = self.client.get_server_metadata()
        self.assertEqual(server["name"], "sluice")
        self.assertIn("binary_tensor_data", server["extensions"])
        model = self.client.get_model_metadata("simple")
        self.assertEqual(model["versions"], ["1"])
        self.assertEqual([i["name"] for i in model["inputs"]], ["INPUT0", "INPUT1"])
        self.assertEqual(model["inputs"][0]["shape"], [-1, 16])
        config = self.client.get_model_config("simple")
        self.assertEqual(config["max_batch_size"], 8)
        self.assertEqual(config["input"][0]["data_type"], "TYPE_INT32")
        index = self.client.get_model_repository_index()
        self.assertEqual(sorted(m["name"] for m in index), ["embedder", "identity", "mlp", "simple"])
        self.assertTrue(all(m["state"] == "READY" for m in index))

    def simple(self, binary, model_version=""):
        a = np.arange(32, dtype=np.int32).reshape(2, 16)
        b = np.full((2, 16), 5, dtype=np.int32)
        inputs = [httpclient.InferInput("INPUT0", [2, 16], "INT32"),
                  httpclient.InferInput("INPUT1", [2, 16], "INT32")]
        inputs[0].set_data_from_numpy(a, binary_data=binary)
        inputs[1].set_data_from_numpy(b, binary_data=binary)
        outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary),
                   httpclient.InferRequestedOutput("OUTPUT1", binary_data=not binary)]
        result = self.client.infer("simple", inputs, outputs=outputs, request_id="q7",
                                   model_version=model_version)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
        response = result.get_response()
        self.assertEqual(response["id"], "q7")
        self.assertEqual(response["model_version"], "1")

    def test_simple_binary(self):
        self.simple(binary=True)

    def test_simple_json(self):
        self.simple(binary=False, model_version="1")

    def test_identity_4k_fp32_binary_and_json(self):
        x = np.random.default_rng(1).standard_normal((1, 1024)).astype(np.float32)
        for binary in (True, False):
            inputs = [httpclient.InferInput("INPUT0", [1, 1024], "FP32")]
            inputs[0].set_data_from_numpy(x, binary_data=binary)
            outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)]
            result = self.client.infer("identity", inputs, outputs=outputs)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x)

    def test_mlp_binary_and_json_agree(self):
        x = np.random.default_rng(2).random((3, 784)).astype(np.float32)
        answers = []
        for binary in (True, False):
            inputs = [httpclient.InferInput("INPUT0", [3, 784], "FP32")]
            inputs[0].set_data_from_numpy(x, binary_data=binary)
            result = self.client.infer("mlp", inputs)  # no outputs named: all of them
            out = result.as_numpy("OUTPUT0")
            self.assertEqual(out.shape, (3, 10))
            np.testing.assert_allclose(out.sum(axis=1), np.ones(3), rtol=1e-5)  # softmax
            answers.append(out)
        np.testing.assert_allclose(answers[0], answers[1], rtol=1e-6)

    def test_async_infer(self):
        x = np.ones((1, 16), dtype=np.float32)
        inputs = [httpclient.InferInput("INPUT0", [1, 16], "FP32")]
        inputs[0].set_data_from_numpy(x)
        client = httpclient.InferenceServerClient(url=self.server.url, concurrency=4)
        try:
            pending = [client.async_infer("identity", inputs) for _ in range(16)]
            for p in pending:
                np.testing.assert_array_equal(p.get_result().as_numpy("OUTPUT0"), x)
        finally:
            client.close()

    def test_compressed_requests_and_responses(self):
        """tritonclient.http's request_compression_algorithm / response_compression_algorithm, as
        Triton serves them: the values must come back right whichever way the bodies travel."""
        a = np.arange(32, dtype=np.int32).reshape(2, 16)
        b = np.full((2, 16), 3, dtype=np.int32)
        for binary in (True, False):
            for request_coding, response_coding in (("gzip", None), ("deflate", None),
                                                    (None, "gzip"), (None, "deflate"),
                                                    ("gzip", "deflate")):
                with self.subTest(binary=binary, request=request_coding, response=response_coding):
                    inputs = [httpclient.InferInput("INPUT0", [2, 16], "INT32"),
                              httpclient.InferInput("INPUT1", [2, 16], "INT32")]
                    inputs[0].set_data_from_numpy(a, binary_data=binary)
                    inputs[1].set_data_from_numpy(b, binary_data=binary)
                    outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)]
                    result = self.client.infer("simple", inputs, outputs=outputs,
                                               request_compression_algorithm=request_coding,
                                               response_compression_algorithm=response_coding)
                    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)

    def raw_post(self, path, body, headers):
        connection = http.client.HTTPConnection(self.server.url, timeout=10)
        try:
            connection.request("POST", path, body=body, headers=headers)
            response = connection.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            connection.close()

    def test_compression_on_the_wire_and_its_errors(self):
        request = json.dumps({"inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16}]})
        path = "/v2/models/simple/infer"
        # A gzip body, a gzip answer: the server really compressed it (the client above would not
        # notice an uncompressed one).
        status, headers, body = self.raw_post(path, gzip.compress(request.encode()),
                                              {"Content-Encoding": "gzip",
                                               "Accept-Encoding": "gzip",
                                               "Content-Type": "application/json"})
        self.assertEqual(status, 200, body)
        self.assertEqual(headers.get("Content-Encoding"), "gzip")
        answer = json.loads(gzip.decompress(body))
        self.assertEqual(answer["outputs"][0]["data"], [i + 1 for i in range(16)])
        # No Accept-Encoding: a plain answer.
        status, headers, body = self.raw_post(path, zlib.compress(request.encode()),
                                              {"Content-Encoding": "deflate"})
        self.assertEqual(status, 200, body)
        self.assertNotIn("Content-Encoding", headers)
        self.assertEqual(json.loads(body)["outputs"][1]["data"], [i - 1 for i in range(16)])
        # Errors, each with its message, on a connection that keeps serving.
        status, _, body = self.raw_post(path, b"not gzip", {"Content-Encoding": "gzip"})
        self.assertEqual(status, 400)
        self.assertIn("not valid gzip data", json.loads(body)["error"])
        status, _, body = self.raw_post(path, request.encode(), {"Content-Encoding": "br"})
        self.assertEqual(status, 415)
        self.assertIn("gzip or deflate", json.loads(body)["error"])
        self.assertTrue(self.client.is_server_live())

    def test_a_compression_bomb_is_refused_and_the_server_keeps_serving(self):
        # 64 MiB of zeros, about 64 KiB compressed, against a 1 MiB --http-max-body-bytes.
        bomb = gzip.compress(b"\0" * (64 << 20), compresslevel=9)
        self.assertLess(len(bomb), 1 << 20)
        server = SluiceServer(ARGS.server, ARGS.models, ["--http-max-body-bytes=1048576"])
        try:
            connection = http.client.HTTPConnection(server.url, timeout=10)
            connection.request("POST", "/v2/models/identity/infer", body=bomb,
                               headers={"Content-Encoding": "gzip"})
            response = connection.getresponse()
            body = response.read()
            connection.close()
            self.assertEqual(response.status, 413)
            self.assertIn("inflates to more than 1048576 bytes (--http-max-body-bytes)",
                          json.loads(body)["error"])
            client = httpclient.InferenceServerClient(url=server.url)
            try:
                self.assertTrue(client.is_server_ready())
            finally:
                client.close()
        finally:
            self.assertEqual(server.stop(), 0)

    def test_statistics(self):
        stats = self.client.get_inference_statistics("simple")
        entry = stats["model_stats"][0]
        self.assertEqual(entry["name"], "simple")
        self.assertIsInstance(entry["inference_count"], int)
        self.assertIn("success", entry["inference_stats"])

    def test_tokenizer_statistics_entry(self):
        # The embedder tokenizes text: its statistics carry a second entry, `embedder/tokenizer`,
        # right after its own, which Triton's clients read like any model's (as they read an
        # ensemble's composing models), also when asked for by that name.
        def counts(stats):
            return [(e["name"], e["version"], int(e["inference_stats"]["success"].get("count", 0)))
                    for e in stats["model_stats"]]

        grpc = grpcclient.InferenceServerClient(url=f"127.0.0.1:{self.server.grpc_port}")
        try:
            before = counts(self.client.get_inference_statistics("embedder"))
            self.assertEqual([name for name, _, _ in before], ["embedder", "embedder/tokenizer"])
            text = httpclient.InferInput("text", [2, 1], "BYTES")
            text.set_data_from_numpy(np.array([[b"one sentence"], [b"and another"]],
                                              dtype=np.object_))
            result = self.client.infer("embedder", [text])
            self.assertEqual(result.as_numpy("embedding").shape[0], 2)
            after = counts(self.client.get_inference_statistics("embedder"))
            self.assertEqual(after, [(name, version, count + 1) for name, version, count in before])
            tokenizer = self.client.get_inference_statistics("embedder/tokenizer")["model_stats"]
            self.assertEqual(len(tokenizer), 1)
            self.assertEqual(tokenizer[0]["name"], "embedder/tokenizer")
            self.assertGreaterEqual(int(tokenizer[0]["inference_count"]), 2)
            for phase in ("success", "fail", "queue", "compute_input", "compute_infer",
                          "compute_output"):
                self.assertIn(phase, tokenizer[0]["inference_stats"])
            # gRPC: the same entries, as a protobuf message and as JSON.
            message = grpc.get_inference_statistics("embedder")
            self.assertEqual([(e.name, e.version, e.inference_stats.success.count)
                              for e in message.model_stats], after)
            as_json = grpc.get_inference_statistics("embedder/tokenizer", as_json=True)
            self.assertEqual([e["name"] for e in as_json["model_stats"]], ["embedder/tokenizer"])
            every = [e.name for e in grpc.get_inference_statistics().model_stats]
            self.assertEqual(every[every.index("embedder") + 1], "embedder/tokenizer")
            with self.assertRaises(InferenceServerException):
                self.client.get_inference_statistics("simple/tokenizer")
        finally:
            grpc.close()

    def test_errors(self):
        inputs = [httpclient.InferInput("INPUT0", [1, 16], "FP32")]
        inputs[0].set_data_from_numpy(np.ones((1, 16), dtype=np.float32))
        with self.assertRaises(InferenceServerException) as unknown:
            self.client.infer("nope", inputs)
        self.assertIn("nope", unknown.exception.message())
        self.assertEqual(unknown.exception.status(), "404")
        both = [httpclient.InferInput(name, [1, 16], "FP32") for name in ("INPUT0", "INPUT1")]
        for i in both:
            i.set_data_from_numpy(np.ones((1, 16), dtype=np.float32))
        with self.assertRaises(InferenceServerException) as wrong_type:
            self.client.infer("simple", both)  # FP32 where simple takes INT32
        self.assertIn("INPUT0", wrong_type.exception.message())
        self.assertEqual(wrong_type.exception.status(), "400")
        with self.assertRaises(InferenceServerException):
            self.client.get_model_metadata("nope")
        with self.assertRaises(InferenceServerException) as refused:
            self.client.load_model("simple")
        self.assertIn("--model-control-mode=explicit", refused.exception.message())
        self.assertTrue(self.client.is_server_live())


class TritonHttpClientExplicitModeTest(unittest.TestCase):
    def test_load_and_unload(self):
        repo = tempfile.mkdtemp(prefix="sluice_http_repo_")
        try:
            for name in ("simple", "identity"):
                shutil.copytree(os.path.join(ARGS.models, name), os.path.join(repo, name))
            server = SluiceServer(ARGS.server, repo,
                                  ["--model-control-mode=explicit", "--load-model=simple"])
            client = httpclient.InferenceServerClient(url=server.url)
            try:
                self.assertFalse(client.is_model_ready("identity"))
                client.load_model("identity")
                self.assertTrue(client.is_model_ready("identity"))
                client.unload_model("identity")
                self.assertFalse(client.is_model_ready("identity"))
                with self.assertRaises(InferenceServerException):
                    client.load_model("absent")
            finally:
                client.close()
                self.assertEqual(server.stop(), 0)
        finally:
            shutil.rmtree(repo)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--models", required=True)
    parser.add_argument("--source")
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
