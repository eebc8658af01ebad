// The OpenAI wire format: request bodies in (checked field by field, unknown fields rejected as
// OpenAI does), response objects and server-sent-event chunks out, error objects. No HTTP and
// no engine here, so every rule is unit-testable.
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "server/generation.hpp"
#include "tokenizer/tokenizer.hpp"

namespace steermoe::server {

// Objects keep their key order (as Python dicts do): tojson of tools, items() in templates and
// responses read in the order they were written.
using json = nlohmann::ordered_json;

// A request the server refuses: HTTP status + OpenAI error object fields.
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = "",
           std::string type = "invalid_request_error", std::string code = "")
      : std::runtime_error(message),
        status(status),
        param(std::move(param)),
        type(std::move(type)),
        code(std::move(code)) {}
  int status;
  std::string param, type, code;
};

// {"error": {"message", "type", "param", "code"}} (param/code null when empty).
json error_body(const std::string& message, const std::string& type, const std::string& param = "",
                const std::string& code = "");

struct ProtocolLimits {
  int context = 0;             // engine positions: prompt + generated
  int vocab = 0;               // valid token ids are [0, vocab)
  size_t max_prompts = 256;    // prompts in one /v1/completions request
  int max_logprobs = 20;       // OpenAI's cap
  size_t max_stop = 4;         // stop strings
  size_t max_json_depth = 64;  // nesting of the request body
  // Bytes of the longest token (0: unknown). No text longer than context x this can fit the
  // context, so such a prompt is refused before it is tokenized (bounded work and memory).
  size_t max_token_bytes = 0;
};

// Parses a request body: malformed JSON, invalid UTF-8 and nesting deeper than the limit are
// 400s (the depth is checked before parsing, so a deeply nested body cannot exhaust the stack).
json parse_body(const std::string& body, const ProtocolLimits& limits);

struct RequestExtras {
  std::string model;
  bool stream = false;
  bool include_usage = false;        // stream_options.include_usage
  bool stream_options = false;       // stream_options given (only allowed with stream: true)
  std::string policy;                // "steermoe": {"policy": ...}; "" = server default
  int cache = -1;                    // "steermoe": {"cache": C}; -1 = server default
  std::vector<std::string> ignored;  // accepted fields without effect (logged once each)
};

struct CompletionRequest {
  RequestExtras extras;
  std::vector<std::vector<int32_t>> prompts;
  SamplingOptions options;
};

CompletionRequest parse_completion(const json& body, const tokenizer::Tokenizer& tok,
                                   const ProtocolLimits& limits);

struct ChatRequest {
  RequestExtras extras;
  bool max_tokens_given = false;  // else max_tokens is what the context leaves
  json messages;                  // normalized: role + content string (+ passthrough fields)
  json tools;                     // null or the request's tools (passed to the template)
  json template_kwargs = json::object();  // chat_template_kwargs
  bool add_generation_prompt = true;
  // vLLM's continue_final_message: the prompt ends inside the last (assistant) message, so the
  // answer continues it (a prefill) instead of starting a new turn.
  bool continue_final_message = false;
  SamplingOptions options;
  bool logprobs = false;
  int top_logprobs = 0;
};

ChatRequest parse_chat(const json& body, const ProtocolLimits& limits);

// Checks a prompt's tokens against the context (used after template rendering).
std::vector<int32_t> check_prompt(std::vector<int32_t> ids, const ProtocolLimits& limits,
                                  const std::string& param);
// Refuses (400 context_length_exceeded) a text that cannot fit the context in any tokenization
// (longer than context x max_token_bytes), before it is tokenized.
void check_text_fits(std::string_view text, const ProtocolLimits& limits, const std::string& param);
// The context rule (vLLM's): prompt tokens + max_tokens must not exceed the context, else 400
// context_length_exceeded. A request is answered in full or refused, never cut short.
void check_room(size_t prompt_tokens, int max_tokens, const ProtocolLimits& limits,
                const std::string& param);

// Per-request facts reported under "steermoe" in every response.
json steermoe_report(const Job& job);

struct ResponseMeta {
  std::string id;
  std::string model;
  int64_t created = 0;
};

// The legacy /v1/completions object for finished jobs (one choice per prompt, in order).
json completion_response(const std::vector<const Job*>& jobs, const tokenizer::Tokenizer& tok,
                         const SamplingOptions& options, const ResponseMeta& meta);
// The logprobs object of one choice: tokens [from, to) of the echo-ed prompt followed by the
// generated tokens [gen_from, gen_to); `offset0` is the text offset of the first one.
json completion_logprobs(const Job& job, const tokenizer::Tokenizer& tok, bool echo,
                         size_t gen_from, size_t gen_to, size_t& offset);
json usage(const std::vector<const Job*>& jobs);

json chat_response(const Job& job, const tokenizer::Tokenizer& tok, const ChatRequest& request,
                   const ResponseMeta& meta);
// logprobs.content entries of generated tokens [from, to).
json chat_logprobs(const Job& job, const tokenizer::Tokenizer& tok, int top, size_t from,
                   size_t to);

// "data: {json}\n\n"; JSON serialization replaces invalid UTF-8 with U+FFFD.
std::string sse(const json& chunk);
std::string dump(const json& j);

}  // namespace steermoe::server
