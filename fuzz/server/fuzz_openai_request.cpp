// The OpenAI request bodies `serve` takes (server/protocol.*), the part real clients write: any
// bytes, read as the body of /v1/completions and of /v1/chat/completions, are either refused with
// an ApiError carrying a 4xx status, or give a request the engine can run as it stands: every
// prompt non-empty, its token ids in the vocabulary, prompt + max_tokens within the context, every
// sampling option in its documented range. Anything else (another exception, a crash, a request
// that would overrun the context) is a bug.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "server/protocol.hpp"
#include "tokenizer/tokenizer.hpp"

namespace {

namespace server = steermoe::server;

const server::ProtocolLimits kLimits{.context = 96, .vocab = 0, .max_prompts = 8};

const steermoe::tokenizer::Tokenizer& tokenizer() {
  static const steermoe::tokenizer::Tokenizer tok =
      steermoe::tokenizer::Tokenizer::load(STEERMOE_FUZZ_TOKENIZER);
  return tok;
}

const server::ProtocolLimits& limits() {
  static const server::ProtocolLimits l = [] {
    server::ProtocolLimits l = kLimits;
    const auto& tok = tokenizer();
    l.vocab = static_cast<int>(tok.size());
    for (size_t id = 0; id < tok.size(); ++id)  // as the server sets it
      l.max_token_bytes =
          std::max(l.max_token_bytes, tok.token_bytes(static_cast<int32_t>(id)).size());
    return l;
  }();
  return l;
}

bool options_in_range(const server::SamplingOptions& o, const server::ProtocolLimits& l) {
  return o.max_tokens >= 0 && o.max_tokens <= l.context && std::isfinite(o.temperature) &&
         o.temperature >= 0 && o.top_p > 0 && o.top_p <= 1 && o.top_k >= 0 && o.min_p >= 0 &&
         o.min_p <= 1 && o.repetition_penalty > 0 && std::isfinite(o.presence_penalty) &&
         std::isfinite(o.frequency_penalty) && o.penalty_last_n >= -1 &&
         o.stop.size() <= l.max_stop && o.logprobs >= -1 && o.logprobs <= l.max_logprobs;
}

// A refusal is the client's fault (4xx), never the server's.
void check_refusal(const server::ApiError& e) {
  if (e.status < 400 || e.status > 499) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const server::ProtocolLimits& l = limits();
  const std::string text(reinterpret_cast<const char*>(data), size);
  server::json body;
  try {
    body = server::parse_body(text, l);
  } catch (const server::ApiError& e) {
    check_refusal(e);
    return 0;
  }
  try {
    const server::CompletionRequest r = server::parse_completion(body, tokenizer(), l);
    if (r.prompts.empty() || r.prompts.size() > 1 << 20 || !options_in_range(r.options, l))
      __builtin_trap();
    for (const auto& prompt : r.prompts) {
      if (prompt.empty() || prompt.size() + static_cast<size_t>(r.options.max_tokens) >
                                static_cast<size_t>(l.context))
        __builtin_trap();
      for (const int32_t id : prompt)
        if (id < 0 || id >= l.vocab) __builtin_trap();
    }
  } catch (const server::ApiError& e) {
    check_refusal(e);
  }
  try {
    const server::ChatRequest r = server::parse_chat(body, l);
    if (!r.messages.is_array() || r.messages.empty() || !options_in_range(r.options, l) ||
        r.top_logprobs < 0 || r.top_logprobs > l.max_logprobs)
      __builtin_trap();
    for (const auto& m : r.messages) {  // normalized: a role, and a content string (or null
                                        // for an assistant turn that only calls tools)
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string() ||
          !m.contains("content") ||
          !(m["content"].is_string() || (m["content"].is_null() && m["role"] == "assistant")))
        __builtin_trap();
    }
  } catch (const server::ApiError& e) {
    check_refusal(e);
  }
  return 0;
}
