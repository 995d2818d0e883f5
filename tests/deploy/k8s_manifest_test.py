#!/usr/bin/env python3
"""Renders deploy/k8s with `kubectl kustomize` and checks the objects against what sluice-server
and its image expect: flags the server knows, ports, probes on gRPC health, a termination grace
that covers preStop + the drain, the image's non-root user, GPU resources, and a ServiceMonitor
and autoscaler that point at what the server exports.
"""
import argparse
import re
import subprocess
import sys
import unittest

import yaml

ARGS = None


def render(path):
    out = subprocess.run(["kubectl", "kustomize", path], check=True, capture_output=True,
                         text=True).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def by_kind(objects, kind, name=None):
    found = [o for o in objects if o["kind"] == kind and
             (name is None or o["metadata"]["name"] == name)]
    assert found, f"no {kind} {name or ''} rendered"
    return found[0]


def flag_value(args, flag):
    for arg in args:
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    raise AssertionError(f"{flag} not in the container args {args}")


class K8sManifestTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.objects = render(ARGS.k8s)
        cls.kserve = render(ARGS.k8s + "/kserve")
        cls.help = subprocess.run([ARGS.server, "--help"], check=True, capture_output=True,
                                  text=True).stdout
        with open(ARGS.dockerfile) as f:
            cls.dockerfile = f.read()
        deployment = by_kind(cls.objects, "Deployment", "sluice")
        cls.pod = deployment["spec"]["template"]["spec"]
        cls.container = cls.pod["containers"][0]
        cls.ports = {p["name"]: p["containerPort"] for p in cls.container["ports"]}

    def test_every_flag_is_one_the_server_knows(self):
        runtimes = [o for o in self.kserve if o["kind"] == "ServingRuntime"]
        for container in [self.container] + [
                c for runtime in runtimes for c in runtime["spec"]["containers"]]:
            for arg in container["args"]:
                flag = arg.split("=", 1)[0]
                self.assertRegex(self.help, re.escape(flag) + r"\b", f"unknown flag {flag}")

    def test_ports_match_the_flags(self):
        args = self.container["args"]
        self.assertEqual(self.ports["grpc"], int(flag_value(args, "--grpc-port")))
        self.assertEqual(self.ports["metrics"], int(flag_value(args, "--metrics-port")))
        self.assertEqual(self.ports["http"], int(flag_value(args, "--http-port")))
        service = by_kind(self.objects, "Service", "sluice")
        targets = {p["name"]: p["targetPort"] for p in service["spec"]["ports"]}
        self.assertEqual(targets, {"http": "http", "grpc": "grpc", "metrics": "metrics"})
        self.assertEqual(self.dockerfile.count("EXPOSE 8000 8001 8002"), 1)

    def test_probes_use_grpc_health(self):
        c = self.container
        for probe in ("startupProbe", "readinessProbe"):
            self.assertEqual(c[probe]["grpc"]["port"], self.ports["grpc"], probe)
            self.assertNotIn("service", c[probe]["grpc"], probe)  # overall readiness
        self.assertEqual(c["livenessProbe"]["grpc"]["port"], self.ports["grpc"])
        self.assertEqual(c["livenessProbe"]["grpc"]["service"], "liveness")

    def test_termination_grace_covers_prestop_and_drain(self):
        pre_stop = self.container["lifecycle"]["preStop"]["exec"]["command"]
        self.assertEqual(pre_stop[0], "sleep")
        exit_timeout = int(flag_value(self.container["args"], "--exit-timeout-secs"))
        shutdown_grace = 1  # ServerProcess::kShutdownGrace in server/main/server_process.h
        self.assertGreaterEqual(self.pod["terminationGracePeriodSeconds"],
                                int(pre_stop[1]) + exit_timeout + shutdown_grace)

    def test_runs_as_the_images_non_root_user(self):
        uid = int(re.search(r"^USER (\d+):\d+$", self.dockerfile, re.M).group(1))
        self.assertNotEqual(uid, 0)
        self.assertTrue(self.pod["securityContext"]["runAsNonRoot"])
        self.assertEqual(self.pod["securityContext"]["runAsUser"], uid)
        sc = self.container["securityContext"]
        self.assertFalse(sc["allowPrivilegeEscalation"])
        self.assertTrue(sc["readOnlyRootFilesystem"])
        self.assertEqual(sc["capabilities"]["drop"], ["ALL"])

    def test_requests_a_gpu(self):
        resources = self.container["resources"]
        self.assertEqual(resources["limits"]["nvidia.com/gpu"], "1")
        self.assertEqual(resources["requests"]["nvidia.com/gpu"], "1")

    def test_monitoring_points_at_the_metrics_endpoint(self):
        monitor = by_kind(self.objects, "ServiceMonitor")
        endpoint = monitor["spec"]["endpoints"][0]
        self.assertEqual(endpoint["port"], "metrics")
        self.assertEqual(endpoint["path"], "/metrics")
        hpa = by_kind(self.objects, "HorizontalPodAutoscaler")
        metric = hpa["spec"]["metrics"][0]["pods"]["metric"]["name"]
        self.assertTrue(metric.startswith("sluice_"))
        if ARGS.metrics_names:
            with open(ARGS.metrics_names) as f:
                self.assertIn(metric, f.read().split())

    def test_kserve_http_runtime_probes_http_health(self):
        runtime = by_kind(self.kserve, "ServingRuntime", "sluice-http")
        self.assertIn("v2", runtime["spec"]["protocolVersions"])
        c = runtime["spec"]["containers"][0]
        port = int(flag_value(c["args"], "--http-port"))
        self.assertEqual([p["containerPort"] for p in c["ports"]], [port])
        self.assertEqual(c["readinessProbe"]["httpGet"], {"path": "/v2/health/ready", "port": port})
        self.assertEqual(c["livenessProbe"]["httpGet"], {"path": "/v2/health/live", "port": port})

    def test_kserve_runtime_speaks_grpc_v2(self):
        runtime = by_kind(self.kserve, "ServingRuntime")
        self.assertIn("grpc-v2", runtime["spec"]["protocolVersions"])
        service = by_kind(self.kserve, "InferenceService")
        self.assertEqual(service["spec"]["predictor"]["model"]["runtime"],
                         runtime["metadata"]["name"])


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--k8s", required=True)
    parser.add_argument("--dockerfile", required=True)
    parser.add_argument("--metrics-names", default="")
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
