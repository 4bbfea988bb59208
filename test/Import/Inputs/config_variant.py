#!/usr/bin/env python3
"""Prints a config.json with fields replaced: config_variant.py BASE.json KEY=JSON ...
(a KEY=- deletes the field). For tests of what the importer rejects."""
import json
import sys

config = json.load(open(sys.argv[1]))
for assignment in sys.argv[2:]:
    key, value = assignment.split("=", 1)
    if value == "-":
        config.pop(key, None)
    else:
        config[key] = json.loads(value)
print(json.dumps(config, indent=2))
