#include "server/http_server.hpp"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "common/error.hpp"
#include "server/protocol.hpp"
#include "server/utf8.hpp"
#include "template/jinja.hpp"

namespace steermoe::server {

const char* const kChatMlTemplate =
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') + '<|im_end|>\\n' "
    "-}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}";

namespace {

using Clock = std::chrono::steady_clock;

// Equal-time comparison: the work depends only on the expected key's length.
bool same_secret(const std::string& given, const std::string& expected) {
  unsigned diff = given.size() == expected.size() ? 0u : 1u;
  for (size_t i = 0; i < expected.size(); ++i) {
    const char g = i < given.size() ? given[i] : '\0';
    diff |= static_cast<unsigned>(static_cast<unsigned char>(g ^ expected[i]));
  }
  return diff == 0;
}

struct Metrics {
  std::mutex mu;
  std::map<std::pair<std::string, int>, int64_t> requests;  // (path, status) -> count
  std::atomic<int64_t> rejected{0}, cancelled{0}, prompt_tokens{0}, generated_tokens{0},
      decode_tokens{0}, copies_demand{0}, copies_prefetch{0};
  std::atomic<int64_t> decode_us{0}, prompt_us{0};
  std::atomic<int64_t> in_flight{0};
};

std::string random_id(const char* prefix) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}();
  return fmt::format("{}{:016x}{:04x}", prefix, salt, counter.fetch_add(1) & 0xffff);
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(dump(body), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) {
  send_json(res, e.status, error_body(e.what(), e.type, e.param, e.code));
}

}  // namespace

struct HttpServer::Impl {
  const model::Model& model;
  const tokenizer::Tokenizer& tok;
  ServerOptions options;
  Worker worker;
  jinja::Template chat_template;
  std::string chat_template_source;
  ProtocolLimits limits;
  Metrics metrics;
  httplib::Server http;
  std::string bos_text, eos_text;

  Impl(const model::Model& m, const tokenizer::Tokenizer& t, ServerOptions o)
      : model(m),
        tok(t),
        options(std::move(o)),
        worker(m, t, options.worker),
        chat_template(options.chat_template.empty() ? kChatMlTemplate : options.chat_template),
        chat_template_source(options.chat_template.empty() ? kChatMlTemplate
                                                           : options.chat_template) {
    limits.context = worker.context();
    limits.vocab = m.config().vocab;
    if (tok.bos()) bos_text = tok.token_bytes(*tok.bos());
    if (tok.eos()) eos_text = tok.token_bytes(*tok.eos());
    setup();
  }

  // --- one request on the worker -----------------------------------------------------------

  std::vector<std::shared_ptr<Job>> make_jobs(const std::vector<std::vector<int32_t>>& prompts,
                                              const SamplingOptions& o, const RequestExtras& x) {
    if (!x.policy.empty() || x.cache >= 0) {
      try {
        worker.check_policy(x.policy, x.cache);
      } catch (const steermoe::Error& e) {
        throw ApiError(400, e.what(), "steermoe");
      }
    }
    std::vector<std::shared_ptr<Job>> jobs;
    for (const auto& p : prompts) {
      auto job = std::make_shared<Job>();
      job->prompt = p;
      job->options = o;
      job->policy = x.policy;
      job->cache_slots = x.cache;
      jobs.push_back(std::move(job));
    }
    return jobs;
  }

  void submit(const std::vector<std::shared_ptr<Job>>& jobs, httplib::Response& res) {
    if (!worker.submit(jobs)) {
      metrics.rejected++;
      res.set_header("Retry-After", "1");
      throw ApiError(503, "the server is busy (request queue full), retry later", "",
                     "server_overloaded", "queue_full");
    }
  }

  void account(const Job& job) {
    metrics.prompt_tokens += static_cast<int64_t>(job.prompt.size());
    metrics.generated_tokens += static_cast<int64_t>(job.generated.size());
    metrics.decode_tokens += job.decoded;
    metrics.decode_us += static_cast<int64_t>(job.decode_ms * 1e3);
    metrics.prompt_us += static_cast<int64_t>(job.prompt_ms * 1e3);
    metrics.copies_demand += job.copies.demand;
    metrics.copies_prefetch += job.copies.prefetch;
  }

  void cancel(const std::vector<std::shared_ptr<Job>>& jobs) {
    bool first = true;
    for (const auto& j : jobs) {
      if (j->cancelled.exchange(true)) first = false;
    }
    if (first) metrics.cancelled++;
  }

  // Waits for `pred` on the job; false if the client went away (the jobs are cancelled).
  template <typename Pred>
  bool wait(Job& job, std::unique_lock<std::mutex>& lock, httplib::DataSink& sink,
            const std::vector<std::shared_ptr<Job>>& jobs, Pred pred) {
    while (!pred()) {
      if (job.changed.wait_for(lock, std::chrono::milliseconds(50), pred)) break;
      lock.unlock();
      const bool alive = sink.is_writable();
      lock.lock();
      if (!alive) {
        cancel(jobs);
        return false;
      }
    }
    return true;
  }

  // Non-streaming: the body is written once every job is done; while waiting, the connection is
  // watched so that a client who hangs up cancels its request.
  void respond_when_done(httplib::Response& res, std::vector<std::shared_ptr<Job>> jobs,
                         std::function<json(const std::vector<const Job*>&)> build) {
    res.status = 200;
    res.set_chunked_content_provider(
        "application/json", [this, jobs, build](size_t, httplib::DataSink& sink) {
          for (const auto& j : jobs) {
            std::unique_lock lock(j->mu);
            if (!wait(*j, lock, sink, jobs, [&] { return j->done; })) return false;
          }
          std::vector<const Job*> view;
          for (const auto& j : jobs) {
            account(*j);
            if (!j->error.empty()) {
              const std::string body =
                  dump(error_body("the engine failed: " + j->error, "server_error"));
              sink.write(body.data(), body.size());
              sink.done();
              return true;
            }
            view.push_back(j.get());
          }
          std::string body;
          try {
            body = dump(build(view));
          } catch (const std::exception& e) {
            body = dump(error_body(std::string("could not build the response: ") + e.what(),
                                   "server_error"));
          }
          if (!sink.write(body.data(), body.size())) return false;
          sink.done();
          return true;
        });
  }

  // Streaming: server-sent events as tokens become safe to show; `chunk` builds one event from
  // (job index, text delta, generated token range, finish reason or "").
  struct StreamState {
    size_t job = 0;
    size_t bytes = 0;   // text bytes of the current job already sent
    size_t tokens = 0;  // generated tokens of the current job already sent
    bool opened = false;
    bool finished = false;
  };
  // (job index, job, first event of this job, text delta, generated tokens [from, to), finish
  // reason or "") -> one event.
  using ChunkFn = std::function<std::string(size_t, const Job&, bool, const std::string&, size_t,
                                            size_t, const std::string&)>;

  void respond_streaming(httplib::Response& res, std::vector<std::shared_ptr<Job>> jobs,
                         ChunkFn chunk, std::function<std::string()> tail) {
    res.status = 200;
    res.set_header("Cache-Control", "no-cache");
    auto state = std::make_shared<StreamState>();
    res.set_chunked_content_provider(
        "text/event-stream", [this, jobs, chunk, tail, state](size_t, httplib::DataSink& sink) {
          StreamState& s = *state;
          if (s.finished) {
            sink.done();
            return true;
          }
          Job& job = *jobs[s.job];
          std::string out;
          {
            std::unique_lock lock(job.mu);
            auto progress = [&] {
              return job.done || job.safe_bytes > s.bytes || job.safe_tokens > s.tokens ||
                     // The opening chunk carries the echoed prompt's logprobs: only once
                     // the prompt has been scored.
                     (job.prompt_done && !s.opened);
            };
            if (!wait(job, lock, sink, jobs, progress)) return false;
            if (!job.error.empty()) {
              out = sse(error_body("the engine failed: " + job.error, "server_error"));
              s.finished = true;
            } else {
              const std::string delta = job.text.substr(s.bytes, job.safe_bytes - s.bytes);
              const size_t from = s.tokens, to = job.safe_tokens;
              const bool opening = !s.opened;
              s.opened = true;
              if (opening || !delta.empty() || to > from) {
                out += chunk(s.job, job, opening, delta, from, to, "");
              }
              s.bytes = job.safe_bytes;
              s.tokens = to;
              if (job.done) {
                out += chunk(s.job, job, false, "", to, to, job.finish_reason);
              }
            }
            if (job.done) {
              lock.unlock();
              account(job);
              if (!s.finished && ++s.job == jobs.size()) s.finished = true;
              s.bytes = s.tokens = 0;
              s.opened = false;
            }
          }
          if (s.finished) out += tail() + "data: [DONE]\n\n";
          if (!out.empty() && !sink.write(out.data(), out.size())) {
            cancel(jobs);
            return false;
          }
          if (s.finished) sink.done();
          return true;
        });
  }

  // --- endpoints -----------------------------------------------------------------------------

  void completions(const httplib::Request& req, httplib::Response& res) {
    const json body = parse_body(req.body, limits);
    CompletionRequest r = parse_completion(body, tok, limits);
    auto jobs = make_jobs(r.prompts, r.options, r.extras);
    submit(jobs, res);
    ResponseMeta meta{random_id("cmpl-"),
                      r.extras.model.empty() ? options.model_name : r.extras.model, unix_now()};
    const SamplingOptions opts = r.options;
    if (!r.extras.stream) {
      respond_when_done(res, jobs, [this, opts, meta](const std::vector<const Job*>& view) {
        return completion_response(view, tok, opts, meta);
      });
      return;
    }
    auto offsets = std::make_shared<std::vector<size_t>>(jobs.size(), 0);
    auto chunk = [this, opts, meta, offsets](size_t index, const Job& job, bool first,
                                             const std::string& delta, size_t from, size_t to,
                                             const std::string& finish) {
      std::string text = delta;
      const bool opening = first && opts.echo;
      if (opening) text = tok.decode(job.prompt) + delta;
      json choice = {{"index", index},
                     {"text", text},
                     {"logprobs", nullptr},
                     {"finish_reason", finish.empty() ? json(nullptr) : json(finish)}};
      if (opts.logprobs >= 0 && (to > from || opening)) {
        choice["logprobs"] = completion_logprobs(job, tok, opening, from, to, (*offsets)[index]);
      }
      json c = {{"id", meta.id},
                {"object", "text_completion"},
                {"created", meta.created},
                {"model", meta.model},
                {"choices", json::array({choice})}};
      if (!finish.empty()) c["steermoe"] = steermoe_report(job);
      return sse(c);
    };
    const bool include_usage = r.extras.include_usage;
    respond_streaming(res, jobs, chunk, [jobs, meta, include_usage] {
      if (!include_usage) return std::string();
      std::vector<const Job*> view;
      for (const auto& j : jobs) view.push_back(j.get());
      return sse({{"id", meta.id},
                  {"object", "text_completion"},
                  {"created", meta.created},
                  {"model", meta.model},
                  {"choices", json::array()},
                  {"usage", usage(view)}});
    });
  }

  std::string render_chat(const ChatRequest& r) const {
    json ctx = r.template_kwargs;
    ctx["messages"] = r.messages;
    if (!r.tools.is_null()) ctx["tools"] = r.tools;
    ctx["add_generation_prompt"] = r.add_generation_prompt;
    ctx["bos_token"] = bos_text;
    ctx["eos_token"] = eos_text;
    try {
      return chat_template.render(ctx);
    } catch (const jinja::TemplateError& e) {
      throw ApiError(400, std::string("chat template: ") + e.what(), "messages");
    }
  }

  void chat(const httplib::Request& req, httplib::Response& res) {
    const json body = parse_body(req.body, limits);
    ChatRequest r = parse_chat(body, limits);
    const std::string prompt_text = render_chat(r);
    std::vector<int32_t> ids = check_prompt(
        tok.encode(prompt_text, {.parse_special = true, .add_special = false}), limits, "messages");
    // Room for the answer: the default max_tokens is whatever the context leaves.
    r.options.max_tokens =
        std::min(r.options.max_tokens, limits.context - static_cast<int>(ids.size()));
    auto jobs = make_jobs({ids}, r.options, r.extras);
    submit(jobs, res);
    ResponseMeta meta{random_id("chatcmpl-"),
                      r.extras.model.empty() ? options.model_name : r.extras.model, unix_now()};
    auto request = std::make_shared<ChatRequest>(std::move(r));
    if (!request->extras.stream) {
      respond_when_done(res, jobs, [this, request, meta](const std::vector<const Job*>& view) {
        return chat_response(*view[0], tok, *request, meta);
      });
      return;
    }
    auto chunk = [this, request, meta](size_t, const Job& job, bool first, const std::string& delta,
                                       size_t from, size_t to, const std::string& finish) {
      json d = json::object();
      if (first) d["role"] = "assistant";
      if (finish.empty()) d["content"] = delta;
      json choice = {{"index", 0},
                     {"delta", d},
                     {"logprobs", nullptr},
                     {"finish_reason", finish.empty() ? json(nullptr) : json(finish)}};
      if (request->logprobs && to > from) {
        choice["logprobs"] = chat_logprobs(job, tok, request->top_logprobs, from, to);
      }
      json c = {{"id", meta.id},
                {"object", "chat.completion.chunk"},
                {"created", meta.created},
                {"model", meta.model},
                {"choices", json::array({choice})}};
      if (!finish.empty()) c["steermoe"] = steermoe_report(job);
      return sse(c);
    };
    const bool include_usage = request->extras.include_usage;
    respond_streaming(res, jobs, chunk, [jobs, meta, include_usage] {
      if (!include_usage) return std::string();
      return sse({{"id", meta.id},
                  {"object", "chat.completion.chunk"},
                  {"created", meta.created},
                  {"model", meta.model},
                  {"choices", json::array()},
                  {"usage", usage({jobs[0].get()})}});
    });
  }

  void tokenize(const httplib::Request& req, httplib::Response& res) {
    const json body = parse_body(req.body, limits);
    if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
    std::string text;
    bool add_special = false, pieces = false, have = false;
    for (const auto& [k, v] : body.items()) {
      if (k == "prompt" || k == "content") {
        if (!v.is_string()) throw ApiError(400, "'" + k + "' must be a string", k);
        text = v.get<std::string>();
        have = true;
      } else if (k == "add_special_tokens" || k == "add_special") {
        if (!v.is_boolean()) throw ApiError(400, "'" + k + "' must be a boolean", k);
        add_special = v.get<bool>();
      } else if (k == "with_pieces" || k == "return_token_strs") {
        if (!v.is_boolean()) throw ApiError(400, "'" + k + "' must be a boolean", k);
        pieces = v.get<bool>();
      } else if (k != "model") {
        throw ApiError(400, "unrecognized request argument supplied: " + k, k);
      }
    }
    if (!have) throw ApiError(400, "'prompt' (or 'content') is required", "prompt");
    if (!valid_utf8(text)) throw ApiError(400, "'prompt' is not valid UTF-8", "prompt");
    const auto ids = tok.encode(text, {.parse_special = true, .add_special = add_special});
    json out = {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", limits.context}};
    if (pieces) {
      json strs = json::array();
      for (int32_t id : ids) strs.push_back(tok.token_bytes(id));
      out["token_strs"] = strs;
    }
    send_json(res, 200, out);
  }

  void detokenize(const httplib::Request& req, httplib::Response& res) {
    const json body = parse_body(req.body, limits);
    if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
    std::vector<int32_t> ids;
    bool have = false;
    for (const auto& [k, v] : body.items()) {
      if (k == "tokens") {
        if (!v.is_array()) throw ApiError(400, "'tokens' must be an array of token ids", k);
        for (const json& x : v) {
          if (!(x.is_number_integer() || x.is_number_unsigned()) || x.get<int64_t>() < 0 ||
              x.get<int64_t>() >= limits.vocab) {
            throw ApiError(400, fmt::format("'tokens' must hold ids in [0, {})", limits.vocab), k);
          }
          ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
        }
        have = true;
      } else if (k != "model") {
        throw ApiError(400, "unrecognized request argument supplied: " + k, k);
      }
    }
    if (!have) throw ApiError(400, "'tokens' is required", "tokens");
    const std::string text = tok.decode(ids);
    send_json(res, 200, {{"prompt", text}, {"content", text}});
  }

  json tokenizer_info() const {
    return {{"tokenizer_class", "steermoe-byte-level-bpe"},
            {"vocab_size", tok.size()},
            {"bos_token", bos_text.empty() ? json(nullptr) : json(bos_text)},
            {"eos_token", eos_text.empty() ? json(nullptr) : json(eos_text)},
            {"pad_token", eos_text.empty() ? json(nullptr) : json(eos_text)},
            {"add_bos_token", tok.vocabulary().add_bos},
            {"model_max_length", limits.context},
            {"max_model_len", limits.context},
            {"chat_template", chat_template_source}};
  }

  std::string metrics_text() {
    std::string out;
    auto line = [&](const char* name, const char* type, const char* help, const std::string& v) {
      out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, v);
    };
    out += "# HELP steermoe_requests_total HTTP requests answered, by path and status.\n";
    out += "# TYPE steermoe_requests_total counter\n";
    {
      std::lock_guard lock(metrics.mu);
      for (const auto& [key, n] : metrics.requests) {
        out += fmt::format("steermoe_requests_total{{path=\"{}\",status=\"{}\"}} {}\n", key.first,
                           key.second, n);
      }
    }
    line("steermoe_rejected_total", "counter", "Requests refused with 503 (queue full).",
         std::to_string(metrics.rejected.load()));
    line("steermoe_cancelled_total", "counter", "Requests cancelled by a client disconnect.",
         std::to_string(metrics.cancelled.load()));
    line("steermoe_prompt_tokens_total", "counter", "Prompt tokens processed.",
         std::to_string(metrics.prompt_tokens.load()));
    line("steermoe_generated_tokens_total", "counter", "Tokens generated.",
         std::to_string(metrics.generated_tokens.load()));
    line("steermoe_decode_tokens_total", "counter", "Tokens fed back through decode.",
         std::to_string(metrics.decode_tokens.load()));
    line("steermoe_decode_seconds_total", "counter", "Time spent in decode.",
         fmt::format("{:.6f}", static_cast<double>(metrics.decode_us.load()) * 1e-6));
    line("steermoe_prompt_seconds_total", "counter", "Time spent processing prompts.",
         fmt::format("{:.6f}", static_cast<double>(metrics.prompt_us.load()) * 1e-6));
    const int64_t dt = metrics.decode_tokens.load();
    line("steermoe_ms_per_token", "gauge", "Mean decode milliseconds per token since start.",
         fmt::format("{:.4f}", dt > 0 ? static_cast<double>(metrics.decode_us.load()) * 1e-3 /
                                            static_cast<double>(dt)
                                      : 0.0));
    out +=
        "# HELP steermoe_copies_total Expert copies by kind (from the link; 0 with every expert "
        "resident).\n";
    out += "# TYPE steermoe_copies_total counter\n";
    out +=
        fmt::format("steermoe_copies_total{{kind=\"demand\"}} {}\n", metrics.copies_demand.load());
    out += fmt::format("steermoe_copies_total{{kind=\"prefetch\"}} {}\n",
                       metrics.copies_prefetch.load());
    line("steermoe_queue_depth", "gauge", "Requests waiting for the engine.",
         std::to_string(worker.queue_depth()));
    line("steermoe_engine_busy", "gauge", "1 while the engine runs a request.",
         worker.busy() ? "1" : "0");
    return out;
  }

  // Wraps a handler: ApiError -> its status; steermoe::Error -> 400; anything else -> 500.
  template <typename F>
  httplib::Server::Handler guard(F f) {
    return [f](const httplib::Request& req, httplib::Response& res) {
      try {
        f(req, res);
      } catch (const ApiError& e) {
        send_error(res, e);
      } catch (const steermoe::Error& e) {
        send_error(res, ApiError(400, e.what()));
      } catch (const std::exception& e) {
        send_error(res,
                   ApiError(500, std::string("internal error: ") + e.what(), "", "server_error"));
      }
    };
  }

  void setup() {
    const int threads = options.http_threads > 0
                            ? options.http_threads
                            : static_cast<int>(options.worker.queue_capacity) + 8;
    http.new_task_queue = [threads] {
      return new httplib::ThreadPool(static_cast<size_t>(threads));
    };
    http.set_payload_max_length(options.max_body_bytes);
    http.set_read_timeout(options.read_timeout_s, 0);
    http.set_write_timeout(options.write_timeout_s, 0);
    http.set_keep_alive_timeout(5);
    http.set_keep_alive_max_count(1000);
    http.set_tcp_nodelay(true);
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (options.api_key.empty() || req.path == "/health")
        return httplib::Server::HandlerResponse::Unhandled;
      const std::string auth = req.get_header_value("Authorization");
      const std::string prefix = "Bearer ";
      const std::string given = auth.rfind(prefix, 0) == 0 ? auth.substr(prefix.size()) : "";
      if (same_secret(given, options.api_key)) return httplib::Server::HandlerResponse::Unhandled;
      send_error(res, ApiError(401, "invalid or missing API key (Authorization: Bearer KEY)", "",
                               "invalid_request_error", "invalid_api_key"));
      return httplib::Server::HandlerResponse::Handled;
    });
    http.set_error_handler([](const httplib::Request&, httplib::Response& res) {
      if (!res.body.empty()) return;
      std::string message;
      switch (res.status) {
        case 404:
          message = "no such endpoint";
          break;
        case 405:
          message = "method not allowed";
          break;
        case 413:
          message = "the request body is too large";
          break;
        case 414:
          message = "the request URI is too long";
          break;
        default:
          message = fmt::format("HTTP error {}", res.status);
          break;
      }
      send_json(res, res.status, error_body(message, "invalid_request_error"));
    });
    http.set_exception_handler(
        [](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
          send_json(res, 500, error_body("internal error", "server_error"));
        });
    // Counted in the post-routing handler, which runs before the response is written (the
    // logger runs after): a client that reads /metrics right after a response sees it counted.
    http.set_post_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      // Unknown paths are folded together so a scan cannot grow the table.
      static const std::set<std::string> known{
          "/v1/completions", "/v1/chat/completions", "/v1/models",      "/health",
          "/tokenize",       "/detokenize",          "/tokenizer_info", "/metrics",
          "/completions",    "/chat/completions",    "/models"};
      const std::string path = known.count(req.path) ? req.path : "other";
      std::lock_guard lock(metrics.mu);
      metrics.requests[{path, res.status}]++;
    });
    http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      if (!options.quiet) {
        std::fprintf(stderr, "%s %s %d\n", req.method.c_str(), req.path.c_str(), res.status);
      }
    });

    auto completions_h = guard([this](const auto& q, auto& s) { completions(q, s); });
    auto chat_h = guard([this](const auto& q, auto& s) { chat(q, s); });
    http.Post("/v1/completions", completions_h);
    http.Post("/completions", completions_h);
    http.Post("/v1/chat/completions", chat_h);
    http.Post("/chat/completions", chat_h);
    auto models_h = guard([this](const auto&, auto& res) {
      send_json(res, 200,
                {{"object", "list"},
                 {"data", json::array({{{"id", options.model_name},
                                        {"object", "model"},
                                        {"created", unix_now()},
                                        {"owned_by", "steermoe"},
                                        {"meta",
                                         {{"context", limits.context},
                                          {"vocab", limits.vocab},
                                          {"policy", worker.default_policy()},
                                          {"cache", worker.default_cache()}}}}})}});
    });
    http.Get("/v1/models", models_h);
    http.Get("/models", models_h);
    http.Get("/health", guard([](const auto&, auto& res) {
               send_json(res, 200, {{"status", "ok"}});
             }));
    http.Post("/tokenize", guard([this](const auto& q, auto& s) { tokenize(q, s); }));
    http.Post("/detokenize", guard([this](const auto& q, auto& s) { detokenize(q, s); }));
    http.Get("/tokenizer_info",
             guard([this](const auto&, auto& res) { send_json(res, 200, tokenizer_info()); }));
    http.Get("/metrics", guard([this](const auto&, auto& res) {
               res.set_content(metrics_text(), "text/plain; version=0.0.4");
             }));
  }
};

HttpServer::HttpServer(const model::Model& model, const tokenizer::Tokenizer& tok,
                       ServerOptions options) {
  if (options.chat_template.empty()) {
    std::fprintf(stderr,
                 "warning: the model has no chat template; /v1/chat/completions uses ChatML\n");
  }
  try {
    impl_ = std::make_unique<Impl>(model, tok, std::move(options));
  } catch (const jinja::TemplateError& e) {
    fail("chat template", "chat_template", "expected a template steermoe can render: {}", e.what());
  }
}

HttpServer::~HttpServer() {
  if (impl_) {
    impl_->http.stop();
    impl_->worker.stop();
  }
}

int HttpServer::bind() {
  Impl& s = *impl_;
  int port = s.options.port;
  if (port == 0) {
    port = s.http.bind_to_any_port(s.options.host);
    if (port <= 0) fail("serve", "--host", "could not bind {} to any port", s.options.host);
  } else if (!s.http.bind_to_port(s.options.host, port)) {
    fail("serve", "--port", "could not bind {}:{} (in use, or not a local address?)",
         s.options.host, port);
  }
  return port;
}

void HttpServer::serve() {
  impl_->http.listen_after_bind();
}

void HttpServer::stop() {
  impl_->http.stop();
  impl_->worker.stop();
}

}  // namespace steermoe::server
