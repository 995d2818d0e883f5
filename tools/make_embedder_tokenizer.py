#!/usr/bin/env python3
"""make_embedder_tokenizer.py - the bundled `embedder` model's vocabulary and tokenizer.json.

    tools/make_embedder_tokenizer.py --out DIR [--vocab-size 4096] [--max-length 128]

Writes DIR/vocab.txt and DIR/tokenizer.json: an uncased BERT WordPiece tokenizer in the layout of
all-MiniLM-L6-v2's (BertNormalizer, BertPreTokenizer, TemplateProcessing [CLS] $A [SEP] /
[CLS] $A [SEP] $B:1 [SEP]:1, truncation LongestFirst at --max-length), with a small generated
vocabulary: the five special tokens, every printable ASCII character alone and as a "##"
continuation (so no ASCII word is ever [UNK]), the letters of a few other scripts, a list of
frequent English words, and then deterministic subword pieces until --vocab-size. The same
arguments give the same bytes on every machine (a fixed-seed generator, JSON in insertion
order). Python's standard library only: the model build needs no PyPI package.
text/reference_test.py --generate-embedder checks that Hugging Face's `tokenizers` loads the
output and gives the ids sluice gives.
"""

import argparse
import json
import os
import random

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = (
    "the of and to in a is that for it as was with be by on not he this are or his from at which "
    "but have an they you were her she there been one all we their has would when if more no "
    "other its what so who can about into some than them these may only time new after first "
    "also two could like over such most made then any years world where way many before through "
    "well much between under those being now while however three both each because same during "
    "people work state year day use used using model models server request requests batch token "
    "tokens text texts sentence sentences search query queries document documents vector vectors "
    "embedding embeddings similarity inference latency throughput queue encoder transformer "
    "attention layer layers hidden weights input output data network service cluster memory "
    "thread threads device kernel cache graph hello good great small large fast slow question "
    "answer find found know think make take see come give look want tell ask seem feel try leave "
    "call city country house water room mother father child children school family student "
    "because although system systems program problem number part place case week company "
    "government group hand point night home fact life money story month book eye job word"
).split()
# Letters of a few other scripts, so that common non-English text is not all [UNK].
SCRIPTS = [(0x3B1, 0x3C9), (0x430, 0x44F), (0x5D0, 0x5EA), (0x627, 0x64A), (0x4E00, 0x4E80),
           (0x3041, 0x3093), (0x30A1, 0x30F3)]
ONSETS = ["", "b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w",
          "st", "tr", "pr", "ch", "sh", "th", "pl", "gr", "br", "cl", "sp"]
NUCLEI = ["a", "e", "i", "o", "u", "ea", "ou", "ai", "io", "y"]
CODAS = ["", "n", "r", "s", "t", "l", "m", "nd", "ng", "st", "ck", "ed", "er", "ly", "ing", "tion"]


def vocabulary(size, seed):
    vocab = []
    seen = set()

    def add(token):
        if token not in seen and len(vocab) < size:
            seen.add(token)
            vocab.append(token)

    for token in SPECIALS:
        add(token)
    printable = [chr(c) for c in range(0x21, 0x7F) if not ("A" <= chr(c) <= "Z")]
    for ch in printable:
        add(ch)
    for ch in printable:
        add("##" + ch)
    for lo, hi in SCRIPTS:
        for c in range(lo, hi + 1):
            add(chr(c))
            add("##" + chr(c))
    for word in WORDS:
        add(word)
    rng = random.Random(seed)
    while len(vocab) < size:
        piece = rng.choice(ONSETS) + rng.choice(NUCLEI) + rng.choice(CODAS)
        add(piece if rng.random() < 0.5 else "##" + piece)
    if len(vocab) < size:
        raise SystemExit(f"cannot make {size} distinct tokens")
    return vocab


def tokenizer_json(vocab, max_length):
    special = lambda token: {"SpecialToken": {"id": token, "type_id": 0}}
    return {
        "version": "1.0",
        "truncation": {"direction": "Right", "max_length": max_length,
                       "strategy": "LongestFirst", "stride": 0},
        "padding": None,
        "added_tokens": [
            {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True} for i, t in enumerate(SPECIALS)],
        "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                       "strip_accents": None, "lowercase": True},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [special("[CLS]"), {"Sequence": {"id": "A", "type_id": 0}},
                       special("[SEP]")],
            "pair": [special("[CLS]"), {"Sequence": {"id": "A", "type_id": 0}},
                     special("[SEP]"), {"Sequence": {"id": "B", "type_id": 1}},
                     {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
            "special_tokens": {t: {"id": t, "ids": [SPECIALS.index(t)], "tokens": [t]}
                               for t in ("[CLS]", "[SEP]")},
        },
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100,
                  "vocab": {token: i for i, token in enumerate(vocab)}},
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--vocab-size", type=int, default=4096)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--seed", type=int, default=4096)
    args = parser.parse_args()
    vocab = vocabulary(args.vocab_size, args.seed)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "vocab.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write("".join(token + "\n" for token in vocab))
    with open(os.path.join(args.out, "tokenizer.json"), "w", encoding="utf-8",
              newline="\n") as f:
        json.dump(tokenizer_json(vocab, args.max_length), f, ensure_ascii=False, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
