// `steermoe convert`: writes a model's weights and tokenizer in the other format (GGUF <-> HF
// folder). Tensor bytes are copied unchanged; DeepSeek's kv_b_proj is split into attn_k_b /
// attn_v_b (and rebuilt) exactly as llama.cpp's converter does.
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "cli/commands.hpp"
#include "common/output_file.hpp"
#include "common/error.hpp"
#include "model/weights_layout.hpp"
#include "tokenizer/gguf_vocab.hpp"
#include "tokenizer/hf_json.hpp"
#include "tokenizer/tokenizer.hpp"

namespace steermoe::cli {

void add_convert_command(CLI::App& root) {
  struct Options {
    std::string model;
    std::string output;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = root.add_subcommand(
      "convert", "Convert a model between GGUF and HF safetensors (weights and tokenizer)");
  cmd->add_option("-m,--model", o->model, "Model: a .gguf file or a HuggingFace folder")
      ->required();
  cmd->add_option("-o,--output", o->output, "Output: a .gguf path or a folder")->required();
  cmd->final_callback([o] {
    auto model = model::Model::load(o->model);
    std::optional<tokenizer::Vocabulary> vocab;
    try {
      vocab = tokenizer::Tokenizer::load(o->model).vocabulary();
    } catch (const Error& e) {
      std::fprintf(stderr, "convert: no tokenizer copied (%s)\n", e.what());
    }
    const bool to_gguf = std::filesystem::path(o->output).extension() == ".gguf";
    std::vector<std::pair<std::string, model::GgufValue>> extra;
    if (vocab && to_gguf) extra = tokenizer::gguf_metadata(*vocab);
    if (to_gguf) {
      // One file, written under a temporary name and renamed when complete (OutputFile).
      model::write_model(model->config(), o->output, model::model_slot_source(*model), extra);
    } else {
      // A folder staged next to the output, moved into place (config.json last) when complete.
      StagedDirectory staged(o->output, "config.json");
      model::write_model(model->config(), staged.staging(), model::model_slot_source(*model),
                         extra);
      if (vocab) tokenizer::write_hf_tokenizer(*vocab, staged.staging());
      staged.commit();
    }
    std::fprintf(stderr, "converted %s -> %s\n", o->model.c_str(), o->output.c_str());
  });
}

}  // namespace steermoe::cli
