"""sluice-server's size and boolean flags as an operator reads and writes them (issue 34.5).

--help shows sizes with units ("=4 GiB", not "=4294967296") and booleans as true/false; size flags
accept units on input ("64MiB", "2KiB", plain bytes), refuse bad sizes with a message that says
what is accepted, and the value given with a unit is the one in effect (an HTTP body one byte
over --max-request-bytes=2KiB is refused with 413, one at the limit is not).
"""

import argparse
import os
import re
import subprocess
import sys
import unittest
import urllib.error
import urllib.request

ARGS = None


def run_server(*flags):
    return subprocess.run([ARGS.server, *flags], capture_output=True, text=True, timeout=60)


class HelpTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.help = run_server("--help").stdout
        # One entry per flag: "--name TYPE...=default (Env:...)".
        cls.flags = {m.group(1): m.group(0) for m in
                     re.finditer(r"^  (--[a-z0-9-]+)[^\n]*", cls.help, re.M)}

    def test_sizes_have_units(self):
        self.assertIn("--grpc-memory-quota-bytes SIZE:in [16 MiB - 16 TiB]=4 GiB", self.help)
        self.assertIn("--max-model-load-bytes SIZE:in [1 - 1 PiB]=4 GiB", self.help)
        self.assertNotIn("4294967296", self.help)
        size_flags = [f for f in self.flags if re.search(r"-bytes\b", f)]
        self.assertGreaterEqual(len(size_flags), 10, size_flags)
        for flag in size_flags:
            line = self.flags[flag]
            self.assertIn(" SIZE", line, line)
            default = re.search(r"=([^(]*) \(Env:", line).group(1)
            # A default that a binary unit divides is written with that unit.
            if default.isdigit() and int(default) >= 1024:
                self.assertNotEqual(int(default) % 1024, 0, line)

    def test_booleans_are_words(self):
        booleans = [line for line in self.flags.values() if " BOOLEAN" in line]
        self.assertGreaterEqual(len(booleans), 5, booleans)
        for line in booleans:
            self.assertRegex(line, r"BOOLEAN=(true|false) ", line)


class InputTest(unittest.TestCase):
    def test_bad_sizes_are_refused_with_the_accepted_forms(self):
        for value, why in (("64XB", "unknown unit 'xb'"), ("1.5GiB", "unknown unit '.5gib'"),
                           ("-1", "no number"), ("99999999999999999999", "too large")):
            result = run_server(f"--max-request-bytes={value}")
            self.assertNotEqual(result.returncode, 0, value)
            self.assertIn(f"'{value}' is not a byte size ({why})", result.stderr)
            self.assertIn("64MiB", result.stderr)

    def test_out_of_range_names_the_bounds_with_units(self):
        result = run_server("--grpc-memory-quota-bytes=1MiB")
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("1MiB is outside [16 MiB - 16 TiB]", result.stderr)

    def test_a_size_with_a_unit_is_in_effect(self):
        sys.path.insert(0, os.path.join(ARGS.source, "tests", "integration"))
        from sluice_server import SluiceServer
        server = SluiceServer(ARGS.server, ARGS.models,
                              ["--max-request-bytes=2KiB", "--grpc-memory-quota-bytes=64MiB",
                               "--http-max-json-bytes=512KiB", "--max-config-bytes=1048576"])
        try:
            url = f"http://{server.url}/v2/models/identity/infer"

            def post(size):
                request = urllib.request.Request(url, data=b" " * size, method="POST",
                                                 headers={"Content-Type": "application/json"})
                try:
                    with urllib.request.urlopen(request, timeout=10) as response:
                        return response.status
                except urllib.error.HTTPError as e:
                    return e.code

            self.assertEqual(post(2049), 413)
            self.assertNotEqual(post(2048), 413)  # read, then refused as bad JSON (400)
        finally:
            self.assertEqual(server.stop(), 0)


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--models", required=True)
    parser.add_argument("--source", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
