#!/usr/bin/python3
"""Export a training checkpoint as an HF OLMoE folder (BF16 safetensors, config, tokenizer).

Writes <out>/config.json, model.safetensors, tokenizer.json, tokenizer_config.json,
generation_config.json, special_tokens_map.json. Tensor names are those of HF OlmoeForCausalLM
with one tensor per expert (model.layers.N.mlp.experts.E.{gate,up,down}_proj.weight).
"""
import argparse
import json
import os
import shutil
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_io import to_hf, write_safetensors_bf16  # noqa: E402
from model import Config, build_model, num_params  # noqa: E402

EOT_ID = 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workdir", default="build-train")
    ap.add_argument("--out", default="models/steer-olmoe-tiny")
    ap.add_argument("--untrained", action="store_true", help="export the step-0 (seeded initial) weights")
    ap.add_argument("--checkpoint", default="", help="a checkpoint or snapshot file (default: <workdir>/ckpt.pt)")
    args = ap.parse_args()
    ck = torch.load(args.checkpoint or os.path.join(args.workdir, "ckpt.pt"), weights_only=False)
    cfg = Config(**ck["config"])
    model = build_model(cfg)
    if args.untrained:
        # the initial (step 0) weights of the run, for random-routing baselines
        model.init_weights(ck["args"]["seed"] if "args" in ck else 20261201)
        ck["step"] = 0
    else:
        model.load_state_dict(ck["model"])
    os.makedirs(args.out, exist_ok=True)

    sd = to_hf(model)
    assert sum(v.numel() for v in sd.values()) == num_params(model)
    write_safetensors_bf16(os.path.join(args.out, "model.safetensors"), sd, {"format": "pt"})

    # the fields both families write; each family adds its own below
    config = {
        "attention_bias": False,
        "attention_dropout": 0.0,
        "hidden_act": "silu",
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_hidden_layers,
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.kv_heads,
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_theta": cfg.rope_theta,
        "rope_scaling": None,
        "max_position_embeddings": cfg.max_position_embeddings,
        "vocab_size": cfg.vocab_size,
        "tie_word_embeddings": cfg.tie_word_embeddings,
        "torch_dtype": "bfloat16",
        "bos_token_id": EOT_ID,
        "eos_token_id": EOT_ID,
        "pad_token_id": EOT_ID,
        "initializer_range": 0.02,
        "use_cache": True,
    }
    if cfg.arch == "qwen3":
        config = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", **config,
                  "head_dim": cfg.head_dim, "use_sliding_window": False, "sliding_window": None}
    else:
        config = {"architectures": ["OlmoeForCausalLM"], "model_type": "olmoe", **config,
                  "num_experts": cfg.num_experts, "num_experts_per_tok": cfg.num_experts_per_tok,
                  "norm_topk_prob": False, "clip_qkv": None,
                  "router_aux_loss_coef": cfg.router_aux_loss_coef, "output_router_logits": False,
                  "transformers_version": "4.46.3"}
    with open(os.path.join(args.out, "config.json"), "w") as fh:
        json.dump(config, fh, indent=2)
        fh.write("\n")
    with open(os.path.join(args.out, "generation_config.json"), "w") as fh:
        json.dump({"bos_token_id": EOT_ID, "eos_token_id": EOT_ID, "pad_token_id": EOT_ID}, fh, indent=2)
        fh.write("\n")

    shutil.copyfile(os.path.join(args.workdir, "tokenizer.json"), os.path.join(args.out, "tokenizer.json"))
    eot = "<|endoftext|>"
    tok_cfg = {
        "add_bos_token": False,
        "add_eos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {str(EOT_ID): {"content": eot, "lstrip": False, "normalized": False,
                                               "rstrip": False, "single_word": False, "special": True}},
        "bos_token": eot,
        "eos_token": eot,
        "pad_token": eot,
        "unk_token": None,
        "clean_up_tokenization_spaces": False,
        "model_max_length": cfg.max_position_embeddings,
        "tokenizer_class": "GPT2TokenizerFast",
    }
    with open(os.path.join(args.out, "tokenizer_config.json"), "w") as fh:
        json.dump(tok_cfg, fh, indent=2)
        fh.write("\n")
    with open(os.path.join(args.out, "special_tokens_map.json"), "w") as fh:
        json.dump({"bos_token": eot, "eos_token": eot, "pad_token": eot}, fh, indent=2)
        fh.write("\n")
    size = os.path.getsize(os.path.join(args.out, "model.safetensors"))
    print(f"exported step {ck['step']}: {num_params(model)} parameters, model.safetensors {size} bytes")


if __name__ == "__main__":
    main()
