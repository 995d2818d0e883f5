"""What the encoder tests against transformers share (encoder_reference_test.py,
encoder_modernbert_test.py, encoder_qwen3_test.py; encoder_engine_reference_test.py and
text_embedding_test.py take some through encoder_reference_test): the model repository's folders,
the served repository's life, the requests, and the comparisons with a reference.

Not a test itself; it imports only what every one of those tests imports.
"""
import argparse
import json
import os
import shutil
import tempfile
import time

import numpy as np
import safetensors.torch
import torch
import tritonclient.grpc as grpcclient

from sluice_server import SluiceServer

# ---- The model repository ----


def write_config(folder, name, extra=""):
    """folder/config.pbtxt of an encoder model with only name, backend, max_batch_size (8) and
    dynamic batching, then `extra` (pbtxt lines)."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.pbtxt"), "w") as f:
        f.write(f'name: "{name}"\nbackend: "encoder"\nmax_batch_size: 8\n'
                f"dynamic_batching {{ max_queue_delay_microseconds: 20000 }}\n{extra}")


def write_checkpoints(root, checkpoints, write_checkpoint, **common):
    """One model per `checkpoints` entry (name -> tools/make_encoder_checkpoint.py options, plus
    `common`): root/name/config.pbtxt and version 1 written by `write_checkpoint`."""
    for name, options in checkpoints.items():
        write_config(os.path.join(root, name), name)
        write_checkpoint(os.path.join(root, name, "1"), **common, **options)


def write_variant(root, name, source, mutate_tensors=None, mutate_config=None, extra=""):
    """Model `name`: a copy of model `source`'s version 1 with its own config.pbtxt (`extra` added),
    its tensors passed through mutate_tensors({name: tensor}) (which edits the dict in place or
    returns a new one) and its config.json through mutate_config(dict) (in place). For the broken
    checkpoints whose loads must fail, and for the same weights in another layout."""
    base = os.path.join(root, source, "1")
    folder = os.path.join(root, name, "1")
    shutil.copytree(base, folder)
    write_config(os.path.join(root, name), name, extra)
    if mutate_tensors:
        # torch's reader: numpy has no bfloat16.
        tensors = dict(safetensors.torch.load_file(os.path.join(base, "model.safetensors")))
        changed = mutate_tensors(tensors)
        tensors = changed if isinstance(changed, dict) else tensors
        safetensors.torch.save_file(tensors, os.path.join(folder, "model.safetensors"))
    if mutate_config:
        path = os.path.join(folder, "config.json")
        with open(path) as f:
            config = json.load(f)
        mutate_config(config)
        with open(path, "w") as f:
            json.dump(config, f)


# ---- The served repository ----


def serve_repository(cls, server, prefix, build):
    """For a TestCase's setUpClass: builds a repository with build(root) in a new temporary folder
    (cls.root), serves it with the sluice-server binary `server` (cls.server, 120 s to start: the
    checkpoints load in parallel) and opens a gRPC client (cls.client); cls.references starts
    empty (the tests' cache of reference models). Returns what `build` returned."""
    cls.root = tempfile.mkdtemp(prefix=prefix)
    built = build(cls.root)
    cls.server = SluiceServer(server, cls.root, timeout_s=120)
    cls.client = grpcclient.InferenceServerClient(f"127.0.0.1:{cls.server.grpc_port}")
    cls.references = {}
    return built


def stop_serving(cls):
    """For tearDownClass: closes the client, stops the server, removes the repository; fails when
    the server did not exit 0 (a sanitizer's report, a crash, a hang at shutdown)."""
    cls.client.close()
    code = cls.server.stop()
    shutil.rmtree(cls.root, ignore_errors=True)
    assert code == 0, f"sluice-server exited with {code}"


def parse_args(sanitizer_help):
    """The tests' command line (--server, --sanitizer-build), the rest left for unittest; torch
    held to one thread (the references share the machine with the server and other tests)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--sanitizer-build", action="store_true", help=sanitizer_help)
    args, rest = parser.parse_known_args()
    torch.set_num_threads(1)
    return args, rest


# ---- Requests ----


def int64_inputs(ids, mask):
    """input_ids and attention_mask (left out where None) as INT64 tensors."""
    inputs = []
    for input_name, values in (("input_ids", ids), ("attention_mask", mask)):
        if values is None:
            continue
        array = np.asarray(values, dtype=np.int64)
        tensor = grpcclient.InferInput(input_name, list(array.shape), "INT64")
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


def infer_in_flight(test, client, name, requests, deadline):
    """Sends every (inputs, requested outputs) of `requests` to model `name` at once (async: the
    server batches them as they come) and returns their results in order; fails `test` on an
    error, or on an answer missing at `deadline` (time.monotonic())."""
    boxes = []
    for inputs, requested in requests:
        box = {}
        client.async_infer(name, inputs,
                           lambda result, error, box=box: box.update(r=result, e=error),
                           outputs=requested)
        boxes.append(box)
    for box in boxes:
        while "r" not in box and time.monotonic() < deadline:
            time.sleep(0.005)
        test.assertIn("r", box, f"{name}: no answer")
        test.assertIsNone(box.get("e"), f"{name}: {box.get('e')}")
    return [box["r"] for box in boxes]


def infer_single_sequences(test, client, name, rng, low, lengths, vocab, requested):
    """One request per length of `lengths`, each one sequence of ids drawn by `rng` from [low,
    vocab), all in flight together (infer_in_flight, 120 s); every other request (odd lengths
    keep it) leaves out its attention_mask, which is optional and all ones. Returns (ids, mask,
    result) per request, the mask as the reference takes it."""
    sent = []
    for length in lengths:
        ids = rng.integers(low, vocab, size=(1, length))
        sent.append((length, ids, np.ones_like(ids)))
    results = infer_in_flight(
        test, client, name,
        [(int64_inputs(ids, mask if length % 2 else None), requested)
         for length, ids, mask in sent], time.monotonic() + 120)
    return [(ids, mask, result) for (_, ids, mask), result in zip(sent, results)]


# ---- Comparisons ----


def rel_err(got, want):
    """max |got - want| / max |want| (want's scale floored at 1e-6)."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, f"shape {got.shape} != reference {want.shape}"
    return float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-6))


def packed_lengths(mask):
    """Each row's length up to its last attended token (what the server computes of the row)."""
    lengths = []
    for row in mask:
        ones = np.nonzero(row)[0]
        lengths.append(int(ones[-1]) + 1)
    return lengths


def assert_outputs_match(test, label, got, want, lengths, worst, tolerance):
    """Every output in `got` ({name: array}) against the reference's `want` at `tolerance` relative
    error; last_hidden_state row by row over its real tokens, its trailing padding zeros (not
    computed). Records the largest error per output in `worst`."""
    for output, value in got.items():
        if output == "last_hidden_state":
            test.assertEqual(value.shape, want[output].shape, label)
            for row, length in enumerate(lengths):
                err = rel_err(value[row, :length], want[output][row, :length])
                test.assertLess(err, tolerance, f"{label} {output} row {row} len {length}")
                worst[output] = max(worst.get(output, 0.0), err)
                test.assertFalse(np.any(value[row, length:]), f"{label}: padding rows not zero")
        else:
            err = rel_err(value, want[output])
            test.assertLess(err, tolerance, f"{label} {output}: relative error {err}")
            worst[output] = max(worst.get(output, 0.0), err)


def check_result(test, name, result, mask, outputs, want, tolerance, worst):
    """A served `result`'s `outputs` against the reference's `want` for a request with `mask`
    (assert_outputs_match); the largest error per "name.output" kept in `worst`."""
    got = {output: result.as_numpy(output) for output in outputs}
    errors = {}
    assert_outputs_match(test, name, got, want, packed_lengths(mask), errors, tolerance)
    for output, err in errors.items():
        worst[f"{name}.{output}"] = max(worst.get(f"{name}.{output}", 0.0), err)


def row_cosines(got, want):
    """The cosine similarity of each row of `got` with the same row of `want`."""
    return np.sum(got * want, axis=1) / (np.linalg.norm(got, axis=1) *
                                         np.linalg.norm(want, axis=1))


def assert_broken_fail_alone(test, client, broken, served):
    """Each model of `broken` (name -> substrings its reason must hold) is UNAVAILABLE with a
    reason naming them, and every model of `served` is ready all the same."""
    index = client.get_model_repository_index(as_json=True)["models"]
    by_name = {m["name"]: m for m in index}
    for name, needles in broken.items():
        with test.subTest(model=name):
            entry = by_name[name]
            test.assertEqual(entry.get("state"), "UNAVAILABLE", entry)
            for needle in needles:
                test.assertIn(needle, entry.get("reason", ""))
    for name in served:
        test.assertTrue(client.is_model_ready(name), name)
