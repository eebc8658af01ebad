"""OLMoE-architecture model (PyTorch) for steer-olmoe-tiny.

Semantics follow HF OlmoeForCausalLM:
  pre-norm blocks, RMSNorm (eps 1e-5, weight * normalised x), q_norm / k_norm over the WHOLE
  q / k projection (not per head), NeoX rotate-half RoPE over the full head (theta 1e4),
  causal softmax attention with scale head_dim^-0.5, no biases, router = softmax(gate(x)) in
  fp32, top-k (8) without renormalisation, SwiGLU experts down(silu(gate(x)) * up(x)),
  no shared expert, untied lm_head, no embedding scaling.

Expert weights are held fused in memory ([E, H, 2I] gate|up and [E, I, H] down) and run as
one padded batched matmul per layer (no token dropping: the pad is the largest expert load of
the batch); export.py writes them one tensor per expert under the HF OLMoE names.
"""
import math
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    vocab_size: int = 4096
    hidden_size: int = 256
    intermediate_size: int = 64      # expert FFN width
    num_hidden_layers: int = 8
    num_attention_heads: int = 4
    num_experts: int = 64
    num_experts_per_tok: int = 8
    max_position_embeddings: int = 256
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    router_aux_loss_coef: float = 0.01
    router_z_loss_coef: float = 0.001
    fused_attention: bool = True     # training speed only; False = the explicit softmax form
    # "olmoe": OlmoeTiny (the MoE); "qwen3": Qwen3Dense, the drafter (dense SwiGLU MLP of
    # width intermediate_size, per-head q/k norm, GQA with num_key_value_heads, tied embeddings)
    arch: str = "olmoe"
    num_key_value_heads: int = 0     # 0: = num_attention_heads
    tie_word_embeddings: bool = False

    @property
    def kv_heads(self):
        return self.num_key_value_heads or self.num_attention_heads

    @property
    def head_dim(self):
        return self.hidden_size // self.num_attention_heads

    def to_dict(self):
        return asdict(self)


def init_weights(model, seed, std, mlp_out):
    """normal(0, std) matrices from a seeded generator in parameter order, ones for norms; the
    residual-output projections (o_proj and the given MLP / expert down projections) scaled by
    1/sqrt(2 L) (GPT-2 style)"""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                nn.init.ones_(p)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * std)
        s = 1.0 / math.sqrt(2 * model.cfg.num_hidden_layers)
        for layer, w in zip(model.layers, mlp_out):
            layer.self_attn.o_proj.weight.mul_(s)
            w.mul_(s)


def causal_attention(q, k, v, fused):
    """softmax(q k^T / sqrt(hd)) v with a causal mask, q/k/v [B, heads, S, hd]; fused = PyTorch's
    CPU kernel (same arithmetic, faster to train), else the explicit form"""
    hd = q.shape[-1]
    if fused:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=hd ** -0.5)
    S = q.shape[-2]
    att = (q @ k.transpose(-1, -2)) * (hd ** -0.5)
    mask = torch.ones(S, S, dtype=torch.bool, device=q.device).triu(1)
    att = torch.softmax(att.masked_fill(mask, float("-inf")).float(), dim=-1).to(q.dtype)
    return att @ v


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * y.to(x.dtype)


def rope_cos_sin(seq_len, head_dim, theta, device):
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim))
    pos = torch.arange(seq_len, dtype=torch.float32, device=device)
    freqs = torch.outer(pos, inv_freq)                 # [S, d/2]
    emb = torch.cat([freqs, freqs], dim=-1)            # [S, d]  (NeoX layout)
    return emb.cos(), emb.sin()


def rotate_half(x):
    d = x.shape[-1] // 2
    return torch.cat([-x[..., d:], x[..., :d]], dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        H = cfg.hidden_size
        self.cfg = cfg
        self.q_proj = nn.Linear(H, H, bias=False)
        self.k_proj = nn.Linear(H, H, bias=False)
        self.v_proj = nn.Linear(H, H, bias=False)
        self.o_proj = nn.Linear(H, H, bias=False)
        self.q_norm = RMSNorm(H, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(H, cfg.rms_norm_eps)

    def forward(self, x, cos, sin):
        B, S, H = x.shape
        nh, hd = self.cfg.num_attention_heads, self.cfg.head_dim
        q = self.q_norm(self.q_proj(x)).view(B, S, nh, hd).transpose(1, 2)
        k = self.k_norm(self.k_proj(x)).view(B, S, nh, hd).transpose(1, 2)
        v = self.v_proj(x).view(B, S, nh, hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        y = causal_attention(q, k, v, self.cfg.fused_attention).transpose(1, 2).reshape(B, S, H)
        return self.o_proj(y)


class _ExpertFFN(torch.autograd.Function):
    """The routed SwiGLU experts with a hand-written backward (training speed only; the same
    arithmetic as the "loop" path). Inputs: xs [N, H] the token rows sorted by expert, counts
    [E] (python ints), w_gate_up [E, H, 2I], w_down [E, I, H]. Output [N, H] unweighted.
    Autograd's version spends most of its time outside the matmuls (per-expert slicing of the
    stacked parameters, concatenations, zero-filled gradient buffers); this one writes every
    per-expert result straight into its slice of one preallocated tensor."""

    @staticmethod
    def forward(ctx, xs, w_gate_up, w_down, counts):
        N, H = xs.shape
        I = w_down.shape[1]
        gu = xs.new_empty(N, 2 * I)
        h = xs.new_empty(N, I)
        out = xs.new_empty(N, H)
        start = 0
        for e, c in enumerate(counts):
            if c == 0:
                continue
            sl = slice(start, start + c)
            torch.mm(xs[sl], w_gate_up[e], out=gu[sl])
            start += c
        h = F.silu(gu[:, :I]) * gu[:, I:]
        start = 0
        for e, c in enumerate(counts):
            if c == 0:
                continue
            sl = slice(start, start + c)
            torch.mm(h[sl], w_down[e], out=out[sl])
            start += c
        ctx.save_for_backward(xs, w_gate_up, w_down, gu, h)
        ctx.counts = counts
        return out

    @staticmethod
    def backward(ctx, grad_out):
        xs, w_gate_up, w_down, gu, h = ctx.saved_tensors
        counts = ctx.counts
        I = w_down.shape[1]
        grad_out = grad_out.contiguous()
        d_wdown = torch.zeros_like(w_down)
        d_wgu = torch.zeros_like(w_gate_up)
        dh = torch.empty_like(h)
        start = 0
        for e, c in enumerate(counts):
            if c == 0:
                continue
            sl = slice(start, start + c)
            torch.mm(h[sl].t(), grad_out[sl], out=d_wdown[e])
            torch.mm(grad_out[sl], w_down[e].t(), out=dh[sl])
            start += c
        g, u = gu[:, :I], gu[:, I:]
        sg = torch.sigmoid(g)
        silu_g = g * sg
        d_g = dh * u * (sg * (1 + g * (1 - sg)))
        d_u = dh * silu_g
        dgu = torch.cat([d_g, d_u], dim=1)
        dxs = torch.empty_like(xs)
        start = 0
        for e, c in enumerate(counts):
            if c == 0:
                continue
            sl = slice(start, start + c)
            torch.mm(xs[sl].t(), dgu[sl], out=d_wgu[e])
            torch.mm(dgu[sl], w_gate_up[e].t(), out=dxs[sl])
            start += c
        return dxs, d_wgu, d_wdown, None


class MoE(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        E, H, I = cfg.num_experts, cfg.hidden_size, cfg.intermediate_size
        self.gate = nn.Linear(H, E, bias=False)                       # router
        self.w_gate_up = nn.Parameter(torch.empty(E, H, 2 * I))      # x @ w -> [gate | up]
        self.w_down = nn.Parameter(torch.empty(E, I, H))
        # "fused": hand-written expert backward (training); "loop": one autograd matmul per
        # expert (reference); "bmm": padded batched matmul
        self.impl = "fused"

    def forward(self, x):
        """x [T, H] -> (y [T, H], router_logits [T, E] fp32, topk_idx [T, k])"""
        cfg = self.cfg
        T, H = x.shape
        E, k, I = cfg.num_experts, cfg.num_experts_per_tok, cfg.intermediate_size
        logits = F.linear(x.float(), self.gate.weight.float())
        probs = torch.softmax(logits, dim=-1)
        topw, topi = torch.topk(probs, k, dim=-1)                     # no renormalisation
        topw = topw.to(x.dtype)

        flat_e = topi.reshape(-1)                                     # [T*k]
        order = torch.argsort(flat_e, stable=True)
        e_sorted = flat_e[order]
        tok_sorted = order // k
        counts = torch.bincount(flat_e, minlength=E)
        starts = torch.cumsum(counts, 0) - counts
        pos = torch.arange(T * k, device=x.device) - starts[e_sorted]
        if self.impl == "fused":
            xs = x.index_select(0, tok_sorted)
            ys = _ExpertFFN.apply(xs, self.w_gate_up, self.w_down, counts.tolist())
            out_sorted = ys * topw.reshape(-1)[order].unsqueeze(-1)
        elif self.impl == "loop":
            xs = x[tok_sorted]
            outs = []
            # unbind once: indexing the parameter per expert would make autograd build and
            # add a full [E, ...] zero gradient for every expert (most of a step's time)
            w_gu, w_dn = self.w_gate_up.unbind(0), self.w_down.unbind(0)
            for e, xe in enumerate(torch.split(xs, counts.tolist())):
                if xe.shape[0] == 0:
                    continue
                gu = xe @ w_gu[e]
                outs.append((F.silu(gu[:, :I]) * gu[:, I:]) @ w_dn[e])
            out_sorted = torch.cat(outs, 0) * topw.reshape(-1)[order].unsqueeze(-1)
        else:
            C = int(counts.max().item())
            buf = x.new_zeros(E, C, H)
            buf = buf.index_put((e_sorted, pos), x[tok_sorted])
            gu = torch.bmm(buf, self.w_gate_up)                       # [E, C, 2I]
            h = F.silu(gu[..., :I]) * gu[..., I:]
            out = torch.bmm(h, self.w_down)                           # [E, C, H]
            out_sorted = out[e_sorted, pos] * topw.reshape(-1)[order].unsqueeze(-1)
        y = torch.zeros_like(x).index_add(0, tok_sorted, out_sorted)
        return y, logits, topi


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MoE(cfg)

    def forward(self, x, cos, sin):
        h = x + self.self_attn(self.input_layernorm(x), cos, sin)
        B, S, H = h.shape
        b = self.post_attention_layernorm(h)
        y, logits, topi = self.mlp(b.reshape(B * S, H))
        return h + y.view(B, S, H), logits, topi, b


class OlmoeTiny(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList([Block(cfg) for _ in range(cfg.num_hidden_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def init_weights(self, seed, std=0.02):
        init_weights(self, seed, std, [layer.mlp.w_down for layer in self.layers])

    def forward(self, ids, return_aux=False):
        B, S = ids.shape
        cos, sin = rope_cos_sin(S, self.cfg.head_dim, self.cfg.rope_theta, ids.device)
        x = self.embed_tokens(ids)
        all_logits, all_topi, all_inputs = [], [], []
        for layer in self.layers:
            x, rl, ti, b = layer(x, cos, sin)
            all_logits.append(rl)
            all_topi.append(ti)
            all_inputs.append(b)
        logits = self.lm_head(self.norm(x))
        if return_aux:
            return logits, all_logits, all_topi, all_inputs
        return logits

    def aux_losses(self, router_logits, topis):
        """OLMoE / megablocks-style losses, averaged over layers.
        load balancing: E * sum_e f_e * P_e (f_e = fraction of the T*k assignments to e,
        P_e = mean router probability of e); 1.0 at perfect balance.
        z-loss: mean over tokens of logsumexp(router logits)^2."""
        E, k = self.cfg.num_experts, self.cfg.num_experts_per_tok
        lb, z = 0.0, 0.0
        for rl, ti in zip(router_logits, topis):
            probs = torch.softmax(rl, dim=-1)
            f = torch.bincount(ti.reshape(-1), minlength=E).float() / ti.numel()
            lb = lb + E * (f * probs.mean(0)).sum()
            z = z + torch.logsumexp(rl, dim=-1).pow(2).mean()
        n = len(router_logits)
        return lb / n, z / n


class DenseAttention(nn.Module):
    """Qwen3 attention: GQA, RMSNorm per head over head_dim on q and k (before RoPE)."""

    def __init__(self, cfg):
        super().__init__()
        H, hd = cfg.hidden_size, cfg.head_dim
        self.cfg = cfg
        self.q_proj = nn.Linear(H, cfg.num_attention_heads * hd, bias=False)
        self.k_proj = nn.Linear(H, cfg.kv_heads * hd, bias=False)
        self.v_proj = nn.Linear(H, cfg.kv_heads * hd, bias=False)
        self.o_proj = nn.Linear(cfg.num_attention_heads * hd, H, bias=False)
        self.q_norm = RMSNorm(hd, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(hd, cfg.rms_norm_eps)

    def forward(self, x, cos, sin):
        B, S, H = x.shape
        nh, nkv, hd = self.cfg.num_attention_heads, self.cfg.kv_heads, self.cfg.head_dim
        q = self.q_norm(self.q_proj(x).view(B, S, nh, hd)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(B, S, nkv, hd)).transpose(1, 2)
        v = self.v_proj(x).view(B, S, nkv, hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if nkv != nh:
            k = k.repeat_interleave(nh // nkv, dim=1)
            v = v.repeat_interleave(nh // nkv, dim=1)
        y = causal_attention(q, k, v, self.cfg.fused_attention)
        return self.o_proj(y.transpose(1, 2).reshape(B, S, nh * hd))


class DenseBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        H, I = cfg.hidden_size, cfg.intermediate_size
        self.input_layernorm = RMSNorm(H, cfg.rms_norm_eps)
        self.self_attn = DenseAttention(cfg)
        self.post_attention_layernorm = RMSNorm(H, cfg.rms_norm_eps)
        self.gate_proj = nn.Linear(H, I, bias=False)
        self.up_proj = nn.Linear(H, I, bias=False)
        self.down_proj = nn.Linear(I, H, bias=False)

    def forward(self, x, cos, sin):
        h = x + self.self_attn(self.input_layernorm(x), cos, sin)
        b = self.post_attention_layernorm(h)
        return h + self.down_proj(F.silu(self.gate_proj(b)) * self.up_proj(b))


class Qwen3Dense(nn.Module):
    """The drafter: HF Qwen3ForCausalLM semantics (pre-norm, per-head q/k RMSNorm, NeoX RoPE over
    the full head, GQA, SwiGLU MLP, final norm, lm_head tied to the embedding when
    tie_word_embeddings)."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList([DenseBlock(cfg) for _ in range(cfg.num_hidden_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = None if cfg.tie_word_embeddings else nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def init_weights(self, seed, std=0.02):
        init_weights(self, seed, std, [layer.down_proj.weight for layer in self.layers])

    def forward(self, ids, return_aux=False):
        B, S = ids.shape
        cos, sin = rope_cos_sin(S, self.cfg.head_dim, self.cfg.rope_theta, ids.device)
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x, cos, sin)
        x = self.norm(x)
        logits = x @ self.embed_tokens.weight.t() if self.lm_head is None else self.lm_head(x)
        if return_aux:
            return logits, [], [], []
        return logits

    def aux_losses(self, router_logits, topis):
        zero = torch.zeros(())
        return zero, zero


def build_model(cfg):
    return Qwen3Dense(cfg) if cfg.arch == "qwen3" else OlmoeTiny(cfg)


def num_params(model):
    return sum(p.numel() for p in model.parameters())
