// HuggingFace config.json -> ModelConfig for the model types steermoe runs (olmoe, qwen3_moe,
// qwen3 (dense: the Qwen3-MoE family without MoE layers),
// deepseek_v3, qwen3_next, qwen3_5_moe with its text_config, qwen3_5_moe_text). Accepts
// transformers v4 style (rope_theta, rope_scaling, torch_dtype) and v5 style (rope_parameters
// {rope_theta, rope_type, yarn fields, partial_rotary_factor}, dtype, num_local_experts), i.e.
// every spelling the configuration classes define (attribute_map) or write. Bad files are rejected
// with a message that names the file, the field and what was expected; every count is bounded
// (ConfigLimits).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "model/config.hpp"

namespace steermoe::model {

// Parses the text of a config.json; `where` names it in error messages.
ModelConfig parse_hf_config(std::string_view json_text, const std::string& where);
// Reads and parses a file.
ModelConfig load_hf_config(const std::filesystem::path& path);

// Writes a config.json for `config` (transformers v4 style, the fields parse_hf_config reads).
// `torch_dtype` is "float32", "bfloat16" or "float16".
std::string hf_config_json(const ModelConfig& config, std::string_view torch_dtype);

}  // namespace steermoe::model
