// `steermoe convert`: writes a model's weights and tokenizer in the other format (GGUF <-> HF
// folder). Tensor bytes are copied unchanged; DeepSeek's kv_b_proj is split into attn_k_b /
// attn_v_b (and rebuilt) exactly as llama.cpp's converter does. Types the output format cannot
// hold (GGUF block types in safetensors; FP8 with block scales in either) are dequantized to
// F32 and reported; --dtype stores every matrix as one type.
#include <cstdio>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "cli/commands.hpp"
#include "common/error.hpp"
#include "common/output_file.hpp"
#include "model/quant_mix.hpp"
#include "model/weights.hpp"
#include "model/weights_layout.hpp"
#include "tokenizer/gguf_vocab.hpp"
#include "tokenizer/hf_json.hpp"
#include "tokenizer/tokenizer.hpp"

namespace steermoe::cli {

void add_convert_command(CLI::App& root) {
  struct Options {
    std::string model;
    std::string output;
    std::string dtype = "keep";
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = root.add_subcommand(
      "convert", "Convert a model between GGUF and HF safetensors (weights and tokenizer)");
  cmd->add_option("-m,--model", o->model, "Model: a .gguf file or a HuggingFace folder")
      ->required();
  cmd->add_option("-o,--output", o->output, "Output: a .gguf path or a folder")->required();
  cmd->add_option("--dtype", o->dtype,
                  "Matrices: keep (the stored type where the format holds it) or f32, bf16, f16 "
                  "(dequantized)")
      ->capture_default_str();
  cmd->final_callback([o] {
    // Written as "<output>.tmp" and renamed: never onto a device or pipe.
    check_renamable_output(o->output);
    auto model = model::Model::load(o->model);
    std::optional<tokenizer::Vocabulary> vocab;
    try {
      vocab = tokenizer::Tokenizer::load(o->model).vocabulary();
    } catch (const Error& e) {
      std::fprintf(stderr, "convert: no tokenizer copied (%s)\n", e.what());
    }
    const bool to_gguf = model::is_gguf_path(o->output);
    std::vector<std::pair<std::string, model::GgufValue>> extra;
    if (vocab && to_gguf) extra = tokenizer::gguf_metadata(*vocab);
    std::optional<model::DType> forced;
    if (o->dtype == "f32")
      forced = model::DType::kF32;
    else if (o->dtype == "bf16")
      forced = model::DType::kBF16;
    else if (o->dtype == "f16")
      forced = model::DType::kF16;
    else if (o->dtype != "keep")
      fail("--dtype", "type", "expected keep, f32, bf16 or f16, found '{}'", o->dtype);
    size_t changed = 0;
    std::string example;
    auto choose = [&](const model::TensorSlot& s, model::DType stored) {
      if (s.f32_only) return model::DType::kF32;
      // GGUF keeps 1-D tensors (norms, biases) in F32, as llama.cpp's converter writes them:
      // its kernels add and multiply them only as F32 (a BF16 norm aborted llama-server).
      if (s.vector()) return to_gguf ? model::DType::kF32 : stored;
      if (forced) return *forced;
      const bool storable =
          stored != model::DType::kF8E4M3 && (to_gguf || !model::dtype_is_quantized(stored));
      if (storable) return stored;
      if (example.empty()) example = s.name + " (" + std::string(model::dtype_name(stored)) + ")";
      return model::DType::kF32;
    };
    // Count first (dtype_of is called again, quietly, while writing); and the matrices' types.
    std::set<model::DType> matrix_types;
    for (const auto& s :
         model::tensor_layout(model->config(), to_gguf ? model::WeightFormat::kGguf
                                                       : model::WeightFormat::kSafetensors)) {
      const model::DType stored = model::stored_dtype(*model, s);
      const model::DType chosen = choose(s, stored);
      if (!forced && chosen != stored && !s.vector()) ++changed;
      if (!s.vector() && !s.f32_only && s.role != model::Role::kRouter) matrix_types.insert(chosen);
    }
    if (changed > 0) {
      std::fprintf(stderr,
                   "convert: %zu tensors cannot keep their type in %s (e.g. %s): written as F32 "
                   "(dequantized); `steermoe quantize` writes quantized GGUF\n",
                   changed, to_gguf ? "GGUF" : "safetensors", example.c_str());
    }
    if (to_gguf) {
      // What llama.cpp's tools print as the model's type: every matrix of one plain type says
      // so; otherwise a GGUF source's own value (its tensors keep their types).
      std::optional<uint32_t> file_type;
      if (matrix_types.size() == 1 && !model::dtype_is_quantized(*matrix_types.begin())) {
        file_type = model::gguf_file_type(*matrix_types.begin());
      } else if (model::is_gguf_path(o->model)) {
        if (const auto v = model::GgufFile::open(o->model).find_uint("general.file_type"))
          file_type = static_cast<uint32_t>(*v);
      }
      if (file_type) extra.emplace_back("general.file_type", model::GgufValue::u32(*file_type));
      // One file, written under a temporary name and renamed when complete (OutputFile).
      model::write_model(model->config(), o->output, model::model_slot_source(*model, choose),
                         extra);
    } else {
      // A folder staged next to the output, moved into place (config.json last) when complete.
      StagedDirectory staged(o->output, "config.json");
      model::write_model(model->config(), staged.staging(),
                         model::model_slot_source(*model, choose), extra);
      if (vocab) tokenizer::write_hf_tokenizer(*vocab, staged.staging());
      staged.commit();
    }
    std::fprintf(stderr, "converted %s -> %s\n", o->model.c_str(), o->output.c_str());
  });
}

}  // namespace steermoe::cli
