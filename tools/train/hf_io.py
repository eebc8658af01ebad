"""Minimal safetensors (BF16) writer/reader and HF OLMoE name mapping, without the safetensors package."""
import json
import struct

import numpy as np
import torch


def bf16_bits(t):
    """float tensor -> numpy uint16 array of its BF16 bits (round to nearest even, as torch)"""
    return t.detach().to(torch.bfloat16).contiguous().view(torch.int16).numpy().view(np.uint16)


def write_safetensors_bf16(path, tensors, metadata=None):
    """tensors: dict name -> float torch tensor; written in name order as BF16."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        bits = bf16_bits(tensors[name])
        b = bits.astype("<u2").tobytes()
        header[name] = {"dtype": "BF16", "shape": list(tensors[name].shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(h)))
        fh.write(h)
        for b in blobs:
            fh.write(b)


def read_safetensors(path):
    """-> dict name -> float32 torch tensor (BF16 and F32 supported)"""
    with open(path, "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        header = json.loads(fh.read(n))
        data = fh.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        if info["dtype"] == "BF16":
            bits = np.frombuffer(data[a:b], dtype="<u2").astype(np.uint32) << 16
            arr = bits.view(np.float32)
        elif info["dtype"] == "F32":
            arr = np.frombuffer(data[a:b], dtype="<f4")
        else:
            raise ValueError(info["dtype"])
        out[name] = torch.from_numpy(arr.reshape(info["shape"]).copy())
    return out


def dense_parameters(model):
    """Qwen3Dense -> dict of HF Qwen3 tensor name -> the model's own parameter (no lm_head.weight
    when tied); the one name mapping that export and import both use"""
    sd = {"model.embed_tokens.weight": model.embed_tokens.weight,
          "model.norm.weight": model.norm.weight}
    if model.lm_head is not None:
        sd["lm_head.weight"] = model.lm_head.weight
    for l, layer in enumerate(model.layers):
        p = f"model.layers.{l}."
        a = layer.self_attn
        for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
            sd[p + f"self_attn.{n}.weight"] = getattr(a, n).weight
        sd[p + "self_attn.q_norm.weight"] = a.q_norm.weight
        sd[p + "self_attn.k_norm.weight"] = a.k_norm.weight
        sd[p + "input_layernorm.weight"] = layer.input_layernorm.weight
        sd[p + "post_attention_layernorm.weight"] = layer.post_attention_layernorm.weight
        for n in ("gate_proj", "up_proj", "down_proj"):
            sd[p + f"mlp.{n}.weight"] = getattr(layer, n).weight
    return sd


def to_hf_dense(model):
    """Qwen3Dense state -> dict of HF Qwen3 tensor names (float copies)"""
    return {k: v.detach().float().contiguous() for k, v in dense_parameters(model).items()}


def load_hf_dense_into(model, sd):
    """inverse of to_hf_dense"""
    with torch.no_grad():
        for name, param in dense_parameters(model).items():
            param.copy_(sd[name])


def to_hf(model):
    """OlmoeTiny state -> dict of HF OLMoE tensor names (one tensor per expert)"""
    cfg = model.cfg
    if cfg.arch == "qwen3":
        return to_hf_dense(model)
    I = cfg.intermediate_size
    sd = {"model.embed_tokens.weight": model.embed_tokens.weight,
          "model.norm.weight": model.norm.weight,
          "lm_head.weight": model.lm_head.weight}
    for l, layer in enumerate(model.layers):
        p = f"model.layers.{l}."
        a = layer.self_attn
        for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
            sd[p + f"self_attn.{n}.weight"] = getattr(a, n).weight
        sd[p + "self_attn.q_norm.weight"] = a.q_norm.weight
        sd[p + "self_attn.k_norm.weight"] = a.k_norm.weight
        sd[p + "input_layernorm.weight"] = layer.input_layernorm.weight
        sd[p + "post_attention_layernorm.weight"] = layer.post_attention_layernorm.weight
        sd[p + "mlp.gate.weight"] = layer.mlp.gate.weight
        for e in range(cfg.num_experts):
            gu = layer.mlp.w_gate_up[e]          # [H, 2I]
            sd[p + f"mlp.experts.{e}.gate_proj.weight"] = gu[:, :I].t()
            sd[p + f"mlp.experts.{e}.up_proj.weight"] = gu[:, I:].t()
            sd[p + f"mlp.experts.{e}.down_proj.weight"] = layer.mlp.w_down[e].t()
    return {k: v.detach().float().contiguous() for k, v in sd.items()}


def load_hf_into(model, sd):
    """inverse of to_hf: fills an OlmoeTiny from HF-named float tensors"""
    cfg = model.cfg
    I = cfg.intermediate_size
    with torch.no_grad():
        model.embed_tokens.weight.copy_(sd["model.embed_tokens.weight"])
        model.norm.weight.copy_(sd["model.norm.weight"])
        model.lm_head.weight.copy_(sd["lm_head.weight"])
        for l, layer in enumerate(model.layers):
            p = f"model.layers.{l}."
            a = layer.self_attn
            for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
                getattr(a, n).weight.copy_(sd[p + f"self_attn.{n}.weight"])
            a.q_norm.weight.copy_(sd[p + "self_attn.q_norm.weight"])
            a.k_norm.weight.copy_(sd[p + "self_attn.k_norm.weight"])
            layer.input_layernorm.weight.copy_(sd[p + "input_layernorm.weight"])
            layer.post_attention_layernorm.weight.copy_(sd[p + "post_attention_layernorm.weight"])
            layer.mlp.gate.weight.copy_(sd[p + "mlp.gate.weight"])
            for e in range(cfg.num_experts):
                layer.mlp.w_gate_up[e, :, :I].copy_(sd[p + f"mlp.experts.{e}.gate_proj.weight"].t())
                layer.mlp.w_gate_up[e, :, I:].copy_(sd[p + f"mlp.experts.{e}.up_proj.weight"].t())
                layer.mlp.w_down[e].copy_(sd[p + f"mlp.experts.{e}.down_proj.weight"].t())


def load_exported(folder):
    """HF folder -> OlmoeTiny (olmoe) or Qwen3Dense (qwen3) in float32 (BF16 weights upcast)"""
    import os
    from model import Config, OlmoeTiny, Qwen3Dense
    with open(os.path.join(folder, "config.json")) as fh:
        c = json.load(fh)
    if c["model_type"] == "qwen3":
        cfg = Config(vocab_size=c["vocab_size"], hidden_size=c["hidden_size"],
                     intermediate_size=c["intermediate_size"], num_hidden_layers=c["num_hidden_layers"],
                     num_attention_heads=c["num_attention_heads"], num_experts=0, num_experts_per_tok=0,
                     max_position_embeddings=c["max_position_embeddings"], rms_norm_eps=c["rms_norm_eps"],
                     rope_theta=c["rope_theta"], arch="qwen3",
                     num_key_value_heads=c["num_key_value_heads"],
                     tie_word_embeddings=c["tie_word_embeddings"])
        model = Qwen3Dense(cfg)
        load_hf_dense_into(model, read_safetensors(os.path.join(folder, "model.safetensors")))
        model.eval()
        return model
    cfg = Config(vocab_size=c["vocab_size"], hidden_size=c["hidden_size"],
                 intermediate_size=c["intermediate_size"], num_hidden_layers=c["num_hidden_layers"],
                 num_attention_heads=c["num_attention_heads"], num_experts=c["num_experts"],
                 num_experts_per_tok=c["num_experts_per_tok"],
                 max_position_embeddings=c["max_position_embeddings"], rms_norm_eps=c["rms_norm_eps"],
                 rope_theta=c["rope_theta"])
    model = OlmoeTiny(cfg)
    load_hf_into(model, read_safetensors(os.path.join(folder, "model.safetensors")))
    model.eval()
    return model
