#!/usr/bin/env python3
"""Checks the documentation's references, for tests/33-docs.bats.

    doclinks.py ROOT    one line per broken reference, "FILE:LINE: why";
                        exit status 1 if there is any

Pages read: README.md, every .md file under doc/, and the README.md files
under tests/, contrib/ and packaging/. In each it checks:

- every Markdown link `[text](target)` that is not a URL: the file exists
  (relative to the page), and a `#anchor` names a heading of the target
  page, spelled as GitHub spells it, or an `<a id="...">` in it;
- every repository path in backquotes (`src/...`, `sql/...`, `tests/...`,
  `doc/...`, `contrib/...`, `packaging/...`, `bench/...`, `.ci/...`):
  it exists (relative to ROOT; `*` and `?` as in a shell), or is a
  program built from PATH.c;
- that no page names the old `docs/` folder.

Only the standard library.
"""
import glob
import os
import re
import sys

LINK = re.compile(r"\]\(([^()\s]+)\)")
REPO_PATH = re.compile(r"`((?:src|sql|tests|doc|contrib|packaging|bench|\.ci)/[^`\s]*)`")
OLD_FOLDER = re.compile(r"(?<![\w./-])docs/")
FENCE = re.compile(r"^\s*(```|~~~)")


def pages(root):
    found = [os.path.join(root, "README.md")]
    found += glob.glob(os.path.join(root, "doc", "**", "*.md"), recursive=True)
    for top in ("tests", "contrib", "packaging"):
        found += glob.glob(os.path.join(root, top, "**", "README.md"), recursive=True)
    return sorted(set(p for p in found if os.path.isfile(p)))


def slug(heading):
    """GitHub's anchor for a heading: lower case, markup and punctuation
    dropped (letters, digits, '_' and '-' kept), spaces made '-'."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    text = re.sub(r"\[([^]]*)\]\([^)]*\)", r"\1", text)
    text = "".join(c for c in text if c.isalnum() or c in " _-")
    return text.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        seen = {}
        names = set()
        fenced = False
        with open(path, encoding="utf-8") as f:
            for line in f:
                if FENCE.match(line):
                    fenced = not fenced
                    continue
                if fenced:
                    continue
                names.update(re.findall(r"<a (?:id|name)=\"([^\"]+)\"", line))
                m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
                if m:
                    base = slug(m.group(1))
                    n = seen.get(base, 0)
                    seen[base] = n + 1
                    names.add(base if n == 0 else f"{base}-{n}")
        cache[path] = names
    return cache[path]


def check(root):
    problems = []
    for page in pages(root):
        rel = os.path.relpath(page, root)
        here = os.path.dirname(page)
        fenced = False
        with open(page, encoding="utf-8") as f:
            lines = f.read().split("\n")
        for no, line in enumerate(lines, 1):
            where = f"{rel}:{no}"
            if FENCE.match(line):
                fenced = not fenced
            if OLD_FOLDER.search(line):
                problems.append(f"{where}: names the old docs/ folder")
            for target in LINK.findall(line):
                if re.match(r"[a-z]+:", target):
                    continue
                path, _, anchor = target.partition("#")
                dest = os.path.normpath(os.path.join(here, path)) if path else page
                if not os.path.exists(dest):
                    problems.append(f"{where}: no such file: {target}")
                elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
                    problems.append(f"{where}: no heading for #{anchor} in {os.path.relpath(dest, root)}")
            if fenced:
                continue
            for path in REPO_PATH.findall(line):
                path = path.rstrip(".,;:")
                # A test tool is named by its program, built from PATH.c.
                if not glob.glob(os.path.join(root, path)) and not os.path.exists(os.path.join(root, path + ".c")):
                    problems.append(f"{where}: no such path: {path}")
    return problems


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    problems = check(sys.argv[1])
    for p in problems:
        print(p)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
