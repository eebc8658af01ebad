#include "server/http_front.hpp"

#include <arpa/inet.h>
#include <malloc.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "common/error.hpp"
#include "common/sanitizer.hpp"

namespace steermoe::server::http {

namespace {

using Clock = std::chrono::steady_clock;
constexpr Clock::time_point kNever = Clock::time_point::max();
constexpr size_t kPipelineCap = 64 << 10;  // input held while a request is in flight
constexpr size_t kReadChunk = 64 << 10;    // one recv()
constexpr int kReadsPerTurn = 4;           // recv() calls per connection per loop turn
constexpr size_t kTrimAfter = 1 << 20;     // bodies this large: freed memory goes back to the OS

// Gives glibc's free pages back to the OS. Not under AddressSanitizer: its allocator owns the heap
// there and does not intercept malloc_trim, so glibc's would initialise its own arenas from a
// handler thread, and that thread's exit then failed glibc's assertion `a->attached_threads > 0`
// (an abort in about 1 run of 8 of HttpItems.LargeBodiesLeaveMemoryNearBaseline in CI's ASan
// build).
void return_freed_memory_to_os() {
#ifndef STEERMOE_ASAN
  malloc_trim(0);
#endif
}

enum class Phase {
  kIdle,      // between requests: nothing of the next one yet
  kHead,      // part of a head has arrived
  kBody,      // reading the body (or dropping a refused request's small body)
  kHandling,  // a handler thread has the request
  kPending,   // the body comes from a Pending (the engine)
  kClosing,   // a last response is being written; input is dropped
  kLinger,    // our side is shut; input dropped until the client closes or the linger deadline
};

struct Conn {
  uint64_t id = 0;
  int fd = -1;
  std::string peer;
  bool dead = false;
  Phase phase = Phase::kIdle;
  Clock::time_point phase_since{};
  Clock::time_point deadline = kNever;  // of the current phase
  int requests = 0;                     // heads received on this connection
  std::string in;
  size_t head_scan = 0;  // bytes of `in` searched for the end of the head
  std::string out;
  size_t out_sent = 0;
  Clock::time_point write_since = kNever;  // unsent output waiting (or last progress) since
  bool fin = false;                        // the client sent FIN (half-close or close)
  bool read_eof = false;                   // ... and every byte before it has been read
  bool close_after = false;                // close once the current response is written
  // The current request.
  Request req;
  ChunkedDecoder chunks;
  size_t reserved = 0;              // bytes of the body budget held
  std::optional<Response> refusal;  // sent once the (small) body has been read and dropped
  // A response whose body comes later.
  std::shared_ptr<Pending> pending;
  bool committed = false;    // its head is out (streaming, or probed)
  bool chunked_out = false;  // its body is chunked (HTTP/1.1) or ends at close (HTTP/1.0)
  std::string deferred;      // a non-streaming body so far
  std::string content_type;
  std::vector<std::pair<std::string, std::string>> fields;
  Clock::time_point next_probe = kNever;
};

std::string address_text(const sockaddr_storage& ss) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(ss).sin_addr, buf, sizeof buf);
  } else if (ss.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(ss).sin6_addr, buf, sizeof buf);
  }
  return buf;
}

bool unsent(const Conn& c) {
  return c.out_sent < c.out.size();
}

bool in_flight(const Conn& c) {
  return c.phase == Phase::kHandling || c.phase == Phase::kPending;
}

bool wants_input(const Conn& c) {
  if (c.read_eof) return false;
  // While a request is in flight, pipelined input is read up to a cap (then only FIN is watched).
  return !in_flight(c) || c.in.size() < kPipelineCap;
}

// Position just past the empty line that ends a head, searching from `from`; npos if none yet.
size_t find_head_end(const std::string& in, size_t from) {
  for (size_t i = from; i < in.size(); ++i) {
    if (in[i] != '\n' || i == 0) continue;
    if (in[i - 1] == '\n') return i + 1;
    if (in[i - 1] == '\r' && i >= 2 && in[i - 2] == '\n') return i + 1;
  }
  return std::string::npos;
}

}  // namespace

struct Front::Impl {
  FrontOptions o;
  Admit admit;
  Handler handler;
  Observer observer;
  ErrorBody error_body;
  FrontStats stats;
  int listen_fd = -1;
  int wake_fd = -1;
  std::atomic<bool> stopping{false};
  std::atomic<bool> draining{false};
  std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns;
  std::unordered_map<std::string, size_t> per_peer;
  size_t live = 0;
  uint64_t next_id = 1;
  size_t buffered = 0;  // body budget in use
  Clock::time_point now = Clock::now();
  Clock::time_point accept_paused_until{};
  std::string date;
  Clock::time_point date_at{};
  // Handler pool.
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<uint64_t, Request>> tasks;
  std::deque<std::pair<uint64_t, Response>> done;
  bool pool_stop = false;
  std::vector<std::thread> pool;

  ~Impl() {
    if (listen_fd >= 0) ::close(listen_fd);
    if (wake_fd >= 0) ::close(wake_fd);
  }

  void wake() {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(wake_fd, &one, sizeof one);
  }

  // --- output ----------------------------------------------------------------------------

  void queue(Conn& c, std::string_view bytes) {
    if (!unsent(c)) {
      c.out.clear();
      c.out_sent = 0;
      c.write_since = now;
    }
    c.out.append(bytes);
  }

  void flush(Conn& c) {
    while (!c.dead && unsent(c)) {
      const ssize_t n = ::send(c.fd, c.out.data() + c.out_sent, c.out.size() - c.out_sent,
                               MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        c.out_sent += static_cast<size_t>(n);
        c.write_since = now;
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (c.pending) stats.gone++;  // EPIPE, ECONNRESET: the client is gone
      kill(c);
      return;
    }
    if (c.dead) return;
    if (!unsent(c)) {
      c.out.clear();
      c.out_sent = 0;
      c.write_since = kNever;
      if (c.phase == Phase::kClosing) shut(c);
    } else if (c.out_sent > (1u << 20)) {
      c.out.erase(0, c.out_sent);
      c.out_sent = 0;
    }
  }

  const std::string& date_now() {
    if (date.empty() || now - date_at >= std::chrono::seconds(1)) {
      date = http_date();
      date_at = now;
    }
    return date;
  }

  std::string head_bytes(const Conn& c, int status, const std::string& content_type,
                         const std::vector<std::pair<std::string, std::string>>& fields,
                         const std::string& framing, bool close) {
    std::string h =
        fmt::format("HTTP/1.1 {} {}\r\nDate: {}\r\n", status, reason_phrase(status), date_now());
    if (!content_type.empty()) h += "Content-Type: " + content_type + "\r\n";
    h += framing;
    if (close) {
      h += "Connection: close\r\n";
    } else if (c.req.minor == 0) {
      h += "Connection: keep-alive\r\n";
    }
    for (const auto& [k, v] : fields) h += k + ": " + v + "\r\n";
    return h + "\r\n";
  }

  // A complete response (status, length and body known).
  void send_response(Conn& c, Response r) {
    if (observer) observer(c.req, r.status);
    const bool close = r.close || !c.req.keep_alive || c.close_after;
    if (close) c.close_after = true;
    queue(c, head_bytes(c, r.status, r.content_type, r.fields,
                        fmt::format("Content-Length: {}\r\n", r.body.size()), close));
    if (c.req.method != "HEAD") queue(c, r.body);
    flush(c);
  }

  Response error_response(int status, const std::string& message) {
    Response r;
    r.status = status;
    r.body = error_body ? error_body(status, message) : message;
    return r;
  }

  // Refuses the current request and closes the connection: after lingering (reading and
  // dropping what the client still sends, so that our response is not lost to a reset) unless
  // the client is the problem (a deadline passed).
  void fail_request(Conn& c, int status, const std::string& message, bool linger = true) {
    Response r = error_response(status, message);
    r.close = true;
    if (status == 503) r.fields.emplace_back("Retry-After", "1");
    release(c);
    c.in.clear();
    c.phase = Phase::kClosing;
    c.deadline = kNever;
    if (!linger) c.read_eof = true;  // closed as soon as the response is out
    send_response(c, std::move(r));
  }

  // --- connection life ---------------------------------------------------------------------

  void release(Conn& c) {
    buffered -= std::min(buffered, c.reserved);
    c.reserved = 0;
  }

  void kill(Conn& c) {
    if (c.dead) return;
    if (c.pending) {
      c.pending->cancel();
      c.pending.reset();
    }
    release(c);
    ::close(c.fd);
    c.fd = -1;
    c.dead = true;
    if (--per_peer[c.peer] == 0) per_peer.erase(c.peer);
    --live;
    stats.open--;
  }

  // Our side is done: shut down writing, then wait for the client's FIN (bounded).
  void shut(Conn& c) {
    if (c.read_eof) {
      kill(c);
      return;
    }
    ::shutdown(c.fd, SHUT_WR);
    c.phase = Phase::kLinger;
    c.deadline = now + std::chrono::milliseconds(o.linger_ms);
  }

  void close_quietly(Conn& c) {
    c.in.clear();
    c.close_after = true;
    c.phase = Phase::kClosing;
    c.deadline = kNever;
    if (!unsent(c)) shut(c);
  }

  bool evictable(const Conn& c) const { return !c.dead && !in_flight(c); }

  // Under a cap, a connection of that address (or any, for the total cap) without a request
  // in flight makes room: the one whose request has been arriving longest (a slow sender),
  // else the one idle longest; false if there is none.
  bool make_room(const std::string& peer) {
    const auto it = per_peer.find(peer);
    const bool over_peer = it != per_peer.end() && it->second >= o.max_connections_per_address;
    const bool over_total = live >= o.max_connections;
    if (!over_peer && !over_total) return true;
    Conn* victim = nullptr;
    for (auto& [id, c] : conns) {
      if (!evictable(*c) || (over_peer && c->peer != peer)) continue;
      const auto rank = [](const Conn& x) {
        return std::make_pair(x.phase == Phase::kIdle ? 1 : 0, x.phase_since);
      };
      if (!victim || rank(*c) < rank(*victim)) victim = c.get();
    }
    if (!victim) return false;
    stats.evicted++;
    kill(*victim);
    return true;
  }

  void refuse(int fd) {
    stats.refused++;
    const std::string body = error_body ? error_body(503, "too many connections, retry later")
                                        : std::string("too many connections");
    const std::string msg = fmt::format(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: "
        "{}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n{}",
        body.size(), body);
    [[maybe_unused]] const ssize_t n =
        ::send(fd, msg.data(), msg.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    ::close(fd);
  }

  void accept_ready() {
    for (;;) {
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      const int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len,
                               SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR) continue;
        // Out of descriptors: the listening socket stays readable; wait instead of spinning.
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          accept_paused_until = now + std::chrono::milliseconds(100);
        }
        return;
      }
      const std::string peer = address_text(ss);
      if (!make_room(peer)) {
        refuse(fd);
        continue;
      }
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      auto c = std::make_unique<Conn>();
      c->id = next_id++;
      c->fd = fd;
      c->peer = peer;
      c->phase_since = now;
      c->deadline = now + std::chrono::milliseconds(o.head_timeout_ms);  // the first head
      ++per_peer[peer];
      ++live;
      stats.accepted++;
      stats.open++;
      conns.emplace(c->id, std::move(c));
    }
  }

  // --- input -------------------------------------------------------------------------------

  void read_input(Conn& c) {
    for (int turn = 0; turn < kReadsPerTurn && !c.dead && wants_input(c); ++turn) {
      char buf[kReadChunk];
      const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
      if (n > 0) {
        // Closing or lingering: what the client still sends is dropped.
        if (c.phase != Phase::kClosing && c.phase != Phase::kLinger) {
          c.in.append(buf, static_cast<size_t>(n));
        }
        if (static_cast<size_t>(n) < sizeof buf) break;
        continue;
      }
      if (n == 0) {
        c.read_eof = true;
        on_fin(c);
        if (c.phase == Phase::kLinger) kill(c);
        return;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (c.pending) stats.gone++;
      kill(c);  // reset by the client
      return;
    }
  }

  void on_fin(Conn& c) {
    if (c.fin) return;
    c.fin = true;
    // A client that half-closed may still wait for its answer, or may have gone for good:
    // only a write tells (a closed socket answers it with a reset). Probe at once.
    if (c.phase == Phase::kPending) c.next_probe = now;
  }

  // Parses and handles what the input holds, as far as it goes.
  void advance(Conn& c) {
    while (!c.dead) {
      if (c.phase == Phase::kIdle || c.phase == Phase::kHead) {
        if (!next_head(c)) return;
      } else if (c.phase == Phase::kBody) {
        if (!read_body(c)) return;
      } else {
        return;
      }
    }
  }

  bool next_head(Conn& c) {
    if (c.in.empty()) {
      if (c.read_eof && c.phase == Phase::kIdle) close_quietly(c);
      return false;
    }
    if (c.phase == Phase::kIdle) {
      c.req = Request{};  // a refusal of this head must not name the previous request's path
      c.phase = Phase::kHead;
      c.phase_since = now;
      // The first head's deadline runs from the connection's start.
      if (c.requests > 0) c.deadline = now + std::chrono::milliseconds(o.head_timeout_ms);
      c.head_scan = 0;
    }
    const size_t end = find_head_end(c.in, c.head_scan > 2 ? c.head_scan - 2 : 0);
    c.head_scan = c.in.size();
    HeadResult h;
    if (end != std::string::npos || c.in.size() > o.head.max_head_bytes) {
      h = parse_head(c.in, o.head, c.req);
    }
    if (h.state == ParseState::kError) {
      fail_request(c, h.error.status, h.error.message);
      return false;
    }
    if (h.state == ParseState::kIncomplete) {
      if (c.read_eof) close_quietly(c);  // half a head, then nothing more
      return false;
    }
    c.in.erase(0, h.length);
    c.head_scan = 0;
    ++c.requests;
    return admit_request(c);
  }

  // The head is complete: refuse it now (unknown path, key, size) or read its body.
  bool admit_request(Conn& c) {
    const Request& r = c.req;
    const bool has_body = r.chunked || r.body_length_hint() > 0;
    if (r.content_length && *r.content_length > o.max_body_bytes) {
      fail_request(c, 413,
                   fmt::format("the request body ({} bytes) exceeds the limit of {} bytes",
                               *r.content_length, o.max_body_bytes));
      return false;
    }
    std::optional<Response> refusal = admit ? admit(r) : std::nullopt;
    if (refusal) {
      if (!has_body) {
        send_response(c, std::move(*refusal));
        finish_request(c);
        return !c.dead;
      }
      // A small body is read and dropped, so the connection can go on; a large one (or one the
      // client waits to send until told to, Expect: 100-continue) is not read: close.
      if (r.chunked || r.expect_continue || *r.content_length > o.discard_body_max) {
        refusal->close = true;
        c.in.clear();
        c.phase = Phase::kClosing;
        send_response(c, std::move(*refusal));
        return false;
      }
      c.refusal = std::move(refusal);
    }
    if (!has_body) {
      dispatch(c);
      return false;
    }
    const size_t want = r.chunked ? 0 : static_cast<size_t>(*r.content_length);
    if (!c.refusal && buffered + want > o.max_buffered_bytes) {
      fail_request(c, 503, "the server holds too many request bodies, retry later");
      return false;
    }
    buffered += want;
    c.reserved = want;
    if (r.expect_continue) queue(c, "HTTP/1.1 100 Continue\r\n\r\n");
    c.req.body.reserve(want);
    c.chunks = ChunkedDecoder{};
    c.phase = Phase::kBody;
    c.phase_since = now;
    c.deadline = now + std::chrono::milliseconds(o.body_timeout_ms);
    return true;
  }

  bool read_body(Conn& c) {
    Request& r = c.req;
    if (!r.chunked) {
      const size_t need = static_cast<size_t>(*r.content_length) - r.body.size();
      const size_t n = std::min(need, c.in.size());
      r.body.append(c.in, 0, n);
      c.in.erase(0, n);
      if (r.body.size() < *r.content_length) {
        if (c.read_eof) close_quietly(c);
        return false;
      }
    } else {
      size_t pos = 0;
      HeadError err;
      const size_t before = r.body.size();
      const ParseState s = c.chunks.feed(c.in, pos, r.body, o.max_body_bytes, err);
      c.in.erase(0, pos);
      const size_t grown = r.body.size() - before;
      buffered += grown;
      c.reserved += grown;
      if (s == ParseState::kError) {
        fail_request(c, err.status, err.message);
        return false;
      }
      if (buffered > o.max_buffered_bytes) {
        fail_request(c, 503, "the server holds too many request bodies, retry later");
        return false;
      }
      if (s == ParseState::kIncomplete) {
        if (c.read_eof) close_quietly(c);
        return false;
      }
    }
    if (c.refusal) {
      Response refusal = std::move(*c.refusal);
      c.refusal.reset();
      r.body.clear();
      release(c);
      send_response(c, std::move(refusal));
      finish_request(c);
      return !c.dead;
    }
    dispatch(c);
    return false;
  }

  void dispatch(Conn& c) {
    std::string body = std::move(c.req.body);
    c.req.body = std::string();
    Request task = c.req;
    task.body = std::move(body);
    c.phase = Phase::kHandling;
    c.phase_since = now;
    c.deadline = kNever;
    {
      std::lock_guard lock(mu);
      tasks.emplace_back(c.id, std::move(task));
    }
    cv.notify_one();
  }

  // The current request is answered (its bytes queued): the next one, or close.
  void finish_request(Conn& c) {
    release(c);
    c.refusal.reset();
    c.pending.reset();
    c.committed = false;
    c.deferred.clear();
    c.next_probe = kNever;
    if (c.dead) return;
    if (c.close_after) {
      c.in.clear();
      c.phase = Phase::kClosing;
      c.deadline = kNever;
      if (!unsent(c)) shut(c);
      return;
    }
    c.phase = Phase::kIdle;
    c.phase_since = now;
    c.deadline = now + std::chrono::milliseconds(o.keep_alive_ms);
  }

  // --- responses from handlers and the engine ----------------------------------------------

  void collect_done() {
    std::deque<std::pair<uint64_t, Response>> batch;
    {
      std::lock_guard lock(mu);
      batch.swap(done);
    }
    for (auto& [id, r] : batch) {
      const auto it = conns.find(id);
      Conn* c = it == conns.end() ? nullptr : it->second.get();
      if (c == nullptr || c->dead || c->phase != Phase::kHandling) {
        if (r.pending) r.pending->cancel();  // nobody to answer
        continue;
      }
      release(*c);  // the handler freed the body
      if (!r.pending) {
        send_response(*c, std::move(r));
        finish_request(*c);
        continue;
      }
      c->pending = std::move(r.pending);
      c->content_type = std::move(r.content_type);
      c->fields = std::move(r.fields);
      c->committed = false;
      c->deferred.clear();
      c->phase = Phase::kPending;
      c->phase_since = now;
      if (c->pending->streaming()) commit(*c, 200);
      if (c->fin) c->next_probe = now;
      pull(*c);
    }
  }

  // Sends the head of a pending response; its body follows as it comes.
  void commit(Conn& c, int status) {
    if (observer) observer(c.req, status);
    c.chunked_out = c.req.minor >= 1;
    // HTTP/1.0 has no chunked coding: the body ends when the connection closes.
    if (!c.chunked_out || !c.req.keep_alive) c.close_after = true;
    std::vector<std::pair<std::string, std::string>> fields = c.fields;
    if (c.pending && c.pending->streaming()) fields.emplace_back("Cache-Control", "no-cache");
    queue(c, head_bytes(c, status, c.content_type, fields,
                        c.chunked_out ? "Transfer-Encoding: chunked\r\n" : "", c.close_after));
    c.committed = true;
  }

  void write_body(Conn& c, std::string_view bytes) {
    if (bytes.empty()) return;
    if (c.chunked_out) {
      queue(c, fmt::format("{:x}\r\n", bytes.size()));
      queue(c, bytes);
      queue(c, "\r\n");
    } else {
      queue(c, bytes);
    }
  }

  void pull(Conn& c) {
    std::string chunk;
    const bool complete = c.pending->pull(chunk);
    if (c.committed) {
      write_body(c, chunk);
    } else {
      c.deferred += chunk;
    }
    if (complete) {
      if (!c.committed) {
        Response r;
        r.status = c.pending->status();
        r.content_type = c.content_type;
        r.fields = std::move(c.fields);
        r.body = std::move(c.deferred);
        c.pending.reset();
        send_response(c, std::move(r));
      } else {
        if (c.chunked_out) queue(c, "0\r\n\r\n");
        c.pending.reset();
      }
      finish_request(c);
    }
    flush(c);
  }

  void probe(Conn& c) {
    stats.probes++;
    if (!c.committed) {
      commit(c, 200);  // the head itself is the probe
    } else {
      write_body(c, c.pending->filler());
    }
    c.next_probe = now + std::chrono::milliseconds(o.probe_interval_ms);
    flush(c);
  }

  // --- timers ------------------------------------------------------------------------------

  void check_timers(Conn& c) {
    if (unsent(c) && now - c.write_since >= std::chrono::milliseconds(o.write_timeout_ms)) {
      stats.write_stalled++;
      if (c.pending) stats.gone++;
      kill(c);
      return;
    }
    if (c.phase == Phase::kPending && c.fin && now >= c.next_probe) {
      probe(c);
      return;
    }
    if (now < c.deadline) return;
    if (c.phase == Phase::kHead || c.phase == Phase::kBody) {
      stats.timed_out++;
      fail_request(c, 408,
                   c.phase == Phase::kHead ? "the request head did not arrive in time"
                                           : "the request body did not arrive in time",
                   /*linger=*/false);
    } else if (c.phase == Phase::kIdle && !unsent(c)) {
      kill(c);  // keep-alive idle (or a connection that never sent anything)
    } else if (c.phase == Phase::kLinger) {
      kill(c);
    }
  }

  int next_timeout_ms() const {
    Clock::time_point next = now + std::chrono::milliseconds(1000);
    for (const auto& [id, c] : conns) {
      if (c->dead) continue;
      next = std::min(next, c->deadline);
      if (c->phase == Phase::kPending && c->fin) next = std::min(next, c->next_probe);
      if (unsent(*c)) {
        next = std::min(next, c->write_since + std::chrono::milliseconds(o.write_timeout_ms));
      }
    }
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count();
    return static_cast<int>(std::clamp<int64_t>(ms + 1, 0, 1000));
  }

  short events(const Conn& c) const {
    short ev = 0;
    if (unsent(c)) ev |= POLLOUT;
    if (wants_input(c)) ev |= POLLIN;
    if (!c.fin) ev |= POLLRDHUP;
    return ev;
  }

  void on_events(Conn& c, short revents) {
    if (revents & POLLNVAL) {
      kill(c);
      return;
    }
    if (revents & POLLIN) read_input(c);
    if (c.dead) return;
    if (revents & POLLRDHUP) on_fin(c);
    if (revents & (POLLERR | POLLHUP)) {
      // Reset, or both directions shut: nothing more can be said.
      if (c.pending) stats.gone++;
      kill(c);
      return;
    }
    if (revents & POLLOUT) flush(c);
    if (!c.dead) advance(c);
  }

  // --- the loop ----------------------------------------------------------------------------

  // Draining: once nothing is being answered (every connection between requests with its output
  // written, no handler busy), the idle connections close and serve() returns. A connection that
  // is still sending a request is waited for (its deadlines bound it).
  bool drained() {
    {
      std::lock_guard lock(mu);
      if (!tasks.empty() || !done.empty()) return false;
    }
    for (const auto& [id, c] : conns)
      if (!c->dead && (c->phase != Phase::kIdle || !c->in.empty() || c->out_sent < c->out.size()))
        return false;
    return true;
  }

  void turn() {
    if (draining.load() && listen_fd >= 0) {  // new connections are refused from here on
      ::close(listen_fd);
      listen_fd = -1;
    }
    std::vector<pollfd> fds;
    std::vector<Conn*> order;
    fds.push_back({wake_fd, POLLIN, 0});
    fds.push_back({listen_fd, static_cast<short>(now >= accept_paused_until ? POLLIN : 0), 0});
    for (auto& [id, c] : conns) {
      fds.push_back({c->fd, events(*c), 0});
      order.push_back(c.get());
    }
    const int n = ::poll(fds.data(), fds.size(), next_timeout_ms());
    now = Clock::now();
    if (n < 0) return;  // EINTR
    if (fds[0].revents & POLLIN) {
      uint64_t count = 0;
      [[maybe_unused]] const ssize_t r = ::read(wake_fd, &count, sizeof count);
    }
    collect_done();
    for (size_t i = 0; i < order.size(); ++i) {
      Conn& c = *order[i];
      if (!c.dead && fds[i + 2].revents) on_events(c, fds[i + 2].revents);
    }
    for (auto& [id, c] : conns) {
      if (!c->dead && c->phase == Phase::kPending) pull(*c);
      if (!c->dead) check_timers(*c);
      // A response just finished: pipelined requests already read are next.
      if (!c->dead && (c->phase == Phase::kIdle || c->phase == Phase::kHead) &&
          (!c->in.empty() || c->read_eof)) {
        advance(*c);
      }
    }
    if (fds[1].revents & POLLIN) accept_ready();
    // A closed connection's buffers may hold a large body's capacity: freed here, after the pool
    // thread's trim, glibc would keep those pages (RSS at the peak) until some later trim.
    bool large_freed = false;
    std::erase_if(conns, [&](const auto& kv) {
      const Conn& c = *kv.second;
      if (!c.dead) return false;
      large_freed = large_freed || c.in.capacity() >= kTrimAfter ||
                    c.out.capacity() >= kTrimAfter || c.deferred.capacity() >= kTrimAfter;
      return true;
    });
    if (large_freed) return_freed_memory_to_os();
  }

  void pool_loop() {
    for (;;) {
      std::pair<uint64_t, Request> task;
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return pool_stop || !tasks.empty(); });
        if (pool_stop) return;
        task = std::move(tasks.front());
        tasks.pop_front();
      }
      const size_t body_bytes = task.second.body.size();
      Response r;
      try {
        r = handler(task.second);
      } catch (const std::exception& e) {
        r = error_response(500, std::string("internal error: ") + e.what());
      } catch (...) {
        r = error_response(500, "internal error");
      }
      // Free the body here; a large one's pages go back to the OS (glibc keeps freed memory
      // of each thread's arena otherwise, and RSS would stay at its peak).
      task.second = Request{};
      if (body_bytes >= kTrimAfter) return_freed_memory_to_os();
      {
        std::lock_guard lock(mu);
        done.emplace_back(task.first, std::move(r));
      }
      wake();
    }
  }
};

Front::Front(FrontOptions options, Admit admit, Handler handler, Observer observer,
             ErrorBody error_body)
    : impl_(std::make_unique<Impl>()) {
  impl_->o = std::move(options);
  impl_->admit = std::move(admit);
  impl_->handler = std::move(handler);
  impl_->observer = std::move(observer);
  impl_->error_body = std::move(error_body);
  impl_->wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (impl_->wake_fd < 0) fail("serve", "eventfd", "cannot create ({})", std::strerror(errno));
}

Front::~Front() {
  stop();
}

int Front::bind() {
  Impl& s = *impl_;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(s.o.port);
  const int rc =
      ::getaddrinfo(s.o.host.empty() ? nullptr : s.o.host.c_str(), port.c_str(), &hints, &found);
  if (rc != 0) fail("serve", "--host", "cannot resolve '{}' ({})", s.o.host, gai_strerror(rc));
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr && s.listen_fd < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) {
      s.listen_fd = fd;
    } else {
      why = std::strerror(errno);
      ::close(fd);
    }
  }
  ::freeaddrinfo(found);
  if (s.listen_fd < 0) {
    fail("serve", s.o.port == 0 ? "--host" : "--port",
         "could not bind {}:{} ({}; in use, or not a local address?)", s.o.host, s.o.port, why);
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getsockname(s.listen_fd, reinterpret_cast<sockaddr*>(&ss), &len);
  return ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6&>(ss).sin6_port
                                        : reinterpret_cast<sockaddr_in&>(ss).sin_port);
}

void Front::serve() {
  Impl& s = *impl_;
  SM_ASSERT(s.listen_fd >= 0);
  for (int i = 0; i < std::max(1, s.o.handler_threads); ++i) {
    s.pool.emplace_back([&s] { s.pool_loop(); });
  }
  while (!s.stopping.load()) {
    s.turn();
    if (s.draining.load() && s.drained()) break;
  }
  for (auto& [id, c] : s.conns) s.kill(*c);
  s.conns.clear();
  {
    std::lock_guard lock(s.mu);
    s.pool_stop = true;
  }
  s.cv.notify_all();
  for (std::thread& t : s.pool) t.join();
  s.pool.clear();
  for (auto& [id, r] : s.done) {
    if (r.pending) r.pending->cancel();
  }
  s.done.clear();
}

void Front::drain() {
  if (!impl_) return;
  impl_->draining = true;
  impl_->wake();
}

void Front::stop() {
  if (!impl_) return;
  impl_->stopping = true;
  impl_->wake();
}

void Front::wake() {
  impl_->wake();
}

const FrontStats& Front::stats() const {
  return impl_->stats;
}

}  // namespace steermoe::server::http
