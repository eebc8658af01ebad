#!/usr/bin/env python3
"""Builds two small lm-eval tasks from a shipped held-out text (default data/text-small/heldout.txt,
the default model's held-out documents; data/text/heldout.txt for steer-olmoe-tiny) as local JSON
files plus task YAMLs:

  heldout_cloze  multiple choice: the two lines before + the start of a line; the choices are the
                 true rest of that line and the rests of three other lines (acc, acc_norm).
  heldout_gen    generate_until: three lines of context, the model writes the next line
                 (until "\\n"); exact_match against the true line.

  python3 tools/lm_eval/make_tasks.py OUT_DIR [--n 40] [--text FILE]
"""
import argparse
import json
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
TEXT = os.path.join(HERE, "..", "..", "data", "text-small", "heldout.txt")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--text", default=TEXT, help="held-out text the tasks are cut from")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    lines = open(a.text, encoding="utf-8").read().split("\n")
    rng = random.Random(1234)
    # Lines with something to predict: 24..70 characters, not blank, not a comment.
    good = [i for i in range(2, len(lines))
            if 24 <= len(lines[i].strip()) <= 70 and not lines[i].strip().startswith("#")
            and lines[i - 1].strip() and len(lines[i - 2]) + len(lines[i - 1]) < 200]
    picks = rng.sample(good, 2 * a.n)
    cloze, gen = [], []
    for k, i in enumerate(picks[: a.n]):
        line = lines[i]
        cut = len(line) - len(line.lstrip()) + max(4, len(line.strip()) // 3)
        cut = line.rfind(" ", 0, cut) if " " in line[:cut].strip() else cut
        ctx = "\n".join(lines[i - 2:i]) + "\n" + line[:cut]
        true_rest = line[cut:]
        others = []
        while len(others) < 3:
            j = rng.choice(good)
            rest = lines[j][len(lines[j]) // 2:]
            if j != i and rest and rest != true_rest and rest not in others:
                others.append(rest)
        choices = [true_rest] + others
        order = list(range(4))
        rng.shuffle(order)
        cloze.append({"id": k, "context": ctx, "choices": [choices[o] for o in order],
                      "gold": order.index(0)})
    for k, i in enumerate(picks[a.n:]):
        gen.append({"id": k, "context": "\n".join(lines[i - 3:i]) + "\n", "target": lines[i]})
    for name, rows in (("heldout_cloze", cloze), ("heldout_gen", gen)):
        with open(os.path.join(a.out, name + ".json"), "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    data = os.path.abspath(a.out)
    with open(os.path.join(a.out, "heldout_cloze.yaml"), "w") as f:
        f.write(f"""task: heldout_cloze
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}/heldout_cloze.json
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{context}}}}"
target_delimiter: ""
doc_to_choice: "{{{{choices}}}}"
doc_to_target: gold
metric_list:
  - metric: acc
  - metric: acc_norm
metadata:
  version: 1.0
""")
    with open(os.path.join(a.out, "heldout_gen.yaml"), "w") as f:
        f.write(f"""task: heldout_gen
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}/heldout_gen.json
test_split: test
output_type: generate_until
doc_to_text: "{{{{context}}}}"
doc_to_target: "{{{{target}}}}"
target_delimiter: ""
generation_kwargs:
  until: ["\\n"]
  max_gen_toks: 24
  temperature: 0
metric_list:
  - metric: exact_match
metadata:
  version: 1.0
""")
    print(f"wrote {len(cloze)} cloze and {len(gen)} generative docs to {a.out}")


if __name__ == "__main__":
    main()
