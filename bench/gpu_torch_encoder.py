#!/usr/bin/env python3
"""PyTorch on the batches sluice-cuda-encoder-bench runs, for gpu-check's sluice/PyTorch ratio.

The same checkpoint folder (sluice-make-encoder's BERT-base shape, Hugging Face layout), the same
workloads by name: b1xS, b8xS, b32xS, b128xS (S tokens per sequence, --seq) and ragged32x8..256
(32 sequences, length 8 + (i * 97 + 13) % 249 for i = 0..31: the benchmark draws the same
lengths). BertModel with attn_implementation="sdpa", in --dtype, torch.compile off (or on, with
--compile), under inference_mode; the embedding is the masked mean of last_hidden_state,
L2-normalised, as the checkpoint's sentence-transformers modules say, so both sides compute the
same outputs. A ragged batch is padded to its longest sequence (what PyTorch does; sluice packs):
the JSON says how many tokens were padded.

Per workload: the latency p50 of one batch (inputs already on the device, synchronised after
each) and the throughput of batches back to back (CUDA events around the loop; on the CPU, the
wall clock). Prints a table and, with --json, every figure.

  python3 bench/gpu_torch_encoder.py --checkpoint DIR --device cuda --dtype fp16 --json out.json
  python3 bench/gpu_torch_encoder.py --tiny --device cpu --seq 16 --seconds 0.05   # CPU check
"""

import argparse
import json
import statistics
import sys
import time

RAGGED_SEQUENCES = 32


def ragged_lengths(count=RAGGED_SEQUENCES):
    """The ragged workload's lengths, 8..256; cuda_encoder_bench.cc's RaggedLengths() is the same."""
    return [8 + (i * 97 + 13) % 249 for i in range(count)]


def workloads(seq):
    result = {f"b{b}x{seq}": [seq] * b for b in (1, 8, 32, 128)}
    result["ragged32x8..256"] = ragged_lengths()
    return result


def load_model(args, torch):
    from transformers import AutoModel, BertConfig, BertModel

    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    if args.tiny:
        config = BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2,
                            num_attention_heads=4, intermediate_size=128,
                            max_position_embeddings=512)
        config._attn_implementation = "sdpa"
        model = BertModel(config, add_pooling_layer=False).to(dtype)
        vocab = 1000
    else:
        kwargs = {"attn_implementation": "sdpa", "output_loading_info": True}
        try:
            model, info = AutoModel.from_pretrained(args.checkpoint, dtype=dtype, **kwargs)
        except TypeError:  # transformers before `dtype` (4.55 and older)
            model, info = AutoModel.from_pretrained(args.checkpoint, torch_dtype=dtype, **kwargs)
        # The same weights as sluice or no comparison: a weight transformers had to initialise
        # itself means the checkpoint was not read as sluice reads it.
        missing = [k for k in info.get("missing_keys", []) if not k.startswith("pooler.")]
        if missing:
            raise RuntimeError(f"weights missing from {args.checkpoint}: {missing[:5]}")
        vocab = model.config.vocab_size
    return model.to(args.device).eval(), vocab


def make_batch(torch, lengths, vocab, device):
    longest = max(lengths)
    generator = torch.Generator().manual_seed(7)
    ids = torch.randint(1000 % vocab, vocab, (len(lengths), longest), generator=generator)
    mask = torch.zeros((len(lengths), longest), dtype=torch.long)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
    ids = ids * mask
    types = torch.zeros_like(ids)
    return ids.to(device), mask.to(device), types.to(device)


def forward(torch, model, ids, mask, types):
    hidden = model(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
    weights = mask.unsqueeze(-1).to(hidden.dtype)
    pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1)
    return torch.nn.functional.normalize(pooled.float(), dim=-1)


def measure(torch, model, batch, device, seconds, sync_batches):
    ids, mask, types = batch
    cuda = device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for _ in range(3):
        out = forward(torch, model, ids, mask, types)
    sync()
    if not torch.isfinite(out).all():
        raise RuntimeError("non-finite embeddings")
    latencies = []
    for _ in range(sync_batches):
        start = time.perf_counter()
        forward(torch, model, ids, mask, types)
        sync()
        latencies.append((time.perf_counter() - start) * 1e3)
    # Back to back for about `seconds`: as many batches as the p50 says fit.
    count = max(3, int(seconds * 1e3 / max(statistics.median(latencies), 1e-3)))
    if cuda:
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(count):
            forward(torch, model, ids, mask, types)
        end.record()
        end.synchronize()
        elapsed = begin.elapsed_time(end) / 1e3
    else:
        start = time.perf_counter()
        for _ in range(count):
            forward(torch, model, ids, mask, types)
        elapsed = time.perf_counter() - start
    return statistics.median(latencies), count, elapsed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", help="checkpoint folder (Hugging Face layout)")
    parser.add_argument("--tiny", action="store_true",
                        help="a tiny random BERT instead of --checkpoint (checks the script)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="fp16", choices=["fp16", "bf16", "fp32"])
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--workloads", default="", help="comma-separated names (default: all)")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    parser.add_argument("--seconds", type=float, default=0.5, help="throughput loop per workload")
    parser.add_argument("--sync-batches", type=int, default=10)
    parser.add_argument("--json")
    args = parser.parse_args()
    if not args.tiny and not args.checkpoint:
        parser.error("--checkpoint or --tiny")

    import torch
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_torch_encoder: CUDA is not available to torch", file=sys.stderr)
        return 2
    started = time.perf_counter()
    model, vocab = load_model(args, torch)
    compile_s = None
    if args.compile:
        model = torch.compile(model)
    chosen = workloads(args.seq)
    if args.workloads:
        chosen = {k: v for k, v in chosen.items() if k in args.workloads.split(",")}
    points = []
    print(f"| workload | seqs | tokens | padded tokens | p50 ms | seq/s | tokens/s |")
    print("|---|---|---|---|---|---|---|")
    with torch.inference_mode():
        for name, lengths in chosen.items():
            batch = make_batch(torch, lengths, vocab, args.device)
            compile_start = time.perf_counter()
            p50, count, elapsed = measure(torch, model, batch, args.device, args.seconds,
                                          args.sync_batches)
            if args.compile and compile_s is None:
                compile_s = time.perf_counter() - compile_start - elapsed
            tokens = sum(lengths)
            point = {"workload": name, "sequences": len(lengths), "tokens": tokens,
                     "padded_tokens": len(lengths) * max(lengths) - tokens, "ms_p50": p50,
                     "batches": count, "sequences_per_s": count * len(lengths) / elapsed,
                     "tokens_per_s": count * tokens / elapsed}
            points.append(point)
            print(f"| {name} | {len(lengths)} | {tokens} | {point['padded_tokens']} | {p50:.3f} "
                  f"| {point['sequences_per_s']:.0f} | {point['tokens_per_s']:.0f} |", flush=True)
    result = {
        "benchmark": "gpu_torch_encoder.py", "device": args.device, "dtype": args.dtype,
        "attention": "sdpa", "compile": args.compile, "compile_and_warmup_s": compile_s,
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name() if args.device.startswith("cuda") else None,
        "model": "tiny" if args.tiny else args.checkpoint, "seq": args.seq,
        "seconds_total": time.perf_counter() - started, "points": points}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
