#!/usr/bin/env python3
"""gpu-check's report: the step table and the key figures of one run, from its logs folder.

Reads LOGS/figures/*.json (gtest JSON, sluice-cuda-encoder-bench, sluice-engine-bench,
sluice-loadtest + server CPU, gpu_torch_encoder.py; the host CPU's sluice-encoder-bench JSON lines) and the step table gpu-check.sh keeps, and
writes one small JSON of every figure and the summary text gpu-check.sh prints last. Python
standard library only (it runs on the GPU machine's python3, and here in the dry run). Missing or
broken inputs are reported, never fatal: a half-finished run still gets its summary.

  gpu_check_report.py --work LOGS --steps steps.tsv --json figures.json --summary summary.txt
"""

import argparse
import glob
import json
import os
import sys

# Ceilings the figures are set against (docs/gpu-check.md says where each comes from).
BF16_PEAK_TFLOPS = 790.0  # H200, 8192^3 bf16 matmul through PyTorch on random data, measured here
HBM_TBPS = 4.3  # H200 device-to-device copy (bytes read + written), measured here
# The bundled mlp (784-512-512-10, FP32): what one batch must move and compute.
MLP_WEIGHT_BYTES = (784 * 512 + 512 * 512 + 512 * 10 + 512 + 512 + 10) * 4
MLP_FLOPS_PER_ROW = 2 * (784 * 512 + 512 * 512 + 512 * 10)
MLP_IO_BYTES_PER_ROW = (784 + 10) * 4
# Characters of summary at most (the device tool returns the last 12,000 of the output).
SUMMARY_LIMIT = 9000


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as error:
        return {"error": f"{os.path.basename(path)}: {error}"}


def read_steps(path):
    steps = []
    if not path or not os.path.exists(path):
        return steps
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 4:
                continue
            parts += [""] * (5 - len(parts))
            steps.append({"step": parts[0], "cap_s": parts[1], "took_s": parts[2],
                          "result": parts[3], "detail": parts[4]})
    return steps


def gtest_figures(figures):
    tests = {}
    paths = glob.glob(os.path.join(figures, "gpu_*.json")) + \
        glob.glob(os.path.join(figures, "engine_*.json"))  # the host CPU's AMX test
    for path in sorted(paths):
        doc = load(path)
        name = os.path.basename(path)[:-5]
        if "error" in doc:
            tests[name] = doc
            continue
        failed = [f"{suite['name']}.{case['name']}"
                  for suite in doc.get("testsuites", []) for case in suite.get("testsuite", [])
                  if case.get("failures")]
        skipped = sum(1 for suite in doc.get("testsuites", []) for case in suite.get("testsuite", [])
                      if case.get("result") == "SKIPPED")
        tests[name] = {"tests": doc.get("tests"), "failures": doc.get("failures"),
                       "skipped": skipped, "failed": failed[:20], "time": doc.get("time")}
    return tests


def fmt(value, spec=".0f"):
    return "-" if value is None else format(value, spec)


def encoder_runs(figures):
    runs = {}
    for path in sorted(glob.glob(os.path.join(figures, "encoder-*.json"))):
        runs[os.path.basename(path)[len("encoder-"):-5]] = load(path)
    return runs


def encoder_section(runs, labels, lines):
    for label in labels:
        doc = runs[label]
        if "error" in doc:
            lines.append(f"encoder {label}: {doc['error']}")
            continue
        lines.append(f"encoder {label} on {doc.get('executor', '?')[:200]}")
        lines.append("  workload        graph tokens/computed  p50_ms comp_ms    seq/s TFLOP/s "
                     "%peak cpu_us/seq")
        for p in doc.get("points", []):
            lines.append(
                f"  {p.get('workload', '?'):<15} {'on ' if p.get('graphs') else 'off'}  "
                f"{p.get('tokens', 0):>6}/{p.get('tokens_computed', 0):<7} "
                f"{fmt(p.get('sync_ms_p50'), '7.3f')} {fmt(p.get('compute_ms'), '7.3f')} "
                f"{fmt(p.get('sequences_per_s'), '8.0f')} {fmt(p.get('tflops_present'), '7.1f')} "
                f"{fmt(p.get('peak_share_present', 0) * 100, '5.1f')} "
                f"{fmt(p.get('cpu_us_per_sequence'), '9.1f')}")
        gemms = doc.get("gemms", [])
        if gemms:
            # The largest token count only (every one is in the JSON).
            largest = max(g.get("tokens", 0) for g in gemms)
            lines.append(f"  GEMMs alone at {largest} tokens, TFLOP/s (of "
                         f"{BF16_PEAK_TFLOPS:.0f}): " + ", ".join(
                             f"{g['name']} {g.get('tflops', 0):.0f}" for g in gemms
                             if g.get("tokens") == largest))


def engine_section(figures, lines):
    runs = {}
    for graphs in ("on", "off"):
        path = os.path.join(figures, f"engine-graphs-{graphs}.json")
        if os.path.exists(path):
            runs[graphs] = load(path)
    rows = {}
    for graphs, doc in runs.items():
        if "error" in doc:
            lines.append(f"engine graphs {graphs}: {doc['error']}")
            continue
        executors = doc.get("executors", {})
        for r in doc.get("results", []):
            key = (r["model"], r["bucket"], r["mode"])
            rows.setdefault(key, {})[graphs] = r
            r["executor"] = executors.get(r["model"], "?")
            if r["model"] == "mlp" and r.get("compute_infer_us_per_batch"):
                seconds = r["compute_infer_us_per_batch"] / 1e6
                moved = MLP_WEIGHT_BYTES + r["bucket"] * MLP_IO_BYTES_PER_ROW
                r["hbm_tb_per_s"] = moved / seconds / 1e12
                r["hbm_share"] = r["hbm_tb_per_s"] / HBM_TBPS
                r["tflops"] = r["bucket"] * MLP_FLOPS_PER_ROW / seconds / 1e12
    if rows:
        lines.append("engine (pipeline items/s, infer us/batch; graphs on | off; mlp: share of "
                     f"{HBM_TBPS} TB/s HBM)")
        for (model, bucket, mode), by in sorted(rows.items()):
            if mode != "pipeline":
                continue
            on, off = by.get("on", {}), by.get("off", {})
            extra = f" HBM {on['hbm_share'] * 100:.2f}%" if "hbm_share" in on else ""
            lines.append(f"  {model:<7} b{bucket:<3} {on.get('executor', '?'):<8} "
                         f"{fmt(on.get('items_per_second'), '10.0f')} | "
                         f"{fmt(off.get('items_per_second'), '10.0f')}   "
                         f"{fmt(on.get('compute_infer_us_per_batch'), '7.1f')} | "
                         f"{fmt(off.get('compute_infer_us_per_batch'), '7.1f')}{extra}")
    return runs


def e2e_section(figures, lines):
    points = []
    for path in sorted(glob.glob(os.path.join(figures, "e2e-*-c*.json"))):
        if path.endswith(".cpu.json"):
            continue
        base = os.path.basename(path)[len("e2e-"):-5]
        model, clients = base.rsplit("-c", 1)
        doc, cpu = load(path), load(path[:-5] + ".cpu.json")
        point = {"model": model, "clients": int(clients)}
        if "error" in doc:
            point["error"] = doc["error"]
        else:
            level = (doc.get("levels") or [{}])[-1]
            latency = level.get("latency_us", {})
            succeeded = (doc.get("totals") or {}).get("succeeded") or 0
            point.update({"sequences_per_s": level.get("throughput_rps"),
                          "tokens_per_s": level.get("tokens_per_s"),
                          "p50_ms": (latency.get("p50") or 0) / 1e3,
                          "p99_ms": (latency.get("p99") or 0) / 1e3,
                          "failed": level.get("failed"), "requests": succeeded})
            if "server_cpu_s" in cpu and succeeded:
                point["server_cpu_us_per_request"] = cpu["server_cpu_s"] / succeeded * 1e6
            point["device"] = cpu.get("device")
        points.append(point)
    if points:
        lines.append("end to end over gRPC (sluice-loadtest async, ragged lengths)")
        lines.append("  model      clients    seq/s   tokens/s  p50_ms  p99_ms cpu_us/req")
        for p in sorted(points, key=lambda p: (p["model"], p["clients"])):
            if "error" in p:
                lines.append(f"  {p['model']:<10} {p['clients']:>7} {p['error']}")
                continue
            lines.append(f"  {p['model']:<10} {p['clients']:>7} {fmt(p['sequences_per_s'], '8.0f')} "
                         f"{fmt(p['tokens_per_s'], '10.0f')} {p['p50_ms']:7.2f} {p['p99_ms']:7.2f} "
                         f"{fmt(p.get('server_cpu_us_per_request'), '10.0f')}")
    return points


def pytorch_section(figures, encoder_runs, lines):
    runs = {}
    for path in sorted(glob.glob(os.path.join(figures, "pytorch-*.json"))):
        runs[os.path.basename(path)[:-5]] = load(path)
    sluice = encoder_runs.get("fp16-s128", {})
    ours = {p["workload"]: p for p in sluice.get("points", []) if p.get("graphs")}
    ratios = []
    for label, doc in runs.items():
        if "error" in doc:
            lines.append(f"{label}: {doc['error']}")
            continue
        for p in doc.get("points", []):
            mine = ours.get(p["workload"])
            ratio = {"pytorch": label, "workload": p["workload"],
                     "pytorch_sequences_per_s": p.get("sequences_per_s"),
                     "pytorch_ms_p50": p.get("ms_p50")}
            if mine:
                ratio["sluice_sequences_per_s"] = mine.get("sequences_per_s")
                ratio["sluice_ms_p50"] = mine.get("sync_ms_p50")
                if p.get("sequences_per_s"):
                    ratio["throughput_ratio"] = mine.get("sequences_per_s", 0) / p["sequences_per_s"]
                if mine.get("sync_ms_p50"):
                    ratio["latency_ratio"] = p.get("ms_p50", 0) / mine["sync_ms_p50"]
            ratios.append(ratio)
    if ratios:
        lines.append("sluice / PyTorch FP16 SDPA (throughput: seq/s ratio; latency: torch p50 / "
                     "sluice p50; >1 = sluice ahead)")
        for r in ratios:
            lines.append(f"  {r['pytorch']:<26} {r['workload']:<17} torch "
                         f"{fmt(r['pytorch_sequences_per_s'], '8.0f')} seq/s  sluice "
                         f"{fmt(r.get('sluice_sequences_per_s'), '8.0f')}  throughput x"
                         f"{fmt(r.get('throughput_ratio'), '.2f')}  latency x"
                         f"{fmt(r.get('latency_ratio'), '.2f')}")
    return runs, ratios


def json_lines(path):
    """The JSON objects of a file of JSON lines (the CPU encoder bench's output); [] if absent."""
    rows = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    return rows


def host_cpu_section(figures, lines):
    """The host-cpu step: the CPU encoder on the GPU machine's CPU (AMX, where it has it)."""
    info = load(os.path.join(figures, "host-cpu.json"))
    if "error" in info:
        return None
    result = {"cpu": info, "gemm": {}, "forward": {}}
    lines.append(f"host CPU: {info.get('cpu')} ({info.get('cores')} cores; "
                 f"{info.get('flags') or 'no AVX-512/AMX flags'})")
    gemm = [row for row in json_lines(os.path.join(figures, "host-cpu-gemm.jsonl"))
            if "shapes" in row]
    if gemm:
        # Per packed format (every *_gflops / *_gops key the bench writes, AMX's included), the
        # median over the encoder's four GEMM shapes, one thread, M = 128.
        rates = {}
        for shape in gemm[-1]["shapes"]:
            for key, value in shape.items():
                if key.startswith("packed") and isinstance(value, (int, float)):
                    rates.setdefault(key, []).append(value)
        medians = {key: sorted(v)[len(v) // 2] for key, v in sorted(rates.items())}
        result["gemm"] = {"kernels": {k: v for k, v in gemm[-1].items() if k != "shapes"},
                          "median_rates": medians}
        def label(key):  # packed_gflops -> fp32, packed_int8_gops -> int8
            name = key[len("packed"):].removesuffix("_gflops").removesuffix("_gops").strip("_")
            return "fp32" if name in ("", "gflops") else name
        hot = [f"{label(key)} {value:.0%}" if "of_amx_peak" in key else
               f"{label(key)} {value:.0f}" for key, value in medians.items() if "cold" not in key]
        lines.append("  GEMMs alone, one thread, M 128, median of 4 shapes (GFLOP/s; int8 GOP/s): "
                     + ", ".join(hot))
        # The variants that ran and the AMX verdict ("available", or why not) and tile peaks.
        kernels = result["gemm"]["kernels"]
        lines.append("  kernels: " + ", ".join(
            f"{key} {value:.3g}" if isinstance(value, float) else f"{key} {value}"
            for key, value in sorted(kernels.items()))[:400])
    base = None
    for precision in ("fp32", "bf16", "int8"):
        rows = json_lines(os.path.join(figures, f"host-cpu-{precision}.jsonl"))
        loaded = next((row for row in rows if "precision" in row), {})
        runs = [row for row in rows if "sequences_per_s" in row]
        if not runs:
            lines.append(f"  BERT-base {precision}: no figure (see host-cpu-{precision}.log)")
            continue
        run = runs[-1]
        result["forward"][precision] = {"load": loaded, "run": run}
        seq = run.get("sequences_per_s") or 0.0
        base = seq if precision == "fp32" else base
        ratio = f" = {seq / base:.2f}x fp32" if base and precision != "fp32" else ""
        lines.append(f"  BERT-base batch {run.get('batch')} x {run.get('seq')}, "
                     f"{info.get('threads')} threads, {precision}: {seq:.1f} seq/s, "
                     f"{fmt(run.get('gflops'))} GFLOP/s{ratio}; "
                     f"{loaded.get('precision', '')[:150]}")
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", required=True)
    parser.add_argument("--steps")
    parser.add_argument("--budget", default="")
    parser.add_argument("--not-run", default="")
    parser.add_argument("--json", required=True)
    parser.add_argument("--summary", required=True)
    args = parser.parse_args()
    figures = os.path.join(args.work, "figures")
    steps = read_steps(args.steps)
    used = sum(int(s["took_s"]) for s in steps if s["took_s"].isdigit())
    lines = [f"gpu-check summary: {len(steps)} steps, {used} s of the {args.budget} s budget"]
    lines.append(f"{'step':<17} {'cap_s':>5} {'took_s':>6}  {'result':<8} detail")
    for s in steps:
        lines.append(f"{s['step']:<17} {s['cap_s']:>5} {s['took_s']:>6}  {s['result']:<8} "
                     f"{s['detail'][:240]}")
    if args.not_run:
        lines.append(f"not run for lack of time: {args.not_run}")
    figure_lines = []
    result = {"steps": steps, "not_run_for_time": args.not_run.split(),
              "ceilings": {"bf16_tflops": BF16_PEAK_TFLOPS, "hbm_tb_per_s": HBM_TBPS}}
    result["tests"] = gtest_figures(figures)
    # In order of value, as the steps: if the summary must be cut, the variants go first.
    runs = encoder_runs(figures)
    main_label = "fp16-s128"
    encoder_section(runs, [label for label in runs if label == main_label], figure_lines)
    result["encoder"] = runs
    result["pytorch"], result["ratios"] = pytorch_section(figures, runs, figure_lines)
    result["e2e"] = e2e_section(figures, figure_lines)
    result["engine"] = engine_section(figures, figure_lines)
    encoder_section(runs, [label for label in runs if label != main_label], figure_lines)
    result["host_cpu"] = host_cpu_section(figures, figure_lines)
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1, default=str)
    overall = "PASS" if steps and all(s["result"] in ("ok", "skipped") for s in steps) else "FAIL"
    # The whole summary must fit the device tool's 12,000-character output tail with room for
    # the lines before it: figures are cut from the end first (all are in the JSON), never the
    # step table.
    tail = lines + [f"gpu-check: {overall}"]
    cut = False
    while figure_lines and len("\n".join(figure_lines + [""] + tail)) > SUMMARY_LIMIT - 100:
        figure_lines.pop()
        cut = True
    if cut:
        figure_lines.append("(figures cut to fit the output tail: gpu-check-figures.json has all)")
    text = "\n".join(figure_lines + [""] + tail) + "\n"
    with open(args.summary, "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
