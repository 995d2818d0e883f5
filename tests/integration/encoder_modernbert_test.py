#!/usr/bin/env python3
"""ModernBERT in the encoder backend (issue 31), against transformers, through the real server.

- Random small ModernBERT checkpoints written by transformers itself (tools/make_encoder_checkpoint.py
  --arch modernbert: ModernBertModel and ModernBertForSequenceClassification, save_pretrained),
  FP32 and BF16 weights, with and without the optional biases, cls and mean classifier pooling, a
  sentence-transformers mean + Normalize head, one label (a reranker) and three (a classifier with
  id2label), served from a temporary model repository whose configs say only name, backend and
  max_batch_size. Every output (last_hidden_state, embedding, logits, score) is compared with
  transformers' eager attention in FP32 (and sentence-transformers' Pooling / Normalize modules for
  `embedding`) at several ragged mixes: requests of many lengths in flight together, most longer
  than the local window (16: the sliding-window layers attend to 8 tokens each side), up to 192
  tokens; rows padded to one length with masks of different lengths, an interior zero and an
  interior run of zeros longer than the window (queries that see no attended key); and a long
  context: 4,096 tokens through ModernBERT's own window of 128.
- `precision: bf16` (every CPU; its arithmetic the CPU's: encoder_precision_test.py): the FP32
  sentence embedder with BF16 weights keeps its embeddings (cosine similarity >= 0.999 to transformers' FP32).
- Broken checkpoints (a missing tensor, a wrong shape, an unknown hidden_activation, an unknown
  classifier_pooling) fail their load with a message naming the tensor or field; the others serve.

Shares encoder_test_support.py's helpers (repository folders, serving, requests, output checks).
"""
import json
import os
import shutil
import sys
import unittest

import numpy as np
import torch
import transformers
import tritonclient.grpc as grpcclient

sys.path.insert(0, os.path.dirname(__file__))
import encoder_precision_test as precision  # noqa: E402
import encoder_test_support as support  # noqa: E402
from encoder_reference_test import make_encoder_checkpoint  # noqa: E402

ARGS = None
# The bar. FP32 against FP32 gives ~1e-6 (printed at the end).
TOLERANCE = 1e-4
VOCAB = 100
MAX_SEQ = 192
WINDOW = 16
COMMON = dict(arch="modernbert", layers=4, local_attention=WINDOW, max_positions=MAX_SEQ)
CHECKPOINTS = {
    # gte-modernbert / nomic-modernbert-embed's shape of head: mean pooling + Normalize.
    "mb_st": dict(COMMON, pooling="mean", normalize=True, seed=11),
    # gte-reranker-modernbert's: one label, CLS pooling, no biases, BF16 weights.
    "mb_rerank": dict(COMMON, classifier=1, dtype="bf16", seed=12),
    # A classifier with every optional bias, mean pooling, tanh GELU, global every 2nd layer.
    "mb_cls": dict(COMMON, classifier=3, biases=True, classifier_pooling="mean",
                   act="gelu_pytorch_tanh", global_every=2, pooling="cls", seed=13),
}
WORST = {}
# A long-context checkpoint: ModernBERT's real window (128) and positions (8,192), two layers (one
# global, one local), asked for 4,096 tokens (the released models' 8,192 matched at 4e-7 by hand;
# transformers' eager reference needs ~4x the memory there).
LONG = dict(arch="modernbert", layers=2, local_attention=128, global_every=2, max_positions=8192,
            pooling="mean", normalize=True, seed=14, vocab=1000)
LONG_SEQ = 4096


class ModernBertReference:
    """transformers' ModernBERT (eager attention) in FP32, and sentence-transformers' modules."""

    def __init__(self, folder, classifier):
        cls = (transformers.AutoModelForSequenceClassification if classifier
               else transformers.AutoModel)
        self.model = cls.from_pretrained(folder, torch_dtype=torch.float32,
                                         attn_implementation="eager").eval()
        self.classifier = classifier
        modules_path = os.path.join(folder, "modules.json")
        self.modules = []
        if os.path.exists(modules_path):
            import sentence_transformers
            with open(modules_path) as f:
                types = [m["type"] for m in json.load(f)]
            if "sentence_transformers.models.Pooling" in types:
                with open(os.path.join(folder, "1_Pooling", "config.json")) as f:
                    self.modules.append(sentence_transformers.models.Pooling(**json.load(f)))
            if "sentence_transformers.models.Normalize" in types:
                self.modules.append(sentence_transformers.models.Normalize())

    @torch.no_grad()
    def __call__(self, ids, mask):
        ids_t = torch.tensor(ids, dtype=torch.long)
        mask_t = torch.tensor(mask, dtype=torch.long)
        out = {}
        if self.classifier:
            logits = self.model(input_ids=ids_t, attention_mask=mask_t).logits
            out["logits"] = logits.numpy()
            out["score"] = (torch.sigmoid(logits) if logits.shape[-1] == 1
                            else torch.softmax(logits, dim=-1)).numpy()
            # ModernBertModel's own output: hidden_states[-1] is before final_norm.
            base = self.model.model
        else:
            base = self.model
        hidden = base(input_ids=ids_t, attention_mask=mask_t).last_hidden_state
        out["last_hidden_state"] = hidden.numpy()
        if self.modules:
            features = {"token_embeddings": hidden, "attention_mask": mask_t}
            for module in self.modules:
                features = module(features)
            out["embedding"] = features["sentence_embedding"].numpy()
        else:
            out["embedding"] = out["last_hidden_state"][:, 0, :]
        return out


BROKEN = {
    "mb_broken_missing": ["layers.2.mlp.Wi.weight", "[128,32]"],
    "mb_broken_shape": ["layers.1.attn.Wqkv.weight", "[64,32]", "[96,32]"],
    "mb_broken_act": ["hidden_activation", "'swish'"],
    "mb_broken_pooling": ["classifier_pooling", "'max'"],
    "mb_broken_head": ["head.norm.weight", "[32]"],
}


def build_repository(root):
    support.write_checkpoints(root, CHECKPOINTS, make_encoder_checkpoint.write_checkpoint)

    def variant(name, source, mutate_tensors=None, mutate_config=None):
        support.write_variant(root, name, source, mutate_tensors, mutate_config)

    support.write_config(os.path.join(root, "mb_long"), "mb_long")
    make_encoder_checkpoint.write_checkpoint(os.path.join(root, "mb_long", "1"), **LONG)
    if precision.HAS["bf16"]:
        # The same FP32 checkpoint computed with `precision: bf16` (the layers' GEMMs in BF16).
        shutil.copytree(os.path.join(root, "mb_st", "1"), os.path.join(root, "mb_st_bf16", "1"))
        support.write_config(os.path.join(root, "mb_st_bf16"), "mb_st_bf16",
                             'parameters { key: "precision" value: { string_value: "bf16" } }\n')
    variant("mb_broken_missing", "mb_st", lambda t: t.pop("layers.2.mlp.Wi.weight"))
    variant("mb_broken_shape", "mb_st",
            lambda t: t.__setitem__("layers.1.attn.Wqkv.weight", torch.zeros((64, 32))))
    variant("mb_broken_act", "mb_st",
            mutate_config=lambda c: c.__setitem__("hidden_activation", "swish"))
    variant("mb_broken_pooling", "mb_cls",
            mutate_config=lambda c: c.__setitem__("classifier_pooling", "max"))
    variant("mb_broken_head", "mb_rerank", lambda t: t.pop("head.norm.weight"))


class EncoderModernBertTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        support.serve_repository(cls, ARGS.server, "sluice_modernbert_", build_repository)

    @classmethod
    def tearDownClass(cls):
        print(f"[modernbert] largest relative errors: {WORST}", flush=True)
        support.stop_serving(cls)

    def reference(self, name):
        if name not in self.references:
            folder = os.path.join(self.root, name, "1")
            options = LONG if name == "mb_long" else CHECKPOINTS[name]
            self.references[name] = ModernBertReference(folder, bool(options.get("classifier")))
        return self.references[name]

    def check(self, name, result, ids, mask, outputs):
        support.check_result(self, name, result, mask, outputs, self.reference(name)(ids, mask),
                             TOLERANCE, WORST)

    def test_outputs(self):
        for name, options in CHECKPOINTS.items():
            with self.subTest(model=name):
                config = self.client.get_model_config(name, as_json=True)["config"]
                outputs = {o["name"] for o in config["output"]}
                expected = {"last_hidden_state", "embedding"}
                if options.get("classifier"):
                    expected.update({"logits", "score"})
                self.assertEqual(outputs, expected)

    def test_ragged_mixes_match_transformers(self):
        rng = np.random.default_rng(31)
        for name in CHECKPOINTS:
            with self.subTest(model=name):
                config = self.client.get_model_config(name, as_json=True)["config"]
                outputs = [o["name"] for o in config["output"]]
                requested = [grpcclient.InferRequestedOutput(o) for o in outputs]
                # Mix 1: one sequence per request, lengths around and far beyond the window, in
                # flight together.
                for ids, mask, result in support.infer_single_sequences(
                        self, self.client, name, rng, 3, (1, 3, 8, 9, 17, 40, 100, MAX_SEQ),
                        VOCAB, requested):
                    self.check(name, result, ids, mask, outputs)
                # Mix 2: rows padded to one length: masks of different lengths, an interior zero,
                # and a run of zeros longer than the window (queries whose window sees no key).
                ids = rng.integers(3, VOCAB, size=(4, 70))
                mask = np.zeros_like(ids)
                for row, length in enumerate((70, 12, 1, 45)):
                    mask[row, :length] = 1
                mask[1, 4] = 0
                mask[0, 10:40] = 0
                result = self.client.infer(name, support.int64_inputs(ids, mask),
                                           outputs=requested)
                self.check(name, result, ids, mask, outputs)

    def test_long_context_matches_transformers(self):
        rng = np.random.default_rng(8192)
        ids = rng.integers(3, LONG["vocab"], size=(2, LONG_SEQ))
        mask = np.ones_like(ids)
        mask[1, 1000:] = 0  # a 1,000-token row padded to 4,096 in the same request
        requested = [grpcclient.InferRequestedOutput(o) for o in ("last_hidden_state", "embedding")]
        result = self.client.infer("mb_long", support.int64_inputs(ids, mask), outputs=requested)
        self.check("mb_long", result, ids, mask, ["last_hidden_state", "embedding"])

    def test_precision_bf16_keeps_the_embeddings(self):
        rng = np.random.default_rng(36)
        ids = rng.integers(3, VOCAB, size=(6, MAX_SEQ))
        mask = np.zeros_like(ids)
        for row, length in enumerate((MAX_SEQ, 100, 40, 17, 9, 2)):
            mask[row, :length] = 1
        requested = [grpcclient.InferRequestedOutput("embedding")]
        got = self.client.infer("mb_st_bf16", support.int64_inputs(ids, mask),
                                outputs=requested).as_numpy("embedding")
        want = self.reference("mb_st")(ids, mask)["embedding"]
        cosines = support.row_cosines(got, want)
        WORST["mb_st_bf16.min_cosine"] = float(np.min(cosines))
        self.assertGreater(float(np.min(cosines)), precision.BF16_MIN_COSINE, cosines)

    def test_broken_checkpoints_fail_alone(self):
        served = (list(CHECKPOINTS) + ["mb_long"] +
                  (["mb_st_bf16"] if precision.HAS["bf16"] else []))
        support.assert_broken_fail_alone(self, self.client, BROKEN, served)


def main():
    global ARGS
    ARGS, rest = support.parse_args("the server is an ASan/TSan build (accepted for symmetry)")
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
