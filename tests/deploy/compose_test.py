#!/usr/bin/env python3
"""Checks deploy/compose/compose.yaml against the files it mounts and the server it runs, since no
Docker engine (and no registry for the Prometheus and Grafana images) is here to bring it up:
every bind-mounted file exists, the build points at a Dockerfile, Prometheus scrapes the sluice
service on the image's metrics port, Grafana's provisioning loads the mounted dashboard from the
provisioned Prometheus, and the stop grace period covers the server's drain.
"""
import argparse
import os
import re
import subprocess
import sys
import unittest

import yaml

ARGS = None


def seconds(duration):
    m = re.fullmatch(r"(\d+)s", str(duration))
    assert m, f"unsupported duration {duration!r}"
    return int(m.group(1))


def default_of(value):
    """`${VAR:-default}` -> default; anything else unchanged."""
    m = re.fullmatch(r"\$\{\w+:-(.*)\}", value)
    return m.group(1) if m else value


class ComposeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = os.path.dirname(os.path.abspath(ARGS.compose))
        with open(ARGS.compose) as f:
            cls.compose = yaml.safe_load(f)
        cls.services = cls.compose["services"]
        with open(ARGS.dockerfile) as f:
            cls.dockerfile = f.read()
        cls.help = subprocess.run([ARGS.server, "--help"], check=True, capture_output=True,
                                  text=True).stdout

    def mounts(self, service):
        """(host path, container path) of each bind mount."""
        for volume in self.services[service].get("volumes", []):
            host, container = volume.split(":")[:2]
            yield os.path.normpath(os.path.join(self.dir, host)), container

    def image_env(self, name):
        m = re.search(name + r"=(\d+)", self.dockerfile)
        self.assertIsNotNone(m, f"{name} not set in the Dockerfile")
        return int(m.group(1))

    def test_the_three_services(self):
        self.assertEqual(set(self.services), {"sluice", "prometheus", "grafana"})

    def test_every_mounted_file_exists(self):
        for service in self.services:
            for host, _ in self.mounts(service):
                self.assertTrue(os.path.exists(host), f"{service} mounts missing {host}")

    def test_build_uses_the_dockerfile(self):
        build = self.services["sluice"]["build"]
        context = os.path.normpath(os.path.join(self.dir, build["context"]))
        dockerfile = os.path.join(context, default_of(build["dockerfile"]))
        self.assertTrue(os.path.samefile(dockerfile, ARGS.dockerfile), dockerfile)

    def test_ports_are_the_images(self):
        grpc, metrics = self.image_env("SLUICE_GRPC_PORT"), self.image_env("SLUICE_METRICS_PORT")
        http = self.image_env("SLUICE_HTTP_PORT")
        published = {int(p.split(":")[1]) for p in self.services["sluice"]["ports"]}
        self.assertEqual(published, {http, grpc, metrics})

    def test_prometheus_scrapes_sluice(self):
        config = dict((c, h) for h, c in self.mounts("prometheus"))["/etc/prometheus/prometheus.yml"]
        with open(config) as f:
            scrape = yaml.safe_load(f)["scrape_configs"]
        targets = [t for job in scrape for sc in job["static_configs"] for t in sc["targets"]]
        self.assertIn(f"sluice:{self.image_env('SLUICE_METRICS_PORT')}", targets)
        self.assertEqual([job["metrics_path"] for job in scrape], ["/metrics"])

    def test_grafana_provisions_the_dashboard_and_prometheus(self):
        mounts = dict((c, h) for h, c in self.mounts("grafana"))
        provisioning = mounts["/etc/grafana/provisioning"]
        with open(os.path.join(provisioning, "dashboards", "sluice.yml")) as f:
            provider = yaml.safe_load(f)["providers"][0]
        dashboard_dir = provider["options"]["path"]
        dashboards = [c for c in mounts if c.endswith(".json")]
        self.assertTrue(dashboards)
        for container_path in dashboards:
            self.assertEqual(os.path.dirname(container_path), dashboard_dir)
        with open(os.path.join(provisioning, "datasources", "prometheus.yml")) as f:
            datasource = yaml.safe_load(f)["datasources"][0]
        prometheus_port = int(self.services["prometheus"]["ports"][0].split(":")[1])
        self.assertEqual(datasource["url"], f"http://prometheus:{prometheus_port}")

    def test_stop_grace_covers_the_drain(self):
        m = re.search(r"--exit-timeout-secs[^\n]*=(\d+)", self.help)
        self.assertIsNotNone(m, "no --exit-timeout-secs default in --help")
        # The server's drain (exit timeout) plus gRPC's 1 s grace must end before SIGKILL.
        self.assertGreater(seconds(self.services["sluice"]["stop_grace_period"]),
                           int(m.group(1)) + 1)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--compose", required=True)
    parser.add_argument("--dockerfile", required=True)
    parser.add_argument("--server", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
