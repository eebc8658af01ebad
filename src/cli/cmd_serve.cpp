// `steermoe serve`: the OpenAI-compatible HTTP server (src/server/). This file only maps flags.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include "cli/commands.hpp"
#include "cli/engine_options.hpp"
#include "cli/speculative.hpp"
#include "common/error.hpp"
#include "common/interrupt.hpp"
#include "engine/memory_plan.hpp"
#include "engine/model_facts.hpp"
#include "kernels/thread_pool.hpp"
#include "server/http_server.hpp"
#include "tokenizer/tokenizer.hpp"

namespace steermoe::cli {

namespace {

// SIGINT/SIGTERM only count (async-signal-safe); a watcher thread drains the server at the
// first and stops it at the second.
volatile std::sig_atomic_t g_signals = 0;

void on_signal(int) {
  if (g_signals < 2) g_signals = g_signals + 1;
}

std::string read_file(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, flag, "expected a readable file");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

void add_serve_command(CLI::App& root) {
  struct Options {
    std::string model;
    server::ServerOptions server;
    EngineOptions engine;
    SpecOptions spec;
    int threads = kernels::physical_core_count();
    int context = 0;
    std::string chat_template_file;
    std::string name;
    size_t max_body_mb = 8;
    size_t max_buffered_mb = 64;
  };
  auto o = std::make_shared<Options>();
  server::ServerOptions& s = o->server;
  CLI::App* cmd = root.add_subcommand(
      "serve", "OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions, ...)");
  cmd->add_option("-m,--model", o->model, "Model: a .gguf file or a HuggingFace folder")
      ->required();
  cmd->add_option("--host", s.host, "Address to bind (loopback by default)");
  cmd->add_option("--port", s.port, "Port (0: any free port, printed at start)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--api-key", s.api_key,
                  "Require 'Authorization: Bearer KEY' on every endpoint but /health");
  cmd->add_option("-t,--threads", o->threads,
                  fmt::format("Engine threads (default: every physical core, {} here)",
                              kernels::physical_core_count()))
      ->check(CLI::Range(1, 1024));
  cmd->add_option("-c,--ctx-size", o->context, "KV cache positions (0: min(trained context, 4096))")
      ->check(CLI::Range(0, 1 << 22));
  add_engine_options(cmd, o->engine);  // the default policy; a request may pick its own
  cmd->add_option("--queue", s.worker.queue_capacity,
                  "Requests that may wait for the engine; more get 503 + Retry-After")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--max-body-mb", o->max_body_mb,
                  "Largest request body in MiB; larger ones are refused by their Content-Length "
                  "before they are read (413)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--max-buffered-mb", o->max_buffered_mb,
                  "Request bodies held in memory at once, all clients together, in MiB (raised "
                  "to --max-body-mb when smaller); a body that would exceed it: 503 + "
                  "Retry-After")
      ->check(CLI::Range(1, 65536));
  cmd->add_option("--timeout", s.read_timeout_s,
                  "Seconds for a request's whole head (from its first byte; late: 408 and "
                  "closed); also the seconds a client may take no response bytes")
      ->check(CLI::Range(1, 3600));
  cmd->add_option("--body-timeout", s.body_timeout_s,
                  "Seconds for a request's whole body, from the end of its head (late: 408)")
      ->check(CLI::Range(1, 3600));
  cmd->add_option("--keep-alive", s.keep_alive_s, "Seconds an idle connection is kept open")
      ->check(CLI::Range(1, 3600));
  cmd->add_option("--max-connections", s.max_connections,
                  "Open connections, all clients; at the cap the oldest one without a request "
                  "in flight is closed to make room")
      ->check(CLI::Range(1, 65536));
  cmd->add_option("--max-connections-per-ip", s.max_connections_per_address,
                  "Open connections per client address (same rule, among that address's)")
      ->check(CLI::Range(1, 65536));
  if (s.http_threads == 0) s.http_threads = 2;  // ServerOptions' 0 means 2: shown as 2
  cmd->add_option("--http-threads", s.http_threads,
                  "Request handler threads (JSON parsing, tokenization, templates; 0: 2). "
                  "Connections are served by one I/O thread")
      ->check(CLI::Range(0, 256));
  cmd->add_option("--chat-template", o->chat_template_file,
                  "Jinja chat template file (overrides the model's)");
  cmd->add_option("--name", o->name, "Model name reported by /v1/models (default: folder name)");
  cmd->add_flag("-q,--quiet", s.quiet, "No request log on stderr");
  add_speculative_options(cmd, o->spec);
  cmd->final_callback([o] {
    server::ServerOptions& so = o->server;
    const std::optional<MemoryBudget> budget = enter_memory_budget(o->engine, o->model);
    auto model = model::Model::load(o->model);
    // Refused now, not at every request: a server that starts must be able to serve.
    if (!o->spec.draft.empty()) engine::check_speculative_target(model->config());
    schedule::OffloadRequest request = offload_request(o->engine, *model, o->model);
    apply_speculative(o->spec, request);
    const schedule::OffloadConfig offload = resolve_policy(request, o->engine.policy, *model);
    check_fits(budget, *model, offload, o->context);
    // Per-request policies use the same calibration (the model's calib.smcal by default).
    warn_past_trained_context(model->config(), o->context);
    so.worker.engine = engine_params(o->engine, offload, o->threads, o->context);
    // A request's own policy or cache runs on a second engine: it must fit beside this one.
    if (budget) {
      const uint64_t planned =
          engine::plan_memory(*model, offload, engine::resolve_context(model->config(), o->context))
              .total();
      so.worker.memory_room = budget->limit_bytes() > planned ? budget->limit_bytes() - planned : 0;
    }
    // The drafter, when asked for: its context at least the target's (it sees the same tokens).
    const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(o->model);
    Drafter drafter;
    if (!o->spec.draft.empty()) {
      drafter =
          load_drafter(o->spec, o->threads,
                       engine::resolve_context(model->config(), so.worker.engine.context), tok);
      engine::check_speculative_target(drafter.model->config());
      so.worker.drafting = {.drafter = drafter.engine.get(), .draft_k = o->spec.draft_k};
    }
    so.write_timeout_s = so.read_timeout_s;
    so.max_body_bytes = o->max_body_mb << 20;
    so.max_buffered_bytes = std::max(o->max_buffered_mb, o->max_body_mb) << 20;
    so.chat_template = o->chat_template_file.empty()
                           ? tok.vocabulary().chat_template
                           : read_file(o->chat_template_file, "--chat-template");
    so.chat_template_source = o->chat_template_file.empty()
                                  ? o->model + " (its tokenizer's chat template)"
                                  : o->chat_template_file;
    so.model_name =
        !o->name.empty() ? o->name : std::filesystem::path(o->model).filename().string();
    if (so.model_name.empty())
      so.model_name = std::filesystem::path(o->model).parent_path().filename().string();
    server::HttpServer srv(*model, tok, so);
    const int port = srv.bind();
    std::fprintf(stderr, "steermoe serve: http://%s:%d (model %s, policy %s, cache %d)\n",
                 so.host.c_str(), port, so.model_name.c_str(), offload.policy_text().c_str(),
                 offload.cache_slots);
    std::fprintf(stdout, "listening on port %d\n", port);
    std::fflush(stdout);
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    // One that came while the model loaded (main's handler only noted it) stops the server too.
    if (interrupt_requested()) g_signals = 1;
    std::atomic<bool> served{false};
    std::thread watcher([&] {
      while (!served.load() && g_signals == 0)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (served.load()) return;
      std::fprintf(stderr,
                   "steermoe serve: shutting down: the running request finishes, queued ones get "
                   "503 (a second Ctrl-C or SIGTERM stops at once)\n");
      srv.drain();
      while (!served.load() && g_signals < 2)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (!served.load()) srv.stop();
    });
    srv.serve();
    served = true;
    watcher.join();
    // Stopped by a signal: the status every interrupted command exits with.
    if (g_signals > 0) throw Interrupted();
  });
}

}  // namespace steermoe::cli
