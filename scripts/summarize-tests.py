#!/usr/bin/env python3
"""Adds up JUnit XML results (lit, ctest) and prints 'N passed, N failed, N skipped'.
Exits non-zero when anything failed or a result file is missing."""
import argparse
import sys
import xml.etree.ElementTree as ET

parser = argparse.ArgumentParser()
parser.add_argument("files", nargs="+")
parser.add_argument("--extra-passed", type=int, default=0)
parser.add_argument("--extra-failed", type=int, default=0)
args = parser.parse_args()

passed, failed, skipped = args.extra_passed, args.extra_failed, 0
for path in args.files:
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as error:
        print(f"missing or broken test results {path}: {error}")
        failed += 1
        continue
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        elif case.find("skipped") is not None:
            skipped += 1
        else:
            passed += 1
print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed else 0)
