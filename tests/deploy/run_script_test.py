"""scripts/run.sh builds only what serving needs, and a GPU-less start says so calmly (issue 34.4).

1. `run.sh --print-targets` lists existing executable targets, and none of them is a test, a
   benchmark or a fuzzer: no CTest command runs one of them, and no name says test/bench/fuzz.
2. A RelWithDebInfo build compiles with line tables only (SLUICE_DEBUG_INFO=lines).
3. sluice-server started with --device=auto on a machine without a GPU logs one calm line ("no GPU
   found; models run on the CPU backend") and none of CUDA's error text (a driver "insufficient"
   for the runtime, the failing cudaGetDeviceCount call). Skipped on a machine with a GPU.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

CALM_LINE = "device=auto: no GPU found; models run on the CPU backend"
ALARMING = ("insufficient", "cudaGetDeviceCount", "cudaError")


def check_targets(repo, build_dir):
    out = subprocess.run([os.path.join(repo, "scripts", "run.sh"), "--print-targets"],
                         check=True, capture_output=True, text=True).stdout
    targets = out.split()
    assert targets, "run.sh --print-targets printed nothing"
    assert "sluice-server" in targets and "sluice-client" in targets, targets
    for t in targets:
        assert not re.search(r"_tests?$|bench|^fuzz_", t), f"run.sh builds {t}, not a serving target"
    # The executables CTest runs (the first word of every test command): none may be built by run.sh.
    shown = subprocess.run(["ctest", "--show-only=json-v1"], cwd=build_dir, check=True,
                           capture_output=True, text=True).stdout
    test_programs = {os.path.basename(t["command"][0]) for t in json.loads(shown)["tests"]
                     if t.get("command")}
    overlap = sorted(test_programs & set(targets))
    assert not overlap, f"run.sh builds test executables: {overlap}"
    # Every target exists in this build tree (a renamed target would fail run.sh's build).
    listed = subprocess.run(["cmake", "--build", build_dir, "--target", "help"], check=True,
                            capture_output=True, text=True).stdout
    for t in targets:
        assert re.search(rf"\b{re.escape(t)}\b", listed), f"no CMake target {t} in {build_dir}"
    print(f"run.sh builds {len(targets)} targets: {' '.join(targets)}; none of "
          f"{len(test_programs)} test programs")


def check_line_tables(build_dir):
    """A RelWithDebInfo build compiles C++ with line tables only (-g1 / -gline-tables-only after
    CMake's -g), the fresh-clone saving of issue 34.4; SLUICE_DEBUG_INFO=full keeps -g."""
    cache = open(os.path.join(build_dir, "CMakeCache.txt"), encoding="utf-8").read()
    build_type = re.search(r"^CMAKE_BUILD_TYPE:STRING=(.*)$", cache, re.M).group(1)
    debug_info = re.search(r"^SLUICE_DEBUG_INFO:STRING=(.*)$", cache, re.M).group(1)
    if build_type != "RelWithDebInfo" or debug_info != "lines":
        print(f"SKIP line-tables check: {build_type} build, SLUICE_DEBUG_INFO={debug_info}")
        return
    commands = json.load(open(os.path.join(build_dir, "compile_commands.json"), encoding="utf-8"))
    cxx = [c for c in commands if c["file"].endswith(".cc")]
    assert cxx, "no C++ compile in compile_commands.json"
    for c in cxx:
        levels = re.findall(r"(?<!\S)-g(?:\S*)", c["command"])
        assert levels and levels[-1] in ("-g1", "-gline-tables-only"), \
            f"{c['file']} compiles with debug flags {levels}, not line tables last"
    print(f"{len(cxx)} C++ files compile with line tables only ({levels[-1]})")


def gpu_present():
    return os.path.exists("/dev/nvidiactl")


def check_no_gpu_log(server, models):
    if gpu_present():
        print("SKIP start-up log check: this machine has an NVIDIA driver (/dev/nvidiactl)")
        return
    with tempfile.NamedTemporaryFile(prefix="sluice_run_", suffix=".log") as log:
        proc = subprocess.Popen(
            [server, f"--model-repository={models}", "--device=auto", "--grpc-address=127.0.0.1",
             "--grpc-port=0", "--http-address=127.0.0.1", "--http-port=0", "--metrics-port=0"],
            stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            text = ""
            while time.monotonic() < deadline and proc.poll() is None:
                with open(log.name, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                if "server ready" in text or "server started, not ready" in text:
                    break
                time.sleep(0.05)
            assert "server ready" in text or "server started, not ready" in text, \
                f"sluice-server did not start:\n{text}"
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    device_lines = [l for l in text.splitlines() if "device=" in l]
    assert any(CALM_LINE in l for l in device_lines), \
        f"no calm no-GPU line ({CALM_LINE!r}) in the start-up log:\n{text}"
    for word in ALARMING:
        assert word not in text, f"start-up log carries CUDA's error text ({word!r}):\n{text}"
    print(f"start-up log: {device_lines[0].split(' ', 2)[-1]}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", required=True)
    parser.add_argument("--build-dir", required=True)
    parser.add_argument("--server", required=True)
    args = parser.parse_args()
    check_targets(args.repo, args.build_dir)
    check_line_tables(args.build_dir)
    check_no_gpu_log(args.server, os.path.join(args.repo, "models"))
    print("PASS")


if __name__ == "__main__":
    sys.exit(main())
