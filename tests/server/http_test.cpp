// The HTTP layer of `steermoe serve` against hostile and unusual clients, over raw loopback
// sockets (issue 22's numbered items): a prompt that fills the context, the body of a refused
// request, half-close, pipelining, slowloris, large bodies, protocol corners. Every wait is
// bounded.
#include <sys/socket.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "../json_test_util.hpp"
#include "server/http_parser.hpp"
#include "server_fixture.hpp"

namespace steermoe::server::test {
namespace {

std::vector<int32_t> context_ids(size_t n) {
  std::vector<int32_t> ids;
  const std::vector<int32_t> text = ids_of(
      "The quick brown fox jumps over the lazy dog. Once upon a time there was a small town by "
      "the sea.");
  while (ids.size() < n) ids.push_back(text[ids.size() % text.size()]);
  return ids;
}

int status_of(const json& j) {
  return j.is_object() && j.contains("error") ? 400 : 200;
}

// 1. A prompt that fills the context (or prompt + max_tokens over it) is a 400, never a
// response with fewer scores than asked for (lm-eval drops the last entry as the generated one).
TEST(HttpItems, PromptPlusMaxTokensOverTheContextIs400) {
  Running r;
  int status = 0;
  json res = post(r, "/v1/completions",
                  {{"prompt", context_ids(256)},
                   {"echo", true},
                   {"logprobs", 1},
                   {"max_tokens", 1},
                   {"temperature", 0}},
                  &status);
  EXPECT_EQ(status, 400) << dump(res);
  EXPECT_EQ(res["error"]["code"], "context_length_exceeded") << dump(res);
  // One position less: the generated token is there, after every prompt score.
  res = post(r, "/v1/completions",
             {{"prompt", context_ids(255)},
              {"echo", true},
              {"logprobs", 1},
              {"max_tokens", 1},
              {"temperature", 0}},
             &status);
  ASSERT_EQ(status, 200) << dump(res);
  EXPECT_EQ(res["choices"][0]["logprobs"]["token_logprobs"].size(), 256u);
  EXPECT_EQ(res["usage"]["completion_tokens"], 1);
  // prompt + max_tokens over the context, also for chat with an explicit max_tokens.
  res = post(r, "/v1/completions", {{"prompt", context_ids(200)}, {"max_tokens", 57}}, &status);
  EXPECT_EQ(status, 400) << dump(res);
  res = post(r, "/v1/completions", {{"prompt", context_ids(200)}, {"max_tokens", 56}}, &status);
  EXPECT_EQ(status, 200) << dump(res);
  res = post(r, "/v1/chat/completions",
             {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 256}}, &status);
  EXPECT_EQ(status, 400) << dump(res);
  EXPECT_EQ(res["error"]["code"], "context_length_exceeded") << dump(res);
  (void)status_of;
}

// 1b. A completion that ends at the end-of-sequence token still has its generated entry in the
// logprobs (lm-eval takes the last entry for the generated token): the EOS token is reported
// there, not in the text. Sampled with seeds until one ends at EOS (bounded).
TEST(HttpItems, EndOfSequenceIsTheGeneratedEntry) {
  Running r;
  // A context after which the tiny model gives the end-of-sequence token about 1% at
  // temperature 2 (from data/text/heldout.txt).
  const std::string text =
      " limit_sl_dest=limit_sl_dest,\n                                hardlink_dupes="
      "hardlink_dupes):\n                success = False\n    return success\n";
  const std::vector<int32_t> prompt = ids_of(text);
  int stops = 0;
  for (int seed = 0; seed < 400 && stops == 0; ++seed) {
    int status = 0;
    const json res = post(r, "/v1/completions",
                          {{"prompt", prompt},
                           {"max_tokens", 1},
                           {"temperature", 2.0},
                           {"seed", seed},
                           {"echo", true},
                           {"logprobs", 1}},
                          &status);
    ASSERT_EQ(status, 200) << dump(res);
    const json& choice = res["choices"][0];
    const json& lp = choice["logprobs"];
    ASSERT_EQ(lp["token_logprobs"].size(), prompt.size() + 1) << dump(choice);
    if (choice["finish_reason"] != "stop") continue;
    ++stops;
    EXPECT_EQ(lp["tokens"].back(), shared().tok->token_bytes(*shared().tok->eos()));
    EXPECT_TRUE(lp["token_logprobs"].back().is_number());
    EXPECT_EQ(choice["text"], text) << "echo: the prompt, no text for the EOS token";
    EXPECT_EQ(res["usage"]["completion_tokens"], 1);
  }
  EXPECT_EQ(stops, 1) << "no seed sampled the end-of-sequence token";
}

// 2. The body of a request refused with 401 is never read as the next request.
TEST(HttpItems, RefusedBodyIsNotTheNextRequest) {
  ServerOptions o;
  o.api_key = "s3cret";
  Running r(o);
  const std::string inner = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  for (const std::string& auth : {std::string("Authorization: Bearer wrong\r\n"), std::string()}) {
    // The body in the same write as the head, and after a pause (its own segment).
    for (bool pause : {false, true}) {
      RawClient c(r.port());
      ASSERT_TRUE(c.connected());
      const std::string request = http_request("POST", "/v1/completions", inner, auth);
      const size_t head = request.size() - inner.size();
      ASSERT_TRUE(c.send(request.substr(0, pause ? head : request.size())));
      if (pause) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        c.send(inner);  // the server may have closed already
      }
      c.read_all(1.5);  // the server answers 401 and then either waits or closes
      const auto responses = parse_responses(c.received(), c.eof());
      ASSERT_EQ(responses.size(), 1u) << c.received();
      EXPECT_EQ(responses[0].status, 401) << c.received();
    }
  }
}

std::string completion_body(int max_tokens, bool stream = false) {
  return dump({{"prompt", "Once upon a time"},
               {"max_tokens", max_tokens},
               {"temperature", 0},
               {"stream", stream}});
}

// 3. A client that half-closes after sending still gets its response.
TEST(HttpItems, HalfClosedClientsGetTheirResponse) {
  Running r;
  struct Case {
    std::string request;
    int status;
  };
  const std::vector<Case> cases = {
      {http_request("GET", "/health"), 200},
      {http_request("POST", "/v1/completions", "{\"prompt\": "), 400},
      {http_request("POST", "/v1/completions", completion_body(8)), 200},
      {http_request("POST", "/v1/completions", completion_body(8, true)), 200},
  };
  for (int round = 0; round < 3; ++round) {
    for (const Case& k : cases) {
      RawClient c(r.port());
      ASSERT_TRUE(c.connected());
      ASSERT_TRUE(c.send(k.request));
      c.shutdown_write();
      c.read_all(10.0);
      EXPECT_TRUE(c.eof()) << "the server should close after answering a half-closed client";
      const auto responses = parse_responses(c.received(), c.eof());
      ASSERT_EQ(responses.size(), 1u) << k.request << "\n--\n" << c.received();
      EXPECT_EQ(responses[0].status, k.status) << c.received();
      if (responses[0].header("content-type") == "text/event-stream") {
        EXPECT_NE(responses[0].body.find("data: [DONE]\n\n"), std::string::npos);
      } else {
        // Leading white space is allowed (a probe of a half-closed client), JSON all the same.
        EXPECT_FALSE(parse_ordered_json_or_discarded(responses[0].body).is_discarded())
            << responses[0].body;
      }
    }
  }
}

// 3b. A client that closes for good while its request waits: the request is cancelled, the
// engine generates nothing for it.
TEST(HttpItems, ClosedClientsRequestIsCancelled) {
  ServerOptions o;
  o.worker.queue_capacity = 4;
  Running r(o);
  std::thread busy([&] {
    int status = 0;
    post(r, "/v1/completions",
         {{"prompt", "Once"}, {"max_tokens", 240}, {"ignore_eos", true}, {"temperature", 0}},
         &status);
    EXPECT_EQ(status, 200);
  });
  for (const auto deadline = Clock::now() + std::chrono::seconds(5);
       metric(r, "steermoe_engine_busy") != 1 && Clock::now() < deadline;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  {
    RawClient c(r.port());
    ASSERT_TRUE(c.send(
        http_request("POST", "/v1/completions",
                     dump({{"prompt", "Twice"}, {"max_tokens", 240}, {"ignore_eos", true}}))));
  }  // closed while the first request still runs
  busy.join();
  double cancelled = 0;
  for (const auto deadline = Clock::now() + std::chrono::seconds(10);
       (cancelled = metric(r, "steermoe_cancelled_total")) < 1 && Clock::now() < deadline;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_GE(cancelled, 1);
  EXPECT_LT(metric(r, "steermoe_generated_tokens_total"), 480);
}

// 4. Pipelined requests are all answered, in order.
TEST(HttpItems, PipelinedRequestsAreAnsweredInOrder) {
  Running r;
  RawClient c(r.port());
  ASSERT_TRUE(c.connected());
  std::string batch;
  for (int i = 0; i < 3; ++i) batch += http_request("GET", "/health");
  batch += http_request("POST", "/v1/completions", completion_body(4));
  batch += http_request("GET", "/v1/models");
  batch += http_request("POST", "/v1/completions", "{bad json");
  batch += http_request("GET", "/health");
  ASSERT_TRUE(c.send(batch));
  c.read_until([](const std::string& s) { return parse_responses(s, false).size() >= 7; }, 10.0);
  const auto responses = parse_responses(c.received(), c.eof());
  ASSERT_EQ(responses.size(), 7u) << c.received();
  const std::vector<int> statuses = {200, 200, 200, 200, 200, 400, 200};
  for (size_t i = 0; i < responses.size(); ++i) {
    EXPECT_EQ(responses[i].status, statuses[i]) << i;
    const json j = parse_ordered_json_or_discarded(responses[i].body);
    ASSERT_FALSE(j.is_discarded()) << responses[i].body;
    const std::vector<std::string> keys = {"status", "status", "status", "object",
                                           "object", "error",  "status"};
    EXPECT_TRUE(j.contains(keys[i])) << i << ": " << responses[i].body;
  }
  EXPECT_FALSE(c.eof()) << "keep-alive: the connection stays open";
}

// 5. 64 connections trickling a header byte per second do not make the server unavailable, and
// are dropped once their head is late.
TEST(HttpItems, SlowlorisDoesNotStarveOthers) {
  ServerOptions o;
  o.read_timeout_s = 3;
  Running r(o);
  constexpr int kSlow = 64;
  std::vector<std::unique_ptr<RawClient>> slow;
  for (int i = 0; i < kSlow; ++i) slow.push_back(std::make_unique<RawClient>(r.port()));
  const std::string head = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    for (size_t k = 0; !stop.load() && k < 12; ++k) {
      const std::string byte(1, k < head.size() ? head[k] : 'a');
      for (auto& c : slow) c->send(byte);
      for (int t = 0; t < 20 && !stop.load(); ++t) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
  });
  for (int probe = 0; probe < 3; ++probe) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    auto c = r.client(3);
    const auto t0 = Clock::now();
    auto res = c->Get("/health");
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    EXPECT_TRUE(res) << "probe " << probe << " got no answer in 3 s";
    if (res) {
      EXPECT_EQ(res->status, 200);
    }
    EXPECT_LT(s, 1.0) << "probe " << probe;
  }
  // By now (~3.5 s) most heads are late; give the deadline a margin, then count the dropped.
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));
  int dropped = 0;
  for (auto& c : slow) {
    c->read_all(0.2);
    if (c->eof()) ++dropped;
  }
  stop = true;
  trickle.join();
  EXPECT_EQ(dropped, kSlow) << "slow clients should be dropped at the head deadline";
}

// 6. Large bodies: refused by Content-Length before they are read (also without the API key),
// and memory goes back near where it was.
TEST(HttpItems, LargeBodiesAreRefusedBeforeReading) {
  ServerOptions o;
  o.api_key = "s3cret";
  Running r(o);
  for (const auto& [auth, length, expect] :
       {std::tuple<std::string, size_t, int>{"", 6815744, 401},
        std::tuple<std::string, size_t, int>{"Authorization: Bearer s3cret\r\n", 100u << 20,
                                             413}}) {
    RawClient c(r.port());
    ASSERT_TRUE(c.send("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth +
                       "Content-Type: application/json\r\nContent-Length: " +
                       std::to_string(length) + "\r\n\r\n{\"prompt\": \""));
    c.read_until([](const std::string& s) { return !parse_responses(s, false).empty(); }, 2.0);
    const auto responses = parse_responses(c.received(), c.eof());
    ASSERT_EQ(responses.size(), 1u) << "no answer before the body: " << c.received();
    EXPECT_EQ(responses[0].status, expect);
  }
}

TEST(HttpItems, LargeBodiesLeaveMemoryNearBaseline) {
  ServerOptions o;
  Running r(o);
  int status = 0;
  for (int i = 0; i < 4; ++i) {
    post(r, "/v1/completions", {{"prompt", "warm up"}, {"max_tokens", 4}}, &status);
    ASSERT_EQ(status, 200);
  }
  const size_t base = rss_kb();
  std::atomic<bool> sampling{true};
  std::atomic<size_t> peak{base};
  std::thread sampler([&] {
    while (sampling.load()) {
      peak = std::max(peak.load(), rss_kb());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  // Raw sockets sending one shared buffer: the client side adds no copies to this process's RSS.
  const std::string big = http_request(
      "POST", "/v1/completions", dump({{"prompt", std::string(7 << 20, 'a')}, {"max_tokens", 1}}));
  for (int round = 0; round < 2; ++round) {
    std::vector<std::thread> clients;
    std::atomic<int> refused{0};
    for (int k = 0; k < 8; ++k) {
      clients.emplace_back([&] {
        RawClient c(r.port());
        c.send(big);
        c.read_until([](const std::string& got) { return !parse_responses(got, false).empty(); },
                     60.0);
        const auto responses = parse_responses(c.received(), c.eof());
        if (!responses.empty() && responses[0].status == 400) ++refused;
      });
    }
    for (auto& t : clients) t.join();
    EXPECT_EQ(refused.load(), 8) << "a 7 MB prompt cannot fit a 256-token context";
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  sampling = false;
  sampler.join();
  const size_t after = rss_kb();
  std::printf("[ server   ] RSS %zu kB before, peak %zu kB, %zu kB after 16 x 7 MB bodies\n", base,
              peak.load(), after);
#ifndef STEERMOE_ASAN
  // Measured: peak +120..130 MB (8 bodies held, 2 parsed at a time), +8 MB after. Without the
  // length check before tokenizing the peak was +228 MB; without giving freed memory back,
  // +24 MB stayed; cpp-httplib: +1,340 MB peak, +575 MB after.
  EXPECT_LT(peak.load(), base + 192 * 1024) << "peak memory";
  EXPECT_LT(after, base + 16 * 1024) << "memory left behind";
#endif
}

// 7. Protocol corners.
TEST(HttpItems, Http10ClientsGetNoChunkedEncoding) {
  Running r;
  for (bool stream : {false, true}) {
    RawClient c(r.port());
    ASSERT_TRUE(c.send(
        http_request("POST", "/v1/completions", completion_body(6, stream), "", "HTTP/1.0")));
    c.read_all(10.0);
    EXPECT_TRUE(c.eof()) << "HTTP/1.0 without keep-alive: closed after the response";
    const auto responses = parse_responses(c.received(), c.eof());
    ASSERT_EQ(responses.size(), 1u) << c.received();
    EXPECT_EQ(responses[0].status, 200);
    EXPECT_FALSE(responses[0].chunked) << responses[0].head;
    EXPECT_EQ(responses[0].header("transfer-encoding"), "") << responses[0].head;
    if (stream) {
      EXPECT_NE(responses[0].body.find("data: [DONE]"), std::string::npos) << responses[0].body;
    }
  }
}

TEST(HttpItems, AmbiguousFramingAndBadHeadersAre400) {
  Running r;
  const std::string body = completion_body(2);
  const std::string len = std::to_string(body.size());
  const std::vector<std::string> bad = {
      // two different Content-Length values
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + len +
          "\r\nContent-Length: 5\r\n\r\n" + body,
      // Content-Length and Transfer-Encoding: chunked
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + len +
          "\r\nTransfer-Encoding: chunked\r\n\r\n" + body,
      // a header line without a colon
      "GET /health HTTP/1.1\r\nHost: x\r\nthis line has no colon\r\n\r\n",
      // white space before the colon
      "GET /health HTTP/1.1\r\nHost : x\r\n\r\n",
      // a folded header line
      "GET /health HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n  folded\r\n\r\n",
  };
  for (const std::string& request : bad) {
    RawClient c(r.port());
    ASSERT_TRUE(c.send(request));
    c.read_all(3.0);
    const auto responses = parse_responses(c.received(), c.eof());
    ASSERT_GE(responses.size(), 1u) << request << "\n--\n" << c.received();
    EXPECT_EQ(responses[0].status, 400) << request << "\n--\n" << c.received();
    EXPECT_EQ(responses.size(), 1u) << "nothing after the refusal: " << c.received();
  }
  // The same value twice is one length (RFC 9110 8.6), and a chunked body is read.
  RawClient same(r.port());
  ASSERT_TRUE(same.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + len +
                        "\r\nContent-Length: " + len + "\r\n\r\n" + body));
  same.read_until([](const std::string& s) { return !parse_responses(s, false).empty(); }, 10.0);
  auto responses = parse_responses(same.received(), same.eof());
  ASSERT_EQ(responses.size(), 1u) << same.received();
  EXPECT_EQ(responses[0].status, 200) << same.received();
  char hex[16];
  std::snprintf(hex, sizeof hex, "%zx", body.size() - 5);
  RawClient chunked(r.port());
  ASSERT_TRUE(
      chunked.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
                   "chunked\r\n\r\n5\r\n" +
                   body.substr(0, 5) + "\r\n" + hex + "\r\n" + body.substr(5) + "\r\n0\r\n\r\n"));
  chunked.read_until([](const std::string& s) { return !parse_responses(s, false).empty(); }, 10.0);
  responses = parse_responses(chunked.received(), chunked.eof());
  ASSERT_EQ(responses.size(), 1u) << chunked.received();
  EXPECT_EQ(responses[0].status, 200) << chunked.received();
}

// --- the parser alone -------------------------------------------------------------------------

http::HeadResult head_of(const std::string& bytes, http::Request& r) {
  return http::parse_head(bytes, http::HeadLimits{}, r);
}

TEST(HttpParser, HeadsAndTheirFraming) {
  http::Request r;
  auto h = head_of(
      "\r\nPOST /v1/models/a%20b?x=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n"
      "Connection: close\r\n\r\nabc",
      r);
  ASSERT_EQ(h.state, http::ParseState::kComplete) << h.error.message;
  EXPECT_EQ(r.method, "POST");
  EXPECT_EQ(r.path, "/v1/models/a b");
  EXPECT_EQ(r.query, "x=1");
  EXPECT_EQ(r.content_length, 3u);
  EXPECT_FALSE(r.keep_alive);
  EXPECT_EQ(h.length, std::string("\r\nPOST /v1/models/a%20b?x=1 HTTP/1.1\r\nHost: h\r\n"
                                  "Content-Length: 3\r\nConnection: close\r\n\r\n")
                          .size());
  // Bare LF line ends are accepted; HTTP/1.0 is not kept alive unless asked.
  h = head_of("GET /health HTTP/1.0\n\n", r);
  ASSERT_EQ(h.state, http::ParseState::kComplete);
  EXPECT_FALSE(r.keep_alive);
  h = head_of("GET /health HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", r);
  EXPECT_TRUE(r.keep_alive);
  EXPECT_EQ(head_of("GET /health HTTP/1.1\r\nHost: h\r\n", r).state, http::ParseState::kIncomplete);
  auto status = [&](const std::string& bytes) {
    const auto x = head_of(bytes, r);
    return x.state == http::ParseState::kError ? x.error.status : 0;
  };
  EXPECT_EQ(status("GET /health HTTP/2.0\r\nHost: h\r\n\r\n"), 505);
  EXPECT_EQ(status("GET /health HTTP/1.1\r\n\r\n"), 400);  // no Host
  EXPECT_EQ(status("GET health HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
  EXPECT_EQ(status("GET /a b HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
  EXPECT_EQ(status("GET /" + std::string(9000, 'a') + " HTTP/1.1\r\nHost: h\r\n\r\n"), 414);
  EXPECT_EQ(status("GET / HTTP/1.1\r\nHost: h\r\nX: " + std::string(40000, 'a')), 431);
  EXPECT_EQ(status("GET / HTTP/1.1\r\nHost: h\rX: 1\r\n\r\n"), 400);  // bare CR
  EXPECT_EQ(status("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n"), 400);
  EXPECT_EQ(status("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3, 4\r\n\r\n"), 400);
  // A length no body limit admits, even past 64 bits: too large, not malformed.
  EXPECT_EQ(status("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 99999999999999999999999\r\n\r\n"),
            413);
  EXPECT_EQ(status("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"), 501);
  EXPECT_EQ(status("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, gzip\r\n\r\n"), 400);
  EXPECT_EQ(status("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"), 400);
  EXPECT_EQ(status("GET / HTTP/1.1\r\nHost: h\r\nExpect: 200-ok\r\n\r\n"), 417);
  EXPECT_EQ(status("GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n"),
            0);
}

TEST(HttpParser, ChunkedBodiesByteByByte) {
  const std::string wire = "5;ext=1\r\nhello\r\nc\r\n, 0123456789\r\n0\r\nX-T: 1\r\n\r\nNEXT";
  http::ChunkedDecoder d;
  std::string body, in;
  http::HeadError err;
  size_t pos = 0;
  http::ParseState st = http::ParseState::kIncomplete;
  for (char c : wire) {
    in += c;
    st = d.feed(in, pos, body, 1000, err);
    if (st != http::ParseState::kIncomplete) break;
  }
  ASSERT_EQ(st, http::ParseState::kComplete) << err.message;
  EXPECT_EQ(body, "hello, 0123456789");
  EXPECT_EQ(in.substr(pos), "") << "stops right after the final empty line";
  auto status = [](const std::string& bytes, size_t max) {
    http::ChunkedDecoder dd;
    std::string b;
    http::HeadError e;
    size_t p = 0;
    return dd.feed(bytes, p, b, max, e) == http::ParseState::kError ? e.status : 0;
  };
  EXPECT_EQ(status("zz\r\n", 100), 400);
  EXPECT_EQ(status("fffffffffffffffff\r\n", 100), 400);  // overflow
  EXPECT_EQ(status("65\r\n", 100), 413);
  EXPECT_EQ(status("3\r\nabcd\r\n", 100), 400);  // data longer than its size
  // A line past 1 KiB is refused alike whether it arrives whole or a byte at a time (a chunk
  // extension or a trailer field; the whole line had been accepted, the same bytes in pieces
  // refused). One of exactly 1 KiB passes both ways.
  auto bytewise = [](const std::string& bytes) {
    http::ChunkedDecoder dd;
    std::string b, arrived;
    http::HeadError e;
    size_t p = 0;
    for (char c : bytes) {
      arrived += c;
      const auto state = dd.feed(arrived, p, b, 100, e);
      if (state == http::ParseState::kError) return e.status;
      if (state == http::ParseState::kComplete) return 0;
    }
    return -1;
  };
  const std::string long_ext = "0;" + std::string(1100, 'x') + "\r\n\r\n";
  const std::string long_trailer = "0\r\nX: " + std::string(1100, 'y') + "\r\n\r\n";
  const std::string fits = "0;" + std::string(1021, 'x') + "\r\n\r\n";  // 1024 with the CR
  for (const auto& too_long : {long_ext, long_trailer}) {
    EXPECT_EQ(status(too_long, 100), 400);
    EXPECT_EQ(bytewise(too_long), 400);
  }
  EXPECT_EQ(status(fits, 100), 0);
  EXPECT_EQ(bytewise(fits), 0);
}

}  // namespace
}  // namespace steermoe::server::test
