#!/usr/bin/env python3
"""roll_diff.py KILN_COMPILE CONFIG ARGS...: the rolled import must give what the
unrolled one (--no-roll-import) gives: the deployed module, the JSON report and, its
layer loops expanded (--expand-layers), the lowered step, byte for byte (or the same
refusal, e.g. an Eagle3 head's lowering). The rolled import must also really be rolled (a
layer loop in the imported module), or the comparison would prove nothing. The step
lowered as a loop makes the same calls as the unrolled one: test/Compiled's
RolledCalls tests run both."""
import subprocess
import sys

tool, args = sys.argv[1], sys.argv[2:]


def run(extra, refusal_ok=False):
    proc = subprocess.run([tool] + args + extra, capture_output=True, text=True)
    if proc.returncode != 0:
        if refusal_ok:
            return f"exit {proc.returncode}\n{proc.stderr}"
        sys.exit(f"{' '.join([tool] + args + extra)}: exit {proc.returncode}\n{proc.stderr}")
    return proc.stdout


imported = run(["--import-only", "--emit=mlir"])
if "{kiln.layers}" not in imported:
    sys.exit("the import did not roll the layers: no scf.for marked kiln.layers")
for emit, expand in ((["--emit=mlir"], []), (["--report", "json"], []),
                     (["--emit=lowered"], ["--expand-layers"])):
    rolled = run(emit + expand, refusal_ok=True)
    unrolled = run(emit + ["--no-roll-import"], refusal_ok=True)
    if rolled != unrolled:
        for n, (a, b) in enumerate(zip(rolled.splitlines(), unrolled.splitlines())):
            if a != b:
                sys.exit(f"{' '.join(emit)}: line {n + 1} differs\n rolled:   {a}\n"
                         f" unrolled: {b}")
        sys.exit(f"{' '.join(emit)}: {len(rolled)} bytes rolled, {len(unrolled)} unrolled")
print(f"same module, report and lowered step: {' '.join(args)}")
