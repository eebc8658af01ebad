#!/usr/bin/env python3
"""Writes the small seed corpora for fuzz_gguf and fuzz_safetensors (a few KB each).

Run from the repository root: python3 fuzz/model_files/make_seeds.py
"""
import json
import os
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "corpus")


def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<B", 10: "<Q", 11: "<q", 12: "<d"}


def gval(t, v):
    if t == 8:
        return gstr(v)
    if t == 9:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(gval(et, i) for i in items)
    return struct.pack(SCALARS[t], v)


def gguf(kvs, tensors, version=3, alignment=32):
    """tensors: (name, ne list, ggml type, data bytes)."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for key, t, v in kvs:
        out += gstr(key) + struct.pack("<I", t) + gval(t, v)
    offset = 0
    for name, ne, gt, data in tensors:
        out += gstr(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        out += struct.pack("<IQ", gt, offset)
        offset += (len(data) + alignment - 1) // alignment * alignment
    out += b"\0" * (-len(out) % alignment)
    for _, _, _, data in tensors:
        out += data + b"\0" * (-len(data) % alignment)
    return out


def f32(values):
    return b"".join(struct.pack("<f", v) for v in values)


def f16(values):
    return b"".join(struct.pack("<e", v) for v in values)


def bf16(values):
    return b"".join(struct.pack("<f", v)[2:] for v in values)


def q8_0(blocks):
    return b"".join(struct.pack("<e", 0.5) + bytes((i * 7) % 256 for i in range(32)) for _ in range(blocks))


def write(sub, name, data):
    os.makedirs(os.path.join(ROOT, sub), exist_ok=True)
    with open(os.path.join(ROOT, sub, name), "wb") as f:
        f.write(data)


def main():
    every_type = [
        ("general.architecture", 8, "olmoe"),
        ("general.alignment", 4, 32),
        ("t.u8", 0, 7), ("t.i8", 1, -7), ("t.u16", 2, 700), ("t.i16", 3, -700),
        ("t.u32", 4, 70000), ("t.i32", 5, -70000), ("t.f32", 6, 1e-5), ("t.bool", 7, 1),
        ("t.u64", 10, 1 << 40), ("t.i64", 11, -(1 << 40)), ("t.f64", 12, 0.25),
        ("tokenizer.ggml.tokens", 9, (8, ["a", "b", "ab", "<|bos|>"])),
        ("tokenizer.ggml.merges", 9, (8, ["a b"])),
        ("tokenizer.ggml.token_type", 9, (5, [1, 1, 1, 3])),
        ("t.nested", 9, (9, [(4, [1, 2]), (4, [])])),
    ]
    tensors = [
        ("token_embd.weight", [8, 4], 0, f32([i * 0.5 for i in range(32)])),
        ("blk.0.attn_norm.weight", [8], 1, f16([1.0] * 8)),
        ("blk.0.ffn_gate_exps.weight", [8, 2, 2], 30, bf16([0.25 * i for i in range(32)])),
        ("blk.0.q8.weight", [64], 8, q8_0(2)),
    ]
    write("gguf", "every_type.gguf", gguf(every_type, tensors))
    write("gguf", "v2_metadata_only.gguf", gguf(every_type[:3], [], version=2))
    write("gguf", "align64.gguf",
          gguf([("general.alignment", 4, 64)], tensors[:2], alignment=64))
    write("gguf", "q4k.gguf", gguf([], [("k", [256], 12, bytes(144))]))
    # Every block type steermoe computes on (ggml ids and block bytes), patterned bytes with a
    # 0.5 f16 scale at the start of each block.
    def blocks(n, size):
        return b"".join(struct.pack("<e", 0.5) + bytes((i * 13 + j) % 256 for i in range(size - 2))
                        for j in range(n))
    quants = [("q4_0", 2, 32, 18), ("q4_1", 3, 32, 20), ("q5_0", 6, 32, 22), ("q5_1", 7, 32, 24),
              ("q4_k", 12, 256, 144), ("q5_k", 13, 256, 176), ("q6_k", 14, 256, 210)]
    write("gguf", "every_quant.gguf",
          gguf([("general.architecture", 8, "olmoe")],
               [(f"blk.0.{n}.weight", [be, 2], gt, blocks(2, bb)) for n, gt, be, bb in quants]))

    def st(tensors, metadata=None):
        header, data = {}, b""
        if metadata:
            header["__metadata__"] = metadata
        for name, dtype, shape, blob in tensors:
            header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(blob)]}
            data += blob
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)
        return struct.pack("<Q", len(text)) + text + data

    write("safetensors", "mixed.safetensors", st([
        ("model.embed_tokens.weight", "F32", [4, 8], f32([i * 0.5 for i in range(32)])),
        ("model.norm.weight", "BF16", [8], bf16([1.0] * 8)),
        ("model.layers.0.mlp.gate.weight", "F16", [2, 8], f16([0.125] * 16)),
        ("ids", "I64", [3], struct.pack("<3q", 1, -2, 3)),
        ("mask", "BOOL", [2], b"\x01\x00"),
        ("scalar", "F64", [], struct.pack("<d", 2.0)),
        ("empty", "U8", [0], b""),
    ], {"format": "pt"}))
    write("safetensors", "empty.safetensors", st([]))
    write("safetensors", "fp8.safetensors", st([("w", "F8_E4M3", [4, 4], bytes(range(16)))], {"k": "v"}))
    write("safetensors", "fp8_scaled.safetensors", st([
        ("model.layers.0.mlp.experts.0.up_proj.weight", "F8_E4M3", [2, 130], bytes(i % 0x7e for i in range(260))),
        ("model.layers.0.mlp.experts.0.up_proj.weight_scale_inv", "F32", [1, 2], f32([0.5, 0.25])),
    ]))


if __name__ == "__main__":
    main()
