#!/usr/bin/env python3
"""ctest-skips.py JUNIT_XML: one line per test CTest skipped, with the reason the test printed.

CTest itself only says "Skipped" (SKIP_RETURN_CODE, SKIP_REGULAR_EXPRESSION); scripts/test.sh runs
ctest with --output-junit and prints this after it. The reason is the test's first line starting
"SKIP:" (our scripts' convention), else the line after gtest's "Skipped" (GTEST_SKIP), else the last
line it printed. Prints nothing when nothing was skipped.
"""
import sys
import xml.etree.ElementTree as ET


def reason(output):
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in lines:
        if line.startswith("SKIP:"):
            return line[len("SKIP:"):].strip()
    for i, line in enumerate(lines[:-1]):
        if line.endswith(": Skipped") or line == "Skipped":
            return lines[i + 1]
    return lines[-1] if lines else "(the test printed no reason)"


def main():
    root = ET.parse(sys.argv[1]).getroot()
    skipped = [case for case in root.iter("testcase") if case.get("status") == "notrun"
               or case.find("skipped") is not None]
    if not skipped:
        return 0
    print(f"{len(skipped)} test(s) skipped:")
    for case in skipped:
        out = case.findtext("system-out") or ""
        print(f"  {case.get('name')}: {reason(out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
