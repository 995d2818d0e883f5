"""container_test's skip path and its clean-up, without building an image (issue 34.8).

1. On a machine with neither podman nor container-env.sh, container_test.py exits 77 (CTest:
   skipped) and prints the reason on a "SKIP: " line; run through a real ctest with
   --output-junit, scripts/ctest-skips.py (scripts/test.sh's summary) quotes that reason.
2. Both Dockerfiles label their build stage, and container_test.py prunes exactly that label's
   untagged images (the ~1.1 GB a build leaves behind).
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import unittest

ARGS = None


class SkipTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        # A PATH with python and nothing else: no podman, no docker.
        self.bin = os.path.join(self.tmp.name, "bin")
        os.mkdir(self.bin)
        os.symlink(sys.executable, os.path.join(self.bin, "python3"))
        self.test = os.path.join(ARGS.repo, "tests", "deploy", "container_test.py")
        self.args = ["--repo", ARGS.repo, "--stubs", self.tmp.name,
                     "--container-env", os.path.join(self.tmp.name, "no-container-env.sh")]

    def tearDown(self):
        self.tmp.cleanup()

    def test_exit_77_with_the_reason(self):
        r = subprocess.run([sys.executable, self.test, *self.args], capture_output=True,
                           text=True, env={"PATH": self.bin}, timeout=60)
        self.assertEqual(r.returncode, 77, r.stdout + r.stderr)
        self.assertRegex(r.stdout, r"(?m)^SKIP: no podman on PATH and no .*no-container-env\.sh "
                                   r"to set it up: install podman .*docs/deployment\.md")

    def test_summary_quotes_the_reason(self):
        # A CTest directory as CMake writes one, registered as tests/deploy/CMakeLists.txt does.
        quoted = " ".join(f'"{a}"' for a in [sys.executable, self.test, *self.args])
        with open(os.path.join(self.tmp.name, "CTestTestfile.cmake"), "w") as f:
            f.write(f"add_test(container_test {quoted})\n"
                    f'set_tests_properties(container_test PROPERTIES SKIP_RETURN_CODE 77 '
                    f'ENVIRONMENT "PATH={self.bin}")\n'
                    'add_test(passing_test "true")\n')
        junit = os.path.join(self.tmp.name, "junit.xml")
        ctest = subprocess.run(["ctest", "--output-junit", junit], cwd=self.tmp.name,
                               capture_output=True, text=True, timeout=120)
        self.assertEqual(ctest.returncode, 0, ctest.stdout + ctest.stderr)
        self.assertIn("container_test (Skipped)", ctest.stdout)
        summary = subprocess.run(
            [sys.executable, os.path.join(ARGS.repo, "scripts", "ctest-skips.py"), junit],
            check=True, capture_output=True, text=True).stdout
        self.assertRegex(summary, r"^1 test\(s\) skipped:\n  container_test: no podman on PATH")
        self.assertNotIn("passing_test", summary)


class CleanupTest(unittest.TestCase):
    def test_build_stage_is_labelled_and_pruned_by_that_label(self):
        with open(os.path.join(ARGS.repo, "tests", "deploy", "container_test.py")) as f:
            test = f.read()
        label = re.search(r'BUILD_STAGE_LABEL = "([^"]+)"', test).group(1)
        self.assertIn('"podman", "image", "prune", "-f", "--filter", f"label={BUILD_STAGE_LABEL}"',
                      test)
        # Pruned after the build whether it worked or not, before a failure is raised.
        self.assertLess(test.index("pruned = prune_build_stage()"),
                        test.index('raise RuntimeError("podman build failed'))
        for name in ("Dockerfile", "Dockerfile.cuda"):
            with open(os.path.join(ARGS.repo, "deploy", "docker", name)) as f:
                stages = re.split(r"(?m)^FROM ", f.read())[1:]
            self.assertEqual(len(stages), 2, name)
            self.assertTrue(stages[0].split("\n", 1)[0].endswith(" AS build"), name)
            self.assertIn(f"\nLABEL {label}\n", stages[0], name)
            self.assertNotIn("LABEL", stages[1], f"{name}: the runtime image must not match")


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
