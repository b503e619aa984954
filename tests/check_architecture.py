#!/usr/bin/env python3
"""Checks the crate arrows of docs/architecture.md against `cargo metadata`, that the runtime
crate and the plugin's tree stay free of the offline and test-support crates, and that no CLI
command module imports another. Exits 1 with one line per violation."""
import json, pathlib, re, subprocess, sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
FORBIDDEN = {"distprof-offline", "distprof-testkit"}
problems = []

# Not --offline: on a fresh machine the registry cache is empty and cargo must fetch the index.
run = subprocess.run(["cargo", "metadata", "--format-version", "1", "--locked"],
                     cwd=ROOT, capture_output=True, text=True)
if run.returncode != 0:
    sys.exit(f"check_architecture: `cargo metadata` failed:\n{run.stderr}")
meta = json.loads(run.stdout)
ws = {p["id"]: p for p in meta["packages"] if p["id"] in meta["workspace_members"]}
names = {p["name"] for p in ws.values()}
normal = {p["name"]: {d["name"] for d in p["dependencies"]
                      if d["name"] in names and d["kind"] is None}
          for p in ws.values()}

# The table: | crate | rooms | owns | depends on |
table = {}
rooms = {}
for line in (ROOT / "docs/architecture.md").read_text().splitlines():
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) == 4 and cells[0] in names | {c for c in cells[:1] if c.startswith("distprof")}:
        deps = set() if cells[3] == "(none)" else {d.strip() for d in cells[3].split(",")}
        table[cells[0]] = deps
        rooms[cells[0]] = [r.strip() for r in cells[1].split(",")]
for crate in sorted(names | set(table)):
    if crate not in table:
        problems.append(f"docs/architecture.md: crate {crate} has no row")
    elif crate not in normal:
        problems.append(f"docs/architecture.md: row {crate} is not a workspace crate")
    elif table[crate] != normal[crate]:
        problems.append(f"docs/architecture.md: {crate} depends on {sorted(normal[crate])} "
                        f"per cargo metadata, the table says {sorted(table[crate])}")

# Every room the table names is a module of its crate (src/ROOM.rs or src/ROOM/), or the
# crate root (`lib`).
for crate, listed in rooms.items():
    src = ROOT / "rust" / crate / "src"
    for room in listed:
        if room == "lib" and (src / "lib.rs").is_file():
            continue
        if not ((src / f"{room}.rs").is_file() or (src / room).is_dir()):
            problems.append(f"docs/architecture.md: {crate} has no module {room} (rust/{crate}/src)")

# And every module of a crate has its room in the table, so the table is the whole map.
for crate, listed in rooms.items():
    src = ROOT / "rust" / crate / "src"
    if not src.is_dir():
        continue
    for p in sorted(src.iterdir()):
        name = p.stem if p.suffix == ".rs" else p.name
        if name in ("lib", "main") or not (p.suffix == ".rs" or p.is_dir()):
            continue
        if name not in listed:
            problems.append(f"docs/architecture.md: {crate}'s module {name} (rust/{crate}/src) is in no row")

if normal.get("distprof", set()) & FORBIDDEN:
    problems.append(f"runtime crate distprof depends on {sorted(normal['distprof'] & FORBIDDEN)}")

# Everything distprof-ffi links, transitively over normal dependencies.
seen, todo = set(), ["distprof-ffi"]
while todo:
    c = todo.pop()
    for d in normal.get(c, ()):
        if d not in seen:
            seen.add(d)
            todo.append(d)
if seen & FORBIDDEN:
    problems.append(f"distprof-ffi's dependency tree contains {sorted(seen & FORBIDDEN)}")

# No command module imports another command module.
cmd_dir = ROOT / "rust/distprof-cli/src/cmd"
commands = {p.stem if p.is_file() else p.name for p in cmd_dir.iterdir()
            if p.name != "mod.rs" and (p.suffix == ".rs" or p.is_dir())}
for path in sorted(cmd_dir.rglob("*.rs")):
    rel = path.relative_to(cmd_dir)
    if rel.name == "mod.rs" and rel.parent == pathlib.Path("."):
        continue
    own = rel.parts[0].removesuffix(".rs")
    for n, line in enumerate(path.read_text().splitlines(), 1):
        for other in re.findall(r"(?:crate::cmd::|super::)(\w+)", line):
            if other in commands and other != own and not line.lstrip().startswith("//"):
                problems.append(f"{path.relative_to(ROOT)}:{n}: command {own} imports command {other}")

for p in problems:
    print(p)
if not problems:
    print(f"architecture: {len(table)} crates as docs/architecture.md says; the runtime and the "
          f"plugin's tree free of {sorted(FORBIDDEN)}; no command imports another")
sys.exit(1 if problems else 0)
