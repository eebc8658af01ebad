// Values for tensor slots: read back from a loaded model (convert) or drawn at random
// (make-model), and the named real shapes.
#include <cmath>
#include <cstring>
#include <optional>

#include "common/error.hpp"
#include "model/weights_binder.hpp"
#include "model/weights_layout.hpp"

namespace steermoe::model {

namespace {

DType to_model_dtype(kernels::DType d) {
  return model_dtype(d);
}

const kernels::Matrix& expert_matrix(const LayerWeights& w, Role role, size_t e) {
  const SwigluWeights& s = w.experts[e];
  return role == Role::kExpGate ? s.gate : role == Role::kExpUp ? s.up : s.down;
}

// The bound matrix of a non-stacked slot; nullptr for vectors, the embedding, stacked experts
// and the MLA k_b / v_b halves.
const kernels::Matrix* matrix_of(const Model& m, const TensorSlot& s) {
  if (s.role == Role::kOutput) return &m.lm_head();
  if (s.layer < 0) return nullptr;
  const LayerWeights& w = m.layer(s.layer);
  switch (s.role) {
    case Role::kWq:
      return &w.wq;
    case Role::kWk:
      return &w.wk;
    case Role::kWv:
      return &w.wv;
    case Role::kWo:
      return &w.wo;
    case Role::kQa:
      return &w.q_a;
    case Role::kQb:
      return &w.q_b;
    case Role::kKvA:
      return &w.kv_a;
    case Role::kKvB:
      return &w.kv_b;
    case Role::kRouter:
      return &w.router;
    case Role::kSharedGate:
      return &w.shared.gate;
    case Role::kSharedUp:
      return &w.shared.up;
    case Role::kSharedDown:
      return &w.shared.down;
    case Role::kDenseGate:
      return &w.dense.gate;
    case Role::kDenseUp:
      return &w.dense.up;
    case Role::kDenseDown:
      return &w.dense.down;
    case Role::kExpGate:
    case Role::kExpUp:
    case Role::kExpDown:
      return s.expert >= 0 ? &expert_matrix(w, s.role, static_cast<size_t>(s.expert)) : nullptr;
    default:
      return nullptr;
  }
}

// ---- hybrid families: value-head order, fused projections, stored-vs-effective vectors ----

uint64_t element_size(kernels::DType d) {
  return kernels::dtype_size(d);
}

// GGUF slot names are blk.*, token_embd, output*; HF ones model.* and lm_head.
bool slot_is_gguf(const TensorSlot& s) {
  return s.name.rfind("model.", 0) != 0 && s.name.rfind("lm_head", 0) != 0;
}

// Value head of the model (in its in-memory order) that is value head t of the slot's file.
uint64_t source_v_head(const Model& m, const TensorSlot& s, uint64_t t) {
  const ModelConfig& c = m.config();
  const bool src_tiled = c.linear.v_heads_tiled;
  const bool dst_tiled = slot_is_gguf(s) && c.family == Family::kQwen35Moe;
  const auto nk = static_cast<uint64_t>(c.linear.k_heads);
  const uint64_t r = static_cast<uint64_t>(c.linear.v_heads) / nk;
  if (src_tiled == dst_tiled) return t;
  if (dst_tiled) return (t % nk) * r + t / nk;  // grouped source
  return (t % r) * nk + t / r;                   // tiled source
}

void write_rows(const kernels::Matrix& mat, const std::vector<uint64_t>& rows, OutputFile& out) {
  SM_ASSERT(mat.row_stride == 0 || mat.row_stride == mat.cols);
  const uint64_t row_bytes = mat.cols * element_size(mat.dtype);
  const auto* base = static_cast<const std::byte*>(mat.data);
  for (uint64_t r : rows) out.write(base + r * row_bytes, row_bytes);
}

// Rows of a [v_heads * block, ...] matrix (or the v part of qkv, starting at `first`) in the
// slot's value-head order.
std::vector<uint64_t> v_rows(const Model& m, const TensorSlot& s, uint64_t first, uint64_t block) {
  const auto nv = static_cast<uint64_t>(m.config().linear.v_heads);
  std::vector<uint64_t> rows;
  rows.reserve(first + nv * block);
  for (uint64_t i = 0; i < first; ++i) rows.push_back(i);
  for (uint64_t t = 0; t < nv; ++t) {
    const uint64_t h = source_v_head(m, s, t);
    for (uint64_t d = 0; d < block; ++d) rows.push_back(first + h * block + d);
  }
  return rows;
}

void write_f32_as(const std::vector<float>& v, DType dtype, const std::string& name,
                  OutputFile& out) {
  std::vector<std::byte> bytes(*dtype_byte_size(dtype, v.size()));
  convert_from_f32(dtype, v, bytes, name);
  out.write(bytes);
}

// Hybrid-family slots; false if `s` is not one of them.
bool produce_hybrid(const Model& m, const TensorSlot& s, DType dtype, OutputFile& out) {
  const ModelConfig& c = m.config();
  if (!is_hybrid(c.family)) return false;
  const bool gguf = slot_is_gguf(s);
  // Zero-centred norms in HF files: the loader folded the 1 in.
  const bool plus_one = c.norm_plus_one && !gguf;
  auto norm_out = [&](const WeightVector& v) {
    std::vector<float> x(v.begin(), v.end());
    if (plus_one) {
      for (float& e : x) e -= 1.0f;
    }
    write_f32_as(x, dtype, s.name, out);
  };
  if (s.role == Role::kFinalNorm) {
    norm_out(m.final_norm());
    return true;
  }
  if (s.layer < 0) return false;
  const LayerWeights& w = m.layer(s.layer);
  const LinearAttnWeights& la = w.linear;
  const LinearAttnConfig& a = c.linear;
  const auto hv = static_cast<uint64_t>(a.v_head_dim);
  const auto kd = static_cast<uint64_t>(a.key_dim());
  const auto nv = static_cast<uint64_t>(a.v_heads);
  const auto K = static_cast<uint64_t>(a.conv_kernel);
  switch (s.role) {
    case Role::kAttnNorm:
      norm_out(w.attn_norm);
      return true;
    case Role::kFfnNorm:
      norm_out(w.ffn_norm);
      return true;
    case Role::kQNorm:
      norm_out(w.q_norm);
      return true;
    case Role::kKNorm:
      norm_out(w.k_norm);
      return true;
    case Role::kLinQkv:
      write_rows(la.qkv, v_rows(m, s, 2 * kd, hv), out);
      return true;
    case Role::kLinZ:
      write_rows(la.z, v_rows(m, s, 0, hv), out);
      return true;
    case Role::kLinB:
      write_rows(la.b, v_rows(m, s, 0, 1), out);
      return true;
    case Role::kLinA:
      write_rows(la.a, v_rows(m, s, 0, 1), out);
      return true;
    case Role::kLinQkvz:
    case Role::kLinBa: {
      // Qwen3-Next's interleaved layouts (value heads grouped on both sides).
      SM_ASSERT(!a.v_heads_tiled);
      const FusedRows f = qwen3next_fused_rows(a);
      const bool qkvz = s.role == Role::kLinQkvz;
      const std::vector<uint64_t>& first = qkvz ? f.qkv : f.b;
      const std::vector<uint64_t>& second = qkvz ? f.z : f.a;
      const kernels::Matrix& m1 = qkvz ? la.qkv : la.b;
      const kernels::Matrix& m2 = qkvz ? la.z : la.a;
      std::vector<std::pair<const kernels::Matrix*, uint64_t>> src(first.size() + second.size());
      for (size_t i = 0; i < first.size(); ++i) src[first[i]] = {&m1, i};
      for (size_t i = 0; i < second.size(); ++i) src[second[i]] = {&m2, i};
      for (const auto& [mat, row] : src) write_rows(*mat, {row}, out);
      return true;
    }
    case Role::kLinConv: {
      const std::vector<uint64_t> channels = v_rows(m, s, 2 * kd, hv);
      std::vector<float> x;
      x.reserve(la.conv.size());
      for (uint64_t ch : channels)
        x.insert(x.end(), la.conv.begin() + static_cast<ptrdiff_t>(ch * K),
                 la.conv.begin() + static_cast<ptrdiff_t>((ch + 1) * K));
      write_f32_as(x, dtype, s.name, out);
      return true;
    }
    case Role::kLinDtBias:
    case Role::kLinALog: {
      const WeightVector& v = s.role == Role::kLinDtBias ? la.dt_bias : la.a_neg;
      std::vector<float> x(nv);
      for (uint64_t t = 0; t < nv; ++t) x[t] = v[source_v_head(m, s, t)];
      if (s.role == Role::kLinALog && !gguf) {
        for (float& e : x) e = std::log(-e);  // A_log (not bit-exact through -exp)
      }
      write_f32_as(x, dtype, s.name, out);
      return true;
    }
    case Role::kLinNorm:
      write_f32_as(std::vector<float>(la.norm.begin(), la.norm.end()), dtype, s.name, out);
      return true;
    case Role::kLinOut: {
      // Columns in value-head blocks.
      const kernels::Matrix& o = la.out;
      const uint64_t es = element_size(o.dtype);
      const auto* base = static_cast<const std::byte*>(o.data);
      std::vector<std::byte> row(o.cols * es);
      for (uint64_t r = 0; r < o.rows; ++r) {
        for (uint64_t t = 0; t < nv; ++t) {
          const uint64_t h = source_v_head(m, s, t);
          std::memcpy(&row[t * hv * es], base + (r * o.cols + h * hv) * es, hv * es);
        }
        out.write(row.data(), row.size());
      }
      return true;
    }
    case Role::kSharedExpGate:
      write_f32_as(std::vector<float>(w.shared_gate.begin(), w.shared_gate.end()), dtype, s.name,
                   out);
      return true;
    default:
      return false;
  }
}

// Stored dtype of a hybrid-family slot (nullopt: not one).
std::optional<DType> hybrid_dtype(const Model& m, const TensorSlot& s) {
  if (!is_hybrid(m.config().family) || s.layer < 0) return std::nullopt;
  const LayerWeights& w = m.layer(s.layer);
  const LinearAttnWeights& la = w.linear;
  switch (s.role) {
    case Role::kLinQkv:
    case Role::kLinQkvz:
      return to_model_dtype(la.qkv.dtype);
    case Role::kLinZ:
      return to_model_dtype(la.z.dtype);
    case Role::kLinB:
    case Role::kLinBa:
      return to_model_dtype(la.b.dtype);
    case Role::kLinA:
      return to_model_dtype(la.a.dtype);
    case Role::kLinOut:
      return to_model_dtype(la.out.dtype);
    case Role::kLinConv:
      return la.conv.source_dtype;
    case Role::kLinDtBias:
      return la.dt_bias.source_dtype;
    case Role::kLinALog:
      return la.a_neg.source_dtype;
    case Role::kLinNorm:
      return la.norm.source_dtype;
    case Role::kSharedExpGate:
      return w.shared_gate.source_dtype;
    default:
      return std::nullopt;
  }
}

const WeightVector* vector_of(const Model& m, const TensorSlot& s) {
  if (s.role == Role::kFinalNorm) return &m.final_norm();
  if (s.layer < 0) return nullptr;
  const LayerWeights& w = m.layer(s.layer);
  switch (s.role) {
    case Role::kAttnNorm:
      return &w.attn_norm;
    case Role::kFfnNorm:
      return &w.ffn_norm;
    case Role::kQNorm:
      return &w.q_norm;
    case Role::kKNorm:
      return &w.k_norm;
    case Role::kQaNorm:
      return &w.q_a_norm;
    case Role::kKvANorm:
      return &w.kv_a_norm;
    case Role::kRouterBias:
      return &w.router_bias;
    default:
      return nullptr;
  }
}


// The rows of `mat` stored as `dtype`: the bytes unchanged when the type is kept, otherwise
// dequantized row by row to f32 and encoded as `dtype` (convert_from_f32).
void write_matrix(const kernels::Matrix& mat, DType dtype, OutputFile& out,
                  const std::string& name) {
  if (to_model_dtype(mat.dtype) == dtype && mat.dtype != kernels::DType::kF8E4M3) {
    SM_ASSERT(mat.row_stride == 0 || mat.row_stride == mat.cols);
    out.write(mat.data, mat.rows * kernels::row_bytes(mat.dtype, mat.cols));
    return;
  }
  std::vector<float> row(mat.cols);
  std::vector<std::byte> bytes(*dtype_byte_size(dtype, mat.cols));
  for (size_t r = 0; r < mat.rows; ++r) {
    kernels::dequantize_row(mat, r, row.data());
    convert_from_f32(dtype, row, bytes, name);
    out.write(bytes);
  }
}

kernels::Matrix embedding_matrix(const Model& m) {
  const TensorView& e = m.embedding();
  kernels::Matrix mat;
  mat.data = e.data;
  mat.dtype = *kernel_dtype(e.dtype);
  mat.rows = e.shape[0];
  mat.cols = e.shape[1];
  return mat;
}

// kv_b [H * (nope + v), kv_lora] as f32.
std::vector<float> kv_b_f32(const kernels::Matrix& kvb) {
  std::vector<float> v(kvb.rows * kvb.cols);
  for (size_t r = 0; r < kvb.rows; ++r) kernels::dequantize_row(kvb, r, v.data() + r * kvb.cols);
  return v;
}

// GGUF attn_k_b [H, kv_lora, nope] / attn_v_b [H, v, kv_lora] from kv_b [H * (nope + v), kv_lora].
void write_mla_half(const Model& m, const TensorSlot& s, DType dtype, OutputFile& out) {
  const ModelConfig& c = m.config();
  const kernels::Matrix& kvb = m.layer(s.layer).kv_b;
  const auto heads = static_cast<uint64_t>(c.heads),
             lora = static_cast<uint64_t>(c.mla.kv_lora_rank);
  const auto nope = static_cast<uint64_t>(c.mla.qk_nope_head_dim),
             vd = static_cast<uint64_t>(c.mla.v_head_dim);
  if (to_model_dtype(kvb.dtype) != dtype || kernels::dtype_is_block(kvb.dtype) ||
      kvb.dtype == kernels::DType::kF8E4M3) {
    // Through f32: rearrange, then encode each half as `dtype`.
    const std::vector<float> v = kv_b_f32(kvb);
    std::vector<float> half;
    half.reserve(heads * lora * (s.role == Role::kVB ? vd : nope));
    for (uint64_t h = 0; h < heads; ++h) {
      if (s.role == Role::kVB) {
        const float* base = v.data() + (h * (nope + vd) + nope) * lora;
        half.insert(half.end(), base, base + vd * lora);
      } else {
        for (uint64_t col = 0; col < lora; ++col) {
          for (uint64_t r = 0; r < nope; ++r) half.push_back(v[(h * (nope + vd) + r) * lora + col]);
        }
      }
    }
    std::vector<std::byte> bytes(*dtype_byte_size(dtype, half.size()));
    convert_from_f32(dtype, half, bytes, s.name);
    out.write(bytes);
    return;
  }
  const uint64_t es = element_size(kvb.dtype);
  const auto* base = static_cast<const std::byte*>(kvb.data);
  if (s.role == Role::kVB) {
    for (uint64_t h = 0; h < heads; ++h)
      out.write(base + (h * (nope + vd) + nope) * lora * es, vd * lora * es);
    return;
  }
  std::vector<std::byte> head(lora * nope * es);
  for (uint64_t h = 0; h < heads; ++h) {
    for (uint64_t col = 0; col < lora; ++col) {
      for (uint64_t r = 0; r < nope; ++r) {
        std::memcpy(&head[(col * nope + r) * es], base + ((h * (nope + vd) + r) * lora + col) * es,
                    es);
      }
    }
    out.write(head.data(), head.size());
  }
}

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t hash_name(const std::string& s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (char ch : s) h = (h ^ static_cast<uint8_t>(ch)) * 1099511628211ull;
  return h;
}

}  // namespace

DType stored_dtype(const Model& m, const TensorSlot& s) {
  if (s.role == Role::kEmbed) return m.weight_dtype();
  if (auto d = hybrid_dtype(m, s)) return *d;
  if (const WeightVector* v = vector_of(m, s)) return v->source_dtype;
  if (const kernels::Matrix* mat = matrix_of(m, s)) return to_model_dtype(mat->dtype);
  if (s.role == Role::kKB || s.role == Role::kVB)
    return to_model_dtype(m.layer(s.layer).kv_b.dtype);
  SM_ASSERT(s.expert < 0);  // stacked experts
  return to_model_dtype(expert_matrix(m.layer(s.layer), s.role, 0).dtype);
}

SlotSource model_slot_source(const Model& m, DTypeChooser choose) {
  SlotSource src;
  src.dtype_of = [&m, choose](const TensorSlot& s) -> DType {
    const DType stored = stored_dtype(m, s);
    return choose ? choose(s, stored) : stored;
  };
  src.produce = [&m](const TensorSlot& s, DType dtype, OutputFile& out) {
    if (produce_hybrid(m, s, dtype, out)) return;
    if (s.role == Role::kEmbed) {
      if (m.weight_dtype() == dtype) {
        out.write(m.embedding().bytes());
      } else {
        write_matrix(embedding_matrix(m), dtype, out, s.name);
      }
    } else if (const WeightVector* v = vector_of(m, s)) {
      std::vector<std::byte> bytes(*dtype_byte_size(dtype, v->size()));
      convert_from_f32(dtype, *v, bytes, s.name);
      out.write(bytes);
    } else if (const kernels::Matrix* mat = matrix_of(m, s)) {
      write_matrix(*mat, dtype, out, s.name);
    } else if (s.role == Role::kKB || s.role == Role::kVB) {
      write_mla_half(m, s, dtype, out);
    } else {
      const LayerWeights& w = m.layer(s.layer);
      for (size_t e = 0; e < w.experts.size(); ++e) {
        write_matrix(expert_matrix(w, s.role, e), dtype, out, s.name);
      }
    }
  };
  return src;
}

SlotSource random_slot_source(DType dtype, uint64_t seed) {
  SlotSource src;
  src.dtype_of = [dtype](const TensorSlot& s) { return s.vector() ? DType::kF32 : dtype; };
  src.produce = [seed](const TensorSlot& s, DType dt, OutputFile& out) {
    float mean = 0.0f, std = 0.0f;
    switch (s.role) {
      case Role::kEmbed:
        std = 1.0f;
        break;
      case Role::kRouterBias:
        std = 0.1f;
        break;
      case Role::kKB:
        std = 1.0f / std::sqrt(static_cast<float>(s.shape[1]));
        break;
      case Role::kLinALog:
        // HF A_log (A = exp(A_log) in ~[1, 2.5]) or GGUF ssm_a = -exp(A_log) (must be < 0).
        mean = s.name.rfind("blk.", 0) == 0 ? -1.7f : 0.5f;
        std = 0.2f;
        break;
      case Role::kSharedExpGate:
        std = 1.0f / std::sqrt(static_cast<float>(s.shape.back()));
        break;
      default:
        if (s.vector()) {
          mean = 1.0f;
          std = 0.1f;
        } else {
          std = 1.0f / std::sqrt(static_cast<float>(s.shape.back()));
        }
    }
    const float half_width = std * std::sqrt(3.0f);  // uniform(-a, a) has std a / sqrt(3)
    uint64_t state = seed ^ hash_name(s.name);
    constexpr size_t kChunk = size_t{1} << 20;
    std::vector<float> values;
    std::vector<std::byte> bytes;
    for (uint64_t done = 0, total = s.elements(); done < total;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, total - done));
      values.resize(n);
      for (size_t i = 0; i < n; ++i) {
        const float u =
            static_cast<float>(splitmix64(state) >> 40) * (1.0f / 16777216.0f);  // [0, 1)
        values[i] = mean + (2.0f * u - 1.0f) * half_width;
      }
      bytes.resize(*dtype_byte_size(dt, n));
      convert_from_f32(dt, values, bytes, s.name);
      out.write(bytes);
      done += n;
    }
  };
  return src;
}

ModelConfig shape_config(const std::string& shape) {
  ModelConfig c;
  c.source = "shape " + shape;
  c.rope = RopeKind::kNeox;
  c.max_positions = 4096;
  if (shape == "OLMoE-1B-7B" || shape == "olmoe-small") {
    const bool small = shape == "olmoe-small";
    c.family = Family::kOlmoe;
    c.vocab = small ? 300 : 50304;
    c.hidden = small ? 64 : 2048;
    c.layers = small ? 3 : 16;
    c.heads = c.kv_heads = small ? 4 : 16;
    c.head_dim = small ? 16 : 128;
    c.rms_eps = 1e-5f;
    c.rope_theta = 10000.0f;
    c.experts = small ? 16 : 64;
    c.top_k = small ? 4 : 8;
    c.expert_ffn = small ? 32 : 1024;
    c.qk_norm = QkNorm::kWholeProjection;
    c.eos_token = small ? 296 : 50279;
  } else if (shape == "Qwen3-30B-A3B" || shape == "qwen3moe-small") {
    const bool small = shape == "qwen3moe-small";
    c.family = Family::kQwen3Moe;
    c.vocab = small ? 300 : 151936;
    c.hidden = small ? 64 : 2048;
    c.layers = small ? 3 : 48;
    c.heads = small ? 4 : 32;
    c.kv_heads = small ? 2 : 4;
    c.head_dim = small ? 32 : 128;
    c.rms_eps = 1e-6f;
    c.rope_theta = 1e6f;
    c.max_positions = small ? 4096 : 40960;
    c.experts = small ? 16 : 128;
    c.top_k = small ? 4 : 8;
    c.expert_ffn = small ? 32 : 768;
    c.dense_ffn = small ? 128 : 6144;
    c.norm_topk_prob = true;
    c.qk_norm = QkNorm::kPerHead;
    c.bos_token = small ? 297 : 151643;
    c.eos_token = small ? 296 : 151645;
  } else if (shape == "Qwen3-0.6B" || shape == "qwen3-small") {
    // The dense Qwen3 (no experts, tied embeddings): the shape of a small drafter model.
    const bool small = shape == "qwen3-small";
    c.family = Family::kQwen3Moe;
    c.vocab = small ? 300 : 151936;
    c.hidden = small ? 64 : 1024;
    c.layers = small ? 2 : 28;
    c.heads = small ? 4 : 16;
    c.kv_heads = small ? 2 : 8;
    c.head_dim = small ? 16 : 128;
    c.rms_eps = 1e-6f;
    c.rope_theta = small ? 10000.0f : 1e6f;
    c.max_positions = small ? 256 : 40960;
    c.dense_ffn = small ? 128 : 3072;
    c.qk_norm = QkNorm::kPerHead;
    c.tied_embeddings = true;
    c.bos_token = small ? 297 : 151643;
    c.eos_token = small ? 296 : 151645;
    c.moe_layer.assign(static_cast<size_t>(c.layers), 0);
    c.validate();
    return c;
  } else if (shape == "Moonlight-16B-A3B" || shape == "deepseek-small") {
    const bool small = shape == "deepseek-small";
    c.family = Family::kDeepseekV3;
    c.vocab = small ? 300 : 163840;
    c.hidden = small ? 64 : 2048;
    c.layers = small ? 3 : 27;
    c.heads = c.kv_heads = small ? 4 : 16;
    c.rms_eps = small ? 1e-6f : 1e-5f;
    c.rope_theta = small ? 10000.0f : 50000.0f;
    c.rope = RopeKind::kInterleaved;
    c.max_positions = small ? 4096 : 8192;
    c.mla = {.q_lora_rank = 0,
             .kv_lora_rank = small ? 32 : 512,
             .qk_nope_head_dim = small ? 16 : 128,
             .qk_rope_head_dim = small ? 8 : 64,
             .v_head_dim = small ? 16 : 128,
             .lora_norm_eps = 1e-6f};
    c.experts = small ? 16 : 64;
    c.top_k = 6;
    c.expert_ffn = small ? 32 : 1408;
    c.shared_ffn = 2 * c.expert_ffn;
    c.dense_ffn = small ? 96 : 11264;
    c.router = RouterScore::kSigmoid;
    c.norm_topk_prob = true;
    c.routed_scaling_factor = 2.446f;
    c.correction_bias = true;
    c.bos_token = small ? 297 : 163584;
    c.eos_token = small ? 296 : 163586;
  } else if (shape == "Qwen3.6-35B-A3B" || shape == "qwen3.6-35b-a3b" ||
             shape == "Qwen3-Next-80B-A3B" || shape == "qwen35moe-small" ||
             shape == "qwen3next-small") {
    // Qwen3.5 / 3.6 35B-A3B (= transformers' Qwen3_5MoeTextConfig defaults) and Qwen3-Next-80B:
    // groups of three Gated DeltaNet layers and one gated full-attention layer.
    const bool small = shape == "qwen35moe-small" || shape == "qwen3next-small";
    const bool next = shape == "Qwen3-Next-80B-A3B" || shape == "qwen3next-small";
    c.family = next ? Family::kQwen3Next : Family::kQwen35Moe;
    c.vocab = small ? 300 : next ? 151936 : 248320;
    c.hidden = small ? 64 : 2048;
    c.layers = small ? 4 : next ? 48 : 40;
    c.heads = small ? 4 : 16;
    c.kv_heads = 2;
    c.head_dim = small ? 16 : 256;
    c.rope_dim = c.head_dim / 4;  // partial_rotary_factor 0.25
    c.rms_eps = 1e-6f;
    c.rope_theta = small ? 10000.0f : 1e7f;
    c.max_positions = small ? 4096 : 262144;
    c.linear = {.conv_kernel = 4,
                .k_heads = small ? 2 : 16,
                .v_heads = small ? 4 : 32,
                .k_head_dim = small ? 16 : 128,
                .v_head_dim = small ? 16 : 128,
                .v_heads_tiled = false};
    c.experts = small ? 16 : next ? 512 : 256;
    c.top_k = small ? 4 : next ? 10 : 8;
    c.expert_ffn = small ? 32 : 512;
    c.shared_ffn = small ? 32 : 512;
    c.norm_topk_prob = true;
    c.qk_norm = QkNorm::kPerHead;
    c.attn_output_gate = true;
    c.shared_expert_gate = true;
    c.norm_plus_one = true;
    c.linear_layer.assign(static_cast<size_t>(c.layers), 0);
    for (int l = 0; l < c.layers; ++l) c.linear_layer[static_cast<size_t>(l)] = (l + 1) % 4 != 0;
    if (small) c.eos_token = 296;
  } else {
    fail("--shape", "name",
         "expected OLMoE-1B-7B, Qwen3-30B-A3B, Qwen3-0.6B, Moonlight-16B-A3B, Qwen3.6-35B-A3B, "
         "Qwen3-Next-80B-A3B, olmoe-small, qwen3moe-small, qwen3-small, deepseek-small, "
         "qwen35moe-small or qwen3next-small, found '{}'",
         shape);
  }
  c.moe_layer.assign(static_cast<size_t>(c.layers), 1);
  if (c.family == Family::kDeepseekV3) c.moe_layer[0] = 0;
  c.validate();
  return c;
}

}  // namespace steermoe::model
