// Rules (after llama.cpp's mixtures, simplified):
// - vectors (norms, correction bias) and routers (ffn_gate_inp): F32 (tiny; routing decisions
//   are the most sensitive);
// - _M schemes: the token embedding Q8_0, the output matrix Q6_K, and attn_v plus every
//   ffn_down (routed, shared, dense) Q6_K in the layers llama.cpp gives more bits (the first and
//   last eighth and every third layer between); everything else the base type;
// - plain schemes: every matrix the base type;
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

}  // namespace

std::optional<QuantScheme> parse_quant_scheme(std::string_view name) {
  std::string n;
  for (char c : name) n.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  struct Entry {
    const char* name;
    DType base;
    bool mixture;
  };
  static constexpr Entry kEntries[] = {
      {"q8_0", DType::kQ8_0, false},   {"q4_0", DType::kQ4_0, false},
      {"q4_1", DType::kQ4_1, false},   {"q5_0", DType::kQ5_0, false},
      {"q5_1", DType::kQ5_1, false},   {"q4_k", DType::kQ4_K, false},
      {"q4_k_s", DType::kQ4_K, false}, {"q5_k", DType::kQ5_K, false},
      {"q5_k_s", DType::kQ5_K, false}, {"q6_k", DType::kQ6_K, false},
      {"q4_k_m", DType::kQ4_K, true},  {"q5_k_m", DType::kQ5_K, true},
  };
  for (const Entry& e : kEntries) {
    if (n == e.name) return QuantScheme{e.name, e.base, e.mixture, DType::kQ6_K};
  }
  return std::nullopt;
}

std::string quant_scheme_names() {
  return "q8_0, q4_0, q4_1, q5_0, q5_1, q4_k (q4_k_s), q5_k (q5_k_s), q6_k, q4_k_m, q5_k_m";
}

DType choose_quant_dtype(const QuantScheme& scheme, const ModelConfig& config,
                         const TensorSlot& slot, std::string* note) {
  if (slot.vector() || slot.role == Role::kRouter) return DType::kF32;
  DType want = scheme.base;
  if (scheme.mixture) {
    switch (slot.role) {
      case Role::kEmbed:
        want = DType::kQ8_0;
        break;
      case Role::kOutput:
        want = scheme.more_bits;
        break;
      case Role::kWv:
      case Role::kExpDown:
      case Role::kSharedDown:
      case Role::kDenseDown:
        if (slot.layer >= 0 && more_bits_layer(slot.layer, config.layers)) want = scheme.more_bits;
        break;
      default:
        break;
    }
  }
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
