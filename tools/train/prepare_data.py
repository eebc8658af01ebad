#!/usr/bin/python3
"""Build the text corpus of a steermoe training run from installed Debian packages and split it.

--corpus tiny   the three sources of steer-olmoe-tiny (data/text/), as that model was built
--corpus small  those three and six more, for steer-olmoe-small (data/text-small/)

Sources of the tiny corpus (all redistributable, see models/steer-olmoe-tiny/README.md):
  * code: the Python standard library source, /usr/lib/python3.11/**/*.py
          (Debian package libpython3.11-stdlib, PSF License v2)
  * docs: the Python documentation sources, /usr/share/doc/python3.11/html/_sources/**/*.rst.txt
          (Debian package python3.11-doc, PSF License v2)
  * bible: the King James Version, one document per chapter, read with /usr/bin/bible
          (Debian packages bible-kjv-text + bible-kjv; the KJV text is public domain)

More sources of the small corpus (see models/steer-olmoe-small/README.md for versions, licences):
  * perl: Perl 5 documentation, /usr/share/perl/5.36.0/pod/*.pod (perl-doc; GPL-1+ or Artistic)
  * linux: Linux kernel documentation, /usr/share/doc/linux-doc/Documentation/**/*.{rst,txt}.gz
           without translations/ (linux-doc; GPL-2), capped at LINUX_CAP bytes in hash order
  * pgsql: PostgreSQL 15 manual, /usr/share/doc/postgresql-doc-15/html/*.html as text
           (postgresql-doc-15; PostgreSQL licence)
  * gcide: GNU Collaborative International Dictionary of English, /usr/share/dictd/gcide.dict.dz,
           cut into documents of about 16 kB at entry boundaries (dict-gcide; GPL-2+), capped
  * debref: Debian Reference, /usr/share/debian-reference/*.en.html as text
           (debian-reference-en; GPL-2+)

One document = one file (code, docs, perl, linux, pgsql, debref), one chapter (bible) or one
run of dictionary entries (gcide). Splits are by document and
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
import glob
import gzip
import hashlib
import html.parser
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
# the small corpus: per-source budgets of eval and held-out (each file stays < 300 KB), and caps
# on the train share of the two largest sources so that no source dominates
BUDGET_SMALL = {"code": 36_000, "docs": 36_000, "bible": 30_000, "perl": 30_000, "linux": 36_000,
                "pgsql": 30_000, "gcide": 30_000, "debref": 18_000}
PACKAGES_SMALL = PACKAGES + ["perl-doc", "linux-doc", "postgresql-doc-15", "dict-gcide",
                             "debian-reference-en"]
LINUX_CAP = 30_000_000
GCIDE_CAP = 20_000_000
PERL_POD = "/usr/share/perl/5.36.0/pod"
LINUX_DOC = "/usr/share/doc/linux-doc/Documentation"
PGSQL_DOC = "/usr/share/doc/postgresql-doc-15/html"
GCIDE = "/usr/share/dictd/gcide.dict.dz"
DEBREF = "/usr/share/debian-reference"
BIBLE_BOOKS = None  # discovered from the program's output


def pkg_versions(packages):
    out = {}
    for p in packages:
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


def perl_docs():
    docs = []
    for p in sorted(glob.glob(os.path.join(PERL_POD, "*.pod"))):
        with open(p, "rb") as fh:
            t = clean(fh.read().decode("utf-8", errors="replace"))
        if len(t) > 200:
            docs.append(("perl:" + os.path.basename(p), t))
    return docs


def linux_docs():
    docs = []
    for root, dirs, files in os.walk(LINUX_DOC):
        dirs[:] = sorted(d for d in dirs if d != "translations")
        for f in sorted(files):
            if f.endswith(".rst.gz") or f.endswith(".txt.gz"):
                p = os.path.join(root, f)
                with gzip.open(p, "rb") as fh:
                    raw = fh.read()
                try:
                    t = clean(raw.decode("utf-8"))
                except UnicodeDecodeError:
                    continue
                if len(t) > 200:
                    docs.append(("linux:" + os.path.relpath(p, LINUX_DOC)[:-3], t))
    return docs


class _HtmlText(html.parser.HTMLParser):
    """Visible text of an HTML page: block elements end lines, script/style dropped."""
    BLOCK = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "dt", "dd",
             "table", "ul", "ol", "dl", "blockquote", "title"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts, self.skip, self.pre = [], 0, 0

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style"):
            self.skip += 1
        elif tag == "pre":
            self.pre += 1
        if tag in self.BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag):
        if tag in ("script", "style"):
            self.skip = max(0, self.skip - 1)
        elif tag == "pre":
            self.pre = max(0, self.pre - 1)
        if tag in self.BLOCK:
            self.parts.append("\n")

    def handle_data(self, data):
        if self.skip:
            return
        self.parts.append(data if self.pre else re.sub(r"\s+", " ", data))

    def text(self):
        t = "".join(self.parts)
        return "\n".join(l.strip() if not l.startswith("  ") else l.rstrip() for l in t.split("\n"))


def html_text(path):
    with open(path, encoding="utf-8", errors="replace") as fh:
        parser = _HtmlText()
        parser.feed(fh.read())
        parser.close()
    return clean(parser.text())


def pgsql_docs():
    docs = []
    for p in sorted(glob.glob(os.path.join(PGSQL_DOC, "*.html"))):
        t = html_text(p)
        if len(t) > 200:
            docs.append(("pgsql:" + os.path.basename(p), t))
    return docs


def debref_docs():
    docs = []
    for p in sorted(glob.glob(os.path.join(DEBREF, "*.en.html"))):
        t = html_text(p)
        if len(t) > 200:
            docs.append(("debref:" + os.path.basename(p), t))
    return docs


def gcide_docs(target=16_000):
    """The dictionary cut at entry boundaries (a line that starts in column 0 after a blank line
    begins an entry in this dictd text) into documents of about `target` bytes, named by their
    first headword; the 00-database-* header entries and the licence preamble are dropped."""
    with gzip.open(GCIDE, "rb") as fh:
        text = fh.read().decode("utf-8", errors="replace")
    entries = re.split(r"\n(?=\S)", text)
    docs, cur, size = [], [], 0
    for e in entries:
        head = e.split("\n", 1)[0].strip()
        if not head or head.startswith("00-database") or "GNU version of" in e[:400]:
            continue
        cur.append(e.rstrip())
        size += len(e)
        if size >= target:
            docs.append(cur)
            cur, size = [], 0
    if cur:
        docs.append(cur)
    return [("gcide:" + d[0].split("\n", 1)[0].strip()[:60] + f"#{i}", clean("\n\n".join(d)))
            for i, d in enumerate(docs)]


def order_key(doc_id, salt="steer-olmoe-tiny"):
    return hashlib.sha256((salt + ":" + doc_id).encode()).hexdigest()


def cap(docs, limit, salt):
    """the documents of a source, in hash order, up to `limit` bytes (eval/held-out candidates
    come first in hash order too, so the cap never removes them)"""
    out, used = [], 0
    for d in sorted(docs, key=lambda d: order_key(d[0], salt)):
        n = len(d[1].encode("utf-8"))
        if used + n > limit:
            continue
        out.append(d)
        used += n
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", default="build-train")
    ap.add_argument("--textdir", default="data/text")
    ap.add_argument("--corpus", choices=["tiny", "small"], default="tiny")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    os.makedirs(args.textdir, exist_ok=True)

    sources = {"code": code_docs(), "docs": doc_docs(), "bible": bible_docs()}
    budget, packages, salt = BUDGET, PACKAGES, "steer-olmoe-tiny"
    if args.corpus == "small":
        budget, packages, salt = BUDGET_SMALL, PACKAGES_SMALL, "steer-olmoe-small"
        sources.update({"perl": perl_docs(), "linux": cap(linux_docs(), LINUX_CAP, salt),
                        "pgsql": pgsql_docs(), "gcide": cap(gcide_docs(), GCIDE_CAP, salt),
                        "debref": debref_docs()})
    splits = {"train": [], "heldout": [], "eval": []}
    for src, docs in sources.items():
        docs = sorted(docs, key=lambda d: order_key(d[0], salt))
        used = {"eval": 0, "heldout": 0}
        for doc_id, text in docs:
            n = len(text.encode("utf-8"))
            dest = "train"
            if n <= MAX_SMALL_DOC:
                for s in ("eval", "heldout"):
                    if used[s] + n <= budget[src]:
                        dest = s
                        used[s] += n
                        break
            splits[dest].append((doc_id, text))
        print(f"{src}: {len(docs)} docs, eval {used['eval']} B, heldout {used['heldout']} B",
              file=sys.stderr)

    # keep a stable order inside each split: by source then hash order (already)
    manifest = {"corpus": args.corpus, "package_versions": pkg_versions(packages),
                "max_small_doc": MAX_SMALL_DOC, "budget_bytes_per_source": budget,
                "train_bytes_per_source": {}, "splits": {}}
    for src in sources:
        manifest["train_bytes_per_source"][src] = sum(
            len(t.encode("utf-8")) for d, t in splits["train"] if d.split(":", 1)[0] == src)
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
