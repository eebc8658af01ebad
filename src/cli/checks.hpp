// Consistency checks at load, shared by the commands that combine several inputs: a tokenizer
// must fit the model's vocabulary (its special ids too), a calibration must have the model's
// (or trace's) shape. Every message names the file that does not fit.
#pragma once

#include <cstdio>
#include <string>

#include "model/weights.hpp"
#include "policy/calibration.hpp"
#include "policy/router.hpp"
#include "schedule/profile.hpp"
#include "tokenizer/tokenizer.hpp"

namespace steermoe::cli {

// Tokenizer::load(model_path), then: at most the model's vocab tokens, BOS/EOS ids inside it.
tokenizer::Tokenizer load_tokenizer_for(const std::string& model_path, const model::Model& model);

// trace::read_calibration(path), then: the model's MoE layers x experts and top-k, and a token
// prior no wider than the model's vocabulary. Errors name the .smcal file.
policy::Calibration load_calibration_for(const std::string& path, const model::Model& model);
// Same against an explicit shape (a trace's); `against` names it in the message.
policy::Calibration load_calibration_for(const std::string& path, int layers, int experts,
                                         int top_k, int vocab, const std::string& against);

// A note on stderr where a hardware profile was measured on another shape than `shape` (its
// per-layer durations are used as they are): `command` names who says it (sim, bench).
void note_profile_shape(const schedule::HardwareProfile& profile, const policy::RouterSpec& shape,
                        const char* command);

// A text file the command tokenizes (regular file, bounded size), checked to be UTF-8 here so
// that an error names the file: "<path>: encoding: expected valid UTF-8 ... at offset N".
std::string read_text_file(const std::string& path);

// A command's JSON report: to stdout for "-" (the command then writes its table to stderr:
// table_stream), else complete under `path` or not at all.
void write_json_report(const std::string& path, const std::string& json_text);
FILE* table_stream(const std::string& json_path);

// Commands that only make sense with routed experts (trace, bench, kl) refuse a dense model
// (a Qwen3 without MoE layers) up front: "model X has no MoE layers ...".
void require_moe_layers(const std::string& model_path, const model::ModelConfig& config,
                        const std::string& command);

}  // namespace steermoe::cli
