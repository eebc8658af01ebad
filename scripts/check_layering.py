#!/usr/bin/env python3
"""Checks every src/ folder's README dependency rule against the folder's #include lines, so the
rules newcomers read cannot drift from the code.

Each src/<folder>/README.md has one line starting "Depends on:" naming the src/ folders the
folder may include (external libraries may follow in the same sentence and are ignored), and
optionally a line starting "Must not depend on:". The rule is the first sentence after the
colon. Every `#include "<other>/..."` in src/<folder>/ (subfolders included) must name the
folder itself or one listed after "Depends on:", and never one listed after "Must not depend
on:". Exit status 1 with one line per violation; 0 and a summary when every rule holds.

    scripts/check_layering.py [REPO_ROOT]
"""
import re
import sys
from pathlib import Path

INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/', re.MULTILINE)
SOURCE_SUFFIXES = {".cpp", ".hpp", ".h", ".cu", ".cuh", ".inc"}


def rule(readme, label, folders):
    """The src/ folders named in the first sentence after `label`, or None without the line."""
    for line in readme.splitlines():
        stripped = line.strip().lstrip("-* ").replace("**", "")
        if stripped.lower().startswith(label.lower()):
            text = stripped[len(label):]
            # The sentence may continue on the next lines of the paragraph, up to the next rule.
            rest = []
            for more in readme[readme.index(line) + len(line):].split("\n\n", 1)[0].splitlines():
                if re.match(r"\s*(Depends on:|Must not depend on:)", more):
                    break
                rest.append(more)
            sentence = " ".join([text] + rest).split(". ", 1)[0]
            sentence = re.sub(r"\([^)]*\)?", " ", sentence)  # asides name folders in passing
            words = re.findall(r"`?([a-z_]+)/?`?", sentence)
            return {w for w in words if w in folders}
    return None


def main():
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1])
    src = root / "src"
    folders = sorted(p.name for p in src.iterdir() if p.is_dir())
    problems = []
    for folder in folders:
        readme_path = src / folder / "README.md"
        if not readme_path.is_file():
            problems.append(f"src/{folder}: README.md: expected a README with a dependency rule")
            continue
        readme = readme_path.read_text()
        allowed = rule(readme, "Depends on:", set(folders))
        forbidden = rule(readme, "Must not depend on:", set(folders)) or set()
        if allowed is None:
            problems.append(f"src/{folder}/README.md: Depends on: expected a line 'Depends on: "
                            "<src folders>, <libraries>.'")
            continue
        if allowed & forbidden:
            problems.append(f"src/{folder}/README.md: rule: {sorted(allowed & forbidden)} both "
                            "allowed and forbidden")
        for path in sorted((src / folder).rglob("*")):
            if path.suffix not in SOURCE_SUFFIXES or not path.is_file():
                continue
            for other in INCLUDE.findall(path.read_text(errors="replace")):
                if other == folder or other not in folders:
                    continue
                rel = path.relative_to(root)
                if other in forbidden:
                    problems.append(f"{rel}: includes {other}/, which src/{folder}/README.md "
                                    "forbids")
                elif other not in allowed:
                    problems.append(f"{rel}: includes {other}/, expected only "
                                    f"{sorted(allowed) or 'nothing of src/'} "
                                    f"(src/{folder}/README.md: Depends on)")
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} layering problem(s)")
        return 1
    print(f"layering: {len(folders)} folders, every include within its README's rule")
    return 0


if __name__ == "__main__":
    sys.exit(main())
