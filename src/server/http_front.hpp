// The server's HTTP/1.1 front end: one I/O thread multiplexing every connection with poll(),
// a small pool of handler threads for complete requests, and bodies produced later by the
// engine (`Pending`). It owns every connection-level rule, because each one needs state across
// reads that an HTTP library's per-read callbacks do not give (src/server/README.md says why no
// library): deadlines for a request's whole head and whole body (a client trickling bytes is
// dropped), caps on connections per address and in total (the oldest connection not waiting
// for a response makes room), pipelined requests answered in order, a client that half-closes
// still answered (and one that closed for good detected by a probe write, so the engine stops),
// bodies refused by their declared length before they are read, the body of a refused request
// never parsed as a request, no chunked responses to HTTP/1.0 clients.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/http_parser.hpp"

namespace steermoe::server::http {

// A response body another thread produces (the engine's tokens). Called on the I/O thread only;
// the producer calls Front::wake() when it has more.
class Pending {
 public:
  virtual ~Pending() = default;
  // true: the head goes out at once and body bytes as they come (server-sent events); false:
  // one body at the end, whose status and length are known then.
  virtual bool streaming() const = 0;
  // Appends the bytes ready since the last call; true once the body is complete.
  virtual bool pull(std::string& out) = 0;
  // The status of a non-streaming body, read once pull() returned true.
  virtual int status() const { return 200; }
  // Bytes that may be inserted into the body at any point without changing its meaning (JSON:
  // white space; SSE: a comment line): written to find out whether a client that half-closed
  // is still there (a closed socket answers with a reset).
  virtual std::string_view filler() const = 0;
  // The client is gone: stop producing.
  virtual void cancel() = 0;
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> fields;  // extra header fields
  std::string body;
  std::shared_ptr<Pending> pending;  // set: the body comes from it (content_type applies)
  bool close = false;                // close the connection after this response
};

struct FrontOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                        // 0: any free port
  size_t max_body_bytes = 8u << 20;       // larger declared or decoded bodies: 413
  size_t max_buffered_bytes = 64u << 20;  // bodies held at once, all connections: beyond, 503
  int head_timeout_ms = 10000;            // a request's whole head (from its first byte)
  int body_timeout_ms = 30000;            // a request's whole body (from the end of its head)
  int write_timeout_ms = 10000;           // a client that takes nothing this long is dropped
  int keep_alive_ms = 5000;               // idle between requests
  int probe_interval_ms = 1000;           // probes of a half-closed client waiting for a body
  int linger_ms = 2000;                   // reading and dropping after a refusal, before close
  size_t max_connections = 256;
  size_t max_connections_per_address = 64;
  size_t discard_body_max = 64 << 10;  // a refused request's smaller body is read and dropped
  int handler_threads = 2;
  HeadLimits head;
};

// Counters for /metrics.
struct FrontStats {
  std::atomic<int64_t> accepted{0};
  std::atomic<int64_t> open{0};
  std::atomic<int64_t> evicted{0};    // closed to make room under a connection cap
  std::atomic<int64_t> refused{0};    // turned away at a cap with nobody to evict (503)
  std::atomic<int64_t> timed_out{0};  // head or body deadline passed (408), or keep-alive idle
  std::atomic<int64_t> write_stalled{0};
  std::atomic<int64_t> probes{0};  // probe writes to half-closed clients
  std::atomic<int64_t> gone{0};    // clients found gone while their response was pending
};

class Front {
 public:
  // On the I/O thread, once the head is parsed, before the body is read: a response refusing
  // the request (unknown path, wrong method, missing API key), or nullopt to read the body and
  // hand the request to a handler. Must be quick.
  using Admit = std::function<std::optional<Response>(const Request&)>;
  // On a handler thread: the response to a complete request. Exceptions become 500s.
  using Handler = std::function<Response(Request&)>;
  // When a response's status is known, before its bytes are queued (metrics, request log).
  // Requests that could not be parsed come with an empty path.
  using Observer = std::function<void(const Request&, int status)>;
  // The body of the front end's own refusals (malformed requests, 408, 413, 503): the
  // server's error object. Called on any thread.
  using ErrorBody = std::function<std::string(int status, const std::string& message)>;

  Front(FrontOptions options, Admit admit, Handler handler, Observer observer,
        ErrorBody error_body);
  ~Front();
  Front(const Front&) = delete;
  Front& operator=(const Front&) = delete;

  // Binds and listens; returns the port. Throws steermoe::Error naming --host/--port.
  int bind();
  // Runs the I/O loop on this thread until stop().
  void serve();
  // Any thread: accept no more connections, let every response in progress be written, then
  // close the idle connections and return from serve() (a graceful stop; stop() still cuts).
  void drain();
  // Any thread: serve() returns soon; pending bodies are cancelled.
  void stop();
  // Any thread: some pending body has more bytes.
  void wake();
  const FrontStats& stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace steermoe::server::http
