// HTTP/1.1 request framing for the server's front end (http_front.hpp): the request head
// (request line and header fields) and chunked request bodies, parsed strictly (RFC 9112).
// Anything ambiguous is refused rather than guessed, because a server that frames a request
// differently from a proxy in front of it can be made to answer the wrong request ("request
// smuggling"): two different Content-Length values, Content-Length together with
// Transfer-Encoding, header lines without a colon or with white space before it, folded
// lines, bare CR. Pure functions over bytes: no sockets, so every rule is unit-tested.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace steermoe::server::http {

struct HeadLimits {
  size_t max_head_bytes = 32 << 10;   // request line + header fields (larger: 431)
  size_t max_fields = 100;            // header lines (more: 431)
  size_t max_target_bytes = 8 << 10;  // request target (larger: 414)
};

struct Request {
  std::string method;
  std::string target;  // as sent
  std::string path;   // the target's path, percent-decoded ("/v1/models/a%20b" -> "/v1/models/a b")
  std::string query;  // after '?', as sent
  int minor = 1;      // HTTP/1.<minor>: 0 or 1
  std::vector<std::pair<std::string, std::string>> fields;  // names lower-cased, in order
  std::optional<uint64_t> content_length;
  bool chunked = false;          // Transfer-Encoding: chunked
  bool keep_alive = true;        // 1.1 unless "Connection: close"; 1.0 only with "keep-alive"
  bool expect_continue = false;  // Expect: 100-continue
  std::string body;

  // The value of the first field of that (lower-case) name, or nullptr.
  const std::string* field(std::string_view lower_name) const;
  uint64_t body_length_hint() const { return content_length.value_or(0); }
};

// A request the parser refuses: the status to answer and why.
struct HeadError {
  int status = 400;
  std::string message;
};

enum class ParseState { kIncomplete, kComplete, kError };

struct HeadResult {
  ParseState state = ParseState::kIncomplete;
  size_t length = 0;  // kComplete: bytes of the head, final empty line included
  HeadError error;    // kError
};

// Parses the head at the start of `buffer` (leading empty lines are skipped, as RFC 9112 2.2
// allows). kIncomplete while the final empty line has not arrived (kError 431 once the buffer
// exceeds the limit without one).
HeadResult parse_head(std::string_view buffer, const HeadLimits& limits, Request& out);

// Decodes a chunked body incrementally (chunk sizes, extensions ignored, trailers skipped).
class ChunkedDecoder {
 public:
  // Consumes bytes of `in` from `pos` (advanced past what was used) and appends the data to
  // `body`. kComplete after the last chunk and its trailers; kError with 400 (bad framing) or
  // 413 (the data would exceed `max_body`).
  ParseState feed(std::string_view in, size_t& pos, std::string& body, size_t max_body,
                  HeadError& error);

 private:
  enum class Part { kSize, kData, kDataEnd, kTrailer };
  Part part_ = Part::kSize;
  uint64_t left_ = 0;         // data bytes left in the current chunk
  size_t trailer_bytes_ = 0;  // bytes of trailer fields so far (bounded)
};

// "Mon, 01 Jan 2024 00:00:00 GMT" for the Date field.
std::string http_date();
// "OK", "Bad Request", ... ("Unknown" for codes the server does not use).
const char* reason_phrase(int status);

// Header text rules, shared by the parser and the server: `a` equals `lower_case` ignoring the
// case of `a`'s ASCII letters (field names, auth schemes, codings are case-insensitive); `s`
// without leading and trailing spaces and tabs (optional whitespace around field values).
bool iequals(std::string_view a, std::string_view lower_case);
std::string_view trim(std::string_view s);

}  // namespace steermoe::server::http
