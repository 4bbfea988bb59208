#!/usr/bin/env python3
"""Adds up the test results and prints 'N passed, N failed, N skipped'.

Counts individual cases: every lit test, every gtest case (from the XML each gtest
binary wrote into --gtest-dir, named after the binary), and every other ctest test
(e.g. command-line checks) once. Exits non-zero when anything failed or a result file
is missing."""
import argparse
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def outcome(case):
    if case.find("failure") is not None or case.find("error") is not None:
        return "failed"
    skipped = case.find("skipped")
    if skipped is not None or case.get("result") == "skipped" or case.get("status") == "notrun":
        return "skipped"
    return "passed"


def load(path):
    try:
        return ET.parse(path).getroot()
    except (OSError, ET.ParseError) as error:
        print(f"missing or broken test results {path}: {error}")
        return None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lit", required=True, help="lit's JUnit XML")
    parser.add_argument("--ctest", required=True, help="ctest's JUnit XML")
    parser.add_argument("--gtest-dir", required=True, help="XML files of the gtest binaries")
    parser.add_argument("--extra-passed", type=int, default=0)
    parser.add_argument("--extra-failed", type=int, default=0)
    args = parser.parse_args()

    counts = {"passed": args.extra_passed, "failed": args.extra_failed, "skipped": 0}
    lit = load(args.lit)
    if lit is None:
        counts["failed"] += 1
    else:
        for case in lit.iter("testcase"):
            counts[outcome(case)] += 1

    ctest = load(args.ctest)
    if ctest is None:
        counts["failed"] += 1
        ctest_cases = []
    else:
        ctest_cases = list(ctest.iter("testcase"))
    gtest_dir = Path(args.gtest_dir)
    for case in ctest_cases:
        name = case.get("name", "")
        binary_result = outcome(case)
        gtest = gtest_dir / f"{name}.xml"
        cases = list(load(gtest).iter("testcase")) if gtest.exists() else []
        if not cases:
            counts[binary_result] += 1
            continue
        for gcase in cases:
            counts[outcome(gcase)] += 1
        # A binary that crashed after writing some cases still counts as a failure.
        if binary_result == "failed" and not any(outcome(c) == "failed" for c in cases):
            counts["failed"] += 1
    print(f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
