#!/usr/bin/python3
"""Train the byte-level BPE tokenizer of steer-olmoe-tiny on the train split and tokenize splits.

Byte-level BPE in the HF tokenizer.json format: GPT-2 byte map, ByteLevel(use_regex=true)
pre-tokenizer (GPT-2 split regex), ByteLevel decoder, one special token <|endoftext|> (id 0)
used as document separator, BOS and EOS. Uses the `tokenizers` package (PyPI) as a tool only.

Writes <workdir>/tokenizer.json and <workdir>/{train,heldout,eval}.u16 (uint16 token ids,
every document followed by <|endoftext|>).
"""
import argparse
import json
import os
import sys

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

EOT = "<|endoftext|>"


def read_docs(path):
    with open(path, encoding="utf-8") as fh:
        return [json.loads(l)["text"] for l in fh]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workdir", default="build-train")
    ap.add_argument("--vocab", type=int, default=4096)
    args = ap.parse_args()

    train_docs = read_docs(os.path.join(args.workdir, "train.jsonl"))
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=args.vocab, min_frequency=2, special_tokens=[EOT],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(train_docs, trainer=trainer, length=len(train_docs))
    assert tok.token_to_id(EOT) == 0
    path = os.path.join(args.workdir, "tokenizer.json")
    tok.save(path)
    print(f"tokenizer: vocab {tok.get_vocab_size()} -> {path}", file=sys.stderr)

    for split in ("train", "heldout", "eval"):
        docs = read_docs(os.path.join(args.workdir, split + ".jsonl"))
        ids = []
        for enc in tok.encode_batch(docs, add_special_tokens=False):
            ids.extend(enc.ids)
            ids.append(0)
        arr = np.asarray(ids, dtype=np.uint16)
        arr.tofile(os.path.join(args.workdir, split + ".u16"))
        nbytes = sum(len(d.encode("utf-8")) for d in docs)
        print(f"{split}: {len(docs)} docs, {len(arr)} tokens, {nbytes / len(arr):.2f} bytes/token",
              file=sys.stderr)
    # round trip check on a few documents
    for d in docs[:5]:
        assert tok.decode(tok.encode(d).ids) == d


if __name__ == "__main__":
    main()
