// GGUF (llama.cpp's weight file, versions 2 and 3): a hardened reader over a mapped file or a
// byte buffer, and a streaming writer. Layout (little-endian):
//   "GGUF" u32 version, u64 n_tensors, u64 n_kv,
//   n_kv x (string key, u32 value type, value), n_tensors x (string name, u32 n_dims,
//   n_dims x u64 ne, u32 ggml type, u64 offset), padding to `general.alignment` (default 32),
//   data section (each tensor at data_start + offset, offsets aligned).
// Strings are u64 length + bytes (no terminator). Arrays are u32 element type, u64 count, items.
//
// Shapes: GGUF lists dimensions innermost first (ne[0] is contiguous). TensorView::shape and
// GgufTensorInfo::shape are reversed(ne), i.e. row-major outermost first, the HuggingFace
// convention: GGUF `token_embd.weight` with ne = [hidden, vocab] has shape [vocab, hidden].
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "model/dtype.hpp"
#include "model/file_writer.hpp"
#include "model/pending_tensor.hpp"

namespace steermoe::model {

// GGUF metadata value types (numbering of the format).
enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
// "uint32", "string", "array", ... (used in error messages).
std::string_view gguf_type_name(GgufType type);

struct GgufValue;
// A GGUF array: element type and items (items all have type element_type; nested arrays are
// legal in the format and supported).
struct GgufArray {
  GgufType element_type = GgufType::kUint8;
  std::vector<GgufValue> items;
  bool operator==(const GgufArray&) const;
};

// One metadata value. The variant's index equals the GgufType number, so type() is exact.
struct GgufValue {
  using Storage = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool,
                               std::string, GgufArray, uint64_t, int64_t, double>;
  Storage value;

  GgufType type() const { return static_cast<GgufType>(value.index()); }
  bool operator==(const GgufValue&) const = default;

  // Builders (mainly for the writer and tests).
  static GgufValue u8(uint8_t v) { return {Storage(std::in_place_index<0>, v)}; }
  static GgufValue i8(int8_t v) { return {Storage(std::in_place_index<1>, v)}; }
  static GgufValue u16(uint16_t v) { return {Storage(std::in_place_index<2>, v)}; }
  static GgufValue i16(int16_t v) { return {Storage(std::in_place_index<3>, v)}; }
  static GgufValue u32(uint32_t v) { return {Storage(std::in_place_index<4>, v)}; }
  static GgufValue i32(int32_t v) { return {Storage(std::in_place_index<5>, v)}; }
  static GgufValue f32(float v) { return {Storage(std::in_place_index<6>, v)}; }
  static GgufValue boolean(bool v) { return {Storage(std::in_place_index<7>, v)}; }
  static GgufValue string(std::string v) { return {Storage(std::in_place_index<8>, std::move(v))}; }
  static GgufValue array(GgufArray v) { return {Storage(std::in_place_index<9>, std::move(v))}; }
  static GgufValue u64(uint64_t v) { return {Storage(std::in_place_index<10>, v)}; }
  static GgufValue i64(int64_t v) { return {Storage(std::in_place_index<11>, v)}; }
  static GgufValue f64(double v) { return {Storage(std::in_place_index<12>, v)}; }
  static GgufValue string_array(const std::vector<std::string>& items);
  static GgufValue f32_array(std::span<const float> items);
  static GgufValue i32_array(std::span<const int32_t> items);
  static GgufValue u32_array(std::span<const uint32_t> items);
  static GgufValue bool_array(const std::vector<bool>& items);
};

// ggml tensor type numbers the reader knows the block layout of (enough to bound every tensor;
// only the ones with a DType can be viewed).
struct GgmlTypeTraits {
  uint32_t id = 0;
  std::string_view name;        // "F32", "Q4_K", ...
  uint64_t block_elements = 0;  // elements per block
  uint64_t block_bytes = 0;     // bytes per block
  std::optional<DType> dtype;   // nullopt: known layout, but steermoe cannot use it
};
// nullopt for unknown / removed type numbers.
std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t ggml_type);
// ggml type number for a DType GGUF can store (F32, F16, BF16, F64, I8, I16, I32, I64 and the
// block types Q8_0 .. Q6_K);
// nullopt otherwise.
std::optional<uint32_t> ggml_type_of(DType dtype);

struct GgufTensorInfo {
  std::string name;
  uint32_t ggml_type = 0;       // raw ggml type number
  std::string_view type_name;   // "F32", "Q4_K", ...
  std::optional<DType> dtype;   // nullopt: a type steermoe cannot view (e.g. Q4_K)
  std::vector<uint64_t> ne;     // GGUF order: ne[0] innermost (contiguous)
  std::vector<uint64_t> shape;  // reversed(ne): row-major, outermost first
  uint64_t elements = 0;        // product of ne
  uint64_t offset = 0;          // from the start of the data section
  uint64_t nbytes = 0;          // bytes in the data section
};

// Limits applied while parsing (a file exceeding them is rejected with a message naming the
// limit). Defaults are far above any real model.
struct GgufLimits {
  uint64_t max_string_bytes = uint64_t{1} << 30;  // one key / name / string value
  uint64_t max_array_items = uint64_t{1} << 24;   // per array (vocabularies are ~10^5)
  uint32_t max_array_depth = 8;                   // nested arrays
  uint64_t max_dimension = uint64_t{1} << 40;     // one ne[i]
};

class GgufFile {
 public:
  static constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as little-endian u32
  static constexpr uint64_t kDefaultAlignment = 32;

  // Maps and parses a file. Throws steermoe::Error "<path>: <field>: <what was expected>".
  static GgufFile open(const std::filesystem::path& path, const GgufLimits& limits = {});
  // Parses bytes owned by the returned object (fuzzer, tests). `display_name` stands in for the
  // file name in error messages.
  static GgufFile from_bytes(std::vector<std::byte> bytes, std::string display_name,
                             const GgufLimits& limits = {});

  GgufFile(GgufFile&&) noexcept = default;
  GgufFile& operator=(GgufFile&&) noexcept = default;

  const std::string& name() const { return name_; }  // path or display name
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // absolute offset of the data section
  std::span<const std::byte> bytes() const { return bytes_; }

  // ---- metadata ----
  // All key/value pairs in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  bool has(std::string_view key) const { return find(key) != nullptr; }
  const GgufValue* find(std::string_view key) const;  // nullptr if absent
  // Throws "<file>: metadata key 'k': missing" if absent.
  const GgufValue& get(std::string_view key) const;

  // Strict typed getters: the stored type must match exactly, otherwise
  // "<file>: metadata key 'x': expected uint32, found string".
  uint8_t get_u8(std::string_view key) const;
  uint32_t get_u32(std::string_view key) const;
  int32_t get_i32(std::string_view key) const;
  uint64_t get_u64(std::string_view key) const;
  float get_f32(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  const std::string& get_string(std::string_view key) const;
  const GgufArray& get_array(std::string_view key) const;
  // Arrays with a required element type ("expected array of string, found array of int32").
  std::vector<std::string> get_string_array(std::string_view key) const;
  std::vector<float> get_f32_array(std::string_view key) const;
  std::vector<int32_t> get_i32_array(std::string_view key) const;

  // Lenient numeric getters: any integer type whose value fits (writers disagree on u32 vs i32
  // vs u64 for counts); get_float accepts float32 / float64. Messages as above, plus
  // "value -1 does not fit in uint64" when out of range.
  uint64_t get_uint(std::string_view key) const;
  int64_t get_int(std::string_view key) const;
  double get_float(std::string_view key) const;
  // Integer arrays of any integer element type, converted to int64 (e.g. token_type,
  // per-layer head counts).
  std::vector<int64_t> get_int_array(std::string_view key) const;

  // Optional variants: nullopt if the key is absent, Error if present with the wrong type.
  std::optional<uint64_t> find_uint(std::string_view key) const;
  std::optional<int64_t> find_int(std::string_view key) const;
  std::optional<double> find_float(std::string_view key) const;
  std::optional<bool> find_bool(std::string_view key) const;
  std::optional<std::string> find_string(std::string_view key) const;

  // ---- tensors ----
  const std::vector<GgufTensorInfo>& tensor_infos() const { return tensors_; }  // file order
  const GgufTensorInfo* find_tensor_info(std::string_view name) const;
  bool has_tensor(std::string_view name) const { return find_tensor_info(name) != nullptr; }
  // A view of a tensor's bytes. Throws "<file>: tensor 'x': missing" or "...: type Q4_K is not
  // supported" for types without a DType.
  TensorView tensor(std::string_view name) const;
  std::optional<TensorView> find_tensor(std::string_view name) const;

  // Throws if the mapped file changed on disk since it was opened (MappedFile::check_unchanged).
  void check_unchanged() const { file_.check_unchanged(); }
  // The mapping (empty when parsed from bytes): Model::load moves its non-expert weights into
  // 2 MiB pages (MappedFile::promote_to_huge_pages).
  MappedFile& mapping() { return file_; }

 private:
  GgufFile() = default;
  void parse(const GgufLimits& limits);
  [[noreturn]] void key_type_error(std::string_view key, std::string_view expected,
                                   const GgufValue& found) const;
  TensorView view_of(const GgufTensorInfo& info) const;

  std::string name_;
  MappedFile file_;               // when opened from a path
  std::vector<std::byte> owned_;  // when parsed from bytes
  std::span<const std::byte> bytes_;
  uint32_t version_ = 0;
  uint64_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::unordered_map<std::string, size_t> metadata_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

// Streaming GGUF v3 writer. Declare metadata and tensors, then finish() writes the header and
// streams every tensor's bytes in declaration order (each padded to the alignment), so a
// multi-GB model never sits in memory. Writes `general.alignment` only if it differs from 32.
// The output goes to "<path>.tmp" and is renamed onto `path` when complete.
class GgufWriter {
 public:
  explicit GgufWriter(std::filesystem::path path, uint64_t alignment = GgufFile::kDefaultAlignment);

  // Metadata in insertion order; an empty or duplicate key throws steermoe::Error.
  void add(std::string key, GgufValue value);

  // Declares a tensor. `shape` is row-major outermost first (HF convention); the file stores
  // ne = reversed(shape). dtype must be storable in GGUF (see ggml_type_of).
  // (1) bytes that stay valid until finish() returns;
  void add_tensor(std::string name, DType dtype, std::vector<uint64_t> shape,
                  std::span<const std::byte> bytes);
  // (2) a producer called during finish() that must write exactly the tensor's byte size.
  void add_tensor(std::string name, DType dtype, std::vector<uint64_t> shape,
                  TensorBytesFn produce);
  // Convenience: f32 values stored as `dtype` (F32, F16, BF16, Q8_0), converted in chunks
  // while writing; `values` must stay valid until finish().
  void add_tensor_f32(std::string name, DType dtype, std::vector<uint64_t> shape,
                      std::span<const float> values);

  // Writes the file. Throws steermoe::Error on I/O errors or if a producer wrote the wrong
  // number of bytes (the temporary file is removed).
  void finish();
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  uint64_t alignment_;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<PendingTensor> tensors_;
  bool finished_ = false;
};

// Whether a path names a GGUF file (its extension .gguf in any case: "out.GGUF" is one too);
// every reader and writer decides GGUF against folder through this.
bool is_gguf_path(const std::filesystem::path& path);

// llama.cpp's split models (gguf-split, as published for the large MoE models): files named
// PREFIX-00001-of-0000N.gguf in one folder, each a GGUF file of its own holding some of the
// tensors, with split.no (uint16, from 0), split.count (uint16) and split.tensors.count (int32,
// all files' tensors); the first also holds the model's metadata. `path` may name any file of
// the set. Returns the first file of the set, or `path` when its name is not of that form.
std::filesystem::path gguf_split_first(const std::filesystem::path& path);
// Every file name of the set `path` belongs to, by its name (not opened: they may be missing);
// `path` alone when its name is not of that form.
std::vector<std::filesystem::path> gguf_split_paths(const std::filesystem::path& path);
// Opens every file of the set `path` belongs to, the first (the metadata) first; a file that is
// not split: itself alone. Checks that every file is present and numbered as its name says,
// that the counts agree and that no tensor is in two files; errors name the file and the key.
std::vector<GgufFile> open_gguf_split(const std::filesystem::path& path,
                                      const GgufLimits& limits = {});

}  // namespace steermoe::model
