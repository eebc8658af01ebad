// GGUF reader. Every count, length, dimension and offset read from the file is checked against
// the bytes actually present before it is used, so a corrupt or hostile file produces an Error
// naming the field, never an out-of-bounds read or a huge allocation.
#include "model/gguf.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstring>
#include <limits>

#include "common/error.hpp"

namespace steermoe::model {
namespace {

constexpr std::array<std::string_view, 13> kTypeNames = {
    "uint8", "int8",   "uint16", "int16",  "uint32", "int32",  "float32",
    "bool",  "string", "array",  "uint64", "int64",  "float64"};

// Bytes of one scalar of a fixed-size type; 0 for string / array.
uint64_t fixed_size(GgufType type) {
  switch (type) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool:
      return 1;
    case GgufType::kUint16:
    case GgufType::kInt16:
      return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32:
      return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64:
      return 8;
    case GgufType::kString:
    case GgufType::kArray:
      return 0;
  }
  return 0;
}

// Fewest bytes one value of `type` can occupy (used to bound counts by the bytes left).
uint64_t min_encoded_size(GgufType type) {
  if (type == GgufType::kString) return 8;  // u64 length, possibly empty
  if (type == GgufType::kArray) return 12;  // u32 element type + u64 count
  return fixed_size(type);
}

std::string describe(const GgufValue& value) {
  if (value.type() != GgufType::kArray) return std::string(gguf_type_name(value.type()));
  return fmt::format("array of {}", gguf_type_name(std::get<GgufArray>(value.value).element_type));
}

bool is_power_of_two(uint64_t x) {
  return x != 0 && (x & (x - 1)) == 0;
}

// Sequential little-endian reads with bounds checks; `where` is the file's display name.
class Cursor {
 public:
  Cursor(std::span<const std::byte> bytes, const std::string& where)
      : bytes_(bytes), where_(where) {}

  uint64_t position() const { return pos_; }
  uint64_t remaining() const { return bytes_.size() - pos_; }

  template <typename T>
  T read(const std::string& field) {
    need(sizeof(T), field);
    T value;
    std::memcpy(&value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }

  std::string read_string(const std::string& field, uint64_t max_bytes) {
    const auto length = read<uint64_t>(field);
    if (length > max_bytes) {
      fail(where_, field, "string length {} exceeds the limit of {} bytes", length, max_bytes);
    }
    need(length, field);
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), static_cast<size_t>(length));
    pos_ += length;
    return s;
  }

 private:
  void need(uint64_t n, const std::string& field) const {
    if (n > remaining()) {
      fail(where_, field, "expected {} bytes at offset {}, but the file ends at {}", n, pos_,
           bytes_.size());
    }
  }

  std::span<const std::byte> bytes_;
  const std::string& where_;
  uint64_t pos_ = 0;
};

GgufType read_type(Cursor& in, const std::string& where, const std::string& field) {
  const auto raw = in.read<uint32_t>(field);
  if (raw >= kTypeNames.size()) {
    fail(where, field, "expected a GGUF value type 0..12, found {}", raw);
  }
  return static_cast<GgufType>(raw);
}

GgufValue read_value(Cursor& in, GgufType type, const std::string& where, const std::string& field,
                     const GgufLimits& limits, uint32_t depth) {
  switch (type) {
    case GgufType::kUint8:
      return GgufValue::u8(in.read<uint8_t>(field));
    case GgufType::kInt8:
      return GgufValue::i8(in.read<int8_t>(field));
    case GgufType::kUint16:
      return GgufValue::u16(in.read<uint16_t>(field));
    case GgufType::kInt16:
      return GgufValue::i16(in.read<int16_t>(field));
    case GgufType::kUint32:
      return GgufValue::u32(in.read<uint32_t>(field));
    case GgufType::kInt32:
      return GgufValue::i32(in.read<int32_t>(field));
    case GgufType::kFloat32:
      return GgufValue::f32(in.read<float>(field));
    case GgufType::kBool: {
      const auto raw = in.read<uint8_t>(field);
      if (raw > 1) fail(where, field, "expected a bool (0 or 1), found {}", raw);
      return GgufValue::boolean(raw == 1);
    }
    case GgufType::kString:
      return GgufValue::string(in.read_string(field, limits.max_string_bytes));
    case GgufType::kArray: {
      if (depth >= limits.max_array_depth) {
        fail(where, field, "arrays nested deeper than {} levels", limits.max_array_depth);
      }
      GgufArray array;
      array.element_type = read_type(in, where, field + " element type");
      const auto count = in.read<uint64_t>(field + " element count");
      if (count > limits.max_array_items) {
        fail(where, field, "array of {} items exceeds the limit of {}", count,
             limits.max_array_items);
      }
      const uint64_t min_size = min_encoded_size(array.element_type);
      if (min_size > 0 && count > in.remaining() / min_size) {
        fail(where, field,
             "array of {} {} items needs at least {} bytes per item, only {} bytes left", count,
             gguf_type_name(array.element_type), min_size, in.remaining());
      }
      array.items.reserve(static_cast<size_t>(count));
      for (uint64_t i = 0; i < count; ++i) {
        // Items share the array's field name: formatting "key[i]" per item would dominate the
        // load time of a 150k-token vocabulary.
        array.items.push_back(read_value(in, array.element_type, where, field, limits, depth + 1));
      }
      return GgufValue::array(std::move(array));
    }
    case GgufType::kUint64:
      return GgufValue::u64(in.read<uint64_t>(field));
    case GgufType::kInt64:
      return GgufValue::i64(in.read<int64_t>(field));
    case GgufType::kFloat64:
      return GgufValue::f64(in.read<double>(field));
  }
  fail(where, field, "unknown value type");
}

// Integer value of any width, or nullopt if `value` is not an integer type (bool is not an
// integer here). Signed types fill `s` (is_signed), unsigned types fill `u`.
struct IntegerValue {
  bool is_signed;
  uint64_t u;
  int64_t s;
};
std::optional<IntegerValue> as_integer(const GgufValue& value) {
  return std::visit(
      [](const auto& v) -> std::optional<IntegerValue> {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool> || !std::is_integral_v<T>) {
          return std::nullopt;
        } else if constexpr (std::is_signed_v<T>) {
          return IntegerValue{true, 0, static_cast<int64_t>(v)};
        } else {
          return IntegerValue{false, static_cast<uint64_t>(v), 0};
        }
      },
      value.value);
}

// Table of ggml tensor types (numbering and block layout of ggml.h).
constexpr GgmlTypeTraits make_traits(uint32_t id, std::string_view name, uint64_t block_elements,
                                     uint64_t block_bytes) {
  return GgmlTypeTraits{id, name, block_elements, block_bytes, std::nullopt};
}
std::array<GgmlTypeTraits, 33> build_ggml_types() {
  std::array<GgmlTypeTraits, 33> t = {{
      make_traits(0, "F32", 1, 4),         make_traits(1, "F16", 1, 2),
      make_traits(2, "Q4_0", 32, 18),      make_traits(3, "Q4_1", 32, 20),
      make_traits(6, "Q5_0", 32, 22),      make_traits(7, "Q5_1", 32, 24),
      make_traits(8, "Q8_0", 32, 34),      make_traits(9, "Q8_1", 32, 36),
      make_traits(10, "Q2_K", 256, 84),    make_traits(11, "Q3_K", 256, 110),
      make_traits(12, "Q4_K", 256, 144),   make_traits(13, "Q5_K", 256, 176),
      make_traits(14, "Q6_K", 256, 210),   make_traits(15, "Q8_K", 256, 292),
      make_traits(16, "IQ2_XXS", 256, 66), make_traits(17, "IQ2_XS", 256, 74),
      make_traits(18, "IQ3_XXS", 256, 98), make_traits(19, "IQ1_S", 256, 50),
      make_traits(20, "IQ4_NL", 32, 18),   make_traits(21, "IQ3_S", 256, 110),
      make_traits(22, "IQ2_S", 256, 82),   make_traits(23, "IQ4_XS", 256, 136),
      make_traits(24, "I8", 1, 1),         make_traits(25, "I16", 1, 2),
      make_traits(26, "I32", 1, 4),        make_traits(27, "I64", 1, 8),
      make_traits(28, "F64", 1, 8),        make_traits(29, "IQ1_M", 256, 56),
      make_traits(30, "BF16", 1, 2),       make_traits(34, "TQ1_0", 256, 54),
      make_traits(35, "TQ2_0", 256, 66),   make_traits(39, "MXFP4", 32, 17),
      make_traits(0xffffffff, "", 0, 0),  // sentinel, never matched
  }};
  const std::pair<uint32_t, DType> viewable[] = {
      {0, DType::kF32},   {1, DType::kF16},   {8, DType::kQ8_0}, {2, DType::kQ4_0},
      {3, DType::kQ4_1},  {6, DType::kQ5_0},  {7, DType::kQ5_1}, {12, DType::kQ4_K},
      {13, DType::kQ5_K}, {14, DType::kQ6_K}, {24, DType::kI8},  {25, DType::kI16},
      {26, DType::kI32},  {27, DType::kI64},  {28, DType::kF64}, {30, DType::kBF16},
      {10, DType::kQ2_K}, {11, DType::kQ3_K}};
  for (auto& traits : t) {
    for (const auto& [id, dtype] : viewable) {
      if (traits.id == id && !traits.name.empty()) traits.dtype = dtype;
    }
  }
  return t;
}
const std::array<GgmlTypeTraits, 33>& ggml_types() {
  static const auto table = build_ggml_types();
  return table;
}

}  // namespace

std::string_view gguf_type_name(GgufType type) {
  const auto index = static_cast<size_t>(type);
  return index < kTypeNames.size() ? kTypeNames[index] : std::string_view("invalid");
}

bool GgufArray::operator==(const GgufArray& other) const {
  return element_type == other.element_type && items == other.items;
}

GgufValue GgufValue::string_array(const std::vector<std::string>& items) {
  GgufArray a{GgufType::kString, {}};
  a.items.reserve(items.size());
  for (const auto& s : items) a.items.push_back(string(s));
  return array(std::move(a));
}
GgufValue GgufValue::f32_array(std::span<const float> items) {
  GgufArray a{GgufType::kFloat32, {}};
  for (float v : items) a.items.push_back(f32(v));
  return array(std::move(a));
}
GgufValue GgufValue::i32_array(std::span<const int32_t> items) {
  GgufArray a{GgufType::kInt32, {}};
  for (int32_t v : items) a.items.push_back(i32(v));
  return array(std::move(a));
}
GgufValue GgufValue::u32_array(std::span<const uint32_t> items) {
  GgufArray a{GgufType::kUint32, {}};
  for (uint32_t v : items) a.items.push_back(u32(v));
  return array(std::move(a));
}
GgufValue GgufValue::bool_array(const std::vector<bool>& items) {
  GgufArray a{GgufType::kBool, {}};
  for (bool v : items) a.items.push_back(boolean(v));
  return array(std::move(a));
}

std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t ggml_type) {
  for (const auto& traits : ggml_types()) {
    if (traits.id == ggml_type && !traits.name.empty()) return traits;
  }
  return std::nullopt;
}

std::optional<uint32_t> ggml_type_of(DType dtype) {
  for (const auto& traits : ggml_types()) {
    if (traits.dtype == dtype) return traits.id;
  }
  return std::nullopt;
}

GgufFile GgufFile::open(const std::filesystem::path& path, const GgufLimits& limits) {
  GgufFile file;
  file.name_ = path.string();
  file.file_ = MappedFile::open(path);
  file.bytes_ = file.file_.bytes();
  file.parse(limits);
  return file;
}

GgufFile GgufFile::from_bytes(std::vector<std::byte> bytes, std::string display_name,
                              const GgufLimits& limits) {
  GgufFile file;
  file.name_ = std::move(display_name);
  file.owned_ = std::move(bytes);
  file.bytes_ = file.owned_;
  file.parse(limits);
  return file;
}

void GgufFile::parse(const GgufLimits& limits) {
  const std::string& where = name_;
  Cursor in(bytes_, where);

  // ---- header ----
  if (bytes_.size() < 4)
    fail(where, "magic", "expected \"GGUF\", but the file has {} bytes", bytes_.size());
  const auto magic = in.read<uint32_t>("magic");
  if (magic != kMagic) {
    fail(where, "magic", "expected \"GGUF\" (47 47 55 46), found {:02x} {:02x} {:02x} {:02x}",
         magic & 0xff, (magic >> 8) & 0xff, (magic >> 16) & 0xff, magic >> 24);
  }
  version_ = in.read<uint32_t>("version");
  if (version_ != 2 && version_ != 3) {
    fail(where, "version", "expected 2 or 3, found {}{}", version_,
         (version_ & 0xffff) == 0 ? " (a big-endian GGUF? only little-endian is supported)" : "");
  }
  const auto n_tensors = in.read<uint64_t>("tensor count");
  const auto n_kv = in.read<uint64_t>("metadata key count");
  // Every key/value needs >= 14 bytes (8 length + 1 char + 4 type + 1 value) and every tensor
  // info >= 33 bytes (8 length + 1 char + 4 n_dims + 8 ne + 4 type + 8 offset).
  if (n_kv > in.remaining() / 14) {
    fail(where, "metadata key count", "{} keys cannot fit in the {} bytes left", n_kv,
         in.remaining());
  }
  if (n_tensors > in.remaining() / 33) {
    fail(where, "tensor count", "{} tensors cannot fit in the {} bytes left", n_tensors,
         in.remaining());
  }

  // ---- metadata ----
  metadata_.reserve(static_cast<size_t>(n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) {
    const std::string key_field = fmt::format("metadata key #{}", i);
    std::string key = in.read_string(key_field, limits.max_string_bytes);
    if (key.empty()) fail(where, key_field, "expected a non-empty key");
    const std::string field = fmt::format("metadata key '{}'", key);
    if (metadata_index_.count(key) != 0) fail(where, field, "duplicate key");
    const GgufType type = read_type(in, where, field + " type");
    GgufValue value = read_value(in, type, where, field, limits, 0);
    metadata_index_.emplace(key, metadata_.size());
    metadata_.emplace_back(std::move(key), std::move(value));
  }

  alignment_ = kDefaultAlignment;
  if (const GgufValue* a = find("general.alignment")) {
    const auto integer = as_integer(*a);
    if (!integer) {
      fail(where, "metadata key 'general.alignment'", "expected an unsigned integer, found {}",
           describe(*a));
    }
    const uint64_t value =
        integer->is_signed ? static_cast<uint64_t>(std::max<int64_t>(integer->s, 0)) : integer->u;
    if (!is_power_of_two(value) || value > (uint64_t{1} << 30)) {
      fail(where, "metadata key 'general.alignment'", "expected a power of two <= 2^30, found {}",
           integer->is_signed ? fmt::to_string(integer->s) : fmt::to_string(integer->u));
    }
    alignment_ = value;
  }

  // ---- tensor infos ----
  tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    const std::string name_field = fmt::format("tensor #{} name", i);
    GgufTensorInfo info;
    info.name = in.read_string(name_field, limits.max_string_bytes);
    if (info.name.empty()) fail(where, name_field, "expected a non-empty tensor name");
    const std::string field = fmt::format("tensor '{}'", info.name);
    if (tensor_index_.count(info.name) != 0) fail(where, field, "duplicate tensor name");
    const auto n_dims = in.read<uint32_t>(field + " n_dims");
    if (n_dims < 1 || n_dims > 4) fail(where, field, "expected 1..4 dimensions, found {}", n_dims);
    info.elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const auto ne = in.read<uint64_t>(fmt::format("{} ne[{}]", field, d));
      if (ne > limits.max_dimension) {
        fail(where, field, "dimension ne[{}] = {} exceeds the limit of {}", d, ne,
             limits.max_dimension);
      }
      if (__builtin_mul_overflow(info.elements, ne, &info.elements)) {
        fail(where, field, "element count overflows 64 bits");
      }
      info.ne.push_back(ne);
    }
    info.shape.assign(info.ne.rbegin(), info.ne.rend());
    info.ggml_type = in.read<uint32_t>(field + " type");
    const auto traits = ggml_type_traits(info.ggml_type);
    if (!traits) fail(where, field, "unknown ggml tensor type {}", info.ggml_type);
    info.type_name = traits->name;
    info.dtype = traits->dtype;
    if (info.ne[0] % traits->block_elements != 0) {
      fail(where, field, "type {} needs ne[0] to be a multiple of {}, found {}", traits->name,
           traits->block_elements, info.ne[0]);
    }
    if (__builtin_mul_overflow(info.elements / traits->block_elements, traits->block_bytes,
                               &info.nbytes)) {
      fail(where, field, "byte size overflows 64 bits");
    }
    info.offset = in.read<uint64_t>(field + " offset");
    if (info.offset % alignment_ != 0) {
      fail(where, field, "offset {} is not a multiple of the alignment {}", info.offset,
           alignment_);
    }
    tensor_index_.emplace(info.name, tensors_.size());
    tensors_.push_back(std::move(info));
  }

  // ---- data section ----
  const uint64_t header_end = in.position();
  data_offset_ = (header_end + alignment_ - 1) / alignment_ * alignment_;  // no overflow: < 2^63
  if (tensors_.empty()) return;  // a metadata-only file (e.g. a vocabulary) may omit the padding
  if (data_offset_ > bytes_.size()) {
    fail(where, "data section", "expected to start at offset {}, but the file has {} bytes",
         data_offset_, bytes_.size());
  }
  const uint64_t data_size = bytes_.size() - data_offset_;
  std::vector<const GgufTensorInfo*> by_offset;
  by_offset.reserve(tensors_.size());
  for (const auto& info : tensors_) {
    if (info.offset > data_size || info.nbytes > data_size - info.offset) {
      fail(where, fmt::format("tensor '{}'", info.name),
           "{} bytes at offset {} of the data section lie outside it ({} bytes)", info.nbytes,
           info.offset, data_size);  // offset + nbytes could wrap: printed as given
    }
    by_offset.push_back(&info);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto* a, const auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const auto* prev = by_offset[i - 1];
    const auto* cur = by_offset[i];
    if (cur->offset < prev->offset + prev->nbytes) {
      fail(where, fmt::format("tensor '{}'", cur->name),
           "bytes [{}, {}) overlap tensor '{}' at [{}, {})", cur->offset, cur->offset + cur->nbytes,
           prev->name, prev->offset, prev->offset + prev->nbytes);
    }
  }
}

const GgufValue* GgufFile::find(std::string_view key) const {
  const auto it = metadata_index_.find(std::string(key));
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

const GgufValue& GgufFile::get(std::string_view key) const {
  const GgufValue* value = find(key);
  if (value == nullptr) fail(name_, fmt::format("metadata key '{}'", key), "missing");
  return *value;
}

void GgufFile::key_type_error(std::string_view key, std::string_view expected,
                              const GgufValue& found) const {
  fail(name_, fmt::format("metadata key '{}'", key), "expected {}, found {}", expected,
       describe(found));
}

namespace {
template <GgufType kType>
const auto& exact(const GgufValue& value) {
  return std::get<static_cast<size_t>(kType)>(value.value);
}
}  // namespace

#define SM_GGUF_STRICT_GETTER(method, ret, kind)                                \
  ret GgufFile::method(std::string_view key) const {                            \
    const GgufValue& value = get(key);                                          \
    if (value.type() != kind) key_type_error(key, gguf_type_name(kind), value); \
    return exact<kind>(value);                                                  \
  }
SM_GGUF_STRICT_GETTER(get_u8, uint8_t, GgufType::kUint8)
SM_GGUF_STRICT_GETTER(get_u32, uint32_t, GgufType::kUint32)
SM_GGUF_STRICT_GETTER(get_i32, int32_t, GgufType::kInt32)
SM_GGUF_STRICT_GETTER(get_u64, uint64_t, GgufType::kUint64)
SM_GGUF_STRICT_GETTER(get_f32, float, GgufType::kFloat32)
SM_GGUF_STRICT_GETTER(get_bool, bool, GgufType::kBool)
SM_GGUF_STRICT_GETTER(get_string, const std::string&, GgufType::kString)
SM_GGUF_STRICT_GETTER(get_array, const GgufArray&, GgufType::kArray)
#undef SM_GGUF_STRICT_GETTER

std::vector<std::string> GgufFile::get_string_array(std::string_view key) const {
  const GgufValue& value = get(key);
  if (value.type() != GgufType::kArray ||
      exact<GgufType::kArray>(value).element_type != GgufType::kString) {
    key_type_error(key, "array of string", value);
  }
  std::vector<std::string> out;
  const auto& items = exact<GgufType::kArray>(value).items;
  out.reserve(items.size());
  for (const auto& item : items) out.push_back(exact<GgufType::kString>(item));
  return out;
}

std::vector<float> GgufFile::get_f32_array(std::string_view key) const {
  const GgufValue& value = get(key);
  if (value.type() != GgufType::kArray ||
      exact<GgufType::kArray>(value).element_type != GgufType::kFloat32) {
    key_type_error(key, "array of float32", value);
  }
  std::vector<float> out;
  for (const auto& item : exact<GgufType::kArray>(value).items)
    out.push_back(exact<GgufType::kFloat32>(item));
  return out;
}

std::vector<int32_t> GgufFile::get_i32_array(std::string_view key) const {
  const GgufValue& value = get(key);
  if (value.type() != GgufType::kArray ||
      exact<GgufType::kArray>(value).element_type != GgufType::kInt32) {
    key_type_error(key, "array of int32", value);
  }
  std::vector<int32_t> out;
  for (const auto& item : exact<GgufType::kArray>(value).items)
    out.push_back(exact<GgufType::kInt32>(item));
  return out;
}

uint64_t GgufFile::get_uint(std::string_view key) const {
  const GgufValue& value = get(key);
  const auto integer = as_integer(value);
  if (!integer) key_type_error(key, "an integer", value);
  if (integer->is_signed) {
    if (integer->s < 0) {
      fail(name_, fmt::format("metadata key '{}'", key), "value {} does not fit in uint64",
           integer->s);
    }
    return static_cast<uint64_t>(integer->s);
  }
  return integer->u;
}

int64_t GgufFile::get_int(std::string_view key) const {
  const GgufValue& value = get(key);
  const auto integer = as_integer(value);
  if (!integer) key_type_error(key, "an integer", value);
  if (integer->is_signed) return integer->s;
  if (integer->u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    fail(name_, fmt::format("metadata key '{}'", key), "value {} does not fit in int64",
         integer->u);
  }
  return static_cast<int64_t>(integer->u);
}

double GgufFile::get_float(std::string_view key) const {
  const GgufValue& value = get(key);
  if (value.type() == GgufType::kFloat32) return exact<GgufType::kFloat32>(value);
  if (value.type() == GgufType::kFloat64) return exact<GgufType::kFloat64>(value);
  key_type_error(key, "float32 or float64", value);
}

std::vector<int64_t> GgufFile::get_int_array(std::string_view key) const {
  const GgufValue& value = get(key);
  if (value.type() != GgufType::kArray) key_type_error(key, "array of integers", value);
  std::vector<int64_t> out;
  for (const auto& item : exact<GgufType::kArray>(value).items) {
    const auto integer = as_integer(item);
    if (!integer) key_type_error(key, "array of integers", value);
    if (!integer->is_signed &&
        integer->u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      fail(name_, fmt::format("metadata key '{}'", key), "value {} does not fit in int64",
           integer->u);
    }
    out.push_back(integer->is_signed ? integer->s : static_cast<int64_t>(integer->u));
  }
  return out;
}

std::optional<uint64_t> GgufFile::find_uint(std::string_view key) const {
  return has(key) ? std::optional(get_uint(key)) : std::nullopt;
}
std::optional<int64_t> GgufFile::find_int(std::string_view key) const {
  return has(key) ? std::optional(get_int(key)) : std::nullopt;
}
std::optional<double> GgufFile::find_float(std::string_view key) const {
  return has(key) ? std::optional(get_float(key)) : std::nullopt;
}
std::optional<bool> GgufFile::find_bool(std::string_view key) const {
  return has(key) ? std::optional(get_bool(key)) : std::nullopt;
}
std::optional<std::string> GgufFile::find_string(std::string_view key) const {
  return has(key) ? std::optional(get_string(key)) : std::nullopt;
}

const GgufTensorInfo* GgufFile::find_tensor_info(std::string_view name) const {
  const auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

TensorView GgufFile::view_of(const GgufTensorInfo& info) const {
  if (!info.dtype) {
    fail(name_, fmt::format("tensor '{}'", info.name),
         "type {} is not supported (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, "
         "Q4_K, Q5_K, Q6_K, F64, I8, I16, I32, I64)",
         info.type_name);
  }
  TensorView view;
  view.name = info.name;
  view.dtype = *info.dtype;
  view.shape = info.shape;
  view.data = bytes_.data() + data_offset_ + info.offset;
  view.nbytes = info.nbytes;
  return view;
}

TensorView GgufFile::tensor(std::string_view name) const {
  const GgufTensorInfo* info = find_tensor_info(name);
  if (info == nullptr) fail(name_, fmt::format("tensor '{}'", name), "missing");
  return view_of(*info);
}

std::optional<TensorView> GgufFile::find_tensor(std::string_view name) const {
  const GgufTensorInfo* info = find_tensor_info(name);
  if (info == nullptr) return std::nullopt;
  return view_of(*info);
}

bool is_gguf_path(const std::filesystem::path& path) {
  std::string ext = path.extension().string();
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext == ".gguf";
}

}  // namespace steermoe::model
