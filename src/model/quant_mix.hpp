// The dtype chooser of `steermoe quantize`: which stored type each tensor of a model gets for a
// named scheme (q8_0, q4_0, ..., q4_k_m, q5_k_m, q2_k, q3_k_m, q3_k_l), with fallbacks for rows
// that are not a whole number of the type's blocks.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/config.hpp"
#include "model/dtype.hpp"
#include "model/weights_layout.hpp"

namespace steermoe::model {

// Which of llama.cpp's mixtures a scheme follows (simplified; the rules in quant_mix.cpp).
enum class QuantMix : uint8_t {
  kNone,  // every matrix the base type
  kKM,    // q4_k_m / q5_k_m: Q6_K for attn_v and ffn_down in llama.cpp's more-bits layers
  kQ2K,   // q2_k: ffn_down and attn_output Q3_K, attn_v Q3_K (Q4_K with 4+ query heads per kv)
  kQ3KM,  // q3_k_m: ffn_down, attn_v and attn_output Q4_K (Q5_K in the first layers)
  kQ3KL,  // q3_k_l: ffn_down, attn_v and attn_output Q5_K
};

struct QuantScheme {
  std::string name;  // "q4_k_m"
  DType base;        // Q4_K
  QuantMix mix = QuantMix::kNone;
  // llama.cpp's llama_ftype of such a file (LLAMA_FTYPE_MOSTLY_Q4_K_M = 15), written as
  // general.file_type: what llama.cpp's tools print as the file's type.
  uint32_t gguf_file_type = 0;
  bool mixture() const { return mix != QuantMix::kNone; }  // embedding Q8_0, output Q6_K
};

// Parses "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k" (= "q4_k_s"), "q5_k" (= "q5_k_s"),
// "q6_k", "q4_k_m", "q5_k_m", "q2_k", "q3_k" (= "q3_k_s"), "q3_k_m", "q3_k_l"
// (case-insensitive); nullopt otherwise.
std::optional<QuantScheme> parse_quant_scheme(std::string_view name);
// general.file_type of a file whose matrices are all `dtype` (F32 0, F16 1, BF16 32).
uint32_t gguf_file_type(DType dtype);
// The accepted names, for messages.
std::string quant_scheme_names();

// The type of one slot under `scheme` (see quant_mix.cpp for the rules). `note`, when set,
// receives a line explaining a fallback.
DType choose_quant_dtype(const QuantScheme& scheme, const ModelConfig& config,
                         const TensorSlot& slot, std::string* note);

}  // namespace steermoe::model
