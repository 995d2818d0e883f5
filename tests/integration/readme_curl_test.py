"""README.md's curl examples, run exactly as written (between the http-examples markers), against a
real sluice-server on a free port: `localhost:8000` in each command becomes that port, nothing
else changes. Each command must exit 0 (the examples use curl -f: an HTTP error fails them) and
print something; the infer example must print OUTPUT0 = INPUT0 + INPUT1.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluice_server import SluiceServer  # noqa: E402

ARGS = None


def readme_commands(path):
    text = open(path, encoding="utf-8").read()
    match = re.search(r"<!-- http-examples:begin -->(.*?)<!-- http-examples:end -->", text, re.S)
    if match is None:
        raise AssertionError("README.md has no <!-- http-examples:begin/end --> block")
    blocks = re.findall(r"```sh\n(.*?)```", match.group(1), re.S)
    commands, current = [], ""
    for line in "\n".join(blocks).splitlines():
        current += line + "\n"
        # A command ends where its quotes are balanced (the infer example spans lines).
        if current.count("'") % 2 == 0:
            if current.strip():
                commands.append(current.strip())
            current = ""
    return commands


class ReadmeCurlTest(unittest.TestCase):
    def test_examples_run_as_written(self):
        commands = readme_commands(os.path.join(ARGS.source, "README.md"))
        self.assertGreaterEqual(len(commands), 4, commands)
        server = SluiceServer(ARGS.server, ARGS.models)
        try:
            for command in commands:
                with self.subTest(command=command.splitlines()[0]):
                    self.assertIn("localhost:8000", command)
                    run = subprocess.run(
                        ["bash", "-c", command.replace("localhost:8000", server.url)],
                        capture_output=True, text=True, timeout=30)
                    self.assertEqual(run.returncode, 0, f"{command}\n{run.stdout}{run.stderr}")
                    self.assertTrue(run.stdout.strip(), command)
                    if "/infer" in command:
                        answer = json.loads(run.stdout)
                        self.assertEqual(answer["outputs"][0]["name"], "OUTPUT0")
                        self.assertEqual(answer["outputs"][0]["data"], list(range(1, 17)))
        finally:
            self.assertEqual(server.stop(), 0)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--models", required=True)
    parser.add_argument("--source", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
