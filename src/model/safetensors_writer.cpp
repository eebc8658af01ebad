// Streaming safetensors writers (single file and sharded with model.safetensors.index.json).
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "common/json_input.hpp"
#include "common/progress.hpp"
#include "model/safetensors.hpp"

namespace steermoe::model {
namespace {

using nlohmann::json;

constexpr size_t kConvertChunkElements = size_t{1} << 18;

// Validates a declared tensor and returns its byte size.
uint64_t declared_bytes(const std::string& where, const std::string& name, DType dtype,
                        const std::vector<uint64_t>& shape) {
  if (name.empty()) fail(where, "tensor name", "expected a non-empty name");
  if (name == "__metadata__") fail(where, "tensor name", "'__metadata__' is reserved");
  const std::string field = fmt::format("tensor '{}'", name);
  if (dtype_block_elements(dtype) != 1) {
    fail(where, field, "dtype {} cannot be stored in safetensors", dtype_name(dtype));
  }
  uint64_t elements = 1;
  for (uint64_t d : shape) {
    if (__builtin_mul_overflow(elements, d, &elements))
      fail(where, field, "element count overflows");
  }
  const auto nbytes = dtype_byte_size(dtype, elements);
  if (!nbytes) fail(where, field, "byte size overflows");
  return *nbytes;
}

TensorBytesFn f32_producer(DType dtype, std::span<const float> values, std::string label) {
  return [dtype, values, label = std::move(label)](OutputFile& out) {
    std::vector<std::byte> chunk;
    for (size_t begin = 0; begin < values.size(); begin += kConvertChunkElements) {
      const auto part =
          values.subspan(begin, std::min(kConvertChunkElements, values.size() - begin));
      chunk.resize(static_cast<size_t>(*dtype_byte_size(dtype, part.size())));
      convert_from_f32(dtype, part, chunk, label);
      out.write(chunk);
    }
  };
}

uint64_t product(const std::vector<uint64_t>& shape) {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;  // checked by declared_bytes before use
  return n;
}

struct TensorEntry {
  const std::string* name;
  DType dtype;
  const std::vector<uint64_t>* shape;
  uint64_t nbytes;
  const TensorBytesFn* produce;
};

// Writes one safetensors file holding `tensors` in order.
void write_file(const std::filesystem::path& path,
                const std::map<std::string, std::string>& metadata,
                const std::vector<TensorEntry>& tensors) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    header[*t.name] = {{"dtype", std::string(dtype_name(t.dtype))},
                       {"shape", *t.shape},
                       {"data_offsets", {offset, offset + t.nbytes}}};
    offset += t.nbytes;
  }
  std::string text = dump_json(header);
  // Pad with spaces so the data section (and every 8-byte-sized tensor) starts 8-aligned.
  text.append((8 - text.size() % 8) % 8, ' ');

  OutputFile out(path);
  const uint64_t header_bytes = text.size();
  out.write(&header_bytes, 8);
  out.write(text.data(), text.size());
  uint64_t data_bytes = 0;
  for (const auto& t : tensors) data_bytes += t.nbytes;
  Progress progress("write " + path.filename().string(), static_cast<int64_t>(data_bytes >> 20),
                    "MiB");
  const uint64_t data_start = out.position();
  for (const auto& t : tensors) {
    progress.advance(0);  // Ctrl-C: throws Interrupted, OutputFile removes the temporary
    const uint64_t start = out.position();
    (*t.produce)(out);
    const uint64_t written = out.position() - start;
    if (written != t.nbytes) {
      fail(path.string(), fmt::format("tensor '{}'", *t.name),
           "producer wrote {} bytes, expected {}", written, t.nbytes);
    }
    progress.advance(static_cast<int64_t>((out.position() - data_start) >> 20) - progress.done());
  }
  progress.finish();
  out.commit();
}

}  // namespace

SafetensorsWriter::SafetensorsWriter(std::filesystem::path path) : path_(std::move(path)) {}

void SafetensorsWriter::add_metadata(std::string key, std::string value) {
  metadata_[std::move(key)] = std::move(value);
}

void SafetensorsWriter::add_tensor(std::string name, DType dtype, std::vector<uint64_t> shape,
                                   TensorBytesFn produce) {
  const uint64_t nbytes = declared_bytes(path_.string(), name, dtype, shape);
  if (names_.count(name) != 0)
    fail(path_.string(), fmt::format("tensor '{}'", name), "duplicate tensor name");
  names_.emplace(name, tensors_.size());
  data_bytes_ += nbytes;
  tensors_.push_back({std::move(name), dtype, std::move(shape), nbytes, std::move(produce)});
}

void SafetensorsWriter::add_tensor(std::string name, DType dtype, std::vector<uint64_t> shape,
                                   std::span<const std::byte> bytes) {
  const uint64_t nbytes = declared_bytes(path_.string(), name, dtype, shape);
  if (nbytes != bytes.size()) {
    fail(path_.string(), fmt::format("tensor '{}'", name), "shape needs {} bytes, got {}", nbytes,
         bytes.size());
  }
  add_tensor(std::move(name), dtype, std::move(shape),
             [bytes](OutputFile& out) { out.write(bytes); });
}

void SafetensorsWriter::add_tensor_f32(std::string name, DType dtype, std::vector<uint64_t> shape,
                                       std::span<const float> values) {
  declared_bytes(path_.string(), name, dtype, shape);
  if (product(shape) != values.size()) {
    fail(path_.string(), fmt::format("tensor '{}'", name), "shape needs {} values, got {}",
         product(shape), values.size());
  }
  std::string label = fmt::format("tensor '{}'", name);
  add_tensor(std::move(name), dtype, std::move(shape),
             f32_producer(dtype, values, std::move(label)));
}

void SafetensorsWriter::finish() {
  SM_ASSERT_MSG(!finished_, "SafetensorsWriter::finish called twice");
  finished_ = true;
  std::vector<TensorEntry> entries;
  entries.reserve(tensors_.size());
  for (const auto& t : tensors_)
    entries.push_back({&t.name, t.dtype, &t.shape, t.nbytes, &t.produce});
  write_file(path_, metadata_, entries);
}

ShardedSafetensorsWriter::ShardedSafetensorsWriter(std::filesystem::path folder,
                                                   uint64_t max_shard_bytes)
    : folder_(std::move(folder)), max_shard_bytes_(max_shard_bytes) {
  if (max_shard_bytes_ == 0)
    fail(folder_.string(), "max shard size", "expected a positive byte count");
}

void ShardedSafetensorsWriter::add_metadata(std::string key, std::string value) {
  metadata_[std::move(key)] = std::move(value);
}

void ShardedSafetensorsWriter::add_tensor(std::string name, DType dtype,
                                          std::vector<uint64_t> shape, TensorBytesFn produce) {
  const uint64_t nbytes = declared_bytes(folder_.string(), name, dtype, shape);
  if (names_.count(name) != 0)
    fail(folder_.string(), fmt::format("tensor '{}'", name), "duplicate tensor name");
  names_.emplace(name, tensors_.size());
  tensors_.push_back({std::move(name), dtype, std::move(shape), nbytes, std::move(produce)});
}

void ShardedSafetensorsWriter::add_tensor(std::string name, DType dtype,
                                          std::vector<uint64_t> shape,
                                          std::span<const std::byte> bytes) {
  const uint64_t nbytes = declared_bytes(folder_.string(), name, dtype, shape);
  if (nbytes != bytes.size()) {
    fail(folder_.string(), fmt::format("tensor '{}'", name), "shape needs {} bytes, got {}", nbytes,
         bytes.size());
  }
  add_tensor(std::move(name), dtype, std::move(shape),
             [bytes](OutputFile& out) { out.write(bytes); });
}

void ShardedSafetensorsWriter::add_tensor_f32(std::string name, DType dtype,
                                              std::vector<uint64_t> shape,
                                              std::span<const float> values) {
  declared_bytes(folder_.string(), name, dtype, shape);
  if (product(shape) != values.size()) {
    fail(folder_.string(), fmt::format("tensor '{}'", name), "shape needs {} values, got {}",
         product(shape), values.size());
  }
  std::string label = fmt::format("tensor '{}'", name);
  add_tensor(std::move(name), dtype, std::move(shape),
             f32_producer(dtype, values, std::move(label)));
}

std::vector<std::string> ShardedSafetensorsWriter::finish() {
  SM_ASSERT_MSG(!finished_, "ShardedSafetensorsWriter::finish called twice");
  finished_ = true;
  // Greedy grouping in declaration order.
  std::vector<std::vector<TensorEntry>> shards(1);
  uint64_t shard_bytes = 0;
  uint64_t total_bytes = 0;
  for (const auto& t : tensors_) {
    if (!shards.back().empty() && shard_bytes + t.nbytes > max_shard_bytes_) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back({&t.name, t.dtype, &t.shape, t.nbytes, &t.produce});
    shard_bytes += t.nbytes;
    total_bytes += t.nbytes;
  }
  std::error_code error;
  std::filesystem::create_directories(folder_, error);
  if (error) fail(folder_.string(), "write", "cannot create the folder ({})", error.message());

  std::vector<std::string> files;
  json weight_map = json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    files.push_back(fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, shards.size()));
    for (const auto& t : shards[i]) weight_map[*t.name] = files.back();
  }
  for (size_t i = 0; i < shards.size(); ++i) write_file(folder_ / files[i], metadata_, shards[i]);

  const json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
  const std::string text = dump_json(index, 2) + "\n";
  OutputFile out(folder_ / Checkpoint::kIndexFile);
  out.write(text.data(), text.size());
  out.commit();
  return files;
}

}  // namespace steermoe::model
