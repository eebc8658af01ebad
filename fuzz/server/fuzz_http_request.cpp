// Fuzzes the server's HTTP/1.1 request framing (server/http_parser.*): any bytes give a
// complete head, an incomplete one or a refusal with a 4xx/5xx status; a complete head is never
// longer than the input, never has both a Content-Length and chunked framing, and a chunked body
// decodes to the same bytes and the same outcome whether it arrives at once or a byte at a time
// (the front end feeds it as reads arrive).
#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <cstdlib>
#include <string>
#include <string_view>

#include "server/http_parser.hpp"

namespace http = steermoe::server::http;

namespace {

struct Decoded {
  http::ParseState state = http::ParseState::kIncomplete;
  std::string body;
  int status = 0;
};

// Feeds `in` in pieces of `piece` bytes, as reads would deliver it.
Decoded decode_chunked(std::string_view in, size_t piece) {
  http::ChunkedDecoder decoder;
  Decoded out;
  http::HeadError error;
  size_t pos = 0;  // bytes the decoder has used; the caller keeps the rest for the next read
  for (size_t end = 0; end < in.size() && out.state == http::ParseState::kIncomplete;) {
    end = std::min(in.size(), end + piece);
    const size_t before = pos;
    out.state = decoder.feed(in.substr(0, end), pos, out.body, 1 << 16, error);
    if (pos < before || pos > end) std::abort();
  }
  out.status = out.state == http::ParseState::kError ? error.status : 0;
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  http::Request request;
  const http::HeadResult head = http::parse_head(in, http::HeadLimits{}, request);
  switch (head.state) {
    case http::ParseState::kIncomplete:
      return 0;
    case http::ParseState::kError:
      if (head.error.status < 400 || head.error.status > 599) std::abort();
      return 0;
    case http::ParseState::kComplete:
      break;
  }
  if (head.length == 0 || head.length > size) std::abort();
  if (request.chunked && request.content_length) std::abort();
  if (request.minor != 0 && request.minor != 1) std::abort();
  if (!request.chunked) return 0;
  const std::string_view rest = in.substr(head.length);
  const Decoded whole = decode_chunked(rest, rest.size() + 1);
  const Decoded bytewise = decode_chunked(rest, 1);
  if (whole.state != bytewise.state || whole.status != bytewise.status) std::abort();
  if (whole.state == http::ParseState::kComplete && whole.body != bytewise.body) std::abort();
  return 0;
}
