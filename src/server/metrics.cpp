#include "server/metrics.hpp"

#include <fmt/format.h>

#include <set>

namespace steermoe::server {

void Metrics::count(const std::string& path, int status) {
  static const std::set<std::string> known{"/v1/completions",
                                           "/v1/chat/completions",
                                           "/v1/models",
                                           "/health",
                                           "/tokenize",
                                           "/detokenize",
                                           "/tokenizer_info",
                                           "/metrics",
                                           "/completions",
                                           "/chat/completions",
                                           "/models",
                                           "/v1/tokenize",
                                           "/v1/detokenize",
                                           "/v1/models/{id}",
                                           "/",
                                           "/steermoe/cache"};
  std::string key = "other";
  if (known.count(path)) {
    key = path;
  } else if (path.rfind("/v1/models/", 0) == 0) {
    key = "/v1/models/{id}";
  } else if (path.rfind("/static/", 0) == 0) {
    key = "/static/";
  }
  std::lock_guard lock(mu);
  requests[{key, status}]++;
}

void Metrics::account(const Job& job) {
  prompt_tokens += static_cast<int64_t>(job.prompt.size());
  generated_tokens += static_cast<int64_t>(job.generated.size());
  decode_tokens += job.decoded;
  decode_us += static_cast<int64_t>(job.decode_ms * 1e3);
  prompt_us += static_cast<int64_t>(job.prompt_ms * 1e3);
  copies_demand += job.copies.demand;
  copies_prefetch += job.copies.prefetch;
}

std::string Metrics::text(const Worker& worker, const http::FrontStats& front) {
  std::string out;
  auto line = [&](const char* name, const char* type, const char* help, const std::string& v) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, v);
  };
  auto count_line = [&](const char* name, const char* help, int64_t v) {
    line(name, "counter", help, std::to_string(v));
  };
  out += "# HELP steermoe_requests_total HTTP requests answered, by path and status.\n";
  out += "# TYPE steermoe_requests_total counter\n";
  {
    std::lock_guard lock(mu);
    for (const auto& [key, n] : requests) {
      out += fmt::format("steermoe_requests_total{{path=\"{}\",status=\"{}\"}} {}\n", key.first,
                         key.second, n);
    }
  }
  count_line("steermoe_rejected_total", "Requests refused with 503 (queue full).", rejected);
  count_line("steermoe_cancelled_total", "Requests cancelled because their client went away.",
             cancelled);
  count_line("steermoe_prompt_tokens_total", "Prompt tokens processed.", prompt_tokens);
  count_line("steermoe_generated_tokens_total", "Tokens generated.", generated_tokens);
  count_line("steermoe_decode_tokens_total", "Tokens fed back through decode.", decode_tokens);
  line("steermoe_decode_seconds_total", "counter", "Time spent in decode.",
       fmt::format("{:.6f}", static_cast<double>(decode_us.load()) * 1e-6));
  line("steermoe_prompt_seconds_total", "counter", "Time spent processing prompts.",
       fmt::format("{:.6f}", static_cast<double>(prompt_us.load()) * 1e-6));
  const int64_t dt = decode_tokens.load();
  line("steermoe_ms_per_token", "gauge", "Mean decode milliseconds per token since start.",
       fmt::format(
           "{:.4f}",
           dt > 0 ? static_cast<double>(decode_us.load()) * 1e-3 / static_cast<double>(dt) : 0.0));
  out +=
      "# HELP steermoe_copies_total Expert copies by kind (from the link; 0 with every expert "
      "resident).\n# TYPE steermoe_copies_total counter\n";
  out += fmt::format("steermoe_copies_total{{kind=\"demand\"}} {}\n", copies_demand.load());
  out += fmt::format("steermoe_copies_total{{kind=\"prefetch\"}} {}\n", copies_prefetch.load());
  line("steermoe_queue_depth", "gauge", "Requests waiting for the engine.",
       std::to_string(worker.queue_depth()));
  line("steermoe_engine_busy", "gauge", "1 while the engine runs a request.",
       worker.busy() ? "1" : "0");
  line("steermoe_connections_open", "gauge", "Client connections open.",
       std::to_string(front.open.load()));
  count_line("steermoe_connections_total", "Client connections accepted.", front.accepted);
  count_line("steermoe_connections_evicted_total",
             "Connections closed to make room under --max-connections(-per-ip).", front.evicted);
  count_line("steermoe_connections_refused_total",
             "Connections turned away at a cap with none to close (503).", front.refused);
  count_line("steermoe_requests_timed_out_total",
             "Requests whose head or body did not arrive in time (408).", front.timed_out);
  count_line("steermoe_write_stalled_total",
             "Connections dropped because the client took no bytes for --timeout s.",
             front.write_stalled);
  count_line("steermoe_probes_total", "Probe writes to half-closed clients waiting for a response.",
             front.probes);
  count_line("steermoe_clients_gone_total",
             "Clients found gone while their response was being produced.", front.gone);
  return out;
}

}  // namespace steermoe::server
