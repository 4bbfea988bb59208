#!/usr/bin/env python3
"""Adds up the test results and prints 'N passed, N failed, N skipped'.

Counts individual cases: every lit test, every gtest case (from the XML each gtest
binary wrote into --gtest-dir, named after the binary), and every other ctest test
(e.g. command-line checks) once. --also adds another run of lit and ctest (the
sanitizer build's), --junit a JUnit file whose cases count once each (the fuzz smoke
runs); with either, a line per part precedes the total. Exits non-zero when anything
failed or a result file is missing."""
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


def count_run(lit_path, ctest_path, gtest_dir):
    """Cases of one lit + ctest run."""
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    lit = load(lit_path)
    if lit is None:
        counts["failed"] += 1
    else:
        for case in lit.iter("testcase"):
            counts[outcome(case)] += 1

    ctest = load(ctest_path)
    if ctest is None:
        counts["failed"] += 1
        ctest_cases = []
    else:
        ctest_cases = list(ctest.iter("testcase"))
    gtest_dir = Path(gtest_dir)
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
    return counts


def count_junit(path):
    """Every case of a JUnit file once."""
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    root = load(path)
    if root is None:
        counts["failed"] += 1
    else:
        for case in root.iter("testcase"):
            counts[outcome(case)] += 1
    return counts


def line(counts):
    return f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lit", required=True, help="lit's JUnit XML")
    parser.add_argument("--ctest", required=True, help="ctest's JUnit XML")
    parser.add_argument("--gtest-dir", required=True, help="XML files of the gtest binaries")
    parser.add_argument("--extra-passed", type=int, default=0)
    parser.add_argument("--extra-failed", type=int, default=0)
    parser.add_argument("--also", nargs=4, action="append", default=[],
                        metavar=("LABEL", "LIT", "CTEST", "GTEST_DIR"),
                        help="another lit + ctest run, counted in the total")
    parser.add_argument("--junit", nargs=2, action="append", default=[],
                        metavar=("LABEL", "XML"), help="a JUnit file, one count per case")
    args = parser.parse_args()

    parts = []
    main_counts = count_run(args.lit, args.ctest, args.gtest_dir)
    main_counts["passed"] += args.extra_passed
    main_counts["failed"] += args.extra_failed
    parts.append(("build and tests", main_counts))
    for label, lit, ctest, gtest_dir in args.also:
        parts.append((label, count_run(lit, ctest, gtest_dir)))
    for label, path in args.junit:
        parts.append((label, count_junit(path)))

    counts = {"passed": 0, "failed": 0, "skipped": 0}
    for label, part in parts:
        for key in counts:
            counts[key] += part[key]
        if len(parts) > 1:
            print(f"  {label}: {line(part)}")
    print(line(counts))
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
