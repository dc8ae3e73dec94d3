#!/usr/bin/env bash
# Clang's thread-safety analysis over the code whose locks are annotated
# (ABSL_GUARDED_BY and friends): every file of server/ and common/ that
# includes a header naming a mutex, compiled with -fsyntax-only and
# -Werror=thread-safety, with the flags of the CMake build in build/ (run a
# configure first). Exits non-zero on the first file that breaks a lock rule.
#
#   bash scripts/check-thread-safety.sh
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang++ >/dev/null || { echo "check-thread-safety: clang++ is not installed" >&2; exit 2; }
[ -f build/compile_commands.json ] || { echo "check-thread-safety: configure build/ first" >&2; exit 2; }
python3 - <<'PY'
import json, os, re, shlex, subprocess, sys
from concurrent.futures import ThreadPoolExecutor

root = os.getcwd()
commands = json.load(open("build/compile_commands.json"))
annotated = re.compile(rb"ABSL_(GUARDED_BY|EXCLUSIVE_LOCKS_REQUIRED|LOCKS_EXCLUDED|PT_GUARDED_BY)")

def includes_annotated(path, seen):
    """Whether `path` or a project header it includes carries lock annotations."""
    if path in seen or not os.path.exists(path):
        return False
    seen.add(path)
    text = open(path, "rb").read()
    if annotated.search(text):
        return True
    for header in re.findall(rb'#include "((?:server|common)/[^"]+)"', text):
        if includes_annotated(os.path.join(root, header.decode()), seen):
            return True
    return False

jobs = []
for entry in commands:
    source = entry["file"]
    rel = os.path.relpath(source, root)
    if not rel.startswith(("server/", "common/")) or not rel.endswith(".cc"):
        continue
    if not includes_annotated(source, set()):
        continue
    args = shlex.split(entry["command"]) if "command" in entry else entry["arguments"]
    flags = [a for a in args[1:] if a.startswith(("-I", "-D", "-std", "-isystem"))]
    for i, a in enumerate(args):
        if a == "-isystem":
            flags += ["-isystem", args[i + 1]]
    jobs.append((rel, ["clang++", "-fsyntax-only", "-Wthread-safety", "-Werror=thread-safety",
                       "-Wno-unknown-warning-option", "-Wno-unused-command-line-argument",
                       *flags, source]))

def check(job):
    rel, cmd = job
    result = subprocess.run(cmd, cwd=entry_dir, capture_output=True, text=True)
    return rel, result.returncode, result.stderr

entry_dir = os.path.join(root, "build")
failed = 0
with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
    for rel, rc, err in pool.map(check, jobs):
        if rc != 0:
            failed += 1
            print(f"--- {rel}\n{err}", file=sys.stderr)
print(f"check-thread-safety: {len(jobs)} files, {failed} with lock errors")
sys.exit(1 if failed else 0)
PY
