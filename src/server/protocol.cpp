#include "server/protocol.hpp"

#include <cmath>
#include <limits>
#include <set>

#include "common/error.hpp"
#include "common/json_input.hpp"
#include "server/utf8.hpp"

namespace steermoe::server {

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, message, param);
}

std::string type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "an integer";
    case json::value_t::number_float:
      return "a number";
    case json::value_t::string:
      return "a string";
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    default:
      return "an unsupported value";
  }
}

bool is_int(const json& v) {
  return v.is_number_integer() || v.is_number_unsigned();
}

int64_t get_int(const json& v, const std::string& param, int64_t lo, int64_t hi) {
  if (!is_int(v)) bad(param, fmt::format("'{}' must be an integer, found {}", param, type_name(v)));
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi)) {
    bad(param, fmt::format("'{}' must be in [{}, {}]", param, lo, hi));
  }
  const auto x = v.get<int64_t>();
  if (x < lo || x > hi)
    bad(param, fmt::format("'{}' must be in [{}, {}], found {}", param, lo, hi, x));
  return x;
}

double get_number(const json& v, const std::string& param, double lo, double hi) {
  if (!v.is_number())
    bad(param, fmt::format("'{}' must be a number, found {}", param, type_name(v)));
  const auto x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) {
    bad(param, fmt::format("'{}' must be in [{}, {}]", param, lo, hi));
  }
  return x;
}

bool get_bool(const json& v, const std::string& param) {
  if (!v.is_boolean())
    bad(param, fmt::format("'{}' must be a boolean, found {}", param, type_name(v)));
  return v.get<bool>();
}

const std::string& get_string(const json& v, const std::string& param) {
  if (!v.is_string())
    bad(param, fmt::format("'{}' must be a string, found {}", param, type_name(v)));
  return v.get_ref<const std::string&>();
}

std::vector<std::string> get_stop(const json& v, const ProtocolLimits& limits) {
  std::vector<std::string> out;
  if (v.is_null()) return out;
  if (v.is_string()) {
    out.push_back(v.get<std::string>());
  } else if (v.is_array()) {
    if (v.size() > limits.max_stop) {
      bad("stop", fmt::format("'stop' may hold at most {} strings", limits.max_stop));
    }
    for (const json& s : v) out.push_back(get_string(s, "stop"));
  } else {
    bad("stop", "'stop' must be a string, an array of strings or null, found " + type_name(v));
  }
  for (const std::string& s : out) {
    if (s.empty()) bad("stop", "'stop' strings must not be empty");
  }
  return out;
}

// Fields OpenAI SDKs and frameworks send whose meaning is not lost when ignored (storage,
// tagging, billing tier, end-user ids, latency hints): accepted, ignored with a warning.
bool ignored_field(const std::string& key) {
  static const std::set<std::string> keys{
      "store", "metadata",   "service_tier",      "parallel_tool_calls",
      "user",  "prediction", "safety_identifier", "prompt_cache_key"};
  return keys.count(key) > 0;
}

// The sampler's fields beyond temperature and top_p (llama-server's and vLLM's names).
bool sampling_field(const std::string& key, const json& v, SamplingOptions& o) {
  if (key != "top_k" && key != "min_p" && key != "repetition_penalty" && key != "repeat_penalty" &&
      key != "presence_penalty" && key != "frequency_penalty" && key != "repeat_last_n") {
    return false;
  }
  if (v.is_null()) return true;
  if (key == "top_k") {
    // vLLM's -1 and llama-server's 0 both mean off.
    o.top_k = static_cast<int>(std::max<int64_t>(0, get_int(v, key, -1, 1 << 24)));
  } else if (key == "min_p") {
    o.min_p = static_cast<float>(get_number(v, key, 0.0, 1.0));
  } else if (key == "repetition_penalty" || key == "repeat_penalty") {
    o.repetition_penalty = static_cast<float>(get_number(v, key, 0.0, 10.0));
    if (o.repetition_penalty <= 0.0f) bad(key, "'" + key + "' must be in (0, 10] (1: off)");
  } else if (key == "presence_penalty") {
    o.presence_penalty = static_cast<float>(get_number(v, key, -2.0, 2.0));
  } else if (key == "frequency_penalty") {
    o.frequency_penalty = static_cast<float>(get_number(v, key, -2.0, 2.0));
  } else {  // repeat_last_n
    o.penalty_last_n = static_cast<int>(get_int(v, key, -1, 1 << 24));
  }
  return true;
}

// Fields every endpoint shares; returns true if `key` was one of them.
bool common_field(const std::string& key, const json& v, RequestExtras& extras, SamplingOptions& o,
                  const ProtocolLimits& limits) {
  if (key == "model") {
    if (!v.is_null()) extras.model = get_string(v, key);
  } else if (key == "stream") {
    if (!v.is_null()) extras.stream = get_bool(v, key);
  } else if (key == "stream_options") {
    if (v.is_null()) return true;
    if (!v.is_object()) bad(key, "'stream_options' must be an object");
    extras.stream_options = true;
    for (const auto& [k, x] : v.items()) {
      if (k == "include_obfuscation") {  // OpenAI's padding of streamed events: not needed
        extras.ignored.push_back("stream_options." + k);
        continue;
      }
      if (k != "include_usage")
        bad("stream_options." + k, "unrecognized stream option '" + k + "'");
      extras.include_usage = get_bool(x, "stream_options.include_usage");
    }
  } else if (key == "temperature") {
    if (!v.is_null()) o.temperature = static_cast<float>(get_number(v, key, 0.0, 2.0));
  } else if (key == "top_p") {
    if (!v.is_null()) {
      o.top_p = static_cast<float>(get_number(v, key, 0.0, 1.0));
      if (o.top_p <= 0.0f) bad(key, "'top_p' must be in (0, 1]");
    }
  } else if (key == "seed") {
    if (!v.is_null()) {
      o.seed = static_cast<uint64_t>(get_int(v, key, std::numeric_limits<int64_t>::min(),
                                             std::numeric_limits<int64_t>::max()));
    }
  } else if (key == "stop") {
    o.stop = get_stop(v, limits);
  } else if (key == "n") {
    if (!v.is_null() && get_int(v, key, 1, 128) != 1) bad(key, "only 'n' = 1 is supported");
  } else if (sampling_field(key, v, o)) {
    return true;
  } else if (key == "logit_bias") {
    if (!v.is_null() && !(v.is_object() && v.empty())) bad(key, "'logit_bias' is not supported");
  } else if (ignored_field(key)) {
    extras.ignored.push_back(key);
  } else if (key == "ignore_eos") {
    if (!v.is_null()) o.ignore_eos = get_bool(v, key);
  } else if (key == "steermoe") {
    if (v.is_null()) return true;
    if (!v.is_object()) bad(key, "'steermoe' must be an object {\"policy\": ..., \"cache\": C}");
    for (const auto& [k, x] : v.items()) {
      if (k == "policy") {
        extras.policy = get_string(x, "steermoe.policy");
        if (extras.policy.empty()) bad("steermoe.policy", "'steermoe.policy' must not be empty");
      } else if (k == "cache") {
        extras.cache = static_cast<int>(get_int(x, "steermoe.cache", 0, 1 << 20));
      } else {
        bad("steermoe." + k, "unrecognized steermoe option '" + k + "' (policy, cache)");
      }
    }
  } else {
    return false;
  }
  return true;
}

void check_object(const json& body) {
  if (!body.is_object())
    bad("", "the request body must be a JSON object, found " + type_name(body));
}

void check_text(const std::string& s, const std::string& param) {
  if (!valid_utf8(s)) bad(param, "'" + param + "' is not valid UTF-8");
}

// `messages`: each a role and content (a string, text parts joined, or null for an assistant)
// with the fields templates read; normalized to role + content string.
json parse_messages(const json& v) {
  const std::string key = "messages";
  if (!v.is_array() || v.empty()) bad(key, "'messages' must be a non-empty array");
  json out_messages = json::array();
  for (size_t i = 0; i < v.size(); ++i) {
    const json& m = v[i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object()) bad(where, "'" + where + "' must be an object");
    json out = json::object();
    for (const auto& [k, x] : m.items()) {
      if (k == "role") {
        const std::string& role = get_string(x, where + ".role");
        static const std::set<std::string> roles{"system", "developer", "user", "assistant",
                                                 "tool"};
        if (!roles.count(role)) {
          bad(where + ".role", "'" + where +
                                   ".role' must be system, developer, user, "
                                   "assistant or tool");
        }
        out["role"] = role;
      } else if (k == "content") {
        if (x.is_null()) {
          out["content"] = nullptr;
        } else if (x.is_string()) {
          check_text(x.get<std::string>(), where + ".content");
          out["content"] = x;
        } else if (x.is_array()) {
          // Parts joined by a newline, as vLLM and llama-server join them.
          std::string text;
          bool first_part = true;
          for (const json& part : x) {
            if (!part.is_object() || !part.contains("type") || part["type"] != "text" ||
                !part.contains("text") || !part["text"].is_string()) {
              bad(where + ".content", "content parts must be {\"type\": \"text\", \"text\": ...}");
            }
            if (!first_part) text += '\n';
            first_part = false;
            text += part["text"].get<std::string>();
          }
          check_text(text, where + ".content");
          out["content"] = text;
        } else {
          bad(where + ".content", "'content' must be a string, an array of text parts or null");
        }
      } else if (k == "name" || k == "tool_call_id" || k == "reasoning_content") {
        check_text(get_string(x, where + "." + k), where + "." + k);
        out[k] = x;
      } else if (k == "tool_calls") {
        if (!x.is_array()) bad(where + ".tool_calls", "'tool_calls' must be an array");
        out[k] = x;
      } else {
        bad(where + "." + k, "unrecognized message field '" + k + "'");
      }
    }
    if (!out.contains("role")) bad(where + ".role", "'" + where + ".role' is required");
    if (!out.contains("content")) out["content"] = nullptr;
    if (out["content"].is_null() && out["role"] != "assistant") {
      bad(where + ".content", "'" + where + ".content' is required");
    }
    out_messages.push_back(std::move(out));
  }
  return out_messages;
}

}  // namespace

json error_body(const std::string& message, const std::string& type, const std::string& param,
                const std::string& code) {
  return {{"error",
           {{"message", message},
            {"type", type},
            {"param", param.empty() ? json(nullptr) : json(param)},
            {"code", code.empty() ? json(nullptr) : json(code)}}}};
}

json parse_body(const std::string& body, const ProtocolLimits& limits) {
  // Nesting depth outside strings, before the (recursive) parser sees it.
  size_t depth = 0;
  bool in_string = false, escaped = false;
  for (char c : body) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limits.max_json_depth) {
        bad("", fmt::format("the request body nests deeper than {} levels", limits.max_json_depth));
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  json j = parse_ordered_json_or_discarded(body);
  if (j.is_discarded()) {
    bad("", "the request body is not valid JSON (or not valid UTF-8)");
  }
  return j;
}

std::vector<int32_t> check_prompt(std::vector<int32_t> ids, const ProtocolLimits& limits,
                                  const std::string& param) {
  if (ids.empty()) bad(param, "the prompt holds no tokens");
  if (static_cast<int64_t>(ids.size()) > limits.context) {
    throw ApiError(400,
                   fmt::format("this model's maximum context length is {} tokens, the prompt "
                               "holds {} tokens",
                               limits.context, ids.size()),
                   param, "invalid_request_error", "context_length_exceeded");
  }
  return ids;
}

void check_text_fits(std::string_view text, const ProtocolLimits& limits,
                     const std::string& param) {
  if (limits.max_token_bytes == 0) return;
  const uint64_t most = static_cast<uint64_t>(limits.context) * limits.max_token_bytes;
  if (text.size() > most) {
    throw ApiError(400,
                   fmt::format("this model's maximum context length is {} tokens; the prompt "
                               "({} bytes) holds more than that (no token is longer than {} "
                               "bytes)",
                               limits.context, text.size(), limits.max_token_bytes),
                   param, "invalid_request_error", "context_length_exceeded");
  }
}

// OpenAI and vLLM refuse stream_options on a request that does not stream (a client that sends it
// expects a usage chunk that would never come).
void check_stream_options(const RequestExtras& extras) {
  if (extras.stream_options && !extras.stream) {
    bad("stream_options", "'stream_options' is only allowed when 'stream' is true");
  }
}

// max_tokens (or max_completion_tokens) as asked: a non-negative integer; more than the whole
// context is the same error as a prompt that leaves too little room (context_length_exceeded,
// which clients key on), naming the field.
int max_tokens_of(const json& v, const std::string& key, const ProtocolLimits& limits) {
  const int64_t n = get_int(v, key, 0, std::numeric_limits<int32_t>::max());
  if (n > limits.context) {
    throw ApiError(400,
                   fmt::format("this model's maximum context length is {} tokens; '{}' asks for "
                               "{} new tokens: reduce it",
                               limits.context, key, n),
                   key, "invalid_request_error", "context_length_exceeded");
  }
  return static_cast<int>(n);
}

void check_room(size_t prompt_tokens, int max_tokens, const ProtocolLimits& limits,
                const std::string& param) {
  const uint64_t asked = prompt_tokens + static_cast<uint64_t>(std::max(max_tokens, 0));
  if (asked > static_cast<uint64_t>(limits.context)) {
    throw ApiError(400,
                   fmt::format("this model's maximum context length is {} tokens; this request "
                               "asks for {} ({} in the prompt, {} for the completion): reduce "
                               "the prompt or max_tokens",
                               limits.context, asked, prompt_tokens, max_tokens),
                   param, "invalid_request_error", "context_length_exceeded");
  }
}

CompletionRequest parse_completion(const json& body, const tokenizer::Tokenizer& tok,
                                   const ProtocolLimits& limits) {
  check_object(body);
  CompletionRequest r;
  SamplingOptions& o = r.options;
  bool have_prompt = false;
  for (const auto& [key, v] : body.items()) {
    if (common_field(key, v, r.extras, o, limits)) continue;
    if (key == "prompt") {
      have_prompt = true;
      auto ids_of = [&](const json& list, const std::string& param) {
        std::vector<int32_t> ids;
        ids.reserve(list.size());
        for (const json& x : list) {
          ids.push_back(static_cast<int32_t>(get_int(x, param, 0, limits.vocab - 1)));
        }
        return check_prompt(std::move(ids), limits, param);
      };
      auto encode = [&](const json& s, const std::string& param) {
        check_text(get_string(s, param), param);
        check_text_fits(s.get_ref<const std::string&>(), limits, param);
        return check_prompt(tok.encode(s.get_ref<const std::string&>(),
                                       {.parse_special = true, .add_special = true}),
                            limits, param);
      };
      if (v.is_string()) {
        r.prompts.push_back(encode(v, "prompt"));
      } else if (v.is_array() && !v.empty()) {
        if (v.size() > limits.max_prompts && !is_int(v[0])) {
          bad("prompt", fmt::format("at most {} prompts per request", limits.max_prompts));
        }
        if (is_int(v[0])) {
          r.prompts.push_back(ids_of(v, "prompt"));
        } else if (v[0].is_string()) {
          for (const json& s : v) r.prompts.push_back(encode(s, "prompt"));
        } else if (v[0].is_array()) {
          for (const json& list : v) {
            if (!list.is_array()) bad("prompt", "'prompt' mixes token lists with other values");
            r.prompts.push_back(ids_of(list, "prompt"));
          }
        } else {
          bad("prompt", "'prompt' must be a string, strings, token ids or token-id lists");
        }
      } else {
        bad("prompt",
            "'prompt' must be a non-empty string, array of strings, array of token ids "
            "or array of token-id arrays, found " +
                type_name(v));
      }
    } else if (key == "max_tokens") {
      if (!v.is_null()) o.max_tokens = max_tokens_of(v, key, limits);
    } else if (key == "echo") {
      if (!v.is_null()) o.echo = get_bool(v, key);
    } else if (key == "logprobs") {
      if (!v.is_null()) o.logprobs = static_cast<int>(get_int(v, key, 0, limits.max_logprobs));
    } else if (key == "best_of") {
      if (!v.is_null() && get_int(v, key, 1, 128) != 1) bad(key, "only 'best_of' = 1 is supported");
    } else if (key == "suffix") {
      if (!v.is_null()) bad(key, "'suffix' is not supported");
    } else {
      bad(key, "unrecognized request argument supplied: " + key);
    }
  }
  if (!have_prompt) bad("prompt", "'prompt' is required");
  check_stream_options(r.extras);
  for (const auto& p : r.prompts) check_room(p.size(), o.max_tokens, limits, "prompt");
  return r;
}

ChatRequest parse_chat(const json& body, const ProtocolLimits& limits) {
  check_object(body);
  ChatRequest r;
  SamplingOptions& o = r.options;
  bool have_messages = false;
  bool add_generation_prompt_given = false;
  bool have_top = false;
  bool completion_tokens_given = false;
  for (const auto& [key, v] : body.items()) {
    if (common_field(key, v, r.extras, o, limits)) continue;
    if (key == "messages") {
      have_messages = true;
      r.messages = parse_messages(v);
    } else if (key == "max_tokens" || key == "max_completion_tokens") {
      // Both given: max_completion_tokens (OpenAI's current name; max_tokens is deprecated in
      // chat) wins, as in vLLM, whatever the order of the keys.
      if (!v.is_null()) {
        const int n = max_tokens_of(v, key, limits);
        if (key == "max_completion_tokens" || !completion_tokens_given) o.max_tokens = n;
        if (key == "max_completion_tokens") completion_tokens_given = true;
        r.max_tokens_given = true;
      }
    } else if (key == "logprobs") {
      if (!v.is_null()) r.logprobs = get_bool(v, key);
    } else if (key == "top_logprobs") {
      if (!v.is_null()) {
        r.top_logprobs = static_cast<int>(get_int(v, key, 0, limits.max_logprobs));
        have_top = true;
      }
    } else if (key == "tools") {
      if (!v.is_null() && !v.is_array()) bad(key, "'tools' must be an array");
      r.tools = v;
    } else if (key == "tool_choice") {
      if (!v.is_null() && v != "none" && v != "auto") bad(key, "only 'tool_choice' none/auto");
    } else if (key == "chat_template_kwargs") {
      if (!v.is_object()) bad(key, "'chat_template_kwargs' must be an object");
      for (const auto& [k, x] : v.items()) r.template_kwargs[k] = x;
    } else if (key == "reasoning_effort") {
      // Templates of reasoning models read it (vLLM passes it the same way); others ignore it.
      if (!v.is_null()) r.template_kwargs["reasoning_effort"] = get_string(v, key);
    } else if (key == "modalities") {
      if (!v.is_null() && v != json::array({"text"})) bad(key, "only 'modalities' [\"text\"]");
    } else if (key == "add_generation_prompt") {
      r.add_generation_prompt = get_bool(v, key);
      add_generation_prompt_given = true;
    } else if (key == "continue_final_message") {
      r.continue_final_message = get_bool(v, key);
    } else if (key == "response_format") {
      if (!v.is_null() && !(v.is_object() && v.value("type", "") == "text")) {
        bad(key, "only 'response_format' {\"type\": \"text\"} is supported");
      }
    } else {
      bad(key, "unrecognized request argument supplied: " + key);
    }
  }
  if (!have_messages) bad("messages", "'messages' is required");
  if (r.continue_final_message) {
    // vLLM's rules: the last message is the assistant's to continue, and no new turn opens.
    if (add_generation_prompt_given && r.add_generation_prompt)
      bad("continue_final_message",
          "'continue_final_message' and 'add_generation_prompt' cannot both be true");
    r.add_generation_prompt = false;
    if (r.messages.empty() || r.messages.back().value("role", "") != "assistant" ||
        !r.messages.back()["content"].is_string() ||
        r.messages.back()["content"].get<std::string>().find_first_not_of(" \t\r\n") ==
            std::string::npos)
      bad("continue_final_message",
          "'continue_final_message' needs a last message from the assistant with text content");
  }
  check_stream_options(r.extras);
  if (have_top && !r.logprobs) bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  if (!r.max_tokens_given) {
    o.max_tokens = limits.context;  // chat default: until EOS or the context is full
  }
  o.logprobs = r.logprobs ? r.top_logprobs : -1;
  return r;
}

json steermoe_report(const Job& job) {
  const double per_token = job.decoded > 0 ? job.decode_ms / job.decoded : 0.0;
  json report = {{"policy", job.policy_used},
                 {"cache", job.cache_used},
                 {"copies", {{"demand", job.copies.demand}, {"prefetch", job.copies.prefetch}}},
                 {"queue_ms", job.queue_ms},
                 {"prompt_ms", job.prompt_ms},
                 {"decode_ms", job.decode_ms},
                 {"decoded_tokens", job.decoded},
                 {"ms_per_token", per_token}};
  if (job.speculative) {
    report["speculative"] = {
        {"verifications", job.verifications},
        {"tokens_per_verification",
         job.verifications > 0 ? static_cast<double>(job.decoded) / job.verifications : 0.0}};
  }
  return report;
}

json completion_logprobs(const Job& job, const tokenizer::Tokenizer& tok, bool echo,
                         size_t gen_from, size_t gen_to, size_t& offset) {
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(),
       offsets = json::array();
  auto add = [&](const ScoredToken& t) {
    const std::string piece = tok.token_bytes(t.id);
    tokens.push_back(token_string(piece));
    offsets.push_back(offset);
    offset += code_points(piece);
    if (!t.logprob) {
      token_logprobs.push_back(nullptr);
      top.push_back(nullptr);
      return;
    }
    token_logprobs.push_back(*t.logprob);
    json alts = json::object();
    for (const auto& [id, lp] : t.top) {
      const std::string key = token_string(tok.token_bytes(id));
      if (!alts.contains(key)) alts[key] = lp;
    }
    top.push_back(std::move(alts));
  };
  if (echo) {
    for (const ScoredToken& t : job.prompt_tokens) add(t);
  }
  for (size_t i = gen_from; i < gen_to && i < job.generated.size(); ++i) add(job.generated[i]);
  return {{"tokens", tokens},
          {"token_logprobs", token_logprobs},
          {"top_logprobs", top},
          {"text_offset", offsets}};
}

json usage(const std::vector<const Job*>& jobs) {
  size_t prompt = 0, completion = 0;
  for (const Job* j : jobs) {
    prompt += j->prompt.size();
    completion += j->generated.size();
  }
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion}};
}

json completion_response(const std::vector<const Job*>& jobs, const tokenizer::Tokenizer& tok,
                         const SamplingOptions& options, const ResponseMeta& meta) {
  json choices = json::array();
  json reports = json::array();
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Job& job = *jobs[i];
    std::string text;
    if (options.echo) text = tok.decode(job.prompt);
    size_t offset = 0;
    text += job.text;
    json choice = {
        {"index", i}, {"text", text}, {"finish_reason", job.finish_reason}, {"logprobs", nullptr}};
    if (options.logprobs >= 0) {
      choice["logprobs"] =
          completion_logprobs(job, tok, options.echo, 0, job.generated.size(), offset);
    }
    choices.push_back(std::move(choice));
    reports.push_back(steermoe_report(job));
  }
  json out = {{"id", meta.id},       {"object", "text_completion"}, {"created", meta.created},
              {"model", meta.model}, {"choices", choices},          {"usage", usage(jobs)}};
  out["steermoe"] = reports.size() == 1 ? reports[0] : reports;
  return out;
}

json chat_logprobs(const Job& job, const tokenizer::Tokenizer& tok, int top, size_t from,
                   size_t to) {
  json content = json::array();
  auto bytes_of = [](const std::string& s) {
    json b = json::array();
    for (char c : s) b.push_back(static_cast<uint8_t>(c));
    return b;
  };
  for (size_t i = from; i < to && i < job.generated.size(); ++i) {
    const ScoredToken& t = job.generated[i];
    const std::string piece = tok.token_bytes(t.id);
    json alts = json::array();
    for (size_t k = 0; k < t.top.size() && static_cast<int>(k) < top; ++k) {
      const std::string alt = tok.token_bytes(t.top[k].first);
      alts.push_back(
          {{"token", token_string(alt)}, {"logprob", t.top[k].second}, {"bytes", bytes_of(alt)}});
    }
    content.push_back({{"token", token_string(piece)},
                       {"logprob", t.logprob.value_or(0.0)},
                       {"bytes", bytes_of(piece)},
                       {"top_logprobs", alts}});
  }
  return {{"content", content}};
}

json chat_response(const Job& job, const tokenizer::Tokenizer& tok, const ChatRequest& request,
                   const ResponseMeta& meta) {
  json choice = {{"index", 0},
                 {"message", {{"role", "assistant"}, {"content", job.text}}},
                 {"finish_reason", job.finish_reason},
                 {"logprobs", nullptr}};
  if (request.logprobs) {
    choice["logprobs"] = chat_logprobs(job, tok, request.top_logprobs, 0, job.generated.size());
  }
  return {{"id", meta.id},
          {"object", "chat.completion"},
          {"created", meta.created},
          {"model", meta.model},
          {"choices", json::array({choice})},
          {"usage", usage({&job})},
          {"steermoe", steermoe_report(job)}};
}

std::string dump(const json& j) {
  return dump_json(j, -1, ' ', false, json::error_handler_t::replace);
}

std::string sse(const json& chunk) {
  return "data: " + dump(chunk) + "\n\n";
}

}  // namespace steermoe::server
