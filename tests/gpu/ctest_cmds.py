#!/usr/bin/env python3
"""Each test's command and environment as CTest holds them (from
`ctest --show-only=json-v1` on stdin), one line per test, tab-separated: the
name, the environment (VAR=VALUE words, or - for none: read(1) would merge
two tabs) and the command, both shell-quoted,
for scripts that run the tests under another tool (sanitize_run.sh).
Filters: --label L, --regex R."""
import json
import re
import shlex
import sys

label, regex = None, "."
args = sys.argv[1:]
while args:
    flag, val, args = args[0], args[1], args[2:]
    if flag == "--label":
        label = val
    elif flag == "--regex":
        regex = val
    else:
        sys.exit(f"ctest_cmds.py: unknown flag {flag}: allowed --label L, --regex R")
for t in json.load(sys.stdin)["tests"]:
    props = {p["name"]: p["value"] for p in t.get("properties", [])}
    if label and label not in props.get("LABELS", []):
        continue
    if not re.search(regex, t["name"]) or "command" not in t:
        continue
    env = props.get("ENVIRONMENT", [])
    print("\t".join([t["name"], shlex.join(env) or "-", shlex.join(t["command"])]))
