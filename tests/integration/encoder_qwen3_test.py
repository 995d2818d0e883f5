#!/usr/bin/env python3
"""Qwen3 as an embedder in the encoder backend (issue 31), against transformers and
sentence-transformers, through the real server.

- Random small Qwen3 checkpoints written by transformers itself (tools/make_encoder_checkpoint.py
  --arch qwen3: Qwen3Model, save_pretrained) with a sentence-transformers lasttoken (+ Normalize)
  head: grouped-query attention (4 query heads on 2 and on 1 key/value heads), an explicit
  head_dim (16 where hidden / heads is 8), q/k/v/o biases, FP32 and BF16 weights, rope_theta 1e6;
  the same weights as Qwen3ForCausalLM saves them ("model." prefix, lm_head.weight beside);
  Qwen3ForSequenceClassification (3 labels: `logits` and `score` from `score` on the last non-pad
  token).
  Every output (last_hidden_state, embedding) is compared with transformers' eager attention in
  FP32 (and sentence-transformers' Pooling / Normalize for `embedding`) at 1e-4 relative, at
  several ragged mixes: requests of many lengths in flight together; rows padded to one length
  with masks of different lengths, an interior zero and leading zeros (queries that see no
  attended key); a sequence's answer the same whatever its batch-mates.
- Text in: a byte-level BPE tokenizer trained here with `tokenizers` whose post-processor appends
  <|endoftext|> (as Qwen3-Embedding's does), a SentenceTransformer saved with sentence-transformers'
  own save() with Qwen3-Embedding's instruction prompt; gRPC (prompt_name parameter) and HTTP
  (TEI /embed) against SentenceTransformer(folder).encode(..., prompt_name="query").
- `precision: bf16` (every CPU) and `int8` (where the CPU has AVX512-VNNI): cosine >= 0.999
  and >= 0.99 (encoder_precision_test.py's per-sentence bars) to FP32 transformers.
- Broken checkpoints (a missing tensor, a wrong shape, hidden_act "gelu", rope_scaling yarn,
  use_sliding_window true) fail their load naming the tensor or field; the others serve.

    encoder_qwen3_test.py --server build/server/sluice-server [--sanitizer-build]
"""
import json
import os
import shutil
import sys
import unittest
import urllib.request

import numpy as np
import torch
import transformers
import tritonclient.grpc as grpcclient

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "text"))
import encoder_precision_test as precision  # noqa: E402
import encoder_test_support as support  # noqa: E402
from encoder_reference_test import make_encoder_checkpoint  # noqa: E402

ARGS = None
TOLERANCE = 1e-4  # the bar; FP32 against FP32 gives ~1e-6 (printed at the end)
VOCAB = 100
MAX_SEQ = 160
COMMON = dict(arch="qwen3", hidden=32, heads=4, intermediate=64, max_positions=MAX_SEQ,
              pooling="lasttoken")
CHECKPOINTS = {
    # GQA 2:1, head_dim 16 != hidden / heads (8), Qwen3-Embedding's rope_theta, Normalize.
    "q3_gqa": dict(COMMON, layers=3, kv_heads=2, head_dim=16, rope_theta=1e6, normalize=True,
                   seed=21),
    # GQA 4:1 with q/k/v/o biases, BF16 weights.
    "q3_bias_bf16": dict(COMMON, layers=2, kv_heads=1, biases=True, dtype="bf16", seed=22),
    # Qwen3ForSequenceClassification: 3 labels, `score` on the last non-pad token (pad id 0).
    "q3_cls": dict(COMMON, layers=2, kv_heads=2, head_dim=16, classifier=3, seed=24),
}
# A copy of q3_gqa as Qwen3ForCausalLM writes it: same answers.
ALIASES = {"q3_causallm": "q3_gqa"}
INSTRUCTION = "Instruct: Given a web search query, retrieve relevant passages\nQuery:"
SENTENCES = ["what is the capital of France?", "Paris is the capital and largest city of France.",
             "x", "Café déjà vu — naïve résumé! 🚀",
             # Surrounding whitespace (ASCII and Unicode): SentenceTransformer's
             # Transformer.tokenize strips every text, and so does the server for a
             # sentence-transformers folder; byte-level BPE would give it tokens of its own.
             "  spaced out\u00a0\t", "\u3000ideographic space\n ",
             " ".join(["rotary embeddings rotate pairs of dimensions by an angle that grows with "
                       "the position"] * 3)]
WORST = {}


class Qwen3Reference:
    """transformers' Qwen3Model (eager attention) in FP32, and sentence-transformers' modules."""

    def __init__(self, folder, classifier=False):
        import sentence_transformers
        cls = (transformers.AutoModelForSequenceClassification if classifier
               else transformers.AutoModel)
        self.model = cls.from_pretrained(folder, dtype=torch.float32,
                                         attn_implementation="eager").eval()
        self.classifier = classifier
        with open(os.path.join(folder, "1_Pooling", "config.json")) as f:
            self.modules = [sentence_transformers.models.Pooling(**json.load(f))]
        with open(os.path.join(folder, "modules.json")) as f:
            if "Normalize" in f.read():
                self.modules.append(sentence_transformers.models.Normalize())

    @torch.no_grad()
    def __call__(self, ids, mask):
        ids_t = torch.tensor(ids, dtype=torch.long)
        mask_t = torch.tensor(mask, dtype=torch.long)
        out = {}
        base = self.model
        if self.classifier:
            logits = self.model(input_ids=ids_t, attention_mask=mask_t).logits
            out["logits"] = logits.numpy()
            out["score"] = torch.softmax(logits, dim=-1).numpy()
            base = self.model.model
        hidden = base(input_ids=ids_t, attention_mask=mask_t).last_hidden_state
        features = {"token_embeddings": hidden, "attention_mask": mask_t}
        for module in self.modules:
            features = module(features)
        out["last_hidden_state"] = hidden.numpy()
        out["embedding"] = features["sentence_embedding"].numpy()
        return out


BROKEN = {
    "q3_broken_missing": ["layers.1.self_attn.k_norm.weight", "[16]"],
    "q3_broken_shape": ["layers.0.self_attn.k_proj.weight", "[64,32]", "[32,32]"],
    "q3_broken_act": ["hidden_act", "'gelu'"],
    "q3_broken_rope": ["rope_scaling", "'yarn'"],
    "q3_broken_window": ["use_sliding_window"],
}


def build_text_model(root):
    """A byte-level BPE (Qwen's pre-tokenizer) appending <|endoftext|>, a random Qwen3Model over
    its vocabulary, lasttoken pooling + Normalize and Qwen3-Embedding's query prompt, written by
    sentence-transformers' save()."""
    import pipeline_reference_test as trained
    import sentence_transformers
    from tokenizers import processors
    texts = [c["text"] for c in [{"text": t} for t in trained.training_texts([])]]
    tok = trained.qwen(texts[:1500] + [INSTRUCTION])
    eot = tok.token_to_id("<|endoftext|>")
    tok.post_processor = processors.TemplateProcessing(
        single="$A <|endoftext|>", pair="$A <|endoftext|> $B <|endoftext|>",
        special_tokens=[("<|endoftext|>", eot)])
    raw = os.path.join(root, "q3_text_raw")
    make_encoder_checkpoint.write_checkpoint(
        raw, arch="qwen3", hidden=32, heads=4, kv_heads=2, head_dim=16, intermediate=64,
        layers=2, vocab=tok.get_vocab_size(with_added_tokens=True), max_positions=512, seed=23)
    tok.save(os.path.join(raw, "tokenizer.json"))
    with open(os.path.join(raw, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "pad_token": "<|endoftext|>",
                   "eos_token": "<|endoftext|>", "padding_side": "right",
                   "model_max_length": 512}, f)
    m = sentence_transformers.models
    transformer = m.Transformer(raw, max_seq_length=512)
    pooling = m.Pooling(32, pooling_mode="lasttoken")
    model = sentence_transformers.SentenceTransformer(
        modules=[transformer, pooling, m.Normalize()], device="cpu",
        prompts={"query": INSTRUCTION, "document": ""}, default_prompt_name=None)
    out = os.path.join(root, "q3_text", "1")
    model.save(out)
    support.write_config(os.path.join(root, "q3_text"), "q3_text")
    shutil.rmtree(raw)
    return out


def build_repository(root):
    support.write_checkpoints(root, CHECKPOINTS, make_encoder_checkpoint.write_checkpoint)

    def variant(name, source, mutate_tensors=None, mutate_config=None):
        support.write_variant(root, name, source, mutate_tensors, mutate_config)

    def causal_lm(tensors):
        renamed = {f"model.{k}": v for k, v in tensors.items()}
        renamed["lm_head.weight"] = torch.randn(VOCAB, 32)
        return renamed

    def causal_lm_config(config):
        config["architectures"] = ["Qwen3ForCausalLM"]

    variant("q3_causallm", "q3_gqa", causal_lm, causal_lm_config)
    for kind in ("bf16", "int8"):
        if precision.HAS[kind]:
            name = f"q3_{kind}"
            shutil.copytree(os.path.join(root, "q3_gqa", "1"), os.path.join(root, name, "1"))
            support.write_config(
                os.path.join(root, name), name,
                f'parameters {{ key: "precision" value: {{ string_value: "{kind}" }} }}\n')
    variant("q3_broken_missing", "q3_gqa", lambda t: t.pop("layers.1.self_attn.k_norm.weight"))
    variant("q3_broken_shape", "q3_gqa",
            lambda t: t.__setitem__("layers.0.self_attn.k_proj.weight", torch.zeros((64, 32))))
    variant("q3_broken_act", "q3_gqa", mutate_config=lambda c: c.__setitem__("hidden_act", "gelu"))
    variant("q3_broken_rope", "q3_gqa", mutate_config=lambda c: c.__setitem__(
        "rope_scaling", {"rope_type": "yarn", "factor": 4.0,
                         "original_max_position_embeddings": 32}))
    variant("q3_broken_window", "q3_gqa",
            mutate_config=lambda c: c.__setitem__("use_sliding_window", True))


class EncoderQwen3Test(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        os.environ["HF_HUB_OFFLINE"] = "1"

        def build(root):
            build_repository(root)
            return build_text_model(root)

        cls.text_dir = support.serve_repository(cls, ARGS.server, "sluice_qwen3_", build)

    @classmethod
    def tearDownClass(cls):
        print(f"[qwen3] largest relative errors: {WORST}", flush=True)
        support.stop_serving(cls)

    def reference(self, name):
        name = ALIASES.get(name, name)
        if name not in self.references:
            self.references[name] = Qwen3Reference(os.path.join(self.root, name, "1"),
                                                   bool(CHECKPOINTS[name].get("classifier")))
        return self.references[name]

    def check(self, name, result, ids, mask, outputs):
        support.check_result(self, name, result, mask, outputs, self.reference(name)(ids, mask),
                             TOLERANCE, WORST)

    def test_ragged_mixes_match_transformers(self):
        rng = np.random.default_rng(31)
        lengths = (1, 5, 40) if ARGS.sanitizer_build else (1, 3, 8, 9, 17, 40, 129, MAX_SEQ)
        for name in list(CHECKPOINTS) + list(ALIASES):
            with self.subTest(model=name):
                outputs = ["last_hidden_state", "embedding"]
                if CHECKPOINTS[ALIASES.get(name, name)].get("classifier"):
                    outputs += ["logits", "score"]
                requested = [grpcclient.InferRequestedOutput(o) for o in outputs]
                # Mix 1: one sequence per request, many lengths in flight together (the server
                # batches them as they come).
                for ids, mask, result in support.infer_single_sequences(
                        self, self.client, name, rng, 0, lengths, VOCAB, requested):
                    self.check(name, result, ids, mask, outputs)
                # Mix 2: rows padded to one length: masks of different lengths, an interior zero,
                # leading zeros (on the full-length row: its first queries see no attended key).
                width = 30 if ARGS.sanitizer_build else 70
                ids = rng.integers(0, VOCAB, size=(4, width))
                mask = np.zeros_like(ids)
                for row, length in enumerate((width, 12, 1, width - 25)):
                    mask[row, :length] = 1
                mask[1, 4] = 0
                mask[0, :3] = 0
                # Trailing padding holds the pad id, as a tokenizer pads (the score head of
                # transformers finds the last token by id, not by mask).
                for row, length in enumerate((width, 12, 1, width - 25)):
                    ids[row, length:] = 0
                result = self.client.infer(name, support.int64_inputs(ids, mask),
                                           outputs=requested)
                self.check(name, result, ids, mask, outputs)
                # A sequence's answer does not depend on its batch-mates.
                alone = self.client.infer(name, support.int64_inputs(ids[3:4, :width - 25],
                                                                     mask[3:4, :width - 25]),
                                          outputs=requested)
                np.testing.assert_array_equal(alone.as_numpy("embedding")[0],
                                              result.as_numpy("embedding")[3])

    def test_text_with_instruction_prompt_matches_sentence_transformers(self):
        import sentence_transformers
        st = sentence_transformers.SentenceTransformer(self.text_dir, device="cpu")
        for prompt_name in (None, "query"):
            want = st.encode(SENTENCES, prompt_name=prompt_name, convert_to_numpy=True)
            parameters = {"prompt_name": prompt_name} if prompt_name else None
            array = np.array([[s.encode("utf-8")] for s in SENTENCES], dtype=np.object_)
            tensor = grpcclient.InferInput("text", list(array.shape), "BYTES")
            tensor.set_data_from_numpy(array)
            got = self.client.infer("q3_text", [tensor], parameters=parameters,
                                    outputs=[grpcclient.InferRequestedOutput("embedding")])
            err = support.rel_err(got.as_numpy("embedding"), want)
            if err >= TOLERANCE:
                for i, sentence in enumerate(SENTENCES):
                    print(f"{prompt_name} {sentence[:30]!r}: "
                          f"{support.rel_err(got.as_numpy('embedding')[i], want[i]):.2e}",
                          flush=True)
                print(st.tokenize([(INSTRUCTION if prompt_name else "") + SENTENCES[0]]),
                      flush=True)
            WORST[f"q3_text.grpc.{prompt_name}"] = err
            self.assertLess(err, TOLERANCE, f"grpc prompt {prompt_name}")
            body = {"model": "q3_text", "inputs": SENTENCES}
            if prompt_name:
                body["prompt_name"] = prompt_name
            request = urllib.request.Request(f"http://{self.server.url}/embed",
                                             data=json.dumps(body).encode(),
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=120) as response:
                http = np.array(json.loads(response.read()), dtype=np.float32)
            err = support.rel_err(http, want)
            WORST[f"q3_text.http.{prompt_name}"] = err
            self.assertLess(err, TOLERANCE, f"http /embed prompt {prompt_name}")
        # The instruction reached the tokenizer: with and without it the answers differ.
        self.assertGreater(support.rel_err(st.encode(SENTENCES, prompt_name="query"),
                                           st.encode(SENTENCES)), 1e-2)

    def test_precision_bf16_and_int8_keep_the_embeddings(self):
        for kind, bar in (("bf16", precision.BF16_MIN_COSINE),
                          ("int8", precision.BARS["minilm_int8"][1])):
            with self.subTest(precision=kind):
                if not precision.HAS[kind]:
                    self.skipTest(f"this CPU cannot run precision: {kind}")
                self.check_precision(kind, bar)

    def check_precision(self, kind, bar):
        rng = np.random.default_rng(36)
        ids = rng.integers(0, VOCAB, size=(4, 100))
        mask = np.zeros_like(ids)
        for row, length in enumerate((100, 40, 9, 2)):
            mask[row, :length] = 1
        got = self.client.infer(f"q3_{kind}", support.int64_inputs(ids, mask),
                                outputs=[grpcclient.InferRequestedOutput("embedding")])
        got = got.as_numpy("embedding")
        want = self.reference("q3_gqa")(ids, mask)["embedding"]
        cosines = support.row_cosines(got, want)
        WORST[f"q3_{kind}.min_cosine"] = float(np.min(cosines))
        self.assertGreater(float(np.min(cosines)), bar, cosines)

    def test_broken_checkpoints_fail_alone(self):
        support.assert_broken_fail_alone(self, self.client, BROKEN,
                                         list(CHECKPOINTS) + list(ALIASES) + ["q3_text"])


def main():
    global ARGS
    ARGS, rest = support.parse_args("the server is an ASan/TSan build: fewer and shorter sequences")
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
