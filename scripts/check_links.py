#!/usr/bin/env python3
"""Checks that every relative link in the repository's Markdown files resolves: the file or folder
exists, and a #anchor names a heading of the target (GitHub's rule: lower case, punctuation
dropped, spaces as hyphens, -1, -2 ... for repeats). Links inside code blocks and to URLs are not
checked; build folders, hidden folders and virtual environments are skipped.
CTest: Docs.RelativeLinksResolve.

  python3 scripts/check_links.py [REPO_ROOT]
"""
import os
import re
import sys

SKIP_DIRS = {".git", "node_modules", "__pycache__", "site-packages"}


def markdown_files(root):
    for folder, dirs, files in os.walk(root):
        if os.path.exists(os.path.join(folder, "pyvenv.cfg")):  # a virtual environment
            dirs[:] = []
            continue
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith((".", "build")))
        for name in sorted(files):
            if name.endswith(".md"):
                yield os.path.join(folder, name)


def outside_code(path):
    """(line number, line) of the lines outside fenced code blocks."""
    fence = False
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.lstrip().startswith("```"):
                fence = not fence
                continue
            if not fence:
                yield number, line


def slug(heading):
    heading = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return heading.replace(" ", "-")


_anchors = {}


def anchors(path):
    if path not in _anchors:
        found, seen = set(), {}
        for _, line in outside_code(path):
            m = re.match(r"#{1,6} (.*)", line)
            if m:
                s = slug(m.group(1))
                n = seen.get(s, 0)
                seen[s] = n + 1
                found.add(s if n == 0 else f"{s}-{n}")
        _anchors[path] = found
    return _anchors[path]


def main():
    default = os.path.join(os.path.dirname(__file__), "..")
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else default)
    problems, count = [], 0
    for path in markdown_files(root):
        rel = os.path.relpath(path, root)
        for number, line in outside_code(path):
            for m in re.finditer(r"\]\(([^)\s]+)\)", line):
                target = m.group(1)
                if re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", target):  # https:, mailto:, ...
                    continue
                count += 1
                file_part, _, anchor = target.partition("#")
                resolved = path
                if file_part:
                    resolved = os.path.normpath(os.path.join(os.path.dirname(path), file_part))
                if not os.path.exists(resolved):
                    problems.append(f"{rel}:{number}: {target}: no such file or folder")
                elif anchor and resolved.endswith(".md") and anchor not in anchors(resolved):
                    problems.append(f"{rel}:{number}: {target}: no heading with anchor #{anchor}")
    for p in problems:
        print(p)
    print(f"links: {count} relative links in Markdown files, {len(problems)} broken")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
