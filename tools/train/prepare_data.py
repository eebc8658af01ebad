#!/usr/bin/python3
"""Build the text corpus of steer-olmoe-tiny from installed Debian packages and split it.

Sources (all redistributable, see models/steer-olmoe-tiny/README.md):
  * code: the Python standard library source, /usr/lib/python3.11/**/*.py
          (Debian package libpython3.11-stdlib, PSF License v2)
  * docs: the Python documentation sources, /usr/share/doc/python3.11/html/_sources/**/*.rst.txt
          (Debian package python3.11-doc, PSF License v2)
  * bible: the King James Version, one document per chapter, read with /usr/bin/bible
          (Debian packages bible-kjv-text + bible-kjv; the KJV text is public domain)

One document = one file (code, docs) or one chapter (bible). Splits are by document and
deterministic: documents are ordered by sha256("steer-olmoe-tiny:" + doc id); walking that
order per source, small documents (<= MAX_SMALL_DOC bytes) fill the evaluation split up to
its per-source byte budget, then the held-out split up to its budget; everything else is
train. The evaluation and held-out splits are written to data/text/ (they are committed);
the train split is written to the work directory only (rebuilt from the packages).

Output:
  data/text/eval.txt, data/text/heldout.txt   documents separated by one blank line + "\n"
  data/text/splits.json                       doc ids per split, byte counts, package versions
  <workdir>/train.jsonl                       one JSON string per train document
  <workdir>/eval.jsonl, heldout.jsonl         same documents as the .txt files, as JSON lines
"""
import argparse
import hashlib
import json
import os
import re
import subprocess
import sys

PY_LIB = "/usr/lib/python3.11"
PY_DOC = "/usr/share/doc/python3.11/html/_sources"
MAX_SMALL_DOC = 24_000          # bytes; only documents this small go to eval/held-out
# per-source byte budgets of the evaluation and held-out splits (each file stays < 300 KB)
BUDGET = {"code": 90_000, "docs": 90_000, "bible": 60_000}
PACKAGES = ["libpython3.11-stdlib", "python3.11-doc", "bible-kjv-text", "bible-kjv"]
BIBLE_BOOKS = None  # discovered from the program's output


def pkg_versions():
    out = {}
    for p in PACKAGES:
        try:
            v = subprocess.run(["dpkg-query", "-W", "-f=${Version}", p], capture_output=True,
                               text=True, check=True).stdout.strip()
        except Exception:
            v = "not installed"
        out[p] = v
    return out


def clean(text):
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\t", "    ")
    # strip trailing spaces, collapse runs of >2 blank lines
    text = "\n".join(l.rstrip() for l in text.split("\n"))
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip("\n") + "\n"


def code_docs():
    docs = []
    for root, dirs, files in os.walk(PY_LIB):
        dirs[:] = sorted(d for d in dirs if d not in ("dist-packages", "site-packages",
                                                       "__pycache__", "config-3.11-x86_64-linux-gnu"))
        for f in sorted(files):
            if f.endswith(".py"):
                p = os.path.join(root, f)
                with open(p, "rb") as fh:
                    raw = fh.read()
                try:
                    t = raw.decode("utf-8")
                except UnicodeDecodeError:
                    continue
                t = clean(t)
                if len(t) > 200:
                    docs.append(("code:" + os.path.relpath(p, PY_LIB), t))
    return docs


def doc_docs():
    docs = []
    for root, dirs, files in os.walk(PY_DOC):
        dirs.sort()
        for f in sorted(files):
            if f.endswith(".txt"):
                p = os.path.join(root, f)
                with open(p, "r", encoding="utf-8", errors="strict") as fh:
                    t = clean(fh.read())
                if len(t) > 200:
                    docs.append(("docs:" + os.path.relpath(p, PY_DOC), t))
    return docs


def bible_docs():
    out = subprocess.run(["bible", "-l0", "gen1:1-rev22:21"], capture_output=True, text=True,
                         check=True).stdout
    docs = []
    cur_name, cur_lines = None, []
    head = re.compile(r"^(\S.*\S) (\d+)$")
    verse = re.compile(r"^\s+(\d+) (.*)$")
    for line in out.split("\n"):
        if not line.strip():
            continue
        m = head.match(line)
        if m and not line.startswith(" "):
            if cur_name:
                docs.append((cur_name, cur_lines))
            cur_name, cur_lines = line.strip(), []
            continue
        m = verse.match(line)
        if m:
            cur_lines.append(m.group(1) + " " + m.group(2).strip())
        elif cur_lines:
            cur_lines[-1] += " " + line.strip()
    if cur_name:
        docs.append((cur_name, cur_lines))
    return [("bible:" + n, clean(n + "\n\n" + "\n".join(v))) for n, v in docs]


def order_key(doc_id):
    return hashlib.sha256(("steer-olmoe-tiny:" + doc_id).encode()).hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", default="build-train")
    ap.add_argument("--textdir", default="data/text")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    os.makedirs(args.textdir, exist_ok=True)

    sources = {"code": code_docs(), "docs": doc_docs(), "bible": bible_docs()}
    splits = {"train": [], "heldout": [], "eval": []}
    for src, docs in sources.items():
        docs = sorted(docs, key=lambda d: order_key(d[0]))
        used = {"eval": 0, "heldout": 0}
        for doc_id, text in docs:
            n = len(text.encode("utf-8"))
            dest = "train"
            if n <= MAX_SMALL_DOC:
                for s in ("eval", "heldout"):
                    if used[s] + n <= BUDGET[src]:
                        dest = s
                        used[s] += n
                        break
            splits[dest].append((doc_id, text))
        print(f"{src}: {len(docs)} docs, eval {used['eval']} B, heldout {used['heldout']} B",
              file=sys.stderr)

    # keep a stable order inside each split: by source then hash order (already)
    manifest = {"package_versions": pkg_versions(), "max_small_doc": MAX_SMALL_DOC,
                "budget_bytes_per_source": BUDGET, "splits": {}}
    for s, docs in splits.items():
        with open(os.path.join(args.workdir, s + ".jsonl"), "w", encoding="utf-8") as fh:
            for doc_id, text in docs:
                fh.write(json.dumps({"id": doc_id, "text": text}) + "\n")
        nbytes = sum(len(t.encode("utf-8")) for _, t in docs)
        entry = {"documents": len(docs), "bytes": nbytes}
        if s != "train":
            with open(os.path.join(args.textdir, s + ".txt"), "w", encoding="utf-8") as fh:
                fh.write("\n".join(t for _, t in docs))
            entry["ids"] = [d for d, _ in docs]
        manifest["splits"][s] = entry
        print(f"split {s}: {len(docs)} docs, {nbytes} bytes", file=sys.stderr)
    ids = [set(d for d, _ in splits[s]) for s in splits]
    assert not (ids[0] & ids[1]) and not (ids[0] & ids[2]) and not (ids[1] & ids[2])
    with open(os.path.join(args.textdir, "splits.json"), "w") as fh:
        json.dump(manifest, fh, indent=1)
        fh.write("\n")


if __name__ == "__main__":
    main()
