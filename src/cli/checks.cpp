#include "cli/checks.hpp"

#include "common/error.hpp"
#include "common/input_file.hpp"
#include "common/output_file.hpp"
#include "tokenizer/byte_level.hpp"
#include "trace/calibration_file.hpp"

namespace steermoe::cli {

std::string read_text_file(const std::string& path) {
  std::string text = read_input_file(path, "a text file");
  if (const auto bad = tokenizer::find_invalid_utf8(text))
    fail(path, "encoding", "expected valid UTF-8 text, found invalid byte 0x{:02x} at offset {}",
         static_cast<unsigned char>(text[*bad]), *bad);
  return text;
}

void write_json_report(const std::string& path, const std::string& json_text) {
  if (path.empty()) return;
  if (path == "-") {
    std::fwrite(json_text.data(), 1, json_text.size(), stdout);
    check_stdout();
    return;
  }
  write_file_atomic(path, json_text);  // complete or absent
}

FILE* table_stream(const std::string& json_path) {
  return json_path == "-" ? stderr : stdout;
}

tokenizer::Tokenizer load_tokenizer_for(const std::string& model_path, const model::Model& model) {
  tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(model_path);
  const model::ModelConfig& c = model.config();
  if (tok.size() > static_cast<size_t>(c.vocab)) {
    fail(model_path, "tokenizer",
         "expected at most {} tokens (the model's vocabulary: rows of its embedding table), the "
         "tokenizer has {}; tokenizer and weights are from different models",
         c.vocab, tok.size());
  }
  for (const auto& [name, id] : {std::pair{"bos", tok.bos()}, std::pair{"eos", tok.eos()}}) {
    if (id && (*id < 0 || *id >= c.vocab)) {
      fail(model_path, fmt::format("tokenizer {} token", name),
           "expected an id below the model's vocabulary of {}, found {}", c.vocab, *id);
    }
  }
  return tok;
}

policy::Calibration load_calibration_for(const std::string& path, int layers, int experts,
                                         int top_k, int vocab, const std::string& against) {
  policy::Calibration cal = trace::read_calibration(path);
  policy::RouterSpec shape;
  shape.layers = layers;
  shape.experts = experts;
  shape.top_k = top_k;
  policy::check_calibration_shape(cal, shape, path, "shape", against);
  if (vocab > 0 && cal.prior.vocab > vocab) {
    fail(path, "token prior vocab", "expected at most {} tokens ({}), found {}", vocab, against,
         cal.prior.vocab);
  }
  return cal;
}

void note_profile_shape(const schedule::HardwareProfile& profile, const policy::RouterSpec& shape,
                        const char* command) {
  if ((profile.layers > 0 && profile.layers != shape.layers) ||
      (profile.experts > 0 && profile.experts != shape.experts) ||
      (profile.top_k > 0 && profile.top_k != shape.top_k))
    std::fprintf(stderr,
                 "%s: note: profile %s is for %d layers x %d experts, top-%d; the model or trace "
                 "has %d x %d, top-%d (the profile's per-layer durations are used as they are)\n",
                 command, profile.name.c_str(), profile.layers, profile.experts, profile.top_k,
                 shape.layers, shape.experts, shape.top_k);
}

policy::Calibration load_calibration_for(const std::string& path, const model::Model& model) {
  const model::ModelConfig& c = model.config();
  return load_calibration_for(path, c.moe_layer_count(), c.experts, c.top_k, c.vocab,
                              "the model " + c.source + "'s");
}

void require_moe_layers(const std::string& model_path, const model::ModelConfig& config,
                        const std::string& command) {
  if (config.has_moe()) return;
  fail(command, "model",
       "model {} has no MoE layers (a dense {} model): {} needs routed experts; run, logits, "
       "perplexity, score and tokenize work on it",
       model_path, model::family_name(config), command);
}

}  // namespace steermoe::cli
