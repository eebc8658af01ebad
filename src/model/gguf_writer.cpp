// Streaming GGUF v3 writer: the header (with every tensor's offset) is computed from the
// declared shapes, then tensor bytes are streamed one tensor at a time.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>

#include "common/error.hpp"
#include "common/progress.hpp"
#include "model/gguf.hpp"

namespace steermoe::model {
namespace {

constexpr uint64_t kMaxDims = 4;
// f32 values converted per chunk by add_tensor_f32 (a multiple of every block: 32 and 256).
constexpr size_t kConvertChunkElements = size_t{32} * 8192;

uint64_t align_up(uint64_t x, uint64_t alignment) {
  return (x + alignment - 1) / alignment * alignment;
}

template <typename T>
void put(OutputFile& out, T value) {
  out.write(&value, sizeof value);
}

void put_string(OutputFile& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out.write(s.data(), s.size());
}

void check_value(const GgufValue& value, const std::string& where, const std::string& field) {
  if (value.type() != GgufType::kArray) return;
  const auto& array = std::get<GgufArray>(value.value);
  for (const auto& item : array.items) {
    if (item.type() != array.element_type) {
      fail(where, field, "array declared as {} holds a {}", gguf_type_name(array.element_type),
           gguf_type_name(item.type()));
    }
    check_value(item, where, field);
  }
}

void put_value(OutputFile& out, const GgufValue& value) {
  std::visit(
      [&out](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          put_string(out, v);
        } else if constexpr (std::is_same_v<T, GgufArray>) {
          put<uint32_t>(out, static_cast<uint32_t>(v.element_type));
          put<uint64_t>(out, v.items.size());
          for (const auto& item : v.items) put_value(out, item);
        } else if constexpr (std::is_same_v<T, bool>) {
          put<uint8_t>(out, v ? 1 : 0);
        } else {
          put<T>(out, v);
        }
      },
      value.value);
}

}  // namespace

GgufWriter::GgufWriter(std::filesystem::path path, uint64_t alignment)
    : path_(std::move(path)), alignment_(alignment) {
  if (alignment_ == 0 || (alignment_ & (alignment_ - 1)) != 0) {
    fail(path_.string(), "alignment", "expected a power of two, found {}", alignment_);
  }
}

void GgufWriter::add(std::string key, GgufValue value) {
  const std::string where = path_.string();
  if (key.empty()) fail(where, "metadata key", "expected a non-empty key");
  const std::string field = fmt::format("metadata key '{}'", key);
  for (const auto& [existing, _] : metadata_) {
    if (existing == key) fail(where, field, "duplicate key");
  }
  check_value(value, where, field);
  if (key == "general.alignment") {
    if (value != GgufValue::u32(static_cast<uint32_t>(alignment_))) {
      fail(where, field, "must be the writer's alignment as uint32 ({})", alignment_);
    }
  }
  metadata_.emplace_back(std::move(key), std::move(value));
}

void GgufWriter::add_tensor(std::string name, DType dtype, std::vector<uint64_t> shape,
                            TensorBytesFn produce) {
  const std::string where = path_.string();
  if (name.empty()) fail(where, "tensor name", "expected a non-empty name");
  const std::string field = fmt::format("tensor '{}'", name);
  for (const auto& t : tensors_) {
    if (t.name == name) fail(where, field, "duplicate tensor name");
  }
  if (!ggml_type_of(dtype))
    fail(where, field, "dtype {} cannot be stored in GGUF", dtype_name(dtype));
  if (shape.empty() || shape.size() > kMaxDims) {
    fail(where, field, "expected 1..4 dimensions, found {}", shape.size());
  }
  uint64_t elements = 1;
  for (uint64_t d : shape) {
    if (__builtin_mul_overflow(elements, d, &elements))
      fail(where, field, "element count overflows");
  }
  if (shape.back() % dtype_block_elements(dtype) != 0) {
    fail(where, field, "{} needs the innermost dimension to be a multiple of {}, found {}",
         dtype_name(dtype), dtype_block_elements(dtype), shape.back());
  }
  const auto nbytes = dtype_byte_size(dtype, elements);
  if (!nbytes) fail(where, field, "byte size overflows");
  tensors_.push_back({std::move(name), dtype, std::move(shape), *nbytes, std::move(produce)});
}

void GgufWriter::add_tensor(std::string name, DType dtype, std::vector<uint64_t> shape,
                            std::span<const std::byte> bytes) {
  const size_t declared = tensors_.size();
  add_tensor(std::move(name), dtype, std::move(shape),
             [bytes](OutputFile& out) { out.write(bytes); });
  if (tensors_.back().nbytes != bytes.size()) {
    const PendingTensor bad = std::move(tensors_.back());
    tensors_.resize(declared);
    fail(path_.string(), fmt::format("tensor '{}'", bad.name),
         "shape {} of {} needs {} bytes, got {}", fmt::format("[{}]", fmt::join(bad.shape, ", ")),
         dtype_name(bad.dtype), bad.nbytes, bytes.size());
  }
}

void GgufWriter::add_tensor_f32(std::string name, DType dtype, std::vector<uint64_t> shape,
                                std::span<const float> values) {
  const std::string label = fmt::format("tensor '{}'", name);
  add_tensor(std::move(name), dtype, std::move(shape), [dtype, values, label](OutputFile& out) {
    std::vector<std::byte> chunk;
    for (size_t begin = 0; begin < values.size(); begin += kConvertChunkElements) {
      const auto part =
          values.subspan(begin, std::min(kConvertChunkElements, values.size() - begin));
      chunk.resize(static_cast<size_t>(*dtype_byte_size(dtype, part.size())));
      convert_from_f32(dtype, part, chunk, label);
      out.write(chunk);
    }
  });
  // The element count must match the shape (the producer only runs in finish()).
  uint64_t elements = 1;
  for (uint64_t d : tensors_.back().shape) elements *= d;
  if (elements != values.size()) {
    tensors_.pop_back();
    fail(path_.string(), label, "shape needs {} values, got {}", elements, values.size());
  }
}

void GgufWriter::finish() {
  SM_ASSERT_MSG(!finished_, "GgufWriter::finish called twice");
  finished_ = true;
  const std::string where = path_.string();
  OutputFile out(path_);

  // Header.
  put<uint32_t>(out, GgufFile::kMagic);
  put<uint32_t>(out, 3);
  put<uint64_t>(out, tensors_.size());
  const bool write_alignment = alignment_ != GgufFile::kDefaultAlignment &&
                               std::none_of(metadata_.begin(), metadata_.end(), [](const auto& kv) {
                                 return kv.first == "general.alignment";
                               });
  put<uint64_t>(out, metadata_.size() + (write_alignment ? 1 : 0));
  if (write_alignment) {
    put_string(out, "general.alignment");
    put<uint32_t>(out, static_cast<uint32_t>(GgufType::kUint32));
    put<uint32_t>(out, static_cast<uint32_t>(alignment_));
  }
  for (const auto& [key, value] : metadata_) {
    put_string(out, key);
    put<uint32_t>(out, static_cast<uint32_t>(value.type()));
    put_value(out, value);
  }

  // Tensor infos: offsets are the running, aligned sum of the byte sizes.
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    put_string(out, t.name);
    put<uint32_t>(out, static_cast<uint32_t>(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) put<uint64_t>(out, *it);
    put<uint32_t>(out, *ggml_type_of(t.dtype));
    put<uint64_t>(out, offset);
    offset = align_up(offset + t.nbytes, alignment_);
  }
  out.write_zeros(align_up(out.position(), alignment_) - out.position());

  // Data: each tensor streamed by its producer, then padded.
  uint64_t data_bytes = 0;
  for (const auto& t : tensors_) data_bytes += t.nbytes;
  Progress progress("write " + path_.filename().string(), static_cast<int64_t>(data_bytes >> 20),
                    "MiB");
  uint64_t data_done = 0;  // tensor bytes written (the header is not in the total)
  for (const auto& t : tensors_) {
    progress.advance(0);  // Ctrl-C: throws Interrupted, OutputFile removes the temporary
    const uint64_t start = out.position();
    t.produce(out);
    const uint64_t written = out.position() - start;
    if (written != t.nbytes) {
      fail(where, fmt::format("tensor '{}'", t.name), "producer wrote {} bytes, expected {}",
           written, t.nbytes);
    }
    out.write_zeros(align_up(out.position(), alignment_) - out.position());
    data_done += t.nbytes;
    progress.advance(static_cast<int64_t>(data_done >> 20) - progress.done());
  }
  progress.finish();
  out.commit();
}

}  // namespace steermoe::model
