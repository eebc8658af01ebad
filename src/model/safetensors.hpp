// safetensors (HuggingFace weight files): a reader that validates like the reference
// implementation, sharded checkpoints (model.safetensors.index.json), and streaming writers.
// Layout: u64 little-endian header length N, N bytes of UTF-8 JSON
//   {"__metadata__": {"k": "v", ...}, "name": {"dtype": "F32", "shape": [out, in],
//    "data_offsets": [begin, end]}, ...}
// then the data section; offsets are relative to the data section (8 + N).
// Shapes are row-major, outermost first (the same convention as TensorView).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/dtype.hpp"
#include "model/file_writer.hpp"
#include "model/pending_tensor.hpp"

namespace steermoe::model {

struct SafetensorsTensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<uint64_t> shape;  // row-major, outermost first
  uint64_t begin = 0;           // data_offsets[0], relative to the data section
  uint64_t end = 0;             // data_offsets[1]
  uint64_t nbytes() const { return end - begin; }
};

class SafetensorsFile {
 public:
  static constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // as the reference reader

  // Maps and parses a file. Throws steermoe::Error "<path>: <field>: <what was expected>".
  static SafetensorsFile open(const std::filesystem::path& path);
  // Parses bytes owned by the returned object; `display_name` stands in for the file name.
  static SafetensorsFile from_bytes(std::vector<std::byte> bytes, std::string display_name);

  SafetensorsFile(SafetensorsFile&&) noexcept = default;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept = default;

  const std::string& name() const { return name_; }
  uint64_t data_offset() const { return data_offset_; }  // 8 + header length
  // The whole file's bytes (the mapping when opened from a path): a tensor's file offset is
  // its data pointer minus bytes().data().
  std::span<const std::byte> bytes() const { return bytes_; }
  // The "__metadata__" string map (empty if absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Tensors sorted by data offset (= file order of the bytes).
  const std::vector<SafetensorsTensorInfo>& tensor_infos() const { return tensors_; }
  const SafetensorsTensorInfo* find_tensor_info(std::string_view name) const;
  bool has_tensor(std::string_view name) const { return find_tensor_info(name) != nullptr; }
  // Throws "<file>: tensor 'x': missing" if absent.
  TensorView tensor(std::string_view name) const;
  std::optional<TensorView> find_tensor(std::string_view name) const;

  // Throws if the mapped file changed on disk since it was opened (MappedFile::check_unchanged).
  void check_unchanged() const { file_.check_unchanged(); }
  // The mapping (empty when parsed from bytes), as GgufFile::mapping.
  MappedFile& mapping() { return file_; }

 private:
  SafetensorsFile() = default;
  void parse();
  TensorView view_of(const SafetensorsTensorInfo& info) const;

  std::string name_;
  MappedFile file_;
  std::vector<std::byte> owned_;
  std::span<const std::byte> bytes_;
  uint64_t data_offset_ = 0;
  std::map<std::string, std::string> metadata_;
  std::vector<SafetensorsTensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

// A HuggingFace checkpoint: a folder holding either model.safetensors or
// model.safetensors.index.json plus its shards (or a path to one .safetensors file or to an
// index .json). Finds tensors by name across shards. Opening validates every shard and
// cross-checks the index: every tensor named in weight_map exists in the shard it names, every
// shard tensor is in weight_map, and no tensor is in two shards.
class Checkpoint {
 public:
  static constexpr std::string_view kSingleFile = "model.safetensors";
  static constexpr std::string_view kIndexFile = "model.safetensors.index.json";

  static Checkpoint open(const std::filesystem::path& path);

  Checkpoint(Checkpoint&&) noexcept = default;
  Checkpoint& operator=(Checkpoint&&) noexcept = default;

  const std::filesystem::path& folder() const { return folder_; }
  size_t shard_count() const { return shards_.size(); }
  const SafetensorsFile& shard(size_t i) const { return shards_.at(i); }
  SafetensorsFile& shard(size_t i) { return shards_.at(i); }
  // Sorted tensor names over all shards.
  std::vector<std::string> tensor_names() const;
  size_t tensor_count() const { return location_.size(); }
  bool has_tensor(std::string_view name) const;
  // Throws "<folder>: tensor 'x': missing" if absent.
  TensorView tensor(std::string_view name) const;
  std::optional<TensorView> find_tensor(std::string_view name) const;
  // The index's "metadata" object flattened to strings (e.g. total_size), empty for one file.
  const std::map<std::string, std::string>& index_metadata() const { return index_metadata_; }
  void check_unchanged() const {
    for (const SafetensorsFile& s : shards_) s.check_unchanged();
  }

 private:
  Checkpoint() = default;

  std::filesystem::path folder_;
  std::vector<SafetensorsFile> shards_;
  std::unordered_map<std::string, size_t> location_;  // tensor name -> shard
  std::map<std::string, std::string> index_metadata_;
};

// Streaming single-file writer: declare tensors, then finish() writes the header and streams
// the bytes in declaration order. The header is padded with spaces to a multiple of 8 bytes so
// that every tensor's data starts 8-aligned in the file (as the reference writer does).
class SafetensorsWriter {
 public:
  explicit SafetensorsWriter(std::filesystem::path path);

  void add_metadata(std::string key, std::string value);
  // `shape` row-major outermost first. (1) bytes valid until finish(); (2) a producer called
  // during finish() that writes exactly the tensor's byte size; (3) f32 values stored as
  // `dtype` (F32, F16, BF16), converted in chunks.
  void add_tensor(std::string name, DType dtype, std::vector<uint64_t> shape,
                  std::span<const std::byte> bytes);
  void add_tensor(std::string name, DType dtype, std::vector<uint64_t> shape,
                  TensorBytesFn produce);
  void add_tensor_f32(std::string name, DType dtype, std::vector<uint64_t> shape,
                      std::span<const float> values);
  // Bytes of tensor data declared so far.
  uint64_t data_bytes() const { return data_bytes_; }
  size_t tensor_count() const { return tensors_.size(); }
  void finish();

 private:
  std::filesystem::path path_;
  std::map<std::string, std::string> metadata_;
  std::vector<PendingTensor> tensors_;
  std::unordered_map<std::string, size_t> names_;
  uint64_t data_bytes_ = 0;
  bool finished_ = false;
};

// Sharded writer: tensors go to model-0000i-of-0000N.safetensors in declaration order, a new
// shard starting when the current one would exceed `max_shard_bytes` (a tensor larger than the
// limit gets a shard of its own), plus model.safetensors.index.json with metadata.total_size
// and weight_map. With a single shard it still writes the index (callers wanting one plain file
// use SafetensorsWriter).
class ShardedSafetensorsWriter {
 public:
  ShardedSafetensorsWriter(std::filesystem::path folder, uint64_t max_shard_bytes);

  void add_metadata(std::string key, std::string value);  // copied into every shard
  void add_tensor(std::string name, DType dtype, std::vector<uint64_t> shape,
                  std::span<const std::byte> bytes);
  void add_tensor(std::string name, DType dtype, std::vector<uint64_t> shape,
                  TensorBytesFn produce);
  void add_tensor_f32(std::string name, DType dtype, std::vector<uint64_t> shape,
                      std::span<const float> values);
  // Writes every shard and the index; returns the shard file names in order.
  std::vector<std::string> finish();

 private:
  std::filesystem::path folder_;
  uint64_t max_shard_bytes_;
  std::map<std::string, std::string> metadata_;
  std::vector<PendingTensor> tensors_;
  std::unordered_map<std::string, size_t> names_;
  bool finished_ = false;
};

}  // namespace steermoe::model
