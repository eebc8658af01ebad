// `steermoe quantize`: writes a model as a GGUF of quantized weights (a plain type or a _M
// mixture; rules in model/quant_mix.cpp, quantizers in quant/quantize.cpp), with the tokenizer.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.hpp"
#include "common/error.hpp"
#include "common/output_file.hpp"
#include "model/quant_mix.hpp"
#include "model/weights.hpp"
#include "model/weights_layout.hpp"
#include "tokenizer/gguf_vocab.hpp"
#include "tokenizer/tokenizer.hpp"

namespace steermoe::cli {

void add_quantize_command(CLI::App& root) {
  struct Options {
    std::string model;
    std::string type = "q4_k_m";
    std::string output;
    int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = root.add_subcommand(
      "quantize", "Write a model as a GGUF with quantized weights (Q8_0 .. Q6_K, _M mixtures)");
  cmd->add_option("-m,--model", o->model, "Model: a .gguf file or a HuggingFace folder")
      ->required();
  cmd->add_option("--type", o->type, "Scheme: " + model::quant_scheme_names())
      ->capture_default_str();
  cmd->add_option("-o,--output", o->output, "Output .gguf path")->required();
  cmd->add_option("-t,--threads", o->threads, "Threads that quantize (default: every core)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->final_callback([o] {
    // Written as "<output>.tmp" and renamed: never onto a device or pipe.
    check_renamable_output(o->output);
    const auto scheme = model::parse_quant_scheme(o->type);
    if (!scheme) {
      fail("--type", "scheme", "expected one of {}, found '{}'", model::quant_scheme_names(),
           o->type);
    }
    if (!model::is_gguf_path(o->output)) {
      fail("--output", "path", "expected a path ending in .gguf, found '{}'", o->output);
    }
    // In place would replace the full-precision source with its lossy copy (convert, lossless,
    // may write in place).
    std::error_code same_ec;
    if (o->output == o->model || std::filesystem::equivalent(o->model, o->output, same_ec)) {
      fail("--output", "path",
           "'{}' is the input model: quantizing in place would replace the source with its "
           "lossy copy; write to another path",
           o->output);
    }
    auto model = model::Model::load(o->model);
    std::vector<std::pair<std::string, model::GgufValue>> extra;
    try {
      extra = tokenizer::gguf_metadata(tokenizer::Tokenizer::load(o->model).vocabulary());
    } catch (const Error& e) {
      std::fprintf(stderr, "quantize: no tokenizer copied (%s)\n", e.what());
    }
    extra.emplace_back("general.file_type", model::GgufValue::u32(scheme->gguf_file_type));
    const model::ModelConfig& c = model->config();
    std::vector<std::string> notes;
    uint64_t in_bytes = 0, out_bytes = 0;
    std::string requantized;  // the first tensor stored quantized already
    for (const model::TensorSlot& s : model::tensor_layout(c, model::WeightFormat::kGguf)) {
      std::string note;
      const model::DType dt = model::choose_quant_dtype(*scheme, c, s, &note);
      if (!note.empty()) notes.push_back(note);
      const model::DType stored = model::stored_dtype(*model, s);
      if (requantized.empty() && model::dtype_is_quantized(stored))
        requantized = fmt::format("{} ({})", s.name, model::dtype_name(stored));
      in_bytes += *model::dtype_byte_size(stored, s.elements());
      out_bytes += *model::dtype_byte_size(dt, s.elements());
    }
    // llama-quantize refuses this without --allow-requantize; it works here (from the dequantized
    // values), so a warning says what it costs.
    if (!requantized.empty())
      std::fprintf(stderr,
                   "quantize: warning: %s holds quantized tensors already (%s, ...): they are "
                   "re-quantized from their dequantized values, adding both errors; quantize "
                   "from the BF16 / F32 model instead where you have it\n",
                   o->model.c_str(), requantized.c_str());
    const model::QuantScheme sch = *scheme;
    model::write_model(c, o->output,
                       model::model_slot_source(
                           *model,
                           [&c, sch](const model::TensorSlot& s, model::DType) {
                             return model::choose_quant_dtype(sch, c, s, nullptr);
                           },
                           o->threads),
                       extra);
    for (const auto& n : notes) std::fprintf(stderr, "quantize: %s\n", n.c_str());
    std::fprintf(stderr, "quantized %s -> %s (%s): %.1f MB -> %.1f MB\n", o->model.c_str(),
                 o->output.c_str(), sch.name.c_str(), static_cast<double>(in_bytes) / 1e6,
                 static_cast<double>(out_bytes) / 1e6);
  });
}

}  // namespace steermoe::cli
