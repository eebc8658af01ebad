#include "server/http_server.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <set>

#include "common/error.hpp"
#include "server/http_front.hpp"
#include "server/http_parser.hpp"
#include "server/job_response.hpp"
#include "server/metrics.hpp"
#include "server/protocol.hpp"
#include "server/static_files.hpp"
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

// Equal-time comparison: the work depends only on the expected key's length.
bool same_secret(const std::string& given, const std::string& expected) {
  unsigned diff = given.size() == expected.size() ? 0u : 1u;
  for (size_t i = 0; i < expected.size(); ++i) {
    const char g = i < given.size() ? given[i] : '\0';
    diff |= static_cast<unsigned>(static_cast<unsigned char>(g ^ expected[i]));
  }
  return diff == 0;
}

// The credentials of an Authorization value with the Bearer scheme, "" for any other. Schemes
// are case-insensitive (RFC 7235: some proxies and clients send "bearer"), and one or more
// spaces separate the scheme from the token.
std::string bearer_token(std::string_view authorization) {
  constexpr std::string_view kScheme = "bearer";
  if (authorization.size() <= kScheme.size() ||
      !http::iequals(authorization.substr(0, kScheme.size()), kScheme) ||
      authorization[kScheme.size()] != ' ')
    return {};
  authorization.remove_prefix(kScheme.size());
  while (!authorization.empty() && authorization.front() == ' ') authorization.remove_prefix(1);
  return std::string(authorization);
}

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

http::Response json_response(int status, const json& body) {
  http::Response r;
  r.status = status;
  r.body = dump(body);
  return r;
}

http::Response error_response(const ApiError& e) {
  http::Response r = json_response(e.status, error_body(e.what(), e.type, e.param, e.code));
  if (e.status == 503) r.fields.emplace_back("Retry-After", "1");
  return r;
}

const char* error_type(int status) {
  if (status >= 500) return "server_error";
  return "invalid_request_error";
}

// Frees a request body once it has been parsed (it may be megabytes).
void drop_body(http::Request& req) {
  std::string().swap(req.body);
}

}  // namespace

struct HttpServer::Impl {
  using RouteFn = std::function<http::Response(http::Request&)>;
  struct Route {
    std::string method;  // GET or POST (GET routes answer HEAD too)
    bool open = false;   // no API key needed
    RouteFn fn;
  };

  const model::Model& model;
  const tokenizer::Tokenizer& tok;
  ServerOptions options;
  Worker worker;
  jinja::Template chat_template;
  std::string chat_template_source;
  ProtocolLimits limits;
  Metrics metrics;
  std::string bos_text, eos_text;
  std::map<std::string, Route> routes;
  std::vector<std::string> chat_stops;  // end-of-turn markers of the chat template
  std::mutex warned_mu;
  std::set<std::string> warned;  // ignored fields already logged
  std::unique_ptr<http::Front> front;

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
    for (size_t id = 0; id < tok.size(); ++id) {
      limits.max_token_bytes =
          std::max(limits.max_token_bytes, tok.token_bytes(static_cast<int32_t>(id)).size());
    }
    if (tok.bos()) bos_text = tok.token_bytes(*tok.bos());
    if (tok.eos()) eos_text = tok.token_bytes(*tok.eos());
    // A chat answer ends at the template's end-of-turn marker, or where the model starts a
    // new turn: it has finished its own (as text or as a special token).
    for (const char* marker : {"<|im_end|>", "<|im_start|>", "<|eot_id|>", "<|end|>",
                               "<end_of_turn>", "<|end_of_text|>", "<|eom_id|>"}) {
      if (chat_template_source.find(marker) != std::string::npos &&
          std::string(marker) != eos_text) {
        chat_stops.emplace_back(marker);
      }
    }
    add_routes();
    front = std::make_unique<http::Front>(
        front_options(), [this](const http::Request& r) { return admit(r); },
        [this](http::Request& r) { return handle(r); },
        [this](const http::Request& r, int status) { observe(r, status); },
        [](int status, const std::string& message) {
          return dump(error_body(message, error_type(status)));
        });
  }

  http::FrontOptions front_options() const {
    http::FrontOptions f;
    f.host = options.host;
    f.port = options.port;
    f.max_body_bytes = options.max_body_bytes;
    f.max_buffered_bytes = std::max(options.max_buffered_bytes, options.max_body_bytes);
    f.head_timeout_ms = options.read_timeout_s * 1000;
    f.body_timeout_ms = options.body_timeout_s * 1000;
    f.write_timeout_ms = options.write_timeout_s * 1000;
    f.keep_alive_ms = options.keep_alive_s * 1000;
    f.probe_interval_ms = options.probe_interval_ms;
    f.max_connections = options.max_connections;
    f.max_connections_per_address = options.max_connections_per_address;
    f.handler_threads = options.http_threads > 0 ? options.http_threads : 2;
    return f;
  }

  // --- routing -------------------------------------------------------------------------------

  const Route* find_route(const std::string& path) const {
    const auto it = routes.find(path);
    if (it != routes.end()) return &it->second;
    for (const char* prefix : {"/v1/models/", "/models/"}) {
      if (path.rfind(prefix, 0) == 0 && path.size() > std::string_view(prefix).size()) {
        return &routes.at("/v1/models/{id}");
      }
    }
    return nullptr;
  }

  bool authorized(const http::Request& req) const {
    if (options.api_key.empty()) return true;
    const std::string* auth = req.field("authorization");
    return same_secret(auth ? bearer_token(*auth) : std::string(), options.api_key);
  }

  // Before the body is read: unknown path, wrong method, missing key.
  std::optional<http::Response> admit(const http::Request& req) const {
    const Route* route = find_route(req.path);
    if (route == nullptr) {
      return error_response(
          ApiError(404, "no such endpoint: " + req.path, "", "invalid_request_error", "not_found"));
    }
    if (req.method != route->method && !(req.method == "HEAD" && route->method == "GET")) {
      http::Response r =
          error_response(ApiError(405, fmt::format("{} {} is not supported (use {})", req.method,
                                                   req.path, route->method)));
      r.fields.emplace_back("Allow", route->method == "GET" ? "GET, HEAD" : route->method);
      return r;
    }
    if (!route->open && !authorized(req)) {
      return error_response(ApiError(401, "invalid or missing API key (Authorization: Bearer KEY)",
                                     "", "invalid_request_error", "invalid_api_key"));
    }
    // A compressed body would only fail later as "not valid JSON": say what is wrong instead.
    if (const std::string* enc = req.field("content-encoding")) {
      const std::string_view e = http::trim(*enc);
      if (!e.empty() && !http::iequals(e, "identity")) {
        http::Response r = error_response(
            ApiError(415,
                     fmt::format("Content-Encoding '{}' is not supported: send the body "
                                 "uncompressed",
                                 *enc),
                     "", "invalid_request_error", "unsupported_media_type"));
        r.fields.emplace_back("Accept-Encoding", "identity");
        return r;
      }
    }
    return std::nullopt;
  }

  // On a handler thread: ApiError -> its status; steermoe::Error -> 400; anything else -> 500.
  http::Response handle(http::Request& req) {
    const Route* route = find_route(req.path);
    try {
      return route->fn(req);
    } catch (const ApiError& e) {
      return error_response(e);
    } catch (const steermoe::Error& e) {
      return error_response(ApiError(400, e.what()));
    } catch (const std::bad_alloc&) {
      return error_response(ApiError(503, "out of memory while handling the request", "",
                                     "server_error", "out_of_memory"));
    } catch (const std::exception& e) {
      return error_response(
          ApiError(500, std::string("internal error: ") + e.what(), "", "server_error"));
    }
  }

  void observe(const http::Request& req, int status) {
    metrics.count(req.path, status);
    if (!options.quiet) {
      std::fprintf(stderr, "%s %s %d\n", req.method.empty() ? "-" : req.method.c_str(),
                   req.path.empty() ? "-" : req.path.c_str(), status);
    }
  }

  // --- request checks ----------------------------------------------------------------------

  // The `model` field, when given, must name the served model (OpenAI answers 404).
  void check_model(const std::string& model_field) const {
    if (model_field.empty() || model_field == options.model_name) return;
    throw ApiError(404,
                   fmt::format("the model '{}' does not exist (this server serves '{}')",
                               model_field, options.model_name),
                   "model", "invalid_request_error", "model_not_found");
  }

  // Fields accepted without effect: logged once per name (not per request: no log flood).
  void warn_ignored(const std::vector<std::string>& fields) {
    if (fields.empty() || options.quiet) return;
    std::lock_guard lock(warned_mu);
    for (const std::string& f : fields) {
      if (warned.insert(f).second) {
        std::fprintf(stderr,
                     "warning: request field '%s' is accepted and ignored (it has no effect "
                     "here); logged once\n",
                     f.c_str());
      }
    }
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
      http::Front* f = front.get();
      job->on_change = [f] { f->wake(); };
      jobs.push_back(std::move(job));
    }
    return jobs;
  }

  void submit(const std::vector<std::shared_ptr<Job>>& jobs) {
    if (!worker.submit(jobs)) {
      metrics.rejected++;
      if (worker.draining())
        throw ApiError(503, "the server is shutting down, retry elsewhere", "",
                       "server_shutting_down", "shutting_down");
      throw ApiError(503, "the server is busy (request queue full), retry later", "",
                     "server_overloaded", "queue_full");
    }
  }

  JobHooks hooks() {
    return {[this](const Job& job) { metrics.account(job); }, [this] { metrics.cancelled++; }};
  }

  // --- endpoints -----------------------------------------------------------------------------

  http::Response completions(http::Request& req) {
    CompletionRequest r;
    {
      const json body = parse_body(req.body, limits);
      drop_body(req);
      r = parse_completion(body, tok, limits);
    }
    check_model(r.extras.model);
    warn_ignored(r.extras.ignored);
    auto jobs = make_jobs(r.prompts, r.options, r.extras);
    submit(jobs);
    const ResponseMeta meta{random_id("cmpl-"), options.model_name, unix_now()};
    const SamplingOptions opts = r.options;
    http::Response res;
    if (!r.extras.stream) {
      res.pending = json_when_done(
          jobs,
          [this, opts, meta](const std::vector<const Job*>& view) {
            return completion_response(view, tok, opts, meta);
          },
          hooks());
      return res;
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
    res.content_type = "text/event-stream";
    res.pending = event_stream(
        jobs, chunk,
        [jobs, meta, include_usage] {
          if (!include_usage) return std::string();
          std::vector<const Job*> view;
          for (const auto& j : jobs) view.push_back(j.get());
          return sse({{"id", meta.id},
                      {"object", "text_completion"},
                      {"created", meta.created},
                      {"model", meta.model},
                      {"choices", json::array()},
                      {"usage", usage(view)}});
        },
        hooks());
    return res;
  }

  std::string render_chat(const ChatRequest& r) const {
    json ctx = r.template_kwargs;
    ctx["messages"] = r.messages;
    if (!r.tools.is_null()) ctx["tools"] = r.tools;
    ctx["add_generation_prompt"] = r.add_generation_prompt;
    ctx["bos_token"] = bos_text;
    ctx["eos_token"] = eos_text;
    std::string text;
    try {
      text = chat_template.render(ctx);
    } catch (const jinja::TemplateError& e) {
      throw ApiError(400, std::string("chat template: ") + e.what(), "messages");
    }
    if (r.continue_final_message) {
      // The prompt ends where the last message's text ends (what the template writes after it
      // closes the turn), as HF's apply_chat_template(continue_final_message=True) cuts it.
      // HF's rule: found stripped of surrounding white space (templates often strip it), and
      // its trailing white space kept where the template kept it.
      const std::string whole = r.messages.back()["content"].get<std::string>();
      const size_t b = whole.find_first_not_of(" \t\r\n");
      const std::string lstripped = b == std::string::npos ? std::string() : whole.substr(b);
      std::string last = lstripped.substr(0, lstripped.find_last_not_of(" \t\r\n") + 1);
      const size_t at = last.empty() ? std::string::npos : text.rfind(last);
      if (at != std::string::npos && text.compare(at, lstripped.size(), lstripped) == 0)
        last = lstripped;
      if (at == std::string::npos)
        throw ApiError(400,
                       "continue_final_message: the chat template does not write the last "
                       "message's text as given, so the prompt cannot end inside it",
                       "continue_final_message");
      text.resize(at + last.size());
    }
    return text;
  }

  http::Response chat(http::Request& req) {
    ChatRequest r;
    {
      const json body = parse_body(req.body, limits);
      drop_body(req);
      r = parse_chat(body, limits);
    }
    check_model(r.extras.model);
    warn_ignored(r.extras.ignored);
    for (const std::string& stop : chat_stops) r.options.stop.push_back(stop);
    const std::string prompt_text = render_chat(r);
    check_text_fits(prompt_text, limits, "messages");
    std::vector<int32_t> ids =
        tok.encode(prompt_text, {.parse_special = true, .add_special = false});
    // A model that asks for BOS gets it, once, whether or not its template writes it (as
    // llama-server tokenizes a chat prompt); EOS is never appended to a prompt to continue.
    if (const auto bos = tok.bos();
        bos && tok.vocabulary().add_bos && (ids.empty() || ids[0] != *bos))
      ids.insert(ids.begin(), *bos);
    ids = check_prompt(std::move(ids), limits, "messages");
    // Without max_tokens the answer may fill what the context leaves (at least one token).
    if (!r.max_tokens_given) {
      r.options.max_tokens = std::max(1, limits.context - static_cast<int>(ids.size()));
    }
    check_room(ids.size(), r.options.max_tokens, limits, "messages");
    auto jobs = make_jobs({ids}, r.options, r.extras);
    submit(jobs);
    const ResponseMeta meta{random_id("chatcmpl-"), options.model_name, unix_now()};
    auto request = std::make_shared<ChatRequest>(std::move(r));
    http::Response res;
    if (!request->extras.stream) {
      res.pending = json_when_done(
          jobs,
          [this, request, meta](const std::vector<const Job*>& view) {
            return chat_response(*view[0], tok, *request, meta);
          },
          hooks());
      return res;
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
    res.content_type = "text/event-stream";
    res.pending = event_stream(
        jobs, chunk,
        [jobs, meta, include_usage] {
          if (!include_usage) return std::string();
          return sse({{"id", meta.id},
                      {"object", "chat.completion.chunk"},
                      {"created", meta.created},
                      {"model", meta.model},
                      {"choices", json::array()},
                      {"usage", usage({jobs[0].get()})}});
        },
        hooks());
    return res;
  }

  http::Response tokenize(http::Request& req) {
    const json body = parse_body(req.body, limits);
    drop_body(req);
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
      } else if (k == "model") {
        if (!v.is_string()) throw ApiError(400, "'model' must be a string", k);
        check_model(v.get<std::string>());
      } else {
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
    return json_response(200, out);
  }

  http::Response detokenize(http::Request& req) {
    const json body = parse_body(req.body, limits);
    drop_body(req);
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
      } else if (k == "model") {
        if (!v.is_string()) throw ApiError(400, "'model' must be a string", k);
        check_model(v.get<std::string>());
      } else {
        throw ApiError(400, "unrecognized request argument supplied: " + k, k);
      }
    }
    if (!have) throw ApiError(400, "'tokens' is required", "tokens");
    const std::string text = tok.decode(ids);
    return json_response(200, {{"prompt", text}, {"content", text}});
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

  json model_object() const {
    return {{"id", options.model_name},
            {"object", "model"},
            {"created", unix_now()},
            {"owned_by", "steermoe"},
            {"meta",
             {{"context", limits.context},
              {"vocab", limits.vocab},
              {"policy", worker.default_policy()},
              {"cache", worker.default_cache()}}}};
  }

  void add_routes() {
    auto get = [this](const std::string& path, bool open, RouteFn fn) {
      routes[path] = Route{"GET", open, std::move(fn)};
    };
    auto post = [this](const std::string& path, RouteFn fn) {
      routes[path] = Route{"POST", false, std::move(fn)};
    };
    for (const char* p : {"/v1/completions", "/completions"}) {
      post(p, [this](http::Request& r) { return completions(r); });
    }
    for (const char* p : {"/v1/chat/completions", "/chat/completions"}) {
      post(p, [this](http::Request& r) { return chat(r); });
    }
    for (const char* p : {"/v1/models", "/models"}) {
      get(p, false, [this](http::Request&) {
        return json_response(200, {{"object", "list"}, {"data", json::array({model_object()})}});
      });
    }
    get("/v1/models/{id}", false, [this](http::Request& r) {
      const std::string id = r.path.substr(r.path.find("/models/") + 8);
      if (id != options.model_name) {
        throw ApiError(404,
                       fmt::format("the model '{}' does not exist (this server serves '{}')", id,
                                   options.model_name),
                       "model", "invalid_request_error", "model_not_found");
      }
      return json_response(200, model_object());
    });
    // While draining a load balancer should route elsewhere: 503, as llama-server's /health
    // answers while it cannot take requests.
    get("/health", true, [this](http::Request&) {
      return worker.draining() ? json_response(503, {{"status", "shutting down"}})
                               : json_response(200, {{"status", "ok"}});
    });
    for (const char* p : {"/tokenize", "/v1/tokenize"}) {
      post(p, [this](http::Request& r) { return tokenize(r); });
    }
    for (const char* p : {"/detokenize", "/v1/detokenize"}) {
      post(p, [this](http::Request& r) { return detokenize(r); });
    }
    get("/tokenizer_info", false,
        [this](http::Request&) { return json_response(200, tokenizer_info()); });
    // The chat page needs no key (it holds no data; it asks for one if the API does).
    for (const StaticFile& f : static_files()) {
      auto serve_file = [&f](http::Request&) {
        http::Response r;
        r.content_type = std::string(f.content_type);
        r.body = std::string(f.body);
        r.fields.emplace_back("Cache-Control", "no-cache");
        return r;
      };
      get(std::string(f.path), true, serve_file);
      if (f.path == "/index.html") get("/", true, serve_file);
    }
    get("/steermoe/cache", false, [this](http::Request&) {
      return json_response(200, cache_view_json(worker.cache_view()));
    });
    get("/metrics", false, [this](http::Request&) {
      http::Response r;
      r.content_type = "text/plain; version=0.0.4";
      r.body = metrics.text(worker, front->stats());
      return r;
    });
  }
};

HttpServer::HttpServer(const model::Model& model, const tokenizer::Tokenizer& tok,
                       ServerOptions options) {
  if (options.chat_template.empty()) {
    std::fprintf(stderr,
                 "warning: the model has no chat template; /v1/chat/completions uses ChatML\n");
  }
  const std::string source =
      options.chat_template_source.empty() ? "chat template" : options.chat_template_source;
  try {
    impl_ = std::make_unique<Impl>(model, tok, std::move(options));
  } catch (const jinja::TemplateError& e) {
    fail(source, "chat_template", "expected a template steermoe can render: {}", e.what());
  }
}

HttpServer::~HttpServer() {
  if (impl_) {
    impl_->front->stop();
    impl_->worker.stop();
  }
}

int HttpServer::bind() {
  return impl_->front->bind();
}

void HttpServer::serve() {
  impl_->front->serve();
}

void HttpServer::drain() {
  impl_->worker.drain();
  impl_->front->drain();
}

void HttpServer::stop() {
  impl_->front->stop();
  impl_->worker.stop();
}

}  // namespace steermoe::server
