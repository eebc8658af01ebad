// config.json parser: any input either parses into a validated ModelConfig (bounded layer,
// expert and width counts) or throws steermoe::Error; nothing else may happen.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/error.hpp"
#include "model/config.hpp"
#include "model/hf_config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const steermoe::model::ModelConfig c = steermoe::model::parse_hf_config(text, "fuzz.json");
    using L = steermoe::model::ConfigLimits;
    if (c.layers < 1 || c.layers > L::kMaxLayers || c.experts < 1 || c.experts > L::kMaxExperts ||
        c.top_k > c.experts || c.moe_layer.size() != static_cast<size_t>(c.layers) ||
        (!c.linear_layer.empty() && c.linear_layer.size() != static_cast<size_t>(c.layers)) ||
        (c.linear_layer_count() > 0 &&
         (c.linear.conv_kernel < 1 || c.linear.conv_kernel > L::kMaxConvKernel ||
          c.linear.k_heads < 1 || c.linear.v_heads % c.linear.k_heads != 0)) ||
        c.rotary_dim() < 2 || c.rotary_dim() % 2 != 0) {
      __builtin_trap();  // validate() must have rejected this
    }
    (void)c.summary();
    (void)c.moe_index();
    (void)c.rope_inv_freq();
    (void)c.rope_attention_factor();
    (void)c.attention_scale();
  } catch (const steermoe::Error&) {
  }
  return 0;
}
