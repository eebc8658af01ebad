#!/usr/bin/env python3
"""Tiny random models written by transformers itself, and transformers' outputs on them.

Models: Qwen3-MoE, DeepSeek-V3 (YaRN), OLMoE (clip_qkv), Qwen3-Next, Qwen3.5-MoE and a dense
Qwen3 (no experts; stored in bfloat16).

Each model is built with transformers' own classes from a config, given deterministic random
weights (scaled so that logits and router scores are well separated), saved with
save_pretrained (float32 safetensors, the config as transformers 5.x writes it), and run in
float32 with eager attention / eager experts:

  logits_full.f32         [T][vocab]  one forward over the whole prompt (no cache)
  logits_incremental.f32  [T][vocab]  one token at a time with a cache (DynamicCache /
                                      the hybrid cache with conv + recurrent states)
  experts.i32             [T][moe_layers][top_k]  routed experts per token, ascending
                                      (forward pre-hooks on every mlp.experts module)
  reference.json          tokens, shapes, versions, and the two runs' agreement

Usage (not needed by CI; the outputs are committed under tests/data/hf_models/):
  python3 -m venv /tmp/hfvenv && /tmp/hfvenv/bin/pip install torch transformers safetensors
  /tmp/hfvenv/bin/python tools/reference/make_hf_models.py --out tests/data/hf_models
"""
import argparse
import json
import math
import os
import shutil
import sys

import torch
import transformers
from transformers import (
    DeepseekV3Config,
    DeepseekV3ForCausalLM,
    OlmoeConfig,
    OlmoeForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
    Qwen3NextConfig,
    Qwen3NextForCausalLM,
)
from transformers.models.qwen3_5_moe import (
    Qwen3_5MoeConfig,
    Qwen3_5MoeForConditionalGeneration,
)

VOCAB = 300
SEQ = 12


def tiny_models():
    """name -> (config, model class). Every model has hidden 64 and a few experts."""
    common = dict(vocab_size=VOCAB, hidden_size=64, rms_norm_eps=1e-6, tie_word_embeddings=False,
                  bos_token_id=None, eos_token_id=None, pad_token_id=None)
    models = {}
    # Qwen3-MoE as transformers 5.x saves it (num_local_experts, rope_parameters); one dense layer.
    models["qwen3moe_v5"] = (Qwen3MoeConfig(
        **common, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        intermediate_size=96, moe_intermediate_size=32, num_experts=16, num_experts_per_tok=4,
        norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1],
        max_position_embeddings=512,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}), Qwen3MoeForCausalLM)
    # DeepSeek-V3 with YaRN (factor 4 over 64 pretraining positions, mscale != mscale_all_dim so
    # that both the cos/sin attention factor and the softmax mscale^2 matter), q LoRA, groups.
    models["deepseek_v3_yarn"] = (DeepseekV3Config(
        **common, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
        q_lora_rank=24, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
        intermediate_size=96, moe_intermediate_size=32, n_routed_experts=16, num_experts_per_tok=4,
        n_group=4, topk_group=2, first_k_dense_replace=1, n_shared_experts=1,
        routed_scaling_factor=2.5, norm_topk_prob=True, max_position_embeddings=256,
        rope_interleave=True,
        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                         "original_max_position_embeddings": 64, "beta_fast": 32.0,
                         "beta_slow": 1.0, "mscale": 0.707, "mscale_all_dim": 1.0}),
        DeepseekV3ForCausalLM)
    # OLMoE with clip_qkv small enough to clip, and tied embeddings.
    olmoe_common = dict(common, tie_word_embeddings=True)
    models["olmoe_clip"] = (OlmoeConfig(
        **olmoe_common, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
        intermediate_size=32, num_experts=8, num_experts_per_tok=2, clip_qkv=0.6,
        max_position_embeddings=512), OlmoeForCausalLM)
    # Qwen3-Next: 3 Gated DeltaNet layers + 1 gated full-attention layer (interval 4).
    models["qwen3_next"] = (Qwen3NextConfig(
        **common, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4, moe_intermediate_size=32,
        shared_expert_intermediate_size=32, num_experts=16, num_experts_per_tok=4,
        norm_topk_prob=True, max_position_embeddings=512, full_attention_interval=4,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                         "partial_rotary_factor": 0.25}), Qwen3NextForCausalLM)
    # Qwen3.5-MoE (the multimodal wrapper; only the text model is compared): explicit
    # layer_types [linear, full, linear, full], a tiny vision tower that is never run.
    text = dict(common, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                head_dim=16, linear_conv_kernel_dim=4, linear_key_head_dim=16,
                linear_value_head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
                moe_intermediate_size=32, shared_expert_intermediate_size=32, num_experts=16,
                num_experts_per_tok=4, max_position_embeddings=512,
                layer_types=["linear_attention", "full_attention"] * 2,
                rope_parameters={"rope_type": "default", "rope_theta": 10000000.0,
                                 "partial_rotary_factor": 0.25, "mrope_section": [1, 1, 0],
                                 "mrope_interleaved": True})
    text.pop("tie_word_embeddings")
    vision = dict(depth=1, hidden_size=16, intermediate_size=16, num_heads=2, out_hidden_size=64,
                  patch_size=2, spatial_merge_size=1, temporal_patch_size=1,
                  num_position_embeddings=4)
    models["qwen3_5_moe"] = (Qwen3_5MoeConfig(text_config=text, vision_config=vision,
                                              tie_word_embeddings=False),
                             Qwen3_5MoeForConditionalGeneration)
    # Dense Qwen3 (the speculative-decoding drafter's architecture): no experts at all, tied
    # embeddings, GQA (2 kv heads for 4 query heads), heads x head_dim != hidden, stored in
    # bfloat16 like the drafter (STORE_DTYPE); the reference runs the saved bf16 weights in fp32.
    models["qwen3_dense"] = (Qwen3Config(
        **dict(common, tie_word_embeddings=True, hidden_size=32), num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, intermediate_size=64,
        max_position_embeddings=256, use_sliding_window=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}), Qwen3ForCausalLM)
    return models


# Models saved in another dtype than float32 (the reference still runs in float32).
STORE_DTYPE = {"qwen3_dense": torch.bfloat16}


def randomize(model, seed):
    """Deterministic weights: matrices N(0, 1/fan_in), embeddings N(0, 1), plain norm weights
    1 + N(0, 0.1^2), zero-centred (1 + w) norms N(0, 0.1^2), A_log log(U(1, 16)), dt_bias N(0, 1),
    correction bias N(0, 0.1^2)."""
    g = torch.Generator().manual_seed(seed)
    zero_centred = type(model).__name__.startswith(("Qwen3Next", "Qwen3_5"))
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("A_log"):
                p.copy_(torch.log(1.0 + 15.0 * torch.rand(p.shape, generator=g)))
            elif name.endswith("dt_bias"):
                p.copy_(torch.randn(p.shape, generator=g))
            elif name.endswith("e_score_correction_bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif p.dim() == 1:
                norm = 0.1 * torch.randn(p.shape, generator=g)
                gated = name.endswith("linear_attn.norm.weight")
                p.copy_(norm if zero_centred and not gated else 1.0 + norm)
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            elif "conv1d" in name:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[-1]))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[-1]))
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.1 * torch.randn(b.shape, generator=g))


def text_model_and_head(model):
    """The decoder stack that runs on text tokens (for Qwen3.5, the language model only)."""
    if isinstance(model, Qwen3_5MoeForConditionalGeneration):
        return model.model.language_model, model.lm_head
    return model.model, model.lm_head


def run(model, tokens):
    decoder, head = text_model_and_head(model)
    experts = {}  # module -> list of index tensors per call

    def pre_hook(module, args, kwargs):
        idx = kwargs.get("top_k_index", args[1] if len(args) > 1 else None)
        experts.setdefault(module, []).append(idx.detach().clone())

    hooks = []
    moe_modules = []
    for name, m in decoder.named_modules():
        if name.endswith("mlp.experts"):
            moe_modules.append(m)
            hooks.append(m.register_forward_pre_hook(pre_hook, with_kwargs=True))
    ids = torch.tensor([tokens])
    with torch.no_grad():
        out = decoder(input_ids=ids, use_cache=False)
        full = head(out.last_hidden_state)[0]
        full_experts = [experts[m][0] for m in moe_modules]
        experts.clear()
        cache = None
        steps = []
        for t in range(len(tokens)):
            o = decoder(input_ids=ids[:, t:t + 1], past_key_values=cache, use_cache=True)
            cache = o.past_key_values
            steps.append(head(o.last_hidden_state)[0, 0])
        inc = torch.stack(steps)
        inc_experts = [torch.cat(experts[m], 0) for m in moe_modules]
    for h in hooks:
        h.remove()
    if not moe_modules:  # a dense model routes nothing: [T][0][0]
        empty = torch.zeros((len(tokens), 0, 0), dtype=torch.int32)
        return full.float(), inc.float(), empty, empty
    sel_full = torch.stack([e.sort(-1).values for e in full_experts], 1)  # [T][L][K]
    sel_inc = torch.stack([e.sort(-1).values for e in inc_experts], 1)
    return full.float(), inc.float(), sel_full.int(), sel_inc.int()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    for i, (name, (config, cls)) in enumerate(tiny_models().items()):
        if args.only and name not in args.only:
            continue
        config._attn_implementation = "eager"
        model = cls(config).eval().float()
        if hasattr(model, "set_experts_implementation"):
            model.set_experts_implementation("eager")
        randomize(model, seed=1000 + i)
        if getattr(config, "tie_word_embeddings", False):
            model.tie_weights()
        folder = os.path.join(args.out, name)
        shutil.rmtree(folder, ignore_errors=True)
        if name in STORE_DTYPE:
            model = model.to(STORE_DTYPE[name])
        model.save_pretrained(folder, safe_serialization=True)
        # Reload what was saved (the reference must be the saved model's output).
        model = cls.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()
        if hasattr(model, "set_experts_implementation"):
            model.set_experts_implementation("eager")
        g = torch.Generator().manual_seed(7 + i)
        tokens = torch.randint(0, VOCAB, (SEQ,), generator=g).tolist()
        full, inc, sel_full, sel_inc = run(model, tokens)
        full.numpy().astype("<f4").tofile(os.path.join(folder, "logits_full.f32"))
        inc.numpy().astype("<f4").tofile(os.path.join(folder, "logits_incremental.f32"))
        sel_inc.numpy().astype("<i4").tofile(os.path.join(folder, "experts.i32"))
        meta = {
            "tokens": tokens,
            "vocab": VOCAB,
            "moe_layers": int(sel_inc.shape[1]),
            "top_k": int(sel_inc.shape[2]),
            "full_vs_incremental_max_abs": float((full - inc).abs().max()),
            "routing_full_equals_incremental": bool(torch.equal(sel_full, sel_inc)),
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "dtype": "float32",
            "stored_dtype": str(STORE_DTYPE.get(name, torch.float32)).replace("torch.", ""),
            "attn_implementation": "eager",
            "generator": "tools/reference/make_hf_models.py",
        }
        with open(os.path.join(folder, "reference.json"), "w") as f:
            json.dump(meta, f, indent=1)
        for junk in ("generation_config.json",):
            p = os.path.join(folder, junk)
            if os.path.exists(p):
                os.remove(p)
        size = sum(os.path.getsize(os.path.join(folder, n)) for n in os.listdir(folder))
        print(f"{name}: {size / 1e6:.2f} MB, full vs incremental {meta['full_vs_incremental_max_abs']:.2e}, "
              f"routing equal {meta['routing_full_equals_incremental']}", file=sys.stderr)


if __name__ == "__main__":
    main()
