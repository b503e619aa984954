#!/usr/bin/env python3
"""Runs every `distprof` command that README.md and docs/*.md show, and fails on the first
documented command that no longer works.

Usage: python3 tests/docs_commands.py --distprof target/debug/distprof [--python PY] [--only TEXT]
       python3 tests/docs_commands.py --list

What counts as a command (the same rules as the name check in rust/distprof-cli/src/main.rs):
a line of a fenced block that starts with `distprof ` (or `$ distprof `, or holds
`-p distprof-cli -- `), and an inline code span that starts with `distprof `. A trailing
` # comment` is dropped. Identical commands run once.

How each is run, decided by tests/docs_commands.toml, keyed by the command's exact text:
- no entry: run as written, with `cargo run ... -p distprof-cli --` replaced by the binary
  under test. A command holding a placeholder (`<x>`, `[..]`, `...`, `a\\|b`, an upper-case
  word such as DIR) cannot run as written and must have an entry: the runner says so.
- `run = "..."`: a marked equivalent (smaller sizes, fixture paths for placeholders), run
  with bash in a scratch directory. `expect_exit` (default 0) is the exit status it must
  give; documented error examples expect theirs.
- `mention = true`: prose naming a command or a flag, not a command line; the runner checks
  that `distprof <subcommand> --help` lists every flag the mention names.
An entry whose text no longer appears in the docs is an error too, so the table stays true.

Fixtures, made on first use and exported to the commands as environment variables:
- $TRACES: real JAX traces with their distprof planes, one directory per process as in the
  README's Python example (`/tmp/prof/<rank>`): 2 JAX CPU processes with different real
  clocks (libfaketime), made by tests/jax/skewed_e2e.py with the Python package installed
  (tests/steps/60-python-package.sh installs it into the venv given by --python);
- $RUN: the run directory of `distprof local --nodes 3 --duration 4 --window-s 1`;
- $XLA: the synthetic XLA workspace of tests/fixtures/xla-wiring (commands copy it first);
- $HOOKS: a hooks directory for `xla apply --local-dir` (that fixture's print-only hooks);
- $REPO: this checkout (presets, schema, fixtures);
- $TARGET: the cargo target directory of the binary under test (the debug staticlib of
  distprof-ffi and the cxx bridge headers that `cargo build` of the workspace wrote);
- $PORT: a free loopback port, new for each command.
"""

import argparse
import glob
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLE = os.path.join(ROOT, "tests", "docs_commands.toml")
CARGO_RUN = re.compile(r"^cargo run\b.*?-p distprof-cli -- ")
# Spans that start like a command and are not one: the plugin's log line `distprof disabled: <why>`.
NOT_COMMANDS = ("distprof disabled",)
PLACEHOLDER = re.compile(r"<[^>]*>|\[|\.\.\.|\\\||\b[A-Z][A-Z_]+\b")
TIMEOUT_S = 600


def doc_files():
    return [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))


def commands_of(path):
    """(line number, command text) of every command in one Markdown file."""
    out, fenced, continued = [], False, None
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.strip().startswith("```"):
                fenced = not fenced
                continue
            if fenced and continued is not None:
                # A command continued with a trailing backslash: its lines join into one.
                text, start = continued
                continued = None
                line = text + " " + line.strip()
                number = start
            if fenced and line.rstrip().endswith("\\"):
                continued = (line.rstrip()[:-1].rstrip(), number)
                continue
            if fenced:
                text = line.strip()
                text = text[2:] if text.startswith("$ ") else text
                text = text.split(" #")[0].strip()
                if text.startswith("distprof ") or "-p distprof-cli -- " in text:
                    out.append((number, text))
            else:
                for k, part in enumerate(line.split("`")):
                    if k % 2 == 1 and part.startswith("distprof "):
                        out.append((number, part.strip()))
    return [(n, t) for n, t in out if not t.startswith(NOT_COMMANDS)]


def documented():
    """{command text: [where it appears]} over README.md and docs/*.md, in document order."""
    found = {}
    for path in doc_files():
        for number, text in commands_of(path):
            found.setdefault(text, []).append(f"{os.path.relpath(path, ROOT)}:{number}")
    return found


class Fixtures:
    """Makes the fixtures a command's text refers to, once each."""

    def __init__(self, scratch, distprof, python):
        self.scratch, self.distprof, self.python = scratch, distprof, python
        # The cargo target directory the binary was built in (its staticlib, cxx headers).
        target = os.path.dirname(os.path.dirname(distprof))
        self.env = dict(os.environ, REPO=ROOT, TARGET=target,
                        PATH=f"{os.path.dirname(distprof)}:{os.environ['PATH']}")
        self.made = set()

    def prepare(self, command):
        for name in ("TRACES", "RUN", "XLA", "HOOKS"):
            if f"${name}" in command and name not in self.made:
                start = time.monotonic()
                self.env[name] = getattr(self, name.lower())()
                self.made.add(name)
                print(f"  fixture ${name}: {self.env[name]} ({time.monotonic() - start:.0f} s)", flush=True)

    def _check(self, args, what):
        r = subprocess.run(args, capture_output=True, text=True, env=self.env, timeout=TIMEOUT_S)
        if r.returncode != 0:
            sys.exit(f"docs_commands: cannot make the fixture {what}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")

    def traces(self):
        out = os.path.join(self.scratch, "jax")
        if not self.python or not os.path.exists(self.python):
            sys.exit("docs_commands: $TRACES needs --python, a venv with jax and the distprof wheel "
                     "(tests/setup/30-python.sh, then tests/steps/60-python-package.sh installs the wheel)")
        self._check([self.python, os.path.join(ROOT, "tests", "jax", "skewed_e2e.py"), out,
                     "--distprof", self.distprof, "--processes", "2", "--steps", "5"], "$TRACES")
        prof = os.path.join(self.scratch, "prof")
        os.makedirs(prof)
        for node in sorted(glob.glob(os.path.join(out, "node*"))):
            shutil.copytree(node, os.path.join(prof, os.path.basename(node)))
        return prof

    def run(self):
        out = os.path.join(self.scratch, "run")
        self._check([self.distprof, "local", "--nodes", "3", "--duration", "4", "--window-s", "1",
                     "--out", out], "$RUN")
        return out

    def xla(self):
        return self._fixture_copy("xla-wiring", "xla", ignore=("hooks_repo", "README.md"))

    def hooks(self):
        """A hooks directory of the kind `--local-dir` takes (the fixture's print-only hooks)."""
        out = self._fixture_copy(os.path.join("xla-wiring", "hooks_repo"), "hooks")
        os.makedirs(os.path.join(out, "cc_hooks"))
        shutil.copy(os.path.join(ROOT, "cc_hooks", "distprof_hooks.h"), os.path.join(out, "cc_hooks"))
        return out

    def _fixture_copy(self, fixture, name, ignore=()):
        out = os.path.join(self.scratch, name)
        shutil.copytree(os.path.join(ROOT, "tests", "fixtures", fixture), out,
                        ignore=shutil.ignore_patterns(*ignore))
        # The fixtures' BUILD/WORKSPACE files carry a .fixture suffix (so that Bazel never
        # takes them for packages of distprof itself).
        for path in glob.glob(os.path.join(out, "**", "*.fixture"), recursive=True):
            os.rename(path, path[: -len(".fixture")])
        return out


def check_mention(distprof, text):
    """A mention names a subcommand and maybe flags: each must be in that subcommand's help.
    Alternatives (`check\\|show`, `report/merge`) are each checked."""
    words = text.split()[1:]
    first_flag = next((i for i, w in enumerate(words) if w.startswith("-")), len(words))
    paths = [[]]
    for w in words[:first_flag]:
        paths = [p + [alt] for p in paths for alt in re.split(r"\\\||/", w)]
    flags = [w for w in words if w.startswith("-")]
    for path in paths:
        r = subprocess.run([distprof, *path, "--help"], capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            return f"`distprof {' '.join(path)} --help` failed: {r.stderr.strip()[:300]}"
        missing = [f for f in flags if not re.search(rf"(^|\s){re.escape(f)}[\s,=<]", r.stdout)
                   and not is_hidden_flag(distprof, path, f)]
        if missing:
            return f"flags not in the help of `distprof {' '.join(path)}`: {' '.join(missing)}"
    return None


def is_hidden_flag(distprof, path, flag):
    """A flag that --help does not list (clap's `hide`) still parses: clap then asks for its
    value or runs, instead of calling it an unexpected argument."""
    r = subprocess.run([distprof, *path, flag, "--help"], capture_output=True, text=True, timeout=60)
    return "unexpected argument" not in r.stderr


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--distprof", default=os.path.join(ROOT, "target", "debug", "distprof"))
    ap.add_argument("--python", default=os.path.join(ROOT, ".venv", "py312", "bin", "python"))
    ap.add_argument("--only", help="run only the commands whose text contains this")
    ap.add_argument("--from", dest="start", type=int, default=1, metavar="N",
                    help="start at the N-th command (to resume after a fix)")
    ap.add_argument("--list", action="store_true", help="list the commands and how each is run")
    a = ap.parse_args()
    a.distprof = os.path.abspath(a.distprof)

    with open(TABLE, "rb") as f:
        table = {e["doc"]: e for e in tomllib.load(f)["command"]}
    found = documented()
    problems = [f"tests/docs_commands.toml: `{t}` appears in no document any more; remove its entry"
                for t in table if t not in found]

    plan = []  # (documented text, where, kind, shell command or None, expected exit)
    for text, where in found.items():
        entry = table.get(text, {})
        if entry.get("mention"):
            plan.append((text, where, "mention", None, 0))
        elif "run" in entry:
            plan.append((text, where, "equivalent", entry["run"], entry.get("expect_exit", 0)))
        elif PLACEHOLDER.search(text):
            problems.append(f"{where[0]}: `{text}` has a placeholder, so it cannot run as written: "
                            "give it a `run` equivalent or `mention = true` in tests/docs_commands.toml")
        else:
            plan.append((text, where, "as written", CARGO_RUN.sub("distprof ", text), 0))
    if a.only:
        plan = [p for p in plan if a.only in p[0]]
    if a.list:
        for text, where, kind, command, _ in plan:
            print(f"{where[0]:28} {kind:10} {text}" + (f"\n{'':39} -> {command}" if kind == "equivalent" else ""))
        print("\n".join(problems), file=sys.stderr)
        sys.exit(1 if problems else 0)

    if not os.access(a.distprof, os.X_OK):
        sys.exit(f"docs_commands: no distprof binary at {a.distprof}: build it (cargo build -p distprof-cli) or pass --distprof")
    scratch = tempfile.mkdtemp(prefix="distprof-docs-")
    fixtures = Fixtures(scratch, a.distprof, a.python)
    passed = 0
    try:
        for i, (text, where, kind, command, expect) in enumerate(plan, 1):
            if i < a.start:
                continue
            start = time.monotonic()
            if kind == "mention":
                problem = check_mention(a.distprof, text)
            else:
                fixtures.prepare(command)
                cwd = tempfile.mkdtemp(dir=scratch, prefix="cmd-")
                try:
                    env = dict(fixtures.env, PORT=free_port())
                    r = subprocess.run(["bash", "-c", "set -eo pipefail\n" + command], cwd=cwd, env=env,
                                       capture_output=True, text=True, timeout=TIMEOUT_S)
                    problem = None if r.returncode == expect else (
                        f"exit {r.returncode}, expected {expect}\n--- stdout (tail)\n{r.stdout[-2000:]}"
                        f"\n--- stderr (tail)\n{r.stderr[-2000:]}")
                except subprocess.TimeoutExpired:
                    problem = f"still running after {TIMEOUT_S} s"
            took = time.monotonic() - start
            status = "ok" if problem is None else "FAILED"
            shown = text if kind != "equivalent" else f"{text}  ->  {command}".replace("\n", " ; ")
            print(f"[{i:3}/{len(plan)}] {status:6} {took:6.1f} s  {kind:10} {where[0]}: {shown}", flush=True)
            if problem:
                problems.append(f"{where[0]}: `{text}` ({kind}): {problem}")
            else:
                passed += 1
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"\n{passed} of {len(plan) - a.start + 1} documented commands work "
          f"({sum(1 for p in plan if p[2] == 'mention')} mentions checked against --help)")
    if problems:
        print("\n".join(["", "problems:"] + problems), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
