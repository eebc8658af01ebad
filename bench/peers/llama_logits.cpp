// llama.cpp's logits for a sequence of token ids, every position, as float32 little-endian
// [n][vocab]: the peer side of the GGUF cross-checks (tests/data/llama_hybrid/). Built against a
// llama.cpp build by build_llama_logits.sh; a benchmark tool, never built in CI.
//
//   llama_logits MODEL.gguf IDS OUT.bin [--incremental]
//
// IDS: comma-separated token ids fed at positions 0..n-1 (no BOS). Settings of the external
// oracle set (tests/data/oracle/README.md): F32 KV cache, flash attention off, one sequence;
// --incremental decodes one token per llama_decode (the oracle's logits.bin), else one batch.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "llama.h"

namespace {

std::vector<llama_token> parse_ids(const std::string& s) {
  std::vector<llama_token> ids;
  size_t p = 0;
  while (p < s.size()) {
    size_t q = s.find(',', p);
    if (q == std::string::npos) q = s.size();
    char* end = nullptr;
    const long v = std::strtol(s.c_str() + p, &end, 10);
    if (end != s.c_str() + q || v < 0) {
      std::fprintf(stderr, "llama_logits: IDS: expected comma-separated non-negative integers\n");
      std::exit(1);
    }
    ids.push_back(static_cast<llama_token>(v));
    p = q + 1;
  }
  return ids;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4 || argc > 5 || (argc == 5 && std::strcmp(argv[4], "--incremental") != 0)) {
    std::fprintf(stderr, "usage: llama_logits MODEL.gguf IDS OUT.bin [--incremental]\n");
    return 1;
  }
  const bool incremental = argc == 5;
  const std::vector<llama_token> ids = parse_ids(argv[2]);
  llama_backend_init();
  llama_model* model = llama_model_load_from_file(argv[1], llama_model_default_params());
  if (model == nullptr) {
    std::fprintf(stderr, "llama_logits: %s: llama.cpp could not load it\n", argv[1]);
    return 1;
  }
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 256;
  cp.n_batch = 256;
  cp.n_ubatch = 256;
  cp.n_threads = 1;
  cp.n_threads_batch = 1;
  cp.type_k = GGML_TYPE_F32;
  cp.type_v = GGML_TYPE_F32;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  llama_context* ctx = llama_init_from_model(model, cp);
  const int vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  std::vector<float> logits;
  const size_t step = incremental ? 1 : ids.size();
  llama_batch batch = llama_batch_init(static_cast<int32_t>(ids.size()), 0, 1);
  for (size_t first = 0; first < ids.size(); first += step) {
    batch.n_tokens = 0;
    for (size_t i = first; i < first + step; ++i) {
      const int32_t k = batch.n_tokens++;
      batch.token[k] = ids[i];
      batch.pos[k] = static_cast<llama_pos>(i);
      batch.n_seq_id[k] = 1;
      batch.seq_id[k][0] = 0;
      batch.logits[k] = 1;
    }
    if (llama_decode(ctx, batch) != 0) {
      std::fprintf(stderr, "llama_logits: llama_decode failed at position %zu\n", first);
      return 1;
    }
    for (int32_t k = 0; k < batch.n_tokens; ++k) {
      const float* row = llama_get_logits_ith(ctx, k);
      logits.insert(logits.end(), row, row + vocab);
    }
  }
  FILE* out = std::fopen(argv[3], "wb");
  if (out == nullptr ||
      std::fwrite(logits.data(), sizeof(float), logits.size(), out) != logits.size() ||
      std::fclose(out) != 0) {
    std::fprintf(stderr, "llama_logits: %s: could not write\n", argv[3]);
    return 1;
  }
  std::printf("wrote %zu x %d logits to %s\n", ids.size(), vocab, argv[3]);
  llama_batch_free(batch);
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
