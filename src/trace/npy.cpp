#include "trace/npy.hpp"

#include <fmt/ranges.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <optional>
#include <string_view>

#include "common/mapped_file.hpp"

namespace steermoe::trace {
namespace {

constexpr uint8_t kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
constexpr size_t kHeaderAlign = 64;

std::string shape_text(std::span<const uint64_t> shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// A minimal reader for the Python dict literal numpy writes:
// {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
class DictParser {
 public:
  DictParser(std::string_view text, const std::string& where) : text_(text), where_(where) {}

  NpyHeader parse() {
    std::optional<std::string> descr;
    std::optional<bool> fortran;
    std::optional<std::vector<uint64_t>> shape;
    skip_space();
    expect('{', "header dict", "a Python dict starting with '{'");
    while (true) {
      skip_space();
      if (peek() == '}') {
        ++pos_;
        break;
      }
      const std::string key = parse_string("header dict key");
      skip_space();
      expect(':', "header dict", "':' after key '" + key + "'");
      skip_space();
      if (key == "descr") {
        if (descr) bad(key, "a single 'descr' entry (found it twice)");
        descr = parse_string("descr");
      } else if (key == "fortran_order") {
        if (fortran) bad(key, "a single 'fortran_order' entry (found it twice)");
        fortran = parse_bool(key);
      } else if (key == "shape") {
        if (shape) bad(key, "a single 'shape' entry (found it twice)");
        shape = parse_shape();
      } else {
        bad("header dict",
            "only the keys 'descr', 'fortran_order' and 'shape' (found '" + key + "')");
      }
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      skip_space();
      expect('}', "header dict", "',' or '}' after the value of '" + key + "'");
      break;
    }
    // numpy pads with spaces and ends the header with a newline.
    for (; pos_ < text_.size(); ++pos_) {
      const char c = text_[pos_];
      if (c != ' ' && c != '\n' && c != '\t' && c != '\r' && c != '\0')
        bad("header dict", "only padding after the closing '}'");
    }
    if (!descr) bad("descr", "a 'descr' entry (the dtype)");
    if (!fortran) bad("fortran_order", "a 'fortran_order' entry");
    if (!shape) bad("shape", "a 'shape' entry");
    if (*fortran) bad("fortran_order", "False (C order); Fortran-order arrays are not supported");
    NpyHeader header;
    header.dtype = parse_descr(*descr);
    header.shape = std::move(*shape);
    return header;
  }

 private:
  [[noreturn]] void bad(const std::string& field, const std::string& expected) {
    fail(where_, field, "expected {}", expected);
  }
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t')) ++pos_;
  }
  void expect(char c, const std::string& field, const std::string& what) {
    if (peek() != c) bad(field, what);
    ++pos_;
  }
  std::string parse_string(const std::string& field) {
    const char quote = peek();
    if (quote != '\'' && quote != '"') bad(field, "a quoted string");
    const size_t end = text_.find(quote, pos_ + 1);
    if (end == std::string_view::npos) bad(field, "a closing quote");
    std::string value(text_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return value;
  }
  bool parse_bool(const std::string& field) {
    if (text_.substr(pos_, 4) == "True") {
      pos_ += 4;
      return true;
    }
    if (text_.substr(pos_, 5) == "False") {
      pos_ += 5;
      return false;
    }
    bad(field, "True or False");
  }
  std::vector<uint64_t> parse_shape() {
    expect('(', "shape", "a tuple of non-negative integers such as (3, 4)");
    std::vector<uint64_t> dims;
    while (true) {
      skip_space();
      if (peek() == ')') {
        ++pos_;
        break;
      }
      if (peek() < '0' || peek() > '9')
        bad("shape", "a tuple of non-negative integers such as (3, 4)");
      uint64_t value = 0;
      while (peek() >= '0' && peek() <= '9') {
        const uint64_t digit = static_cast<uint64_t>(peek() - '0');
        if (value > (std::numeric_limits<uint64_t>::max() - digit) / 10)
          bad("shape", "dimensions that fit in 64 bits");
        value = value * 10 + digit;
        ++pos_;
      }
      // Python writes 3L for longs in very old numpy versions.
      if (peek() == 'L') ++pos_;
      dims.push_back(value);
      if (dims.size() > 32) bad("shape", "at most 32 dimensions");
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      skip_space();
      expect(')', "shape", "',' or ')' in the shape tuple");
      break;
    }
    return dims;
  }
  DType parse_descr(const std::string& descr) {
    if (descr == "<f4") return DType::kF32;
    if (descr == "<i4") return DType::kI32;
    if (descr == "<i8") return DType::kI64;
    if (!descr.empty() && descr[0] == '>')
      bad("descr",
          "a little-endian dtype ('<f4', '<i4' or '<i8'), found big-endian '" + descr + "'");
    bad("descr", "one of '<f4', '<i4', '<i8' (found '" + descr + "')");
  }

  std::string_view text_;
  const std::string& where_;
  size_t pos_ = 0;
};

}  // namespace

const char* dtype_descr(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "<f4";
    case DType::kI32:
      return "<i4";
    case DType::kI64:
      return "<i8";
  }
  SM_ASSERT(false);
  return "";
}

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kI32:
      return 4;
    case DType::kI64:
      return 8;
  }
  SM_ASSERT(false);
  return 0;
}

uint64_t NpyHeader::element_count() const {
  uint64_t count = 1;
  for (uint64_t dim : shape) count *= dim;  // overflow excluded by parse_npy_header
  return count;
}

NpyHeader parse_npy_header(std::span<const uint8_t> file, const std::string& where) {
  if (file.size() < 10 || std::memcmp(file.data(), kMagic, sizeof(kMagic)) != 0)
    fail(where, "magic", "expected a .npy file starting with \\x93NUMPY ({} bytes found)",
         file.size());
  const int major = file[6];
  const int minor = file[7];
  if (major < 1 || major > 3 || minor != 0)
    fail(where, "version", "expected format version 1.0, 2.0 or 3.0, found {}.{}", major, minor);
  size_t header_len = 0;
  size_t dict_start = 0;
  if (major == 1) {
    header_len = static_cast<size_t>(file[8]) | (static_cast<size_t>(file[9]) << 8);
    dict_start = 10;
  } else {
    if (file.size() < 12) fail(where, "header length", "expected 4 bytes of header length");
    header_len = static_cast<size_t>(file[8]) | (static_cast<size_t>(file[9]) << 8) |
                 (static_cast<size_t>(file[10]) << 16) | (static_cast<size_t>(file[11]) << 24);
    dict_start = 12;
  }
  if (header_len > file.size() - dict_start)
    fail(where, "header length",
         "expected a header of {} bytes, but the file has only {} bytes after the length field",
         header_len, file.size() - dict_start);
  const std::string_view dict(reinterpret_cast<const char*>(file.data() + dict_start), header_len);
  NpyHeader header = DictParser(dict, where).parse();
  header.major_version = major;
  header.data_offset = dict_start + header_len;

  uint64_t count = 1;
  for (uint64_t dim : header.shape) {
    if (dim != 0 && count > std::numeric_limits<uint64_t>::max() / dim / 8)
      fail(where, "shape", "expected a shape whose size fits in 64 bits, found {}",
           shape_text(header.shape));
    count *= dim;
  }
  const uint64_t expected = count * dtype_size(header.dtype);
  const uint64_t found = file.size() - header.data_offset;
  if (found < expected)
    fail(where, "data", "truncated: shape {} of {} needs {} bytes of data, found {}",
         shape_text(header.shape), dtype_descr(header.dtype), expected, found);
  if (found > expected)
    fail(where, "data", "shape {} of {} needs {} bytes of data, found {} (trailing bytes)",
         shape_text(header.shape), dtype_descr(header.dtype), expected, found);
  return header;
}

std::vector<uint8_t> encode_npy_header(DType dtype, std::span<const uint64_t> shape,
                                       size_t min_total) {
  std::string shape_tuple = "(";
  for (size_t i = 0; i < shape.size(); ++i)
    shape_tuple += fmt::format("{}{}", i ? ", " : "", shape[i]);
  if (shape.size() == 1) shape_tuple += ",";
  shape_tuple += ")";
  std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}",
                                 dtype_descr(dtype), shape_tuple);
  size_t total = 10 + dict.size() + 1;  // magic, version, length, dict, newline
  total = std::max(total, min_total);
  total = (total + kHeaderAlign - 1) / kHeaderAlign * kHeaderAlign;
  SM_ASSERT(total - 10 <= 0xffff);
  dict.append(total - 10 - dict.size() - 1, ' ');
  dict.push_back('\n');
  std::vector<uint8_t> out(kMagic, kMagic + sizeof(kMagic));
  out.push_back(1);
  out.push_back(0);
  const size_t len = dict.size();
  out.push_back(static_cast<uint8_t>(len & 0xff));
  out.push_back(static_cast<uint8_t>(len >> 8));
  out.insert(out.end(), dict.begin(), dict.end());
  SM_ASSERT(out.size() == total);
  return out;
}

void NpyArray::adopt(std::span<const uint8_t> file, const std::string& where,
                     std::initializer_list<DType> accepted) {
  where_ = where;
  header_ = parse_npy_header(file, where);
  bool ok = false;
  std::string names;
  for (DType d : accepted) {
    ok = ok || d == header_.dtype;
    names += fmt::format("{}'{}'", names.empty() ? "" : " or ", dtype_descr(d));
  }
  if (!ok) fail(where, "descr", "expected dtype {}, found '{}'", names, dtype_descr(header_.dtype));
  data_ = file.data() + header_.data_offset;
  if (reinterpret_cast<uintptr_t>(data_) % dtype_size(header_.dtype) != 0) {
    // A header whose length is not a multiple of the element size (legal, but numpy never writes
    // one): copy the data so the typed view is aligned.
    aligned_copy_.resize((header_.data_bytes() + 7) / 8);
    std::memcpy(aligned_copy_.data(), data_, header_.data_bytes());
    data_ = reinterpret_cast<const uint8_t*>(aligned_copy_.data());
  }
}

NpyArray NpyArray::open(const std::filesystem::path& path, std::initializer_list<DType> accepted) {
  NpyArray array;
  array.mapped_ =
      std::make_shared<const MappedFile>(MappedFile::open(path, "a trace or calibration file"));
  const std::span<const std::byte> bytes = array.mapped_->bytes();
  array.adopt({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, path.string(),
              accepted);
  return array;
}

NpyArray NpyArray::from_bytes(std::vector<uint8_t> bytes, const std::string& where,
                              std::initializer_list<DType> accepted) {
  NpyArray array;
  array.owned_ = std::move(bytes);
  array.adopt(array.owned_, where, accepted);
  return array;
}

void NpyArray::expect_shape(std::span<const uint64_t> expected) const {
  if (!std::equal(expected.begin(), expected.end(), header_.shape.begin(), header_.shape.end()))
    fail(where_, "shape", "expected {}, found {}", shape_text(expected), shape_text(header_.shape));
}

namespace {

std::FILE* open_for_writing(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) fail(path, "open", "cannot create the file ({})", std::strerror(errno));
  return file;
}

void write_all(std::FILE* file, const std::string& path, const void* data, size_t bytes) {
  if (bytes > 0 && std::fwrite(data, 1, bytes, file) != bytes)
    fail(path, "write", "could not write {} bytes ({})", bytes, std::strerror(errno));
}

}  // namespace

void write_npy(const std::filesystem::path& path, DType dtype, std::span<const uint64_t> shape,
               const void* data, size_t bytes) {
  const std::string name = path.string();
  uint64_t count = 1;
  for (uint64_t dim : shape) count *= dim;
  SM_ASSERT(count * dtype_size(dtype) == bytes);
  const std::vector<uint8_t> header = encode_npy_header(dtype, shape);
  std::FILE* file = open_for_writing(name);
  try {
    write_all(file, name, header.data(), header.size());
    write_all(file, name, data, bytes);
  } catch (...) {
    std::fclose(file);
    throw;
  }
  if (std::fclose(file) != 0)
    fail(name, "close", "could not finish writing ({})", std::strerror(errno));
}

namespace {
// Room for the largest shape the streaming writer can ever need (three 20-digit dimensions fit
// in well under 128 bytes).
constexpr size_t kStreamHeaderBytes = 128;
}  // namespace

NpyStreamWriter::NpyStreamWriter(const std::filesystem::path& path, DType dtype,
                                 std::vector<uint64_t> row_shape)
    : path_(path.string()), dtype_(dtype), row_shape_(std::move(row_shape)) {
  SM_ASSERT(row_shape_.size() <= 3);
  for (uint64_t dim : row_shape_) row_elements_ *= dim;
  file_ = open_for_writing(path_);
  std::vector<uint64_t> shape{0};
  shape.insert(shape.end(), row_shape_.begin(), row_shape_.end());
  const std::vector<uint8_t> header = encode_npy_header(dtype_, shape, kStreamHeaderBytes);
  write_all(file_, path_, header.data(), header.size());
}

NpyStreamWriter::~NpyStreamWriter() {
  try {
    close();
  } catch (...) {  // NOLINT(bugprone-empty-catch): destructors must not throw; close() reports
  }
}

void NpyStreamWriter::append_rows(const void* data, uint64_t count) {
  SM_ASSERT(file_ != nullptr);
  write_all(file_, path_, data, count * row_elements_ * dtype_size(dtype_));
  rows_ += count;
}

void NpyStreamWriter::close() {
  if (file_ == nullptr) return;
  std::FILE* file = file_;
  file_ = nullptr;
  std::vector<uint64_t> shape{rows_};
  shape.insert(shape.end(), row_shape_.begin(), row_shape_.end());
  const std::vector<uint8_t> header = encode_npy_header(dtype_, shape, kStreamHeaderBytes);
  SM_ASSERT(header.size() == kStreamHeaderBytes);
  bool ok = std::fseek(file, 0, SEEK_SET) == 0 &&
            std::fwrite(header.data(), 1, header.size(), file) == header.size();
  ok = (std::fclose(file) == 0) && ok;
  if (!ok) fail(path_, "close", "could not write the final header ({})", std::strerror(errno));
}

}  // namespace steermoe::trace
