// Rules (after llama.cpp's mixtures in llama_tensor_get_type, simplified):
// - vectors (norms, correction bias) and routers (ffn_gate_inp): F32 (tiny; routing decisions
//   are the most sensitive);
// - every mixture: the token embedding Q8_0 and the output matrix Q6_K;
// - q4_k_m / q5_k_m: attn_v plus every ffn_down (routed, shared, dense) Q6_K in the layers
//   llama.cpp gives more bits (the first and last eighth and every third layer between);
// - q2_k: every ffn_down and attn_output Q3_K, attn_v Q3_K (Q4_K where 4 or more query heads
//   share a kv head);
// - q3_k_m: every ffn_down Q4_K (Q5_K in the first sixteenth of the layers), attn_v Q4_K (Q5_K in
//   the first two layers), attn_output Q4_K;
// - q3_k_l: every ffn_down, attn_v and attn_output Q5_K;
// - everything else, and every matrix of a plain scheme, the base type;
// - a matrix whose rows are not a whole number of the chosen type's blocks falls back to Q8_0
//   (rows a multiple of 32), else F16, and the fallback is reported.
#include "model/quant_mix.hpp"

#include <fmt/format.h>

#include <cctype>

namespace steermoe::model {
namespace {

bool more_bits_layer(int layer, int layers) {
  return layer < layers / 8 || layer >= 7 * layers / 8 || (layer - layers / 8) % 3 == 2;
}

// The type a mixture gives a matrix slot (before the whole-block fallback).
DType mixture_dtype(const QuantScheme& scheme, const ModelConfig& config, const TensorSlot& slot) {
  const int layer = slot.layer, layers = config.layers;
  const bool down = slot.role == Role::kExpDown || slot.role == Role::kSharedDown ||
                    slot.role == Role::kDenseDown;
  const bool wv = slot.role == Role::kWv, wo = slot.role == Role::kWo;
  switch (slot.role) {
    case Role::kEmbed:
      return DType::kQ8_0;
    case Role::kOutput:
      return DType::kQ6_K;
    default:
      break;
  }
  switch (scheme.mix) {
    case QuantMix::kKM:
      if ((wv || down) && layer >= 0 && more_bits_layer(layer, layers)) return DType::kQ6_K;
      break;
    case QuantMix::kQ2K:
      if (down || wo) return DType::kQ3_K;
      if (wv) {
        const bool grouped = config.kv_heads > 0 && config.heads / config.kv_heads >= 4;
        return grouped ? DType::kQ4_K : DType::kQ3_K;
      }
      break;
    case QuantMix::kQ3KM:
      if (down) return layer >= 0 && layer < layers / 16 ? DType::kQ5_K : DType::kQ4_K;
      if (wv) return layer >= 0 && layer < 2 ? DType::kQ5_K : DType::kQ4_K;
      if (wo) return DType::kQ4_K;
      break;
    case QuantMix::kQ3KL:
      if (down || wv || wo) return DType::kQ5_K;
      break;
    case QuantMix::kNone:
      break;
  }
  return scheme.base;
}

}  // namespace

std::optional<QuantScheme> parse_quant_scheme(std::string_view name) {
  std::string n;
  for (char c : name) n.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  struct Entry {
    const char* name;
    DType base;
    QuantMix mix;
    uint32_t file_type;  // llama.h's llama_ftype
  };
  static constexpr Entry kEntries[] = {
      {"q8_0", DType::kQ8_0, QuantMix::kNone, 7},    {"q4_0", DType::kQ4_0, QuantMix::kNone, 2},
      {"q4_1", DType::kQ4_1, QuantMix::kNone, 3},    {"q5_0", DType::kQ5_0, QuantMix::kNone, 8},
      {"q5_1", DType::kQ5_1, QuantMix::kNone, 9},    {"q4_k", DType::kQ4_K, QuantMix::kNone, 14},
      {"q4_k_s", DType::kQ4_K, QuantMix::kNone, 14}, {"q5_k", DType::kQ5_K, QuantMix::kNone, 16},
      {"q5_k_s", DType::kQ5_K, QuantMix::kNone, 16}, {"q6_k", DType::kQ6_K, QuantMix::kNone, 18},
      {"q4_k_m", DType::kQ4_K, QuantMix::kKM, 15},   {"q5_k_m", DType::kQ5_K, QuantMix::kKM, 17},
      {"q2_k", DType::kQ2_K, QuantMix::kQ2K, 10},    {"q3_k", DType::kQ3_K, QuantMix::kNone, 11},
      {"q3_k_s", DType::kQ3_K, QuantMix::kNone, 11}, {"q3_k_m", DType::kQ3_K, QuantMix::kQ3KM, 12},
      {"q3_k_l", DType::kQ3_K, QuantMix::kQ3KL, 13},
  };
  for (const Entry& e : kEntries) {
    if (n == e.name) return QuantScheme{e.name, e.base, e.mix, e.file_type};
  }
  return std::nullopt;
}

uint32_t gguf_file_type(DType dtype) {
  switch (dtype) {
    case DType::kF16:
      return 1;
    case DType::kBF16:
      return 32;
    default:
      return 0;
  }
}

std::string quant_scheme_names() {
  return "q8_0, q4_0, q4_1, q5_0, q5_1, q4_k (q4_k_s), q5_k (q5_k_s), q6_k, q4_k_m, q5_k_m, q2_k, "
         "q3_k (q3_k_s), q3_k_m, q3_k_l";
}

DType choose_quant_dtype(const QuantScheme& scheme, const ModelConfig& config,
                         const TensorSlot& slot, std::string* note) {
  if (slot.vector() || slot.f32_only || slot.role == Role::kRouter) return DType::kF32;
  DType want = scheme.base;
  if (scheme.mixture()) want = mixture_dtype(scheme, config, slot);
  const uint64_t row = slot.shape.back();
  if (row % dtype_block_elements(want) == 0) return want;
  const DType fallback = row % 32 == 0 ? DType::kQ8_0 : DType::kF16;
  if (note != nullptr) {
    *note = fmt::format("{}: rows of {} are not whole {} blocks of {}; stored as {}", slot.name,
                        row, dtype_name(want), dtype_block_elements(want), dtype_name(fallback));
  }
  return fallback;
}

}  // namespace steermoe::model
