#!/usr/bin/env python3
"""Byte-level BPE and SentencePiece Unigram tokenizers through the real server (issue 30).

Two encoder folders, each a random transformers checkpoint (tools/make_encoder_checkpoint.py,
mean pooling) with a tokenizer.json that `tokenizers`' own trainers build here
(text/pipeline_reference_test.py): a RoBERTa-family one (model_type roberta) with a byte-level
BPE as RoBERTa configures it, and an XLM-R-family one (model_type xlm-roberta) with a Unigram +
Precompiled + Metaspace tokenizer as XLM-R configures it. Text goes in over HTTP
(`/v1/embeddings`) and gRPC (the BYTES input `text`); the embeddings must equal transformers'
on the ids `tokenizers` gives for the same text (1e-4 relative), a text longer than the limit
truncated as the tokenizer.json's truncation block says, or from the left with the
truncation_direction request parameter (truncate false refuses it); TEI's /tokenize gives
`tokenizers`' ids and special tokens.

    text_tokenizers_server_test.py --server build/server/sluice-server
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import unittest
import urllib.request

import numpy as np
import tokenizers
import torch
import transformers
import tritonclient.grpc as grpcclient

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.join(ROOT, "text"))
sys.path.insert(0, HERE)
import make_encoder_checkpoint  # noqa: E402
import pipeline_reference_test as trained  # noqa: E402
from sluice_server import SluiceServer  # noqa: E402

ARGS = None
TOLERANCE = 1e-4
MAX_TOKENS = 64
TEXTS = [
    "A man is eating food.",
    "Café déjà vu — naïve résumé! 東京タワー 🚀 ok?",
    "  two  spaces, tabs\tand\r\nCRLF; <mask> in the middle",
    "ภาษาไทย العربية हिन्दी 👩‍👩‍👧‍👦 🇯🇵",
    "x",
    " ".join(["tokenization"] * 80),  # longer than the limit: truncated
]


def training_texts():
    corpus = [{"text": t} for t in trained.training_texts([])]
    return [c["text"] for c in corpus]


def write_model(root, name, tokenizer, model_type, seed):
    folder = os.path.join(root, name, "1")
    vocab = tokenizer.get_vocab_size(with_added_tokens=True)
    make_encoder_checkpoint.write_checkpoint(folder, arch="roberta", vocab=vocab,
                                             max_positions=MAX_TOKENS, pooling="mean", seed=seed)
    config_path = os.path.join(folder, "config.json")
    with open(config_path) as f:
        config = json.load(f)
    config["model_type"] = model_type
    with open(config_path, "w") as f:
        json.dump(config, f)
    data = json.loads(tokenizer.to_str())
    data["truncation"] = {"direction": "Right", "max_length": MAX_TOKENS,
                          "strategy": "LongestFirst", "stride": 0}
    data["padding"] = None
    with open(os.path.join(folder, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False)
    with open(os.path.join(root, name, "config.pbtxt"), "w") as f:
        f.write(f'name: "{name}"\nbackend: "encoder"\nmax_batch_size: 8\n')
    return folder


def reference(folder, texts):
    """transformers' mean-pooled embeddings on the ids `tokenizers` gives for each text stripped of
    surrounding whitespace, as sentence-transformers' Transformer module strips it (the folder is
    a sentence-transformers one: modules.json; the whitespace inside a text still reaches the
    tokenizer, and TEI's /tokenize below shows leading spaces' own tokens)."""
    tok = tokenizers.Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    model = transformers.AutoModel.from_pretrained(folder).eval()
    out = []
    for text in texts:
        ids = tok.encode(text.strip()).ids
        with torch.no_grad():
            hidden = model(input_ids=torch.tensor([ids]),
                           attention_mask=torch.ones(1, len(ids), dtype=torch.long))
        out.append(hidden.last_hidden_state[0].mean(0).numpy())
    return np.stack(out), model.config.model_type


def rel_err(got, want):
    return float(np.max(np.abs(got - want)) / max(1e-12, float(np.max(np.abs(want)))))


class TokenizersThroughServerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        os.environ["HF_HUB_OFFLINE"] = "1"
        cls.root = tempfile.mkdtemp(prefix="sluice_tokenizers_")
        texts = training_texts()
        cls.folders = {
            "roberta_bpe": write_model(cls.root, "roberta_bpe", trained.roberta(texts),
                                       "roberta", 3),
            "xlmr_unigram": write_model(cls.root, "xlmr_unigram", trained.xlmr(texts[-3000:]),
                                        "xlm-roberta", 5),
        }
        cls.server = SluiceServer(ARGS.server, cls.root, timeout_s=120)
        cls.grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{cls.server.grpc_port}")

    @classmethod
    def tearDownClass(cls):
        cls.grpc.close()
        code = cls.server.stop()
        shutil.rmtree(cls.root, ignore_errors=True)
        assert code == 0, f"sluice-server exited with {code}"

    def http_embeddings(self, model, texts):
        body = json.dumps({"model": model, "input": texts}).encode()
        request = urllib.request.Request(f"http://{self.server.url}/v1/embeddings", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as response:
            answer = json.loads(response.read())
        return np.array([d["embedding"] for d in answer["data"]], dtype=np.float32)

    def grpc_embeddings(self, model, texts):
        array = np.array([[t.encode("utf-8")] for t in texts], dtype=np.object_)
        tensor = grpcclient.InferInput("text", list(array.shape), "BYTES")
        tensor.set_data_from_numpy(array)
        result = self.grpc.infer(model, [tensor],
                                 outputs=[grpcclient.InferRequestedOutput("embedding")])
        return result.as_numpy("embedding")

    def check(self, model, model_type):
        want, loaded_type = reference(self.folders[model], TEXTS)
        self.assertEqual(loaded_type, model_type)
        for route, got in (("http /v1/embeddings", self.http_embeddings(model, TEXTS)),
                           ("grpc text", self.grpc_embeddings(model, TEXTS))):
            self.assertEqual(got.shape, want.shape, route)
            for i, text in enumerate(TEXTS):
                err = rel_err(got[i], want[i])
                self.assertLess(err, TOLERANCE, f"{model} {route}: {text[:40]!r}: {err:.2e}")

    def test_roberta_byte_level_bpe(self):
        self.check("roberta_bpe", "roberta")

    def test_xlmr_unigram_precompiled(self):
        self.check("xlmr_unigram", "xlm-roberta")

    def test_truncation_parameters(self):
        """The KServe request parameters: truncation_direction Left keeps the end of the text
        (transformers on the ids `tokenizers` gives when truncating from the left); truncate
        false refuses the over-long text."""
        from tritonclient.utils import InferenceServerException
        text = " ".join(f"entry {i} of a long list" for i in range(60))
        array = np.array([[text.encode("utf-8")]], dtype=np.object_)
        for model, folder in self.folders.items():
            with self.subTest(model=model):
                tok = tokenizers.Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
                tok.enable_truncation(MAX_TOKENS, direction="left")
                ids = tok.encode(text).ids
                self.assertEqual(len(ids), MAX_TOKENS)
                network = transformers.AutoModel.from_pretrained(folder).eval()
                with torch.no_grad():
                    want = network(input_ids=torch.tensor([ids]),
                                   attention_mask=torch.ones(1, len(ids), dtype=torch.long))
                want = want.last_hidden_state[0].mean(0).numpy()
                tensor = grpcclient.InferInput("text", [1, 1], "BYTES")
                tensor.set_data_from_numpy(array)
                result = self.grpc.infer(model, [tensor], parameters={"truncation_direction": "Left"},
                                         outputs=[grpcclient.InferRequestedOutput("embedding")])
                self.assertLess(rel_err(result.as_numpy("embedding")[0], want), TOLERANCE)
                with self.assertRaises(InferenceServerException) as caught:
                    self.grpc.infer(model, [tensor], parameters={"truncate": False})
                self.assertIn(f"more than the limit of {MAX_TOKENS}", str(caught.exception))

    def tei_tokenize(self, model, inputs):
        body = json.dumps({"model": model, "inputs": inputs}).encode()
        request = urllib.request.Request(f"http://{self.server.url}/tokenize", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as response:
            return json.loads(response.read())

    def test_tei_tokenize(self):
        """TEI's /tokenize on the general pipeline (byte-level BPE; Unigram with Precompiled and
        Metaspace): `tokenizers`' ids and special tokens, untruncated. Offsets are exact where
        given: the special tokens have none (as in TEI), and neither do the tokens of these
        normalizers and pre-tokenizers (sluice tracks alignments only through the BERT pipeline;
        docs/operations.md), except an added token found in the raw text as it is."""
        texts = TEXTS + ["a <mask>b</s> c", "<s>x"]
        for model, folder in self.folders.items():
            with self.subTest(model=model):
                tok = tokenizers.Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
                tok.no_truncation()
                answer = self.tei_tokenize(model, texts)
                self.assertEqual(len(answer), len(texts))
                given = 0
                for text, tokens in zip(texts, answer):
                    e = tok.encode(text)
                    self.assertEqual([t["id"] for t in tokens], e.ids, text)
                    self.assertEqual([t["special"] for t in tokens],
                                     [bool(m) for m in e.special_tokens_mask], text)
                    sizes = [0]
                    for c in text:
                        sizes.append(sizes[-1] + len(c.encode("utf-8")))
                    for t, token, (start, stop), special in zip(tokens, e.tokens, e.offsets,
                                                                e.special_tokens_mask):
                        if special:
                            self.assertEqual((t["text"], t["start"], t["stop"]),
                                             (token, None, None))
                        elif t["start"] is not None:
                            given += 1
                            self.assertEqual((t["start"], t["stop"]), (sizes[start], sizes[stop]))
                            self.assertEqual(t["text"], text.encode()[t["start"]:t["stop"]].decode())
                        else:
                            self.assertIsNone(t["stop"])
                self.assertGreater(given, 0)  # "</s>" and "<s>" in the text


def main():
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
