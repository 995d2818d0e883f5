"""docs/openapi.yaml kept true: schemathesis (PyPI, pinned in tests/python-requirements.txt)
generates requests for every operation the description has, sends them to the running
sluice-server, and checks every answer: no 5xx, a status code and content type the description
lists, and a body that matches its schema. Bounded: a fixed number of examples per operation, a
fixed seed (derandomized), a per-request timeout; the whole run takes seconds.

Afterwards the server must still be alive and answer, and its log must hold no sanitizer report.
"""

import argparse
import os
import subprocess
import sys
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluice_server import SluiceServer  # noqa: E402

ARGS = None
CHECKS = ",".join([
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "response_headers_conformance",
])


class OpenApiConformanceTest(unittest.TestCase):
    def test_schemathesis_finds_no_failure(self):
        server = SluiceServer(ARGS.server, ARGS.models)
        try:
            schemathesis = os.path.join(os.path.dirname(sys.executable), "schemathesis")
            command = [
                schemathesis, "run", os.path.join(ARGS.source, "docs", "openapi.yaml"),
                f"--base-url=http://{server.url}", f"--checks={CHECKS}",
                f"--hypothesis-max-examples={ARGS.examples}", "--hypothesis-derandomize",
                "--hypothesis-seed=21", "--hypothesis-deadline=5000", "--request-timeout=5000",
                "--hypothesis-suppress-health-check=all", "--no-color",
            ]
            start = time.monotonic()
            env = dict(os.environ, SCHEMATHESIS_TELEMETRY="false", HYPOTHESIS_STORAGE_DIRECTORY=
                       os.path.join(os.environ.get("TMPDIR", "/tmp"), f"sluice-hypothesis-{os.getpid()}"))
            run = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
            elapsed = time.monotonic() - start
            report = run.stdout[-20000:] + run.stderr[-5000:]
            self.assertEqual(run.returncode, 0, f"schemathesis found failures:\n{report}")
            self.assertIn("passed", run.stdout, report)
            self.assertLess(elapsed, 100, f"took {elapsed:.0f} s")
            self.assertTrue(server.alive(), f"sluice-server died:\n{server.log()[-5000:]}")
            with urllib.request.urlopen(f"http://{server.url}/v2/health/ready", timeout=5) as r:
                self.assertEqual(r.status, 200)
            print(f"schemathesis: {elapsed:.1f} s\n{run.stdout[-3000:]}")
        finally:
            log = server.log()
            self.assertEqual(server.stop(), 0)
        for marker in ("Sanitizer", "runtime error:"):
            self.assertNotIn(marker, log)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--models", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--examples", type=int, default=12)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
