#!/usr/bin/env python3
"""Every command in README.md and docs/*.md runs as written.

The commands are the lines of the ```sh / ```bash / ```shell / ```console blocks (a trailing
backslash joins lines; a console block's "$ " is dropped) and the "$ " lines of unmarked
blocks. Each one that invokes overlapctl or overlapd is checked in one of these ways:

  run    (the default) against a host-backend daemon this script starts, in a scratch
         directory, also its $HOME, that holds the repository's deploy/, bench/, scripts/ and
         the files the docs name: a tiny graph as layer.yaml and my-layer.yaml, a recorded
         bench --torch-peers JSON as bench.json, Mistral 7B's config.json under ~/models;
         every command of the line's pipeline must exit 0. Job ids (job-000042, JOB, ID,
         OLD NEW) become jobs that ran here, and --addr the daemon's socket.
  parse  its flags parse: overlapctl runs against a socket nobody listens on and must not exit
         with a usage error (64, "Run with --help"); overlapd's flags must be in overlapd --help.
         For what cannot run here (a GPU, other nodes, systemd, a size the host backend cannot
         hold).
  block  the whole block runs as one bash script (a loop that starts daemons), in the scratch
         directory with /tmp/ovl moved into it and its loopback peer ports (7101, 7102) moved to
         two free ones; it must exit 0.
  skip   not run at all; the reason says why.

Which lines are not `run` is said in snippets.allow beside this script, one entry each with its
reason; an entry that matches no line fails the test, so the list stays as small as the docs.

Inline code in prose (`overlapctl tuning forget --stale`, `overlapd --print-config`) names a
command and flags: the command must exist and every flag it names must be in that command's
--help (or the global options), so a renamed flag fails here too. And docs/CLI.md's reference
(its first block) has an entry for every command, describes every flag the command's --help
defines, and its synopses name no flag the command lacks.
"""

import argparse
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# overlapctl's global options that take a value (client/main.cc), skipped before the command.
GLOBAL_OPTIONS_WITH_VALUE = {"--addr", "-o", "--output", "--tls-ca", "--tls-cert", "--tls-key",
                             "--tls-server-name"}
EXIT_USAGE = 64  # overlapctl's kExitUsage (client/core/command_io.h)
RUN_TIMEOUT_S = 60
PARSE_TIMEOUT_S = 20
BLOCK_TIMEOUT_S = 90
SHELLS = {"sh", "bash", "shell", "console"}


class Snippet:
    def __init__(self, path, line, text, block_id):
        self.path, self.line, self.text, self.block_id = path, line, text, block_id

    def where(self):
        return f"{self.path}:{self.line}"


def fenced_commands(path, rel):
    """The logical command lines of path's shell blocks, and each block's lines by id."""
    snippets, blocks = [], {}
    lang, block_id, pending, pending_line = None, 0, "", 0
    for number, raw in enumerate(path.read_text().split("\n"), 1):
        fence = re.match(r"^\s*```(\S*)", raw)
        if fence:
            if lang is None:
                lang, block_id = (fence.group(1) or "-"), block_id + 1
                blocks[block_id] = []
            else:
                lang = None
            continue
        if lang is None:
            continue
        line = raw
        if lang == "-" or lang == "console":
            prompt = re.match(r"^\s*\$ (.*)$", line)
            if prompt:
                line = prompt.group(1)
            elif lang == "-" or not pending:
                continue  # output, or prose in an unmarked block
        elif lang not in SHELLS:
            continue
        blocks[block_id].append(line)
        if not pending:
            pending_line = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        text = re.sub(r"\s+", " ", pending + line).strip()
        pending = ""
        if invocations(text, "overlapctl") or invocations(text, "overlapd"):
            snippets.append(Snippet(rel, pending_line, text, (rel, block_id)))
    return snippets, {(rel, k): v for k, v in blocks.items()}


def inline_commands(path, rel):
    """`overlapctl ...` and `overlapd ...` spans in prose (outside fences)."""
    found, in_fence = [], False
    for number, raw in enumerate(path.read_text().split("\n"), 1):
        if re.match(r"^\s*```", raw):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        for span in re.findall(r"`((?:overlapctl|overlapd) [^`]*)`", raw):
            found.append(Snippet(rel, number, span, None))
    return found


def read_allow_list(path):
    """{command text: (mode, file, reason)} from MODE FILE: REASON lines, each followed by the
    command, indented, as the docs write it (continuations joined)."""
    entries, header = {}, None
    for raw in path.read_text().split("\n"):
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        if raw[0].isspace():
            if header is None:
                sys.exit(f"{path}: a command without a MODE FILE: REASON line: {raw.strip()}")
            entries[(header[1], raw.strip())] = header
            continue
        match = re.match(r"^(parse|block|skip) (\S+): (.+)$", raw)
        if not match:
            sys.exit(f"{path}: not MODE FILE: REASON: {raw}")
        header = match.groups()
    return entries


def help_text(binary, words):
    result = subprocess.run([binary, *words, "--help"], capture_output=True, text=True,
                            timeout=PARSE_TIMEOUT_S)
    return result.stdout


def flags_in_help(text):
    return set(re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)", text))


def subcommands_in_help(text):
    part = text.split("Subcommands:", 1)
    return set(re.findall(r"^  ([a-z][a-z0-9-]*) ", part[1], re.M)) if len(part) == 2 else set()


class Helps:
    """overlapctl's and overlapd's --help, read once per command path."""

    def __init__(self, overlapctl, overlapd):
        self.overlapctl, self.overlapd, self.cache = overlapctl, overlapd, {}

    def ctl(self, path):
        if path not in self.cache:
            self.cache[path] = help_text(self.overlapctl, list(path))
        return self.cache[path]

    def check_ctl_words(self, words):
        """Problems with `overlapctl WORDS`: an unknown command, a flag no --help lists."""
        path, rest, flags = (), list(words), []
        while rest:
            word = rest.pop(0)
            if word.startswith("-"):
                flags.append(word.split("=", 1)[0])
                if word in GLOBAL_OPTIONS_WITH_VALUE and rest:
                    rest.pop(0)
            elif word in subcommands_in_help(self.ctl(path)):
                path += (word,)
            else:
                if not path and re.fullmatch(r"[a-z][a-z-]*", word):
                    return [f"no command '{word}'"]
                break
        flags += [w.split("=", 1)[0] for w in rest if w.startswith("--")]
        known = flags_in_help(self.ctl(())) | flags_in_help(self.ctl(path))
        return [f"'{' '.join(path)}' has no flag {flag}" for flag in flags
                if flag.startswith("--") and flag not in known]

    def check_overlapd_words(self, words):
        if "overlapd" not in self.cache:
            self.cache["overlapd"] = help_text(self.overlapd, [])
        known = flags_in_help(self.cache["overlapd"])
        return [f"overlapd has no flag {w}" for w in (x.split("=", 1)[0] for x in words)
                if w.startswith("--") and w not in known]


def defined_flags(help_text_):
    """The long flags a --help defines (its option lines, not the flags its prose names)."""
    flags = set()
    for names in re.findall(r"^  (?:-[a-zA-Z],)?(--[a-z0-9-]+(?:,--[a-z0-9-]+)*)", help_text_,
                            re.M):
        flags.update(names.split(","))
    return flags - {"--help"}


def reference_entries(cli_md):
    """docs/CLI.md's first block, the reference: {command path: its entries' text}. An entry
    starts at a line indented two spaces; its synopsis runs to the description at column 30."""
    lines = cli_md.split("\n")
    start = lines.index("```")
    block = lines[start + 1:lines.index("```", start + 1)]
    entries, path = {}, None
    for line in block:
        head = re.match(r"^  ([a-z][a-z-]*)(?: ([a-z][a-z-]*))?", line)
        if head:
            path = (head.group(1), head.group(2))
        if path:
            entries.setdefault(path, []).append(line)
    return entries


def synopsis(line):
    """The part of a reference line before its description (column 30), "" for a description."""
    if line.startswith(" " * 30):
        return ""
    return line[:30] if len(line) > 30 and line[28:30] == "  " and line[30] != " " else line


def check_reference(helps, cli_md):
    """Every command and every flag its --help defines is in CLI.md's reference, under it, and
    its synopses name no flag it lacks."""
    problems, documented = [], {}
    flag = r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)"
    for (command, word), lines in reference_entries(cli_md).items():
        path = (command, word) if word in subcommands_in_help(helps.ctl((command,))) else (
            command,)
        documented.setdefault(path, set()).update(re.findall(flag, " ".join(lines)))
        known = flags_in_help(helps.ctl(())) | defined_flags(helps.ctl(path))
        problems += [f"docs/CLI.md: `overlapctl {' '.join(path)}` has no flag {f}" for f in
                     re.findall(flag, " ".join(synopsis(line) for line in lines))
                     if f not in known]
    for command in sorted(subcommands_in_help(helps.ctl(()))):
        paths = [(command,)] + [(command, s) for s in subcommands_in_help(helps.ctl((command,)))]
        for path in paths:
            if len(path) == 2 and path not in documented and (command,) in documented:
                continue  # the command's entry covers its subcommands
            if len(paths) > 1 and path == (command,) and path not in documented:
                continue  # entries of its subcommands (tuning list, tuning forget) only
            if path not in documented:
                problems.append(f"docs/CLI.md: no entry for `overlapctl {' '.join(path)}`")
                continue
            problems += [f"docs/CLI.md: `overlapctl {' '.join(path)}` {flag} is not described"
                         for flag in sorted(defined_flags(helps.ctl(path)) - documented[path])]
    return problems


def invocations(text, program):
    """The words after each `program` in a command line's pipeline segments."""
    found = []
    for segment in re.split(r"\|\||&&|[|;]|\$\(", text):
        words = segment.split()
        while words and words[0] in ("sudo", "timeout", "exec") or (
                words and re.fullmatch(r"\d+|-\S+|[A-Z_]+=\S*", words[0])):
            words.pop(0)
        comment = next((i for i, w in enumerate(words) if w.startswith("#")), len(words))
        if words and Path(words[0]).name == program:
            found.append(words[1:comment])
    return found


class Daemon:
    def __init__(self, overlapd, overlapctl, work):
        self.overlapctl = overlapctl
        self.addr = f"unix:{work}/daemon/overlapd.sock"
        self.log = open(work / "daemon.log", "w")
        self.process = subprocess.Popen(
            [overlapd, "--backend", "host", "--host-devices", "2", "--listen", self.addr,
             "--state-dir", str(work / "daemon" / "state")], stdout=self.log,
            stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                sys.exit(f"overlapd exited at start; its log: {work / 'daemon.log'}")
            if subprocess.run([overlapctl, "--addr", self.addr, "node"],
                              capture_output=True).returncode == 0:
                return
            time.sleep(0.1)
        self.process.kill()
        sys.exit(f"overlapd did not answer within 60 s; its log: {work / 'daemon.log'}")

    def submit(self, graph):
        result = subprocess.run([self.overlapctl, "--addr", self.addr, "-o", "name", "-q",
                                 "submit", str(graph), "--wait"], capture_output=True, text=True,
                                timeout=RUN_TIMEOUT_S)
        if result.returncode != 0:
            sys.exit(f"submit {graph}: exit {result.returncode}: {result.stderr}")
        return result.stdout.split()[-1]

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()


def free_port_prefix():
    """The loopback cluster's peer ports are 710 and a node number (7101, 7102): a three-digit
    prefix whose two ports are free here instead, so that the block cannot meet another run's."""
    for prefix in random.sample(range(200, 655), 50):
        try:
            with socket.socket() as first, socket.socket() as second:
                first.bind(("127.0.0.1", prefix * 10 + 1))
                second.bind(("127.0.0.1", prefix * 10 + 2))
            return str(prefix)
        except OSError:
            continue
    return "710"


def substitute(text, jobs, addr, work):
    if addr is not None:
        text = re.sub(r"--addr[ =]\S+", f"--addr {addr}", text)
    text = re.sub(r"\bjob-\d{6}\b", jobs[0], text)
    text = re.sub(r"<id>|\bJOB\b|\bID\b|\bOLD\b|\bA\b(?= B\b)", jobs[0], text)
    text = re.sub(r"\bNEW\b|(?<=\s)B\b", jobs[1], text)
    text = text.replace("/tmp/ovl", f"{work}/ovl")
    return text


def run_shell(script, env, cwd, timeout):
    """bash -c SCRIPT in a process group of its own, which is ended afterwards (a daemon a block
    left behind); (exit status of each command of its last pipeline, output), or (None, output)
    when it ran past timeout."""
    wrapped = script + '\necho "@@pipestatus ${PIPESTATUS[*]}"'
    with tempfile.TemporaryFile(mode="w+") as log:
        process = subprocess.Popen(["bash", "-c", wrapped], env=env, cwd=cwd, stdout=log,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                break
            time.sleep(0.5)
        process.wait()
        log.seek(0)
        output = log.read()
    marker = re.search(r"@@pipestatus ([\d ]+)", output)
    if process.returncode < 0 and not marker:
        return None, f"timed out after {timeout} s: {output}"
    codes = [int(c) for c in marker.group(1).split()] if marker else [process.returncode]
    return codes, output.replace(marker.group(0), "") if marker else output


def scratch_dir(src):
    """The directory the commands run in, also their $HOME: the repository's folders the docs
    name, and the files they take as their own (made again before each command by fixtures())."""
    work = Path(tempfile.mkdtemp(prefix="docsnip."))
    for name in ("deploy", "bench", "scripts", "docs", "client", "tests"):
        (work / name).symlink_to(src / name)
    return work


def fixtures(src, work):
    here = src / "tests" / "docs"
    for name in ("layer.yaml", "my-layer.yaml"):
        shutil.copy(here / "tiny-layer.yaml", work / name)
    # A bench --torch-peers JSON, as export --bench reads: the recorded two-H200 run.
    shutil.copy(src / "docs/results/torch-peers-after-h200x2-2026-12-01-run29-heat.json",
                work / "bench.json")
    (work / "models/Mistral-7B").mkdir(parents=True, exist_ok=True)
    shutil.copy(here / "mistral-7b-config.json", work / "models/Mistral-7B/config.json")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source", type=Path, required=True)
    parser.add_argument("--overlapctl", required=True)
    parser.add_argument("--overlapd", required=True)
    parser.add_argument("--list", action="store_true", help="print each line's mode, run none")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = parser.parse_args()
    src = args.source.resolve()
    here = src / "tests" / "docs"
    allow = read_allow_list(here / "snippets.allow")
    used = set()

    docs = [src / "README.md"] + sorted((src / "docs").glob("*.md"))
    snippets, blocks, inline = [], {}, []
    for path in docs:
        rel = str(path.relative_to(src))
        found, found_blocks = fenced_commands(path, rel)
        snippets += found
        blocks.update(found_blocks)
        inline += inline_commands(path, rel)

    def mode_of(snippet, default):
        key = (snippet.path, snippet.text)
        if key in allow:
            used.add(key)
            return allow[key][0]
        return default

    failures = []
    helps = Helps(args.overlapctl, args.overlapd)
    for snippet in inline:
        if mode_of(snippet, "inline") == "skip":
            continue
        for words in invocations(snippet.text, "overlapctl"):
            failures += [f"{snippet.where()}: `{snippet.text}`: {p}"
                         for p in helps.check_ctl_words(words)]
        for words in invocations(snippet.text, "overlapd"):
            failures += [f"{snippet.where()}: `{snippet.text}`: {p}"
                         for p in helps.check_overlapd_words(words)]

    failures += check_reference(helps, (src / "docs" / "CLI.md").read_text())

    plan = [(s, mode_of(s, "run")) for s in snippets]
    whole = {s.block_id for s, mode in plan if mode == "block"}
    plan = [(s, "block" if s.block_id in whole else mode) for s, mode in plan]
    if args.list:
        for snippet, mode in plan:
            print(f"{mode:5} {snippet.where()}: {snippet.text}")
    stale = [f"{k[0]}: {k[1]}" for k in allow if k not in used]
    failures += [f"snippets.allow: no such docs line (fix or drop the entry): {s}" for s in stale]
    if args.list:
        print("\n".join(failures))
        return 1 if failures else 0

    bin_dirs = os.pathsep.join({str(Path(args.overlapctl).resolve().parent),
                                str(Path(args.overlapd).resolve().parent)})
    work = scratch_dir(src)
    fixtures(src, work)
    daemon = Daemon(args.overlapd, args.overlapctl, work)
    counts = {"run": 0, "parse": 0, "block": 0, "skip": 0}
    try:
        jobs = [daemon.submit(work / "layer.yaml"), daemon.submit(work / "layer.yaml")]
        dead = f"unix:{work}/nobody-listens.sock"
        base_env = {k: v for k, v in os.environ.items() if not k.startswith("OVERLAPD_")}
        base_env["PATH"] = bin_dirs + os.pathsep + base_env.get("PATH", "")
        base_env["HOME"] = str(work)
        done_blocks = set()
        for snippet, mode in plan:
            counts[mode] += 1
            if mode == "skip":
                continue
            fixtures(src, work)
            if mode == "block":
                if snippet.block_id in done_blocks:
                    continue
                done_blocks.add(snippet.block_id)
                script = substitute("\n".join(blocks[snippet.block_id]), jobs, None, work)
                script = re.sub(r"127\.0\.0\.1:710(?=\$n|%s|[12]\b)",
                                f"127.0.0.1:{free_port_prefix()}", script)
                codes, output = run_shell("set -e\n" + script, dict(base_env), work,
                                          BLOCK_TIMEOUT_S)
                if codes is None or any(codes):
                    (work / "block.log").write_text(output)
                    failures.append(f"{snippet.where()}: the block exited {codes} (all its "
                                    f"output: {work / 'block.log'}): {output[-1500:]}")
                continue
            addr = daemon.addr if mode == "run" else dead
            text = substitute(snippet.text, jobs, addr, work)
            env = dict(base_env, OVERLAPD_ADDR=addr)
            if mode == "parse":
                for words in invocations(text, "overlapd"):
                    failures += [f"{snippet.where()}: {p}" for p in
                                 helps.check_overlapd_words(words)]
                if not invocations(text, "overlapctl"):
                    continue
            codes, output = run_shell(text, env, work,
                                      RUN_TIMEOUT_S if mode == "run" else PARSE_TIMEOUT_S)
            if codes is None:
                failures.append(f"{snippet.where()}: `{snippet.text}`: {output[-800:]}")
            elif mode == "run" and any(codes):
                failures.append(f"{snippet.where()}: `{snippet.text}` (ran `{text}`) exited "
                                f"{codes}: {output[-800:]}")
            elif EXIT_USAGE in codes or "Run with --help" in output:
                failures.append(f"{snippet.where()}: `{snippet.text}`: a usage error: "
                                f"{output[-800:]}")
    finally:
        daemon.stop()
        if not args.keep and not failures:
            shutil.rmtree(work, ignore_errors=True)

    print(f"docs snippets: {counts['run']} run, {counts['parse']} flags parsed, "
          f"{counts['block']} lines in whole blocks, {counts['skip']} skipped; {len(inline)} inline "
          f"commands' flags checked")
    for failure in failures:
        print("FAIL:", failure)
    if failures:
        print(f"(scratch directory kept: {work})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
