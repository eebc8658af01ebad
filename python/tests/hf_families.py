#!/usr/bin/env python3
"""steermoe.hf on small random OlmoeForCausalLM, Qwen3MoeForCausalLM and DeepseekV3ForCausalLM
(transformers from PyPI; run by hand like hf_check.py):

  * exact routing with every expert resident reproduces the unpatched model's logits (the
    harness only replaces the gate's top-k; weights from the policy's own rule);
  * PSR (running score range: the uninformed calibration has none) with a small cache changes the
    routing, and a batch of independent rows gives each row
    the logits it gets alone (one logical cache per row).

    /tmp/hf/bin/python python/tests/hf_families.py build
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(sys.argv[1] if len(sys.argv) > 1 else "build").resolve() / "python"))
import steermoe.hf  # noqa: E402
from transformers import (DeepseekV3Config, DeepseekV3ForCausalLM, OlmoeConfig,  # noqa: E402
                          OlmoeForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM)

torch.manual_seed(0)
common = dict(vocab_size=128, hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=64)
models = {
    "olmoe": OlmoeForCausalLM(OlmoeConfig(**common, intermediate_size=32, num_experts=16,
                                          num_experts_per_tok=4)),
    "qwen3_moe": Qwen3MoeForCausalLM(Qwen3MoeConfig(**common, intermediate_size=64,
                                                    moe_intermediate_size=32, num_experts=16,
                                                    num_experts_per_tok=4, head_dim=16,
                                                    norm_topk_prob=True)),
    "deepseek_v3": DeepseekV3ForCausalLM(DeepseekV3Config(
        **common, intermediate_size=64, moe_intermediate_size=32, n_routed_experts=16,
        num_experts_per_tok=4, n_group=4, topk_group=2, n_shared_experts=1,
        first_k_dense_replace=1, kv_lora_rank=16, q_lora_rank=None, qk_rope_head_dim=8,
        qk_nope_head_dim=8, v_head_dim=16, routed_scaling_factor=2.5, norm_topk_prob=True)),
}
failures = 0
for name, model in models.items():
    model = model.float().eval()
    for blk in steermoe.hf._moe_blocks(model):  # non-zero correction bias for DeepSeek
        if hasattr(blk.gate, "e_score_correction_bias"):
            blk.gate.e_score_correction_bias.copy_(torch.randn(16) * 0.05)
    x = torch.randint(0, 128, (3, 24))
    with torch.no_grad():
        ref = model(input_ids=x, use_cache=False).logits
        with steermoe.hf.PolicyHarness(model, "exact:evict=lru", cache_slots=16) as h:
            got = model(input_ids=x, use_cache=False).logits
        d_exact = (got - ref).abs().max().item()
        with steermoe.hf.PolicyHarness(model, "psr:lambda=0.5,n=1,range=running", cache_slots=6) as h:
            psr = model(input_ids=x, use_cache=False).logits
            st = h.stats()
            alone = [model(input_ids=x[b:b + 1], use_cache=False).logits[0] for b in range(3)]
        d_psr = (psr - ref).abs().max().item()
        d_alone = max((psr[b] - alone[b]).abs().max().item() for b in range(3))
    moe = len(steermoe.hf._moe_blocks(model))
    replaced = sum(s["replaced_fraction"] for s in st) / len(st)
    ok = d_exact < 1e-5 and d_psr > 1e-4 and d_alone < 1e-5 and replaced > 0
    failures += not ok
    print(f"{'ok' if ok else 'FAIL'} {name}: {moe} MoE layers; exact vs unpatched {d_exact:.1e}; "
          f"PSR C=6 changes logits by {d_psr:.2f}, replaces {100 * replaced:.1f}% of top-k; "
          f"batch row vs alone {d_alone:.1e}")
sys.exit(1 if failures else 0)
