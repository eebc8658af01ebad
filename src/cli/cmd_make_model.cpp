// `steermoe make-model`: writes a random-weight model of a real shape (OLMoE-1B-7B,
// Qwen3-30B-A3B, Moonlight-16B-A3B, the dense Qwen3-0.6B), a small one, or the shape of a
// config.json, as GGUF (-o ending in .gguf) or as an HF folder (config.json +
// model.safetensors), with a synthetic byte-level BPE tokenizer so that `run` works on it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "cli/commands.hpp"
#include "common/error.hpp"
#include "common/output_file.hpp"
#include "model/hf_config.hpp"
#include "model/quant_mix.hpp"
#include "model/weights_layout.hpp"
#include "tokenizer/byte_level.hpp"
#include "tokenizer/gguf_vocab.hpp"
#include "tokenizer/hf_json.hpp"
#include "tokenizer/pre_tokenizer.hpp"
#include "tokenizer/vocabulary.hpp"

namespace steermoe::cli {
namespace {

// A byte-level BPE vocabulary filling `size` ids: the 256 bytes, <|endoftext|> (BOS = EOS), then
// merges of printable ASCII pairs, then user-defined filler tokens. Random weights make its text
// meaningless, but every id decodes and any text encodes, which is what a test model needs.
// Returns nothing when the vocabulary cannot hold the 256 bytes and an end token.
std::optional<tokenizer::Vocabulary> synthetic_vocabulary(int size) {
  if (size < 257) return std::nullopt;
  tokenizer::Vocabulary v;
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(tokenizer::byte_to_unicode(static_cast<uint8_t>(b)));
    v.types.push_back(tokenizer::TokenType::kNormal);
  }
  v.tokens.push_back("<|endoftext|>");
  v.types.push_back(tokenizer::TokenType::kControl);
  v.bos_id = v.eos_id = 256;
  constexpr int kPrintable = 95;  // ' ' .. '~'
  for (int i = 0; static_cast<int>(v.tokens.size()) < size && i < kPrintable * kPrintable; ++i) {
    const std::string a = tokenizer::byte_to_unicode(static_cast<uint8_t>(' ' + i / kPrintable));
    const std::string b = tokenizer::byte_to_unicode(static_cast<uint8_t>(' ' + i % kPrintable));
    v.merges.emplace_back(a, b);
    v.tokens.push_back(a + b);
    v.types.push_back(tokenizer::TokenType::kNormal);
  }
  for (int i = 0; static_cast<int>(v.tokens.size()) < size; ++i) {
    v.tokens.push_back("<|extra_" + std::to_string(i) + "|>");
    v.types.push_back(tokenizer::TokenType::kUserDefined);
  }
  v.splits.push_back(tokenizer::SplitRule{.pattern = std::string(tokenizer::kGpt2Pattern)});
  v.pre_name = "gpt-2";
  v.source = "make-model (synthetic byte-level vocabulary)";
  return v;
}

}  // namespace

void add_make_model_command(CLI::App& root) {
  struct Options {
    std::string arch;
    std::string shape;
    std::string config;
    bool random = false;
    std::string dtype = "bf16";
    std::string output;
    uint64_t seed = 1;
    int layers = 0;
    std::string type;  // a quantization scheme: matrices written quantized directly
    int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = root.add_subcommand(
      "make-model", "Write a random-weight model of a real or small shape (GGUF or HF folder)");
  cmd->add_option("--arch", o->arch,
                  "Family: olmoe, qwen3moe, qwen3 (dense), deepseek, qwen35moe or qwen3next")
      ->required()
      ->check(CLI::IsMember({"olmoe", "qwen3moe", "qwen3", "deepseek", "qwen35moe", "qwen3next"}));
  auto* shape = cmd->add_option(
      "--shape", o->shape,
      "OLMoE-1B-7B, Qwen3-30B-A3B, Qwen3-0.6B, Moonlight-16B-A3B, Qwen3.6-35B-A3B, "
      "Qwen3-Next-80B-A3B, olmoe-small, qwen3moe-small, qwen3-small, deepseek-small, "
      "qwen35moe-small, qwen3next-small");
  auto* config =
      cmd->add_option("--config", o->config, "A HuggingFace config.json giving the shape");
  shape->excludes(config);
  cmd->add_flag("--random", o->random, "Random weights (the only source supported)")->required();
  auto* dtype_opt =
      cmd->add_option("--dtype", o->dtype, "Storage type of the matrices (norms stay f32)")
          ->check(CLI::IsMember({"bf16", "f16", "f32"}));
  cmd->add_option("--type", o->type,
                  "Write the matrices quantized (GGUF only), streaming, as `quantize --type` "
                  "would: " +
                      model::quant_scheme_names())
      ->excludes(dtype_opt);
  cmd->add_option("-t,--threads", o->threads, "Threads that draw and quantize the values")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("-o,--output", o->output, "Output: a .gguf path or a folder")->required();
  cmd->add_option("--seed", o->seed, "Random seed");
  cmd->add_option("--layers", o->layers,
                  "Keep only the first N layers (0: all; for machines with little memory)")
      ->check(CLI::Range(0, 1024));
  cmd->final_callback([o] {
    // Written as "<output>.tmp" and renamed: never onto a device or pipe.
    check_renamable_output(o->output);
    if (o->shape.empty() && o->config.empty())
      fail("make-model", "--shape/--config", "expected one of them");
    model::ModelConfig c =
        o->config.empty() ? model::shape_config(o->shape) : model::load_hf_config(o->config);
    if (model::family_name(c) != o->arch) {
      fail("make-model", "--arch", "'{}' does not match the shape's family '{}'", o->arch,
           model::family_name(c));
    }
    if (o->layers > c.layers) {
      fail("--layers", "count", "expected at most the shape's {} layers, found {}", c.layers,
           o->layers);
    }
    if (o->layers > 0 && o->layers < c.layers) {
      c.layers = o->layers;
      c.moe_layer.resize(static_cast<size_t>(c.layers));
      if (!c.linear_layer.empty()) c.linear_layer.resize(static_cast<size_t>(c.layers));
      c.validate();
    }
    const model::DType dtype = o->dtype == "bf16"  ? model::DType::kBF16
                               : o->dtype == "f16" ? model::DType::kF16
                                                   : model::DType::kF32;
    // Each slot's stored type: --dtype for every matrix, or the --type mixture's choice.
    std::function<model::DType(const model::TensorSlot&)> dtype_of =
        [dtype](const model::TensorSlot& s) {
          return s.vector() || s.f32_only ? model::DType::kF32 : dtype;
        };
    if (!o->type.empty()) {
      const auto scheme = model::parse_quant_scheme(o->type);
      if (!scheme) {
        fail("--type", "scheme", "expected one of {}, found '{}'", model::quant_scheme_names(),
             o->type);
      }
      if (!model::is_gguf_path(o->output)) {
        fail("--output", "path",
             "--type writes GGUF block types: expected a path ending in .gguf, "
             "found '{}'",
             o->output);
      }
      dtype_of = [c, sch = *scheme](const model::TensorSlot& s) {
        return model::choose_quant_dtype(sch, c, s, nullptr);
      };
    }
    const model::SlotSource source = model::random_slot_source(dtype_of, o->seed, o->threads);
    const auto t0 = std::chrono::steady_clock::now();
    const std::optional<tokenizer::Vocabulary> vocab = synthetic_vocabulary(c.vocab);
    const bool to_gguf = model::is_gguf_path(o->output);
    std::vector<std::pair<std::string, model::GgufValue>> extra;
    if (vocab && to_gguf) extra = tokenizer::gguf_metadata(*vocab);
    if (to_gguf) {
      const auto scheme = model::parse_quant_scheme(o->type);
      extra.emplace_back(
          "general.file_type",
          model::GgufValue::u32(scheme ? scheme->gguf_file_type : model::gguf_file_type(dtype)));
    }
    if (to_gguf) {
      // One file, written under a temporary name and renamed when complete (OutputFile).
      model::write_model(c, o->output, source, extra);
    } else {
      // A folder staged next to the output, moved into place (config.json last) when complete:
      // an interrupted or failed run leaves no loadable-looking partial folder.
      StagedDirectory staged(o->output, "config.json");
      model::write_model(c, staged.staging(), source, extra);
      if (vocab) tokenizer::write_hf_tokenizer(*vocab, staged.staging());
      staged.commit();
    }
    if (!vocab) {
      std::fprintf(stderr,
                   "make-model: vocabulary of %d ids is too small for a byte-level "
                   "tokenizer (needs 257): no tokenizer written\n",
                   c.vocab);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "wrote %s (%s) in %.1f s\n", o->output.c_str(), c.summary().c_str(), s);
  });
}

}  // namespace steermoe::cli
