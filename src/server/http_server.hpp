// `steermoe serve`: the OpenAI-compatible HTTP server (its own HTTP/1.1 front end,
// http_front.hpp) around one engine worker.
//
// Entry point: HttpServer. Endpoints: POST /v1/completions, POST /v1/chat/completions,
// GET /v1/models, GET /health, POST /tokenize, POST /detokenize, GET /tokenizer_info,
// GET /metrics. See src/server/README.md.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "model/weights.hpp"
#include "server/worker.hpp"
#include "tokenizer/tokenizer.hpp"

namespace steermoe::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                        // 0: any free port (bind() returns it)
  std::string api_key;                    // non-empty: every endpoint but /health needs Bearer KEY
  size_t max_body_bytes = 8u << 20;       // larger bodies: 413, refused by Content-Length
  size_t max_buffered_bytes = 64u << 20;  // request bodies held at once, all clients: beyond, 503
  int read_timeout_s = 10;   // a request's whole head must arrive within this (408 after)
  int body_timeout_s = 30;   // ... and its whole body within this, from the end of the head
  int write_timeout_s = 10;  // a client that takes no bytes this long is dropped
  int keep_alive_s = 5;      // an idle connection is closed after this
  int http_threads = 0;      // request handler threads (JSON, tokenization); 0: 2
  size_t max_connections = 256;
  size_t max_connections_per_address = 64;
  int probe_interval_ms = 1000;      // probes of a half-closed client waiting for its response
  std::string model_name;            // reported by /v1/models and in responses
  std::string chat_template;         // Jinja source; empty: ChatML fallback (with a warning)
  std::string chat_template_source;  // where it came from (a file, the model), for errors
  bool quiet = false;                // no request log on stderr
  WorkerOptions worker;
};

class HttpServer {
 public:
  // Builds the worker (default engine) and parses the chat template; throws steermoe::Error.
  HttpServer(const model::Model& model, const tokenizer::Tokenizer& tok, ServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the listening socket; returns the port (useful with port 0). Throws on failure.
  int bind();
  // Serves until stop(); call after bind().
  void serve();
  // Any thread: a graceful stop. Queued requests end at once as 503 (the server is shutting
  // down), the running one finishes and its response is written, new connections are refused,
  // then serve() returns.
  void drain();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ChatML, used when the model has no chat template.
extern const char* const kChatMlTemplate;

}  // namespace steermoe::server
