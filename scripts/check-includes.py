#!/usr/bin/env python3
"""check-includes.py - the module graph, checked against every #include of a sluice header.

Each folder below is one module (one CMake target, or a set of test/tool programs). A module may
include headers of the modules listed as its dependencies, and its own; nothing else. The graph
runs one way (ARCHITECTURE.md section 9: facade -> {models, encoder, cpu, cuda} -> core ->
common), so it is acyclic by construction; the script checks that too, and that every source a
library target under engine/ lists sits in that target's own folder.

Usage: scripts/check-includes.py [--root DIR]. Prints each violation (file:line: what and why)
and exits 1 if there is any; prints a one-line summary and exits 0 otherwise. CTest runs it
(include_graph_test), so scripts/test.sh and CI do.
"""

import argparse
import os
import re
import subprocess
import sys

# Module -> the modules it may include (besides itself). Longest folder prefix names a file's
# module. Test, benchmark, fuzz and tool programs may use any production module but production
# modules never include them.
PRODUCTION = {
    "common/wire": [],
    "common": ["common/wire"],
    "proto": [],
    "text": ["common", "common/wire"],
    "engine/core": ["common", "common/wire"],
    "engine/models": ["engine/core", "common", "common/wire"],
    "engine/models/encoder": ["engine/models", "engine/core", "text", "common", "common/wire"],
    "engine/cpu": ["engine/core", "common", "common/wire"],
    "engine/cuda": ["engine/models/encoder", "engine/models", "engine/core", "common",
                    "common/wire"],
    # The facade: the backend registry names every backend target; executor_factory and device
    # reach the CPU and CUDA executors.
    "engine": ["engine/models/encoder", "engine/models", "engine/cpu", "engine/cuda",
               "engine/core", "common", "common/wire"],
    # The server sees the engine's facade and core only (ARCHITECTURE section 3).
    "server/shared_memory": ["engine", "engine/core", "common", "common/wire"],
    # server/ and server/http/ may use text/ (a leaf library on common/ only): TEI's /tokenize
    # answers from the model's tokenizer without the engine.
    "server/http": ["server", "server/shared_memory", "engine", "engine/core", "text", "common",
                    "common/wire", "proto"],
    "server": ["server/shared_memory", "server/http", "engine", "engine/core", "text", "common",
               "common/wire", "proto"],
    # The process (sluice-server's main and its start-up phases), above both server libraries.
    "server/main": ["server", "server/http", "server/shared_memory", "engine", "engine/core",
                    "text", "common", "common/wire", "proto"],
    "client": ["proto", "common", "common/wire"],
    "loadtest": ["client", "proto", "common", "common/wire"],
}
# Programs that may include any production module (and, for tests, the test support code).
ANY = {"tests", "bench", "fuzz", "tools"}
# Headers of these modules are test-only: production modules never include them.
TEST_ONLY = {"tests"}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SOURCE_EXTENSIONS = (".cc", ".h", ".cu", ".cuh")


def module_of(path):
    """The module (key of PRODUCTION or a member of ANY) a repository path belongs to. A unit
    test beside its code (foo_test.cc, STYLE rule 21) is test code: it links the whole engine."""
    if path.endswith("_test.cc"):
        return "tests"
    best = None
    for module in list(PRODUCTION) + sorted(ANY):
        if path == module or path.startswith(module + "/"):
            if best is None or len(module) > len(best):
                best = module
    return best


def tracked_sources(root):
    files = subprocess.run(["git", "-C", root, "ls-files"], check=True, capture_output=True,
                           text=True).stdout.split()
    return [f for f in files if f.endswith(SOURCE_EXTENSIONS)]


def check_includes(root, files):
    problems = []
    edges = set()
    for path in files:
        module = module_of(path)
        if module is None:
            continue
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                match = INCLUDE.match(line)
                if not match:
                    continue
                target = match.group(1)
                if not os.path.exists(os.path.join(root, target)):
                    continue  # a generated header (proto/*.pb.h) or a path relative to the file
                included = module_of(target)
                if included is None or included == module:
                    continue
                edges.add((module, included))
                if module in ANY:
                    continue
                if included in TEST_ONLY or included in ANY:
                    problems.append(f"{path}:{number}: includes {target}, which is test or tool "
                                    f"code ({included}/); production code never does")
                elif included not in PRODUCTION[module]:
                    allowed = ", ".join(PRODUCTION[module]) or "nothing"
                    problems.append(f"{path}:{number}: {module}/ may not include {target} "
                                    f"({included}/); it may include: {allowed}")
    return problems, edges


def find_cycle(edges):
    graph = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    state = {}

    def visit(node, stack):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt, stack)
                if found:
                    return found
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node, [])
            if found:
                return found
    return None


ADD_LIBRARY = re.compile(r"add_library\(\s*(\w+)([^)]*)\)", re.S)


def check_target_folders(root):
    """Every source a library under engine/ lists lies in its own folder (or a plain subfolder
    that is no target of its own, like engine/cuda/kernels)."""
    problems = []
    for folder, _, names in os.walk(os.path.join(root, "engine")):
        if "CMakeLists.txt" not in names:
            continue
        text = open(os.path.join(folder, "CMakeLists.txt"), encoding="utf-8").read()
        text = re.sub(r"#[^\n]*", "", text)
        for match in ADD_LIBRARY.finditer(text):
            name, body = match.group(1), match.group(2)
            for source in body.split():
                if not source.endswith(SOURCE_EXTENSIONS):
                    continue
                if source.startswith("$") or "/" not in source:
                    continue
                sub = os.path.join(folder, os.path.dirname(source))
                if os.path.exists(os.path.join(sub, "CMakeLists.txt")) or ".." in source:
                    rel = os.path.relpath(os.path.join(folder, source), root)
                    problems.append(f"{rel}: listed by {name} in "
                                    f"{os.path.relpath(folder, root)}/CMakeLists.txt but lies in "
                                    f"another target's folder")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."))
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    files = tracked_sources(root)
    problems, edges = check_includes(root, files)
    problems += check_target_folders(root)
    cycle = find_cycle(edges)
    if cycle:
        problems.append("module cycle: " + " -> ".join(cycle))
    for problem in problems:
        print(problem)
    if problems:
        print(f"FAIL: {len(problems)} include-graph violation(s) in {len(files)} files")
        return 1
    print(f"include graph OK: {len(files)} files, {len(edges)} module arrows, no cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
