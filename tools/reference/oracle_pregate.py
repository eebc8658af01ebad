#!/usr/bin/python3
"""Numpy pre-gate references for two oracle models, for tests/oracle/test_pregate.cpp.

For tests/data/oracle/olmoe and tests/data/oracle/deepseek2_v3 it reads model.gguf with its own
small GGUF parser (numpy only, no gguf package), runs the model's full forward pass in float64
over the oracle's 32 tokens (position i = token i, no BOS, as llama.cpp ran them), and records,
per token and MoE layer m >= 1, the pre-gate scores of docs/policy-contract.md: the router of MoE
layer m applied to the MoE input of MoE layer m-1 (the ffn_norm output, HF
post_attention_layernorm), as selection scores z (OLMoE, softmax router: the logits; DeepSeek-V3,
sigmoid router: sigmoid(logits) + that layer's correction bias). DeepSeek-V3's layer 0 is dense,
so its MoE layers are model layers 1..3: a pre-gate taken from the wrong layer shows there.

Each forward pass is checked before anything is written: its logits must match llama.cpp's
logits.bin within 1e-5 and its executed expert sets llama.cpp's routing.json at every position and
MoE layer; the script stops otherwise.

Writes tests/data/pregate/, per model NAME:
  NAME.pregate.bin    float32 little-endian [32][moe layers][experts]: row m as above; row 0 zero
                      (the engine's RoutingRecord::pregate layout)
  NAME.json           shapes, tokens, the checks above, the largest |score|

Run from the repository root: python3 tools/reference/oracle_pregate.py (needs numpy only).
"""
import json
import os
import struct
import sys

import numpy as np

ORACLE = "tests/data/oracle"
OUT = "tests/data/pregate"

# GGUF metadata value types -> struct format (8 = string, 9 = array handled separately)
SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
          11: "<q", 12: "<d"}


class Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take("<Q")
        s = self.data[self.pos:self.pos + n].decode("utf-8")
        self.pos += n
        return s

    def value(self, vtype):
        if vtype == 8:
            return self.string()
        if vtype == 9:
            etype, n = self.take("<I"), self.take("<Q")
            return [self.value(etype) for _ in range(n)]
        return self.take(SCALAR[vtype])


def read_gguf(path):
    """-> (metadata dict, dict name -> float64 numpy array in numpy order = reversed GGUF ne)"""
    data = open(path, "rb").read()
    r = Reader(data)
    if data[:4] != b"GGUF":
        sys.exit(f"{path}: not a GGUF file")
    r.pos = 4
    version, n_tensors, n_kv = r.take("<I"), r.take("<Q"), r.take("<Q")
    if version != 3:
        sys.exit(f"{path}: GGUF version {version}, expected 3")
    meta = {}
    for _ in range(n_kv):
        key = r.string()
        meta[key] = r.value(r.take("<I"))
    infos = []
    for _ in range(n_tensors):
        name = r.string()
        ne = [r.take("<Q") for _ in range(r.take("<I"))]
        ttype, offset = r.take("<I"), r.take("<Q")
        if ttype != 0:
            sys.exit(f"{path}: tensor {name} has type {ttype}; this reader handles F32 (0) only")
        infos.append((name, ne, offset))
    align = meta.get("general.alignment", 32)
    base = (r.pos + align - 1) // align * align
    tensors = {}
    for name, ne, offset in infos:
        count = int(np.prod(ne))
        a = np.frombuffer(data, dtype="<f4", count=count, offset=base + offset)
        tensors[name] = a.reshape(list(reversed(ne))).astype(np.float64)
    return meta, tensors


def rmsnorm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def rope_neox(x, theta):
    """x [T, heads, d]: rotate-half RoPE, position of row t = t"""
    T, _, d = x.shape
    inv = 1.0 / theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
    ang = np.outer(np.arange(T, dtype=np.float64), inv)              # [T, d/2]
    cos = np.concatenate([np.cos(ang)] * 2, -1)[:, None, :]
    sin = np.concatenate([np.sin(ang)] * 2, -1)[:, None, :]
    rot = np.concatenate([-x[..., d // 2:], x[..., :d // 2]], -1)
    return x * cos + rot * sin


def forward_olmoe(meta, t, tokens):
    """-> (logits [T, V], router logits per layer [L][T, E], MoE inputs per layer [L][T, H])"""
    a = "olmoe."
    L, nh = meta[a + "block_count"], meta[a + "attention.head_count"]
    eps, theta, k = meta[a + "attention.layer_norm_rms_epsilon"], meta[a + "rope.freq_base"], \
        meta[a + "expert_used_count"]
    x = t["token_embd.weight"][tokens]                                # [T, H]
    T, H = x.shape
    hd = H // nh
    mask = np.triu(np.ones((T, T), dtype=bool), 1)
    routers, moe_in = [], []
    for l in range(L):
        p = f"blk.{l}."
        h = rmsnorm(x, t[p + "attn_norm.weight"], eps)
        q = rmsnorm(h @ t[p + "attn_q.weight"].T, t[p + "attn_q_norm.weight"], eps)  # full proj
        kk = rmsnorm(h @ t[p + "attn_k.weight"].T, t[p + "attn_k_norm.weight"], eps)
        v = h @ t[p + "attn_v.weight"].T
        q = rope_neox(q.reshape(T, nh, hd), theta)
        kk = rope_neox(kk.reshape(T, nh, hd), theta)
        v = v.reshape(T, nh, hd)
        att = np.einsum("qhd,khd->hqk", q, kk) / np.sqrt(hd)
        att = np.where(mask[None], -np.inf, att)
        att = np.exp(att - att.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        y = np.einsum("hqk,khd->qhd", att, v).reshape(T, H)
        x = x + y @ t[p + "attn_output.weight"].T
        b = rmsnorm(x, t[p + "ffn_norm.weight"], eps)                 # the MoE input of layer l
        logits = b @ t[p + "ffn_gate_inp.weight"].T                   # [T, E]
        probs = np.exp(logits - logits.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        out = np.zeros_like(x)
        for i in range(T):
            for e in np.argsort(-probs[i], kind="stable")[:k]:        # no renormalisation
                g = t[p + "ffn_gate_exps.weight"][e] @ b[i]
                u = t[p + "ffn_up_exps.weight"][e] @ b[i]
                out[i] += probs[i, e] * (t[p + "ffn_down_exps.weight"][e] @ (g / (1 + np.exp(-g)) * u))
        x = x + out
        routers.append(logits)
        moe_in.append(b)
    x = rmsnorm(x, t["output_norm.weight"], eps)
    return x @ t["output.weight"].T, routers, moe_in


def rope_pairs(x, theta):
    """x [T, heads, d]: RoPE on adjacent pairs (2i, 2i+1), as llama.cpp runs DeepSeek on the
    GGUF weight layout; position of row t = t"""
    T, _, d = x.shape
    inv = 1.0 / theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
    ang = np.outer(np.arange(T, dtype=np.float64), inv)[:, None, :]  # [T, 1, d/2]
    c, s = np.cos(ang), np.sin(ang)
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = a * c - b * s
    out[..., 1::2] = a * s + b * c
    return out


def swiglu(x, gate, up, down):
    g, u = x @ gate.T, x @ up.T
    return (g / (1 + np.exp(-g)) * u) @ down.T


SELECTED = {}  # (position, MoE index) -> experts the DeepSeek forward executed


def forward_deepseek2(meta, t, tokens):
    """DeepSeek-V3 (MLA, leading dense layers, sigmoid router + correction bias, group-limited
    top-k, shared experts). -> (logits, router selection scores z per MoE layer, MoE inputs per
    MoE layer)"""
    a = "deepseek2."
    L, nh, eps = meta[a + "block_count"], meta[a + "attention.head_count"], \
        meta[a + "attention.layer_norm_rms_epsilon"]
    theta, rope = meta[a + "rope.freq_base"], meta[a + "rope.dimension_count"]
    kv_lora, nope = meta[a + "attention.kv_lora_rank"], meta[a + "attention.key_length_mla"] - rope
    dense, k = meta[a + "leading_dense_block_count"], meta[a + "expert_used_count"]
    groups, keep = meta[a + "expert_group_count"], meta[a + "expert_group_used_count"]
    scale, norm_w = meta[a + "expert_weights_scale"], meta[a + "expert_weights_norm"]
    x = t["token_embd.weight"][tokens]
    T, H = x.shape
    mask = np.triu(np.ones((T, T), dtype=bool), 1)
    scores, moe_in = [], []
    for l in range(L):
        p = f"blk.{l}."
        h = rmsnorm(x, t[p + "attn_norm.weight"], eps)
        q = rmsnorm(h @ t[p + "attn_q_a.weight"].T, t[p + "attn_q_a_norm.weight"], eps)
        q = (q @ t[p + "attn_q_b.weight"].T).reshape(T, nh, nope + rope)
        kv = h @ t[p + "attn_kv_a_mqa.weight"].T                      # [T, kv_lora + rope]
        c = rmsnorm(kv[:, :kv_lora], t[p + "attn_kv_a_norm.weight"], eps)
        k_nope = np.einsum("tc,hcn->thn", c, t[p + "attn_k_b.weight"])  # [T, nh, nope]
        v = np.einsum("hvc,tc->thv", t[p + "attn_v_b.weight"], c)       # [T, nh, v]
        q_rope = rope_pairs(q[..., nope:], theta)
        k_rope = rope_pairs(kv[:, None, kv_lora:], theta)             # shared by the heads
        att = (np.einsum("qhd,khd->hqk", q[..., :nope], k_nope)
               + np.einsum("qhd,kd->hqk", q_rope, k_rope[:, 0])) / np.sqrt(nope + rope)
        att = np.where(mask[None], -np.inf, att)
        att = np.exp(att - att.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        y = np.einsum("hqk,khv->qhv", att, v).reshape(T, -1)
        x = x + y @ t[p + "attn_output.weight"].T
        b = rmsnorm(x, t[p + "ffn_norm.weight"], eps)
        if l < dense:
            x = x + swiglu(b, t[p + "ffn_gate.weight"], t[p + "ffn_up.weight"], t[p + "ffn_down.weight"])
            continue
        sig = 1 / (1 + np.exp(-(b @ t[p + "ffn_gate_inp.weight"].T)))  # [T, E]
        z = sig + t[p + "exp_probs_b.bias"]
        E = z.shape[1]
        out = swiglu(b, t[p + "ffn_gate_shexp.weight"], t[p + "ffn_up_shexp.weight"],
                     t[p + "ffn_down_shexp.weight"])
        for i in range(T):
            g = z[i].reshape(groups, -1)
            gscore = np.sort(g, -1)[:, -2:].sum(-1)
            kept = sorted(range(groups), key=lambda j: (-gscore[j], j))[:keep]
            masked = np.zeros(E)                                      # masked to 0.0 as HF does
            for j in kept:
                masked[j * (E // groups):(j + 1) * (E // groups)] = g[j]
            sel = sorted(range(E), key=lambda e: (-masked[e], e))[:k]
            SELECTED[(i, len(scores))] = sel
            w = sig[i, sel] / (sig[i, sel].sum() + 1e-20) if norm_w else sig[i, sel]
            for e, we in zip(sel, w * scale):
                out[i] += we * swiglu(b[i], t[p + "ffn_gate_exps.weight"][e],
                                      t[p + "ffn_up_exps.weight"][e], t[p + "ffn_down_exps.weight"][e])
        x = x + out
        scores.append(z)
        moe_in.append(b)
    x = rmsnorm(x, t["output_norm.weight"], eps)
    return x @ t["output.weight"].T, scores, moe_in


def olmoe_router(t, layer, b):
    return b @ t[f"blk.{layer}.ffn_gate_inp.weight"].T                 # softmax router: logits


def deepseek2_router(t, layer, b):
    p = f"blk.{layer}."
    return 1 / (1 + np.exp(-(b @ t[p + "ffn_gate_inp.weight"].T))) + t[p + "exp_probs_b.bias"]


# model folder -> (forward, selection scores z of a model layer, leading dense layers key)
MODELS = {"olmoe": (forward_olmoe, olmoe_router, None),
          "deepseek2_v3": (forward_deepseek2, deepseek2_router, "deepseek2.leading_dense_block_count")}


def make(name):
    run, router, dense_key = MODELS[name]
    folder = os.path.join(ORACLE, name)
    meta, t = read_gguf(os.path.join(folder, "model.gguf"))
    tokens = json.load(open(os.path.join(folder, "tokens.json")))["tokens"]
    logits, scores, moe_in = run(meta, t, tokens)
    dense = meta[dense_key] if dense_key else 0
    T, V = logits.shape
    L, E = len(scores), scores[0].shape[1]
    k = meta[meta["general.architecture"] + ".expert_used_count"]

    # The forward pass against llama.cpp: logits and routed expert sets (routing.json is keyed
    # by model layer; compare sets of the selection, which for DeepSeek is group-limited: the
    # forward records z, so recompute the set from its own selection there).
    want = np.fromfile(os.path.join(folder, "logits.bin"), dtype="<f4").reshape(T, V)
    logit_diff = float(np.abs(logits - want).max())
    routing = json.load(open(os.path.join(folder, "routing.json")))["positions"]
    mismatches = 0
    for i in range(T):
        for m in range(L):
            if name == "olmoe":
                mine = set(int(e) for e in np.argsort(-scores[m][i], kind="stable")[:k])
            else:
                mine = set(SELECTED[(i, m)])
            mismatches += mine != set(routing[i][str(dense + m)]["experts"])
    print(f"{name}: numpy forward vs llama.cpp: max |logit diff| {logit_diff:.3g}, "
          f"routed-set mismatches {mismatches}")
    if logit_diff > 1e-5 or mismatches:
        sys.exit(f"{name}: the numpy forward does not reproduce llama.cpp: nothing written")

    # Pre-gate: router of MoE layer m on the MoE input of MoE layer m-1 (m >= 1).
    pre = np.zeros((T, L, E), dtype=np.float64)
    for m in range(1, L):
        pre[:, m, :] = router(t, dense + m, moe_in[m - 1])
    os.makedirs(OUT, exist_ok=True)
    pre.astype("<f4").tofile(os.path.join(OUT, f"{name}.pregate.bin"))
    doc = {"model": f"{folder}/model.gguf", "computed_in": "float64 numpy, stored as float32",
           "layout": "float32 little-endian [tokens][moe layers][experts]; row m = router of MoE "
                     "layer m applied to the MoE input (ffn_norm output) of MoE layer m-1, as "
                     "selection scores z (softmax router: logits; sigmoid router: sigmoid(logits) "
                     "+ correction bias); row 0 zero",
           "tokens": tokens, "moe_layers": L, "first_moe_layer": dense, "experts": E,
           "pregate_file": f"{name}.pregate.bin", "max_abs_pregate": float(np.abs(pre).max()),
           "check_max_abs_logit_diff_vs_llamacpp": logit_diff,
           "check_routed_set_mismatches_vs_llamacpp": mismatches}
    with open(os.path.join(OUT, f"{name}.json"), "w") as fh:
        json.dump(doc, fh, indent=1)
        fh.write("\n")
    print(f"wrote {OUT}/{name}.pregate.bin [{T}][{L}][{E}], max |pregate| {doc['max_abs_pregate']:.4g}")


def main():
    for name in MODELS:
        make(name)


if __name__ == "__main__":
    main()
