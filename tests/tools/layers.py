#!/usr/bin/env python3
"""Checks the layering rule of src/: every module says in its header's first
comment (main.c and ctl.c, which have no header: in their own) which modules
it may use, on a line "May use: a, b, c." (or "May use: nothing of
lockrun's."), and the code keeps to it.

A module is a NAME.c with its NAME.h, or a header alone. For each module:
- every lockrun header its .c or .h includes is declared;
- every declared module is used, directly or through a declared header
  (a declaration may name what it gets through another, like item through
  request);
- the includes between modules form no circle, so no two files call each
  other, directly or round a loop.

usage: layers.py SRC_DIR
Prints one line per violation and exits 1 if there is any; prints a summary
line and exits 0 otherwise.
"""

import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"/]+)\.h"', re.M)
GENERATED = {"lr_build"}  # made by meson at build time


def first_comment(text):
    m = re.match(r"\s*/\*(.*?)\*/", text, re.S)
    return m.group(1) if m else ""


def declared(text, where, errors):
    comment = first_comment(text)
    body = re.sub(r"^\s*\* ?", "", comment, flags=re.M)
    m = re.search(r"May use:(.*?)(?:\n\s*\n|\Z)", body, re.S)
    if not m:
        errors.append(f"{where}: no 'May use:' line in its first comment")
        return None
    words = " ".join(m.group(1).split()).rstrip(".")
    if words == "nothing of lockrun's":
        return set()
    names = set()
    for w in words.split(","):
        w = re.sub(r"\(.*?\)", "", w).strip()
        if not re.fullmatch(r"[a-z_]+", w):
            errors.append(f"{where}: 'May use:' names '{w}', not a module")
            continue
        names.add(w)
    return names


def main():
    src = sys.argv[1]
    files = sorted(os.listdir(src))
    mods = sorted({f[:-2] for f in files if f.endswith((".c", ".h"))})
    text = {}
    for m in mods:
        parts = [os.path.join(src, m + ext) for ext in (".h", ".c")]
        text[m] = [(p, open(p).read()) for p in parts if os.path.exists(p)]
    uses = {}
    for m in mods:
        inc = set()
        for _, t in text[m]:
            inc |= set(INCLUDE.findall(t))
        inc.discard(m)
        uses[m] = inc
    errors = []
    decl = {}
    for m in mods:
        path, t = text[m][0]  # the header if there is one
        decl[m] = declared(t, os.path.relpath(path), errors)

    def reach(m, seen):
        for u in uses.get(m, ()):
            if u not in seen:
                seen.add(u)
                reach(u, seen)
        return seen

    for m in mods:
        if decl[m] is None:
            continue
        for u in sorted(uses[m] - decl[m]):
            errors.append(f"src/{m}: includes {u}.h but its 'May use:' does not name {u}")
        for u in sorted(decl[m] - GENERATED):
            if u not in mods:
                errors.append(f"src/{m}: 'May use:' names {u}, which is no module")
            elif u not in reach(m, set()):
                errors.append(f"src/{m}: 'May use:' names {u}, which it does not use")
    # Circles: a depth-first search over the include graph.
    state = {}
    stack = []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for u in sorted(uses[m]):
            if u not in uses:
                continue
            if state.get(u) == 1:
                cyc = stack[stack.index(u):] + [u]
                errors.append("circle: " + " -> ".join(f"src/{c}" for c in cyc))
            elif u not in state:
                visit(u)
        stack.pop()
        state[m] = 2

    for m in mods:
        if m not in state:
            visit(m)
    for e in errors:
        print(e)
    if errors:
        return 1
    print(f"layers: {len(mods)} modules, each keeps to what its header says it may use; no circle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
