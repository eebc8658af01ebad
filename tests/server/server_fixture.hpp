// Shared by the server tests: the shipped tiny model loaded once, a server on a free loopback
// port running on its own thread, a JSON POST helper, and a raw-socket client for the HTTP-level
// tests (bytes exactly as written, half-close, pipelining, slow clients).
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../json_test_util.hpp"
#include "../sanitizer.hpp"
#include "engine/engine.hpp"
#include "server/http_server.hpp"
#include "server/protocol.hpp"
#include "trace/calibration_file.hpp"

namespace steermoe::server::test {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

inline const fs::path kModel = fs::path(STEERMOE_SOURCE_DIR) / "models" / "steer-olmoe-tiny";

struct Shared {
  std::unique_ptr<model::Model> model;
  std::unique_ptr<tokenizer::Tokenizer> tok;
  std::unique_ptr<policy::Calibration> calib;
};

inline Shared& shared() {
  static Shared s = [] {
    Shared x;
    x.model = model::Model::load(kModel);
    x.tok = std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::load(kModel));
    x.calib =
        std::make_unique<policy::Calibration>(trace::read_calibration(kModel / "calib.smcal"));
    return x;
  }();
  return s;
}

// A server on a free loopback port, serving on its own thread.
class Running {
 public:
  // `offload`: the server's --policy, --cache and --link (the tiny model's calibration added).
  explicit Running(ServerOptions o = {}, schedule::OffloadRequest offload = {}) {
    Shared& s = shared();
    o.host = "127.0.0.1";
    o.port = 0;
    o.quiet = true;
    if (o.model_name.empty()) o.model_name = "steer-olmoe-tiny";
    offload.calibration = std::shared_ptr<const policy::Calibration>(
        s.calib.get(), [](const policy::Calibration*) {});
    offload.calibration_source = "calib.smcal";
    o.worker.engine.offload = engine::resolve_offload(*s.model, offload);
    server_ = std::make_unique<HttpServer>(*s.model, *s.tok, o);
    port_ = server_->bind();
    thread_ = std::thread([this] {
      server_->serve();
      served_ = true;
    });
  }
  // A server of another model; `o.worker` set by the caller.
  Running(const model::Model& model, const tokenizer::Tokenizer& tok, ServerOptions o) {
    o.host = "127.0.0.1";
    o.port = 0;
    o.quiet = true;
    server_ = std::make_unique<HttpServer>(model, tok, o);
    port_ = server_->bind();
    thread_ = std::thread([this] {
      server_->serve();
      served_ = true;
    });
  }
  ~Running() {
    server_->stop();
    thread_.join();
  }
  int port() const { return port_; }
  // The graceful stop; true once serve() has returned (within `timeout`).
  bool drain_and_wait(std::chrono::milliseconds timeout) {
    server_->drain();
    return wait_served(timeout);
  }
  void drain() { server_->drain(); }
  bool wait_served(std::chrono::milliseconds timeout) {
    const auto until = Clock::now() + timeout;
    while (!served_.load() && Clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return served_.load();
  }
  std::unique_ptr<httplib::Client> client(int timeout_s = 30) const {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", port_);
    c->set_read_timeout(timeout_s, 0);
    c->set_write_timeout(timeout_s, 0);
    c->set_connection_timeout(5, 0);
    c->set_tcp_nodelay(true);
    return c;
  }

 private:
  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
  std::atomic<bool> served_{false};
  std::thread thread_;
};

inline json post(const Running& r, const std::string& path, const json& body,
                 int* status = nullptr) {
  auto c = r.client();
  auto res = c->Post(path, dump(body), "application/json");
  EXPECT_TRUE(res) << "no response from " << path;
  if (!res) return json();
  if (status) *status = res->status;
  return steermoe::parse_ordered_json_or_discarded(res->body);
}

inline std::vector<int32_t> ids_of(const std::string& text) {
  return shared().tok->encode(text, {.parse_special = false});
}

inline size_t rss_kb() {
  std::ifstream in("/proc/self/statm");
  size_t pages = 0, resident = 0;
  in >> pages >> resident;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE)) / 1024;
}

// The value of one un-labelled metric line ("name value") in /metrics, or -1.
inline double metric(const Running& r, const std::string& name) {
  auto m = r.client()->Get("/metrics");
  if (!m) return -1;
  const std::string key = "\n" + name + " ";
  const auto p = m->body.find(key);
  if (p == std::string::npos) return -1;
  return std::stod(m->body.substr(p + key.size()));
}

// A plain TCP client: every byte as the test writes it.
class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~RawClient() { close(); }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;
  bool connected() const { return connected_; }
  int fd() const { return fd_; }
  bool send(const std::string& bytes) {
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }
  void shutdown_write() { ::shutdown(fd_, SHUT_WR); }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  // Reads until `enough(received)` holds, the server closes (eof() then), or `seconds` pass.
  const std::string& read_until(const std::function<bool(const std::string&)>& enough,
                                double seconds) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
    while (!eof_ && !enough(in_)) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) break;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
      char buf[65536];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        eof_ = true;
        break;
      }
      in_.append(buf, static_cast<size_t>(n));
    }
    return in_;
  }
  const std::string& read_all(double seconds) {
    return read_until([](const std::string&) { return false; }, seconds);
  }
  bool eof() const { return eof_; }
  const std::string& received() const { return in_; }

 private:
  int fd_ = -1;
  bool connected_ = false;
  bool eof_ = false;
  std::string in_;
};

struct RawResponse {
  int status = 0;
  std::string head;  // status line and headers
  std::string body;  // de-chunked
  bool chunked = false;
  std::string header(const std::string& name) const {
    std::string lower_head = head;
    for (char& c : lower_head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string key = "\r\n" + name + ":";
    for (char& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const auto p = lower_head.find(key);
    if (p == std::string::npos) return "";
    const auto end = head.find("\r\n", p + 2);
    std::string v = head.substr(p + key.size(), end - p - key.size());
    while (!v.empty() && v.front() == ' ') v.erase(v.begin());
    return v;
  }
};

// Splits a byte stream into complete HTTP responses (Content-Length, chunked, or up to the end
// when `closed` and neither is given). 1xx interim responses are skipped. Stops at the first
// incomplete one.
inline std::vector<RawResponse> parse_responses(const std::string& bytes, bool closed) {
  std::vector<RawResponse> out;
  size_t pos = 0;
  while (pos < bytes.size()) {
    const size_t head_end = bytes.find("\r\n\r\n", pos);
    if (head_end == std::string::npos) break;
    RawResponse r;
    r.head = bytes.substr(pos, head_end + 2 - pos);
    if (r.head.rfind("HTTP/1.", 0) != 0 || r.head.size() < 12) break;
    r.status = std::atoi(r.head.c_str() + 9);
    size_t body_at = head_end + 4;
    if (r.status >= 100 && r.status < 200) {
      pos = body_at;
      continue;
    }
    const std::string te = r.header("transfer-encoding");
    const std::string cl = r.header("content-length");
    if (te.find("chunked") != std::string::npos) {
      r.chunked = true;
      bool done = false;
      while (true) {
        const size_t line_end = bytes.find("\r\n", body_at);
        if (line_end == std::string::npos) break;
        const size_t n = std::stoul(bytes.substr(body_at, line_end - body_at), nullptr, 16);
        if (n == 0) {
          if (bytes.size() < line_end + 4) break;
          body_at = line_end + 4;  // "0\r\n\r\n"
          done = true;
          break;
        }
        if (bytes.size() < line_end + 2 + n + 2) break;
        r.body += bytes.substr(line_end + 2, n);
        body_at = line_end + 2 + n + 2;
      }
      if (!done) break;
      pos = body_at;
    } else if (!cl.empty()) {
      const size_t n = std::stoul(cl);
      if (bytes.size() < body_at + n) break;
      r.body = bytes.substr(body_at, n);
      pos = body_at + n;
    } else {
      if (!closed) break;
      r.body = bytes.substr(body_at);
      pos = bytes.size();
    }
    out.push_back(std::move(r));
  }
  return out;
}

inline std::string http_request(const std::string& method, const std::string& path,
                                const std::string& body = "", const std::string& extra_headers = "",
                                const std::string& version = "HTTP/1.1") {
  std::string r = method + " " + path + " " + version + "\r\nHost: 127.0.0.1\r\n" + extra_headers;
  if (method == "POST") {
    r +=
        "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  return r + "\r\n" + body;
}

}  // namespace steermoe::server::test
