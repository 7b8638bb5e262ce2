"""The closing line of scripts/test.sh: the test suite's and the conformance suite's counts added
up, so the last line CI prints says how many tests ran in all (``total: N passed, N failed``)."""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def pytest_counts(path: Path) -> tuple[int, int, int]:
    """(passed, failed, skipped) from pytest's JUnit XML; errors count as failed."""
    if not path.is_file():
        return 0, 1, 0  # pytest did not even write its report: count that as a failure
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    tests = sum(int(s.get("tests", 0)) for s in suites)
    failed = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
    skipped = sum(int(s.get("skipped", 0)) for s in suites)
    return tests - failed - skipped, failed, skipped


def conformance_counts(path: Path) -> tuple[int, int, int]:
    if not path.is_file():
        return 0, 0, 0
    found = re.search(r"conformance: (\d+) passed, (\d+) failed, (\d+) skipped", path.read_text())
    return (int(found[1]), int(found[2]), int(found[3])) if found else (0, 1, 0)


def main(argv: list[str]) -> int:
    p1, f1, s1 = pytest_counts(Path(argv[1]))
    p2, f2, s2 = conformance_counts(Path(argv[2]))
    print(f"total: {p1 + p2} passed, {f1 + f2} failed, {s1 + s2} skipped")
    return 1 if f1 + f2 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
