#!/usr/bin/env python3
"""The container images, really built and run (podman, as ../shared/tools/container-env.sh sets it
up; the Dockerfiles are the plain Docker ones). Checks: health through the image's HEALTHCHECK and
the protocol, inferences on `simple` and `mlp` with values checked, /metrics, then SIGTERM under
load: every request the server accepted is answered (its final success count equals the OKs the
client received) and the container exits 0. Prints the image size.

--variant cpu (default): deploy/docker/Dockerfile as it is.
--variant cuda-standin: deploy/docker/Dockerfile.cuda with Debian 12 slim standing in for NVIDIA's
CUDA devel and runtime bases (no registry here) and the host's /usr/local/cuda mounted into the
build and the container: every command of the CUDA build stage runs (nvcc, sm_90 + PTX), and the
image starts and serves on the CPU backend because the machine has no GPU.

Exit code 77 (CTest: skipped) with the reason, a line starting "SKIP: ", when podman cannot be set
up on this machine. The build stage's untagged images are removed after the build (label
io.sluice.stage=build).
"""
import argparse
import json
import os
import re
import shlex
import shutil
import socket
import struct
import subprocess
import sys
import time
import unittest
import urllib.request

ARGS = None
IMAGE = None  # set from --variant
SKIP = 77
# The build stage's label (deploy/docker/Dockerfile*): its untagged images are removed after every
# build, so that a run does not leave ~1.1 GB behind.
BUILD_STAGE_LABEL = "io.sluice.stage=build"


def sh(cmd, check=True, capture=True, timeout=None):
    return subprocess.run(cmd, shell=isinstance(cmd, str), check=check, capture_output=capture,
                          text=True, timeout=timeout)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prune_build_stage():
    """Removes the untagged images of the Dockerfile's build stage (and only those: the filter is
    the stage's label, and prune leaves tagged images alone); returns how many went."""
    r = sh(["podman", "image", "prune", "-f", "--filter", f"label={BUILD_STAGE_LABEL}"],
           check=False, timeout=300)
    if r.returncode != 0:
        print(f"podman image prune failed: {r.stderr.strip()}", file=sys.stderr)
        return 0
    return len(r.stdout.split())


def skip_reason():
    """Why this test cannot run here, or None."""
    if os.path.exists(ARGS.container_env) or shutil.which("podman"):
        return None
    docker = shutil.which("docker")
    return (f"no podman on PATH and no {ARGS.container_env} to set it up"
            + (f" ({docker} is here, but this test drives podman)" if docker else "")
            + ": install podman (apt-get install podman) to run it; docs/deployment.md says how "
            "to build and run the image by hand with Docker or podman")


def container_env():
    """Runs container-env.sh (idempotent) and returns its exported variables; with no such script,
    podman as it is with the same flags."""
    if not os.path.exists(ARGS.container_env):
        return {"PODMAN_BUILD_FLAGS": "--pull=never --network host --format docker",
                "PODMAN_RUN_FLAGS": "--pull=never --network host"}
    out = sh(["bash", ARGS.container_env], timeout=1200).stdout
    env = {}
    for line in out.splitlines():
        m = re.match(r'export (\w+)="(.*)"$', line)
        if m:
            env[m.group(1)] = m.group(2)
    return env


class ContainerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        sys.path.insert(0, ARGS.stubs)
        import grpc
        import grpc_service_pb2 as pb
        import grpc_service_pb2_grpc as pb_grpc
        cls.grpc, cls.pb, cls.pb_grpc = grpc, pb, pb_grpc
        env = container_env()
        cls.build_flags = shlex.split(env["PODMAN_BUILD_FLAGS"])
        cls.run_flags = shlex.split(env["PODMAN_RUN_FLAGS"])
        cls.cuda = ARGS.variant == "cuda-standin"
        dockerfile = "deploy/docker/Dockerfile.cuda" if cls.cuda else "deploy/docker/Dockerfile"
        variant_build_flags, cls.variant_run_flags = [], []
        if cls.cuda:
            base = env.get("CONTAINER_ENV_BASE_IMAGE", "debian:bookworm-slim")
            cuda_mount = ["-v", f"{ARGS.cuda_root}:/usr/local/cuda:ro"]
            variant_build_flags = ["--build-arg", f"BUILD_IMAGE={base}",
                                   "--build-arg", f"RUNTIME_IMAGE={base}", *cuda_mount]
            cls.variant_run_flags = [*cuda_mount, "-e", "LD_LIBRARY_PATH=/usr/local/cuda/lib64"]
        t0 = time.time()
        build = subprocess.run(["podman", "build", *cls.build_flags, *variant_build_flags,
                                "-t", IMAGE, "-f", os.path.join(ARGS.repo, dockerfile), ARGS.repo],
                               capture_output=True, text=True)
        pruned = prune_build_stage()  # whether the build worked or not
        if build.returncode != 0:
            raise RuntimeError("podman build failed:\n" + build.stdout[-4000:] + build.stderr[-4000:])
        print(f"removed {pruned} build-stage image(s) ({BUILD_STAGE_LABEL})", file=sys.stderr)
        size = int(sh(["podman", "image", "inspect", "--format", "{{.Size}}", IMAGE]).stdout)
        print(f"\nimage {IMAGE}: {size / 2**20:.1f} MiB, built in {time.time() - t0:.0f} s",
              file=sys.stderr)
        cls.grpc_port, cls.metrics_port, cls.http_port = free_port(), free_port(), free_port()
        cls.name = f"sluice-test-{os.getpid()}"
        sh(["podman", "run", "-d", "--name", cls.name, *cls.run_flags, *cls.variant_run_flags,
            "-e", f"SLUICE_GRPC_PORT={cls.grpc_port}",
            "-e", f"SLUICE_METRICS_PORT={cls.metrics_port}",
            "-e", f"SLUICE_HTTP_PORT={cls.http_port}", "-e", "SLUICE_HTTP_ADDRESS=127.0.0.1",
            "-e", "SLUICE_GRPC_ADDRESS=127.0.0.1", "-e", "SLUICE_METRICS_ADDRESS=127.0.0.1",
            IMAGE])
        cls.channel = grpc.insecure_channel(f"127.0.0.1:{cls.grpc_port}")
        cls.stub = pb_grpc.GRPCInferenceServiceStub(cls.channel)
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if cls.stub.ServerReady(pb.ServerReadyRequest(), timeout=2).ready:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.2)
        raise RuntimeError("container never got ready:\n" + cls.logs())

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        sh(["podman", "rm", "-f", cls.name], check=False)

    @classmethod
    def logs(cls):
        r = sh(["podman", "logs", cls.name], check=False)
        return r.stdout + r.stderr

    def simple_request(self, seed):
        req = self.pb.ModelInferRequest(model_name="simple", id=str(seed))
        a = [(seed * 13 + i) % 200 - 100 for i in range(16)]
        b = [(seed * 7 + 3 * i) % 50 for i in range(16)]
        for name in ("INPUT0", "INPUT1"):
            t = req.inputs.add()
            t.name, t.datatype = name, "INT32"
            t.shape.extend([1, 16])
        req.raw_input_contents.extend([struct.pack("<16i", *a), struct.pack("<16i", *b)])
        return req, a, b

    def test_1_healthcheck_and_user(self):
        r = sh(["podman", "healthcheck", "run", self.name], check=False)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        user = sh(["podman", "exec", self.name, "id", "-u"]).stdout.strip()
        self.assertEqual(user, "10001")

    def test_2_infer_simple_and_mlp(self):
        req, a, b = self.simple_request(5)
        resp = self.stub.ModelInfer(req, timeout=10)
        self.assertEqual(list(struct.unpack("<16i", resp.raw_output_contents[0])),
                         [x + y for x, y in zip(a, b)])
        meta = self.stub.ModelMetadata(self.pb.ModelMetadataRequest(name="mlp"), timeout=10)
        features = meta.inputs[0].shape[-1]
        mlp = self.pb.ModelInferRequest(model_name="mlp")
        t = mlp.inputs.add()
        t.name, t.datatype = meta.inputs[0].name, "FP32"
        t.shape.extend([2, features])
        mlp.raw_input_contents.append(struct.pack(f"<{2 * features}f",
                                                  *[(i % 17) / 17.0 for i in range(2 * features)]))
        out = self.stub.ModelInfer(mlp, timeout=10)
        self.assertEqual(out.outputs[0].shape[0], 2)
        values = struct.unpack(f"<{len(out.raw_output_contents[0]) // 4}f",
                               out.raw_output_contents[0])
        self.assertTrue(all(v == v for v in values))  # no NaN

    def test_2b_device_line(self):
        # Without a GPU the server says, once, that it runs on the CPU backend (the CUDA image too).
        self.assertRegex(self.logs(), r"(?i)CPU backend")

    def test_2c_http_rest(self):
        # The HTTP/REST front end on its port, ready by the same rule as gRPC.
        base = f"http://127.0.0.1:{self.http_port}"
        with urllib.request.urlopen(base + "/v2/health/ready", timeout=5) as r:
            self.assertEqual(r.status, 200)
        body = json.dumps({"inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16}]}).encode()
        request = urllib.request.Request(base + "/v2/models/simple/infer", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=5) as r:
            answer = json.load(r)
        self.assertEqual(answer["outputs"][0]["data"], list(range(1, 17)))

    def test_3_metrics(self):
        body = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics",
                                      timeout=10).read().decode()
        self.assertIn("sluice_inference_requests_total", body)

    def test_4_sigterm_under_load_answers_every_accepted_request(self):
        futures = []
        expected = {}
        t_end = time.time() + 30
        stop_sent = False
        for i in range(4000):
            req, a, b = self.simple_request(i)
            expected[str(i)] = [x + y for x, y in zip(a, b)]
            futures.append(self.stub.ModelInfer.future(req, timeout=30))
            if i == 1000 and not stop_sent:
                stopper = subprocess.Popen(["podman", "stop", "-t", "30", self.name],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                stop_sent = True
            if time.time() > t_end:
                break
            time.sleep(0.0005)
        outcomes = {}
        for i, future in enumerate(futures):
            try:
                resp = future.result(timeout=60)
                self.assertEqual(list(struct.unpack("<16i", resp.raw_output_contents[0])),
                                 expected[resp.id])
                code = "OK"
            except self.grpc.RpcError as e:
                code = e.code().name
            outcomes[code] = outcomes.get(code, 0) + 1
        stopper.wait(timeout=60)
        state = json.loads(sh(["podman", "inspect", self.name]).stdout)[0]["State"]
        logs = self.logs()
        self.assertEqual(state["ExitCode"], 0, logs[-3000:])
        self.assertFalse(state["Running"])
        self.assertTrue(set(outcomes) <= {"OK", "UNAVAILABLE", "CANCELLED"}, outcomes)
        m = re.search(r"final stats model=simple version=1 success=(\d+) failure=(\d+)", logs)
        self.assertIsNotNone(m, logs[-3000:])
        # Successes include the earlier tests' simple requests: one over gRPC (test_2), one over
        # HTTP (test_2c).
        self.assertEqual(int(m.group(1)), outcomes.get("OK", 0) + 2, outcomes)
        self.assertEqual(int(m.group(2)), 0)
        self.assertGreater(outcomes.get("OK", 0), 500)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", required=True)
    parser.add_argument("--stubs", required=True)
    parser.add_argument("--container-env", required=True)
    parser.add_argument("--variant", choices=["cpu", "cuda-standin"], default="cpu")
    parser.add_argument("--cuda-root", default="/usr/local/cuda")
    ARGS, rest = parser.parse_known_args()
    IMAGE = f"localhost/sluice:{ARGS.variant}-test"
    reason = skip_reason()
    if reason:
        # CTest keeps the line in the test's output; scripts/test.sh's summary quotes it.
        print(f"SKIP: {reason}", flush=True)
        sys.exit(SKIP)
    if ARGS.variant == "cuda-standin" and not os.path.exists(
            os.path.join(ARGS.cuda_root, "bin/nvcc")):
        print(f"SKIP: no CUDA toolkit at {ARGS.cuda_root} to stand in for the CUDA base image",
              file=sys.stderr)
        sys.exit(SKIP)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
