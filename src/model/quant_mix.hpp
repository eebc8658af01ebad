// The dtype chooser of `steermoe quantize`: which stored type each tensor of a model gets for a
// named scheme (q8_0, q4_0, ..., q4_k_m, q5_k_m), with fallbacks for rows that are not a whole
// number of the type's blocks.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/config.hpp"
#include "model/dtype.hpp"
#include "model/weights_layout.hpp"

namespace steermoe::model {

struct QuantScheme {
  std::string name;      // "q4_k_m"
  DType base;            // Q4_K
  bool mixture = false;  // _M: more bits for attn_v / ffn_down in some layers, Q6_K output
  DType more_bits = DType::kQ6_K;
};

// Parses "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k" (= "q4_k_s"), "q5_k" (= "q5_k_s"),
// "q6_k", "q4_k_m", "q5_k_m" (case-insensitive); nullopt otherwise.
std::optional<QuantScheme> parse_quant_scheme(std::string_view name);
// The accepted names, for messages.
std::string quant_scheme_names();

// The type of one slot under `scheme` (see quant_mix.cpp for the rules). `note`, when set,
// receives a line explaining a fallback.
DType choose_quant_dtype(const QuantScheme& scheme, const ModelConfig& config,
                         const TensorSlot& slot, std::string* note);

}  // namespace steermoe::model
