// The lexer: one pass over the source that finds "{{", "{%" and "{#", trims the text between tags
// as transformers' Jinja environment does, and tokenizes tag bodies.
#include "template/lexer.hpp"

#include <fmt/format.h>

#include <cctype>

#include "template/value.hpp"

namespace steermoe::jinja::detail {
namespace {

class Lexer {
 public:
  Lexer(std::string_view src) : src_(src) {}

  std::vector<Segment> run() {
    std::vector<Segment> segs;
    size_t pos = 0;
    bool strip_next = false;    // '-' on the previous closing tag
    bool trim_newline = false;  // trim_blocks after a block tag
    while (pos < src_.size()) {
      size_t open = find_open(pos);
      std::string text(src_.substr(pos, open - pos));
      if (trim_newline) {
        if (text.rfind("\r\n", 0) == 0) {
          text.erase(0, 2);
        } else if (!text.empty() && text[0] == '\n') {
          text.erase(0, 1);
        }
      }
      if (strip_next) {
        size_t k = 0;
        while (k < text.size() && is_space(text[k])) ++k;
        text.erase(0, k);
      }
      strip_next = trim_newline = false;
      if (open >= src_.size()) {
        add_text(segs, std::move(text));
        break;
      }
      const char kind = src_[open + 1];  // '{', '%' or '#'
      size_t body = open + 2;
      const bool minus = body < src_.size() && src_[body] == '-';
      const bool plus = body < src_.size() && src_[body] == '+';
      if (minus || plus) ++body;
      if (minus) {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (!plus && kind != '{') {
        // lstrip_blocks: drop spaces/tabs between the start of the line and the tag.
        size_t k = text.size();
        while (k > 0 && (text[k - 1] == ' ' || text[k - 1] == '\t')) --k;
        size_t sp = open;
        while (sp > pos && (src_[sp - 1] == ' ' || src_[sp - 1] == '\t')) --sp;
        const bool line_start = sp == 0 || src_[sp - 1] == '\n';
        if (line_start) text.resize(k);
      }
      add_text(segs, std::move(text));
      line_ = line_at(open);
      if (kind == '#') {
        const size_t close = src_.find("#}", body);
        if (close == std::string_view::npos) error(line_, "unterminated comment");
        strip_next = close > body && src_[close - 1] == '-';
        trim_newline = !strip_next;
        pos = close + 2;
        continue;
      }
      Segment seg;
      seg.kind = kind == '{' ? SegKind::kExpr : SegKind::kStmt;
      seg.line = line_;
      pos = tokenize(body, kind == '{' ? '}' : '%', seg.tokens, strip_next);
      if (seg.kind == SegKind::kStmt) trim_newline = !strip_next;
      segs.push_back(std::move(seg));
    }
    return segs;
  }

 private:
  static void add_text(std::vector<Segment>& segs, std::string text) {
    if (text.empty()) return;
    Segment s;
    s.kind = SegKind::kText;
    s.text = std::move(text);
    segs.push_back(std::move(s));
  }

  size_t find_open(size_t from) const {
    for (size_t k = from; k + 1 < src_.size(); ++k) {
      if (src_[k] == '{' && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#'))
        return k;
    }
    return src_.size();
  }

  int line_at(size_t pos) {
    for (; counted_ < pos && counted_ < src_.size(); ++counted_) {
      if (src_[counted_] == '\n') ++lines_;
    }
    return lines_;
  }

  // Tokens from `pos` up to the closing "}}" / "%}" (with optional '-'); returns the position
  // after it.
  size_t tokenize(size_t pos, char close, std::vector<Token>& out, bool& strip_after) {
    const int line = line_;
    int braces = 0;  // open '{' of dict literals: their '}' never closes the tag
    for (;;) {
      while (pos < src_.size() && is_space(src_[pos])) ++pos;
      if (pos >= src_.size()) error(line, "unterminated tag");
      const char c = src_[pos];
      // Closing: [-]<close>}
      if (c == '-' && pos + 2 < src_.size() && src_[pos + 1] == close && src_[pos + 2] == '}' &&
          (close != '}' || braces == 0)) {
        strip_after = true;
        out.push_back({Tok::kEnd, "", line});
        return pos + 3;
      }
      if (c == '+' && pos + 2 < src_.size() && src_[pos + 1] == close && src_[pos + 2] == '}') {
        strip_after = false;
        out.push_back({Tok::kEnd, "", line});
        return pos + 3;
      }
      if (c == close && pos + 1 < src_.size() && src_[pos + 1] == '}' &&
          (close != '}' || braces == 0)) {
        strip_after = false;
        out.push_back({Tok::kEnd, "", line});
        return pos + 2;
      }
      if (out.size() > 100000) error(line, "tag too long");
      const auto u = static_cast<unsigned char>(c);
      if (std::isalpha(u) || c == '_') {
        pos = lex_name(pos, line, out);
      } else if (std::isdigit(u)) {
        pos = lex_number(pos, line, out);
      } else if (c == '\'' || c == '"') {
        pos = lex_string(pos, line, out);
      } else {
        pos = lex_operator(pos, line, out, braces);
      }
    }
  }

  // One token at `pos` of each kind; each returns the position after it.
  size_t lex_name(size_t pos, int line, std::vector<Token>& out) const {
    size_t e = pos;
    while (e < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_'))
      ++e;
    out.push_back({Tok::kName, std::string(src_.substr(pos, e - pos)), line});
    return e;
  }

  // Digits with '_' separators; a float has a fraction or an exponent.
  size_t lex_number(size_t pos, int line, std::vector<Token>& out) const {
    size_t e = pos;
    bool is_float = false;
    while (e < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[e])) || src_[e] == '_'))
      ++e;
    if (e + 1 < src_.size() && src_[e] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
      is_float = true;
      ++e;
      while (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) ++e;
    }
    if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t k = e + 1;
      if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
      if (k < src_.size() && std::isdigit(static_cast<unsigned char>(src_[k]))) {
        is_float = true;
        e = k;
        while (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) ++e;
      }
    }
    std::string num;
    for (char d : src_.substr(pos, e - pos))
      if (d != '_') num += d;
    out.push_back({is_float ? Tok::kFloat : Tok::kInt, num, line});
    return e;
  }

  // A quoted literal, escapes decoded (an unknown escape is kept as written).
  size_t lex_string(size_t pos, int line, std::vector<Token>& out) const {
    const char quote = src_[pos];
    std::string s;
    size_t k = pos + 1;
    for (;;) {
      if (k >= src_.size()) error(line, "unterminated string literal");
      const char d = src_[k];
      if (d == quote) break;
      if (d == '\\' && k + 1 < src_.size()) {
        const char e = src_[k + 1];
        k += 2;
        switch (e) {
          case 'n':
            s += '\n';
            break;
          case 't':
            s += '\t';
            break;
          case 'r':
            s += '\r';
            break;
          case '0':
            s += '\0';
            break;
          case '\\':
            s += '\\';
            break;
          case '\'':
            s += '\'';
            break;
          case '"':
            s += '"';
            break;
          case '\n':
            break;
          default:
            s += '\\';
            s += e;
        }
        continue;
      }
      s += d;
      ++k;
    }
    out.push_back({Tok::kString, std::move(s), line});
    return k + 1;
  }

  // The longest operator at `pos`; `braces` counts open '{' so that a dict's '}' is not read as
  // the end of an expression tag.
  size_t lex_operator(size_t pos, int line, std::vector<Token>& out, int& braces) const {
    static const char* const ops[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*",
                                      "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                                      "]",  "{",  "}",  ",",  ".",  ":",  "|"};
    for (const char* op : ops) {
      const size_t n = std::char_traits<char>::length(op);
      if (src_.substr(pos, n) == op) {
        out.push_back({Tok::kOp, op, line});
        if (op[0] == '{' && n == 1) ++braces;
        if (op[0] == '}' && n == 1 && braces > 0) --braces;
        return pos + n;
      }
    }
    error(line, fmt::format("unexpected character '{}'", src_[pos]));
  }

  std::string_view src_;
  int line_ = 1;
  size_t counted_ = 0;
  int lines_ = 1;
};

}  // namespace

std::vector<Segment> lex(std::string_view source) {
  return Lexer(source).run();
}

}  // namespace steermoe::jinja::detail
