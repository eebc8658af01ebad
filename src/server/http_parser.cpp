#include "server/http_parser.hpp"

#include <algorithm>
#include <cctype>
#include <ctime>

namespace steermoe::server::http {

namespace {

char lower(char c) {
  return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
}

}  // namespace

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return lower(x) == y; });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

namespace {

// RFC 9110 5.6.2 token characters (field names, methods).
bool is_tchar(char c) {
  if (std::isalnum(static_cast<unsigned char>(c))) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

// Splits a comma-separated field value into trimmed, non-empty elements.
std::vector<std::string_view> elements(std::string_view value) {
  std::vector<std::string_view> out;
  while (!value.empty()) {
    const size_t comma = value.find(',');
    const std::string_view part = trim(value.substr(0, comma));
    if (!part.empty()) out.push_back(part);
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  return out;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Finds the end of the line starting at `from`: the position of its LF, or npos. A CR not
// followed by LF is an error (`bad`), a bare LF is accepted as a line end (RFC 9112 2.2).
size_t line_end(std::string_view s, size_t from, bool& bad) {
  for (size_t i = from; i < s.size(); ++i) {
    if (s[i] == '\n') return i;
    if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] != '\n') {
      bad = true;
      return i;
    }
  }
  return std::string_view::npos;
}

std::string_view without_cr(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

HeadResult error(int status, std::string message) {
  HeadResult r;
  r.state = ParseState::kError;
  r.error = {status, std::move(message)};
  return r;
}

// Request line: method SP request-target SP HTTP-version.
std::optional<HeadResult> parse_request_line(std::string_view line, const HeadLimits& limits,
                                             Request& out) {
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos) {
    return error(400, "malformed request line (expected: METHOD TARGET HTTP/1.x)");
  }
  out.method = std::string(line.substr(0, sp1));
  out.target = std::string(line.substr(sp1 + 1, sp2 - sp1 - 1));
  const std::string_view version = line.substr(sp2 + 1);
  if (out.method.empty() || !std::all_of(out.method.begin(), out.method.end(), is_tchar)) {
    return error(400, "malformed request method");
  }
  if (out.target.size() > limits.max_target_bytes)
    return error(414, "the request target is too long");
  if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || version[6] != '.' ||
      !std::isdigit(static_cast<unsigned char>(version[5])) ||
      !std::isdigit(static_cast<unsigned char>(version[7]))) {
    return error(400, "malformed HTTP version");
  }
  if (version[5] != '1' || (version[7] != '0' && version[7] != '1')) {
    return error(505, "only HTTP/1.0 and HTTP/1.1 are supported");
  }
  out.minor = version[7] - '0';
  // origin-form "/path?query"; absolute-form "http://host/path" (proxies) keeps its path.
  std::string_view target = out.target;
  if (target.rfind("http://", 0) == 0 || target.rfind("https://", 0) == 0) {
    const size_t slash = target.find('/', target.find("//") + 2);
    target = slash == std::string_view::npos ? std::string_view("/") : target.substr(slash);
  }
  if (target.empty() || (target[0] != '/' && target != "*")) {
    return error(400, "the request target must be a path starting with '/'");
  }
  for (char c : target) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) {
      return error(400, "control characters in the request target");
    }
  }
  const size_t q = target.find('?');
  out.query = q == std::string_view::npos ? "" : std::string(target.substr(q + 1));
  const std::string_view raw_path = target.substr(0, q);
  out.path.clear();
  for (size_t i = 0; i < raw_path.size(); ++i) {
    if (raw_path[i] == '%' && i + 2 < raw_path.size() + 0 && hex_value(raw_path[i + 1]) >= 0 &&
        hex_value(raw_path[i + 2]) >= 0) {
      out.path += static_cast<char>(hex_value(raw_path[i + 1]) * 16 + hex_value(raw_path[i + 2]));
      i += 2;
    } else {
      out.path += raw_path[i];
    }
  }
  return std::nullopt;
}

// One header line into out.fields.
std::optional<HeadResult> parse_field(std::string_view line, Request& out) {
  if (line.front() == ' ' || line.front() == '\t') {
    return error(400, "folded header lines (obsolete line folding) are not accepted");
  }
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) {
    return error(400, "a header line without a colon: " +
                          std::string(line.substr(0, std::min<size_t>(line.size(), 40))));
  }
  const std::string_view name = line.substr(0, colon);
  if (name.empty() || !std::all_of(name.begin(), name.end(), is_tchar)) {
    return error(400, "malformed header name (no white space is allowed before the colon)");
  }
  const std::string_view value = trim(line.substr(colon + 1));
  for (char c : value) {
    if (c == '\0' || c == '\r' || c == '\n') return error(400, "control characters in a header");
  }
  std::string lname(name);
  for (char& c : lname) c = lower(c);
  out.fields.emplace_back(std::move(lname), std::string(value));
  return std::nullopt;
}

// Content-Length, Transfer-Encoding, Connection, Expect, Host: framing and connection rules.
std::optional<HeadResult> apply_fields(Request& out) {
  std::optional<uint64_t> length;
  std::vector<std::string_view> codings;
  bool close = false, keep_alive = false, have_te = false;
  int hosts = 0;
  for (const auto& [name, value] : out.fields) {
    if (name == "content-length") {
      for (std::string_view v : elements(value)) {
        if (v.empty() ||
            !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; })) {
          return error(400, "Content-Length must be a decimal number");
        }
        // A decimal beyond 18 digits is beyond any body limit (and uint64): too large, not bad.
        if (v.size() > 18) return error(413, "the request body is too large");
        const uint64_t n = std::stoull(std::string(v));
        if (length && *length != n) return error(400, "conflicting Content-Length values");
        length = n;
      }
      if (!length) return error(400, "an empty Content-Length");
    } else if (name == "transfer-encoding") {
      have_te = true;
      for (std::string_view v : elements(value)) codings.push_back(v);
    } else if (name == "connection") {
      for (std::string_view v : elements(value)) {
        close = close || iequals(v, "close");
        keep_alive = keep_alive || iequals(v, "keep-alive");
      }
    } else if (name == "expect") {
      if (!iequals(value, "100-continue"))
        return error(417, "only 'Expect: 100-continue' is supported");
      out.expect_continue = out.minor >= 1;
    } else if (name == "host") {
      ++hosts;
    }
  }
  if (out.minor >= 1 && hosts != 1) {
    return error(400,
                 hosts == 0 ? "HTTP/1.1 requests need a Host header" : "more than one Host header");
  }
  if (have_te) {
    if (out.minor == 0) return error(400, "Transfer-Encoding in an HTTP/1.0 request");
    if (length) return error(400, "both Content-Length and Transfer-Encoding (ambiguous framing)");
    if (codings.empty() || !iequals(codings.back(), "chunked")) {
      return error(400, "Transfer-Encoding must end with chunked");
    }
    if (codings.size() > 1) return error(501, "only the chunked transfer coding is supported");
    out.chunked = true;
  }
  out.content_length = length;
  out.keep_alive = out.minor >= 1 ? !close : (keep_alive && !close);
  return std::nullopt;
}

}  // namespace

const std::string* Request::field(std::string_view lower_name) const {
  for (const auto& [name, value] : fields) {
    if (name == lower_name) return &value;
  }
  return nullptr;
}

HeadResult parse_head(std::string_view buffer, const HeadLimits& limits, Request& out) {
  size_t pos = 0;
  // Empty lines before the request line (a client's stray CRLF after a body) are skipped.
  while (pos < buffer.size() && (buffer[pos] == '\r' || buffer[pos] == '\n')) {
    if (buffer[pos] == '\r' && pos + 1 < buffer.size() && buffer[pos + 1] != '\n') {
      return error(400, "a bare CR in the request head");
    }
    ++pos;
  }
  const size_t head_start = pos;
  bool bad = false;
  // Find the empty line that ends the head before parsing anything.
  size_t end = std::string_view::npos;
  for (size_t i = head_start; i < buffer.size();) {
    const size_t e = line_end(buffer, i, bad);
    if (bad) return error(400, "a bare CR in the request head");
    if (e == std::string_view::npos) break;
    if (without_cr(buffer.substr(i, e - i)).empty() && i > head_start) {
      end = e + 1;
      break;
    }
    i = e + 1;
  }
  if (end == std::string_view::npos) {
    if (buffer.size() - head_start > limits.max_head_bytes) {
      return error(431, "the request head is too large");
    }
    return {};
  }
  if (end - head_start > limits.max_head_bytes) return error(431, "the request head is too large");
  out = Request{};
  size_t i = head_start;
  size_t e = line_end(buffer, i, bad);
  if (auto r = parse_request_line(without_cr(buffer.substr(i, e - i)), limits, out)) return *r;
  for (i = e + 1; i < end;) {
    e = line_end(buffer, i, bad);
    const std::string_view line = without_cr(buffer.substr(i, e - i));
    i = e + 1;
    if (line.empty()) break;
    if (out.fields.size() >= limits.max_fields) return error(431, "too many header fields");
    if (auto r = parse_field(line, out)) return *r;
  }
  if (auto r = apply_fields(out)) return *r;
  HeadResult ok;
  ok.state = ParseState::kComplete;
  ok.length = end;
  return ok;
}

ParseState ChunkedDecoder::feed(std::string_view in, size_t& pos, std::string& body,
                                size_t max_body, HeadError& err) {
  constexpr size_t kMaxLine = 1024;  // chunk-size line with extensions
  constexpr size_t kMaxTrailers = 8 << 10;
  auto fail = [&](int status, const char* message) {
    err = {status, message};
    return ParseState::kError;
  };
  while (pos < in.size()) {
    if (part_ == Part::kData) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(left_, in.size() - pos));
      body.append(in.substr(pos, n));
      pos += n;
      left_ -= n;
      if (left_ == 0) part_ = Part::kDataEnd;
      continue;
    }
    bool bad = false;
    const size_t e = line_end(in, pos, bad);
    if (bad) return fail(400, "a bare CR in a chunked body");
    // A line past kMaxLine is refused whether its end has arrived or not, so the outcome does
    // not depend on how the bytes were split into reads (fuzz_http_request checks it).
    if ((e == std::string_view::npos ? in.size() : e) - pos > kMaxLine) {
      return fail(400, "a chunked-body line (chunk size or trailer field) is too long");
    }
    if (e == std::string_view::npos) return ParseState::kIncomplete;
    const std::string_view line = without_cr(in.substr(pos, e - pos));
    pos = e + 1;
    if (part_ == Part::kDataEnd) {
      if (!line.empty()) return fail(400, "chunk data longer than its size");
      part_ = Part::kSize;
    } else if (part_ == Part::kSize) {
      const std::string_view size = trim(line.substr(0, line.find(';')));
      if (size.empty() || size.size() > 15) return fail(400, "malformed chunk size");
      uint64_t n = 0;
      for (char c : size) {
        const int v = hex_value(c);
        if (v < 0) return fail(400, "malformed chunk size");
        n = n * 16 + static_cast<uint64_t>(v);
      }
      if (n > max_body || body.size() + n > max_body)
        return fail(413, "the request body is too large");
      left_ = n;
      part_ = n == 0 ? Part::kTrailer : Part::kData;
    } else {  // trailer fields until the empty line; they are not used
      if (line.empty()) return ParseState::kComplete;
      trailer_bytes_ += line.size();
      if (trailer_bytes_ > kMaxTrailers) return fail(431, "trailer fields are too large");
    }
  }
  return ParseState::kIncomplete;
}

std::string http_date() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  return buf;
}

const char* reason_phrase(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 413:
      return "Content Too Large";
    case 414:
      return "URI Too Long";
    case 415:
      return "Unsupported Media Type";
    case 417:
      return "Expectation Failed";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Unknown";
  }
}

}  // namespace steermoe::server::http
