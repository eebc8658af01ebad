#!/usr/bin/python3
"""Train steermoe's models (steer-olmoe-small and its dense drafter) on CPU (fp32, AdamW, cosine
schedule with linear warm-up).

Deterministic given --seed, --steps and the thread count: the weights are initialised from a
seeded generator and step s reads the windows drawn by numpy's default_rng([seed, s]) from
the train token file, so a run can be resumed (--resume) or reproduced by step count.

Step budget: with --steps 0 the run measures its own speed over the first --budget-after
steps (all inside the warm-up, whose learning rate does not depend on the total) and fixes
--steps so that the run fits in --max-minutes; the chosen value is logged and written to the
checkpoint, and `--steps N` reproduces the run. --max-minutes is also a hard stop: if reached,
the run saves its checkpoint, records the step reached (reproduce with --stop-step) and exits
with status 75 (EX_TEMPFAIL: unfinished, resume with --resume).

Outputs in --workdir: ckpt.pt (model, optimiser, step, config, args), train_log.jsonl.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import Config, build_model, num_params  # noqa: E402

EXIT_UNFINISHED = 75  # sysexits.h EX_TEMPFAIL


def get_batch(tokens, seed, step, batch, seq):
    rng = np.random.default_rng([seed, step])
    starts = rng.integers(0, len(tokens) - seq - 1, size=batch)
    x = np.stack([tokens[s:s + seq + 1] for s in starts]).astype(np.int64)
    return torch.from_numpy(x)


def lr_at(step, args):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    total = max(args.steps, args.warmup + 1)
    p = min(1.0, (step - args.warmup) / (total - args.warmup))
    return args.lr * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * p)))


@torch.no_grad()
def evaluate(model, tokens, seq, n_windows):
    """mean next-token loss over n_windows fixed, evenly spaced windows of the eval tokens"""
    model.eval()
    starts = np.linspace(0, len(tokens) - seq - 1, n_windows).astype(np.int64)
    x = torch.from_numpy(np.stack([tokens[s:s + seq + 1] for s in starts]).astype(np.int64))
    tot = 0.0
    for i in range(0, n_windows, 8):
        xb = x[i:i + 8]
        logits = model(xb[:, :-1])
        tot += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), xb[:, 1:].reshape(-1),
                               reduction="sum").item()
    model.train()
    return tot / (n_windows * seq)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", default="build-train")
    ap.add_argument("--seed", type=int, default=20261201)
    ap.add_argument("--steps", type=int, default=0, help="total steps of the schedule (0: budget from --max-minutes)")
    ap.add_argument("--stop-step", type=int, default=0, help="stop after this many steps (reproduces a time-stopped run)")
    ap.add_argument("--max-minutes", type=float, default=0, help="wall-time budget; hard stop")
    ap.add_argument("--budget-after", type=int, default=12)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=60)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--eval-windows", type=int, default=16)
    ap.add_argument("--ckpt-every-min", type=float, default=10)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--snapshots", default="",
                    help="comma-separated steps at which to keep a model-only copy (snap-STEP.pt) "
                         "for statistics over training")
    # model shape
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--expert-ffn", type=int, default=64)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--experts", type=int, default=64)
    ap.add_argument("--topk", type=int, default=8)
    ap.add_argument("--arch", choices=["olmoe", "qwen3"], default="olmoe",
                    help="olmoe: the MoE; qwen3: the dense drafter (--dense-ffn, --kv-heads)")
    ap.add_argument("--dense-ffn", type=int, default=384, help="qwen3: MLP width")
    ap.add_argument("--kv-heads", type=int, default=0, help="qwen3: KV heads (0: = --heads)")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    t_start = time.time()
    deadline = t_start + args.max_minutes * 60 if args.max_minutes > 0 else None

    train_tok = np.fromfile(os.path.join(args.workdir, "train.u16"), dtype=np.uint16)
    eval_tok = np.fromfile(os.path.join(args.workdir, "eval.u16"), dtype=np.uint16)
    with open(os.path.join(args.workdir, "tokenizer.json")) as fh:
        vocab = len(json.load(fh)["model"]["vocab"])

    dense = args.arch == "qwen3"
    cfg = Config(vocab_size=vocab, hidden_size=args.hidden,
                 intermediate_size=args.dense_ffn if dense else args.expert_ffn,
                 num_hidden_layers=args.layers, num_attention_heads=args.heads,
                 num_experts=0 if dense else args.experts, num_experts_per_tok=0 if dense else args.topk,
                 max_position_embeddings=args.seq, arch=args.arch,
                 num_key_value_heads=args.kv_heads if dense else 0, tie_word_embeddings=dense)
    model = build_model(cfg)
    model.init_weights(args.seed)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "embed_tokens" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "embed_tokens" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    ckpt_path = os.path.join(args.workdir, "ckpt.pt")
    log_path = os.path.join(args.workdir, "train_log.jsonl")
    step = 0
    if args.resume and os.path.exists(ckpt_path):
        ck = torch.load(ckpt_path, weights_only=False)  # our own file (holds the args dict)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        step = ck["step"]
        if args.steps == 0:
            args.steps = ck["args"]["steps"]
        print(f"resumed at step {step}, steps {args.steps}", flush=True)
        # steps logged after the checkpoint was written are redone: drop their records
        if os.path.exists(log_path):
            with open(log_path) as fh:
                keep = [l for l in fh if json.loads(l).get("step", 0) <= step or "event" in json.loads(l)]
            with open(log_path + ".tmp", "w") as fh:
                fh.writelines(keep)
            os.replace(log_path + ".tmp", log_path)
    else:
        open(log_path, "w").close()

    def log(rec):
        with open(log_path, "a") as fh:
            fh.write(json.dumps(rec) + "\n")
        print(json.dumps(rec), flush=True)

    def save(reason):
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                    "config": cfg.to_dict(), "args": vars(args), "reason": reason,
                    "torch": str(torch.__version__)}, ckpt_path + ".tmp")
        os.replace(ckpt_path + ".tmp", ckpt_path)

    log({"event": "start", "params": num_params(model), "config": cfg.to_dict(), "args": vars(args),
         "train_tokens": int(len(train_tok)), "eval_tokens": int(len(eval_tok)), "torch": str(torch.__version__)})
    snapshot_steps = {int(v) for v in args.snapshots.split(",") if v.strip()}
    if 0 in snapshot_steps and step == 0:
        torch.save({"model": model.state_dict(), "step": 0, "config": cfg.to_dict(), "tokens": 0},
                   os.path.join(args.workdir, "snap-0.pt"))
    model.train()
    last_ckpt = time.time()
    step_times = []
    stop_reason = "steps"
    while True:
        if args.steps and step >= args.steps:
            break
        if args.stop_step and step >= args.stop_step:
            stop_reason = "stop-step"
            break
        if deadline and time.time() > deadline:
            stop_reason = "max-minutes"
            break
        t0 = time.time()
        lr = lr_at(step, args) if args.steps else args.lr * (step + 1) / args.warmup
        for g in opt.param_groups:
            g["lr"] = lr
        xb = get_batch(train_tok, args.seed, step, args.batch, args.seq)
        logits, rlog, topi, _ = model(xb[:, :-1], return_aux=True)
        lm = F.cross_entropy(logits.reshape(-1, cfg.vocab_size), xb[:, 1:].reshape(-1))
        lb, z = model.aux_losses(rlog, topi)
        loss = lm + cfg.router_aux_loss_coef * lb + cfg.router_z_loss_coef * z
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip).item()
        opt.step()
        step += 1
        dt = time.time() - t0
        step_times.append(dt)
        rec = {"step": step, "loss": round(lm.item(), 4), "lb": round(float(lb), 4),
               "z": round(float(z), 3), "lr": lr, "gnorm": round(gnorm, 3), "dt": round(dt, 2),
               "elapsed": round(time.time() - t_start, 1)}
        if step % args.eval_every == 0 or step == 1:
            rec["eval_loss"] = round(evaluate(model, eval_tok, args.seq, args.eval_windows), 4)
        log(rec)
        if args.steps == 0 and step == args.budget_after:
            if not deadline:
                sys.exit("--steps 0 needs --max-minutes")
            per = float(np.mean(step_times[2:]))
            per *= 1 + 1.0 / args.eval_every            # eval passes, roughly
            left = deadline - time.time() - 120          # final save and evaluation
            args.steps = int(step + 0.9 * left / per)
            log({"event": "budget", "sec_per_step": round(per, 3), "steps": args.steps})
        if step in snapshot_steps:
            torch.save({"model": model.state_dict(), "step": step, "config": cfg.to_dict(),
                        "tokens": step * args.batch * args.seq},
                       os.path.join(args.workdir, f"snap-{step}.pt.tmp"))
            os.replace(os.path.join(args.workdir, f"snap-{step}.pt.tmp"),
                       os.path.join(args.workdir, f"snap-{step}.pt"))
        if time.time() - last_ckpt > args.ckpt_every_min * 60:
            save("periodic")
            last_ckpt = time.time()
    final_eval = evaluate(model, eval_tok, args.seq, args.eval_windows)
    save(stop_reason)
    log({"event": "end", "step": step, "steps": args.steps, "reason": stop_reason,
         "eval_loss": round(final_eval, 4), "elapsed": round(time.time() - t_start, 1)})
    if stop_reason == "max-minutes":
        # Not finished: a distinct status (EX_TEMPFAIL) so that a pipeline does not go on to
        # export a half-trained model; run again with --resume to continue.
        sys.exit(EXIT_UNFINISHED)


if __name__ == "__main__":
    main()
