// safetensors reader, validating like the reference implementation (huggingface/safetensors):
// bounded header length, UTF-8 JSON object, known dtypes, offsets contiguous from 0 in sorted
// order, byte sizes equal to prod(shape) x dtype size (checked), data section fully used.
// Additionally rejects duplicate keys (the JSON library would silently keep the last one).
#include "model/safetensors.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "common/error.hpp"
#include "common/json_input.hpp"

namespace steermoe::model {
namespace {

using nlohmann::json;

// Deepest nesting a valid header has: {"t": {"shape": [..]}} = 3. Checked before parsing so that
// a header of a million '[' cannot make the JSON library build a huge tree.
constexpr int kMaxJsonDepth = 8;

void check_json_depth(std::string_view text, const std::string& where) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxJsonDepth)
        fail(where, "header", "JSON nested deeper than {} levels", kMaxJsonDepth);
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
}

// Parses JSON text, rejecting duplicate keys in any object.
json parse_json_strict(std::string_view text, const std::string& where, const std::string& field) {
  std::vector<std::unordered_set<std::string>> keys_per_object;
  std::string duplicate;
  json::parser_callback_t callback = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        keys_per_object.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!keys_per_object.empty()) keys_per_object.pop_back();
        break;
      case json::parse_event_t::key: {
        const auto& key = parsed.get_ref<const std::string&>();
        if (!keys_per_object.back().insert(key).second && duplicate.empty()) duplicate = key;
        break;
      }
      default:
        break;
    }
    return true;
  };
  json parsed;
  try {
    parsed = parse_json_with_callback(text, callback);
  } catch (const json::exception& e) {
    fail(where, field, "expected valid UTF-8 JSON ({})", e.what());
  }
  if (!duplicate.empty()) fail(where, field, "duplicate key '{}'", duplicate);
  return parsed;
}

uint64_t get_offset(const json& value, const std::string& where, const std::string& field) {
  if (!value.is_number_unsigned()) {
    fail(where, field, "expected a non-negative integer, found {}", json_excerpt(value));
  }
  return value.get<uint64_t>();
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  SafetensorsFile file;
  file.name_ = path.string();
  file.file_ = MappedFile::open(path);
  file.bytes_ = file.file_.bytes();
  file.parse();
  return file;
}

SafetensorsFile SafetensorsFile::from_bytes(std::vector<std::byte> bytes,
                                            std::string display_name) {
  SafetensorsFile file;
  file.name_ = std::move(display_name);
  file.owned_ = std::move(bytes);
  file.bytes_ = file.owned_;
  file.parse();
  return file;
}

void SafetensorsFile::parse() {
  const std::string& where = name_;
  if (bytes_.size() < 8) {
    fail(where, "header length", "expected an 8-byte header length, but the file has {} bytes",
         bytes_.size());
  }
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, bytes_.data(), 8);
  if (header_bytes > kMaxHeaderBytes) {
    fail(where, "header length", "{} exceeds the limit of {} bytes", header_bytes, kMaxHeaderBytes);
  }
  if (header_bytes > bytes_.size() - 8) {
    fail(where, "header length", "{} bytes of header, but only {} bytes follow", header_bytes,
         bytes_.size() - 8);
  }
  data_offset_ = 8 + header_bytes;
  const std::string_view text(reinterpret_cast<const char*>(bytes_.data() + 8),
                              static_cast<size_t>(header_bytes));
  if (text.empty() || text.front() != '{')
    fail(where, "header", "expected a JSON object starting with '{{'");
  check_json_depth(text, where);
  const json header = parse_json_strict(text, where, "header");
  if (!header.is_object()) fail(where, "header", "expected a JSON object");

  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (value.is_null()) continue;
      if (!value.is_object()) fail(where, "__metadata__", "expected an object of strings");
      for (const auto& [mkey, mvalue] : value.items()) {
        if (!mvalue.is_string()) {
          fail(where, fmt::format("__metadata__ '{}'", mkey), "expected a string, found {}",
               json_excerpt(mvalue));
        }
        metadata_.emplace(mkey, mvalue.get<std::string>());
      }
      continue;
    }
    const std::string field = fmt::format("tensor '{}'", key);
    if (!value.is_object())
      fail(where, field, "expected an object with dtype, shape, data_offsets");
    SafetensorsTensorInfo info;
    info.name = key;

    const auto dtype_it = value.find("dtype");
    if (dtype_it == value.end() || !dtype_it->is_string())
      fail(where, field + " dtype", "expected a string");
    const auto dtype = dtype_from_safetensors_name(dtype_it->get_ref<const std::string&>());
    if (!dtype)
      fail(where, field + " dtype", "unknown dtype '{}'", dtype_it->get_ref<const std::string&>());
    info.dtype = *dtype;

    const auto shape_it = value.find("shape");
    if (shape_it == value.end() || !shape_it->is_array())
      fail(where, field + " shape", "expected an array");
    uint64_t elements = 1;
    for (const auto& dim : *shape_it) {
      const uint64_t d = get_offset(dim, where, field + " shape");
      if (__builtin_mul_overflow(elements, d, &elements)) {
        fail(where, field + " shape", "element count overflows 64 bits");
      }
      info.shape.push_back(d);
    }

    const auto offsets_it = value.find("data_offsets");
    if (offsets_it == value.end() || !offsets_it->is_array() || offsets_it->size() != 2) {
      fail(where, field + " data_offsets", "expected an array [begin, end]");
    }
    info.begin = get_offset((*offsets_it)[0], where, field + " data_offsets");
    info.end = get_offset((*offsets_it)[1], where, field + " data_offsets");
    if (info.end < info.begin) {
      fail(where, field + " data_offsets", "end {} is before begin {}", info.end, info.begin);
    }
    const auto nbytes = dtype_byte_size(info.dtype, elements);
    if (!nbytes)
      fail(where, field, "byte size of {} {} elements overflows", elements, dtype_name(info.dtype));
    if (*nbytes != info.end - info.begin) {
      fail(where, field, "shape [{}] of {} needs {} bytes, data_offsets give {}",
           fmt::join(info.shape, ", "), dtype_name(info.dtype), *nbytes, info.end - info.begin);
    }
    tensors_.push_back(std::move(info));
  }

  std::sort(tensors_.begin(), tensors_.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expected_begin = 0;
  for (const auto& info : tensors_) {
    if (info.begin != expected_begin) {
      fail(where, fmt::format("tensor '{}' data_offsets", info.name),
           "expected to begin at {} (offsets must be contiguous from 0), found {}", expected_begin,
           info.begin);
    }
    expected_begin = info.end;
  }
  const uint64_t data_size = bytes_.size() - data_offset_;
  if (expected_begin != data_size) {
    fail(where, "data section", "tensors cover {} bytes, but the data section has {} bytes",
         expected_begin, data_size);
  }
  for (size_t i = 0; i < tensors_.size(); ++i) tensor_index_.emplace(tensors_[i].name, i);
}

const SafetensorsTensorInfo* SafetensorsFile::find_tensor_info(std::string_view name) const {
  const auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

TensorView SafetensorsFile::view_of(const SafetensorsTensorInfo& info) const {
  TensorView view;
  view.name = info.name;
  view.dtype = info.dtype;
  view.shape = info.shape;
  view.data = bytes_.data() + data_offset_ + info.begin;
  view.nbytes = info.nbytes();
  return view;
}

TensorView SafetensorsFile::tensor(std::string_view name) const {
  const auto* info = find_tensor_info(name);
  if (info == nullptr) fail(name_, fmt::format("tensor '{}'", name), "missing");
  return view_of(*info);
}

std::optional<TensorView> SafetensorsFile::find_tensor(std::string_view name) const {
  const auto* info = find_tensor_info(name);
  if (info == nullptr) return std::nullopt;
  return view_of(*info);
}

// ---------------------------------------------------------------------------------------------
// Checkpoint

Checkpoint Checkpoint::open(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  Checkpoint checkpoint;
  std::error_code error;
  fs::path index_path;
  fs::path single_path;
  if (fs::is_directory(path, error)) {
    checkpoint.folder_ = path;
    if (fs::exists(path / kIndexFile, error)) {
      index_path = path / kIndexFile;
    } else if (fs::exists(path / kSingleFile, error)) {
      single_path = path / kSingleFile;
    } else {
      fail(path.string(), "checkpoint", "expected {} or {} in this folder", kSingleFile,
           kIndexFile);
    }
  } else {
    checkpoint.folder_ = path.parent_path();
    if (path.extension() == ".json") {
      index_path = path;
    } else {
      single_path = path;
    }
  }

  if (!single_path.empty()) {
    checkpoint.shards_.push_back(SafetensorsFile::open(single_path));
    for (const auto& info : checkpoint.shards_[0].tensor_infos())
      checkpoint.location_.emplace(info.name, 0);
    return checkpoint;
  }

  const std::string where = index_path.string();
  const MappedFile index_file = MappedFile::open(index_path);
  const std::string_view text(reinterpret_cast<const char*>(index_file.data()),
                              static_cast<size_t>(index_file.size()));
  check_json_depth(text, where);
  const json index = parse_json_strict(text, where, "index");
  if (!index.is_object()) fail(where, "index", "expected a JSON object");
  if (const auto meta = index.find("metadata"); meta != index.end() && meta->is_object()) {
    for (const auto& [key, value] : meta->items()) {
      checkpoint.index_metadata_.emplace(
          key, value.is_string() ? value.get<std::string>() : json_excerpt(value));
    }
  }
  const auto weight_map = index.find("weight_map");
  if (weight_map == index.end() || !weight_map->is_object()) {
    fail(where, "weight_map", "expected an object mapping tensor names to shard files");
  }

  // Shard files in sorted order; each opened (and fully validated) once.
  std::map<std::string, size_t> shard_of_file;
  for (const auto& [name, file] : weight_map->items()) {
    if (!file.is_string())
      fail(where, fmt::format("weight_map '{}'", name), "expected a file name string");
    const auto& file_name = file.get_ref<const std::string&>();
    if (file_name.empty() || file_name.find('/') != std::string::npos || file_name == "." ||
        file_name == "..") {
      fail(where, fmt::format("weight_map '{}'", name),
           "expected a shard file name in the index's folder, found '{}'", file_name);
    }
    shard_of_file.emplace(file_name, 0);
  }
  for (auto& [file_name, shard] : shard_of_file) {
    shard = checkpoint.shards_.size();
    checkpoint.shards_.push_back(SafetensorsFile::open(checkpoint.folder_ / file_name));
  }

  // Cross-check: every mapped tensor is in its shard; every shard tensor is mapped to that
  // shard (which also rules out a tensor stored in two shards).
  for (const auto& [name, file] : weight_map->items()) {
    const size_t shard = shard_of_file.at(file.get<std::string>());
    if (!checkpoint.shards_[shard].has_tensor(name)) {
      fail(where, fmt::format("weight_map '{}'", name), "tensor missing from shard {}",
           file.get<std::string>());
    }
    checkpoint.location_.emplace(name, shard);
  }
  for (size_t shard = 0; shard < checkpoint.shards_.size(); ++shard) {
    for (const auto& info : checkpoint.shards_[shard].tensor_infos()) {
      const auto it = checkpoint.location_.find(info.name);
      if (it == checkpoint.location_.end()) {
        fail(where, fmt::format("tensor '{}'", info.name),
             "present in shard {} but not in weight_map", checkpoint.shards_[shard].name());
      }
      if (it->second != shard) {
        fail(where, fmt::format("tensor '{}'", info.name), "stored in two shards: {} and {}",
             checkpoint.shards_[it->second].name(), checkpoint.shards_[shard].name());
      }
    }
  }
  return checkpoint;
}

std::vector<std::string> Checkpoint::tensor_names() const {
  std::vector<std::string> names;
  names.reserve(location_.size());
  for (const auto& [name, _] : location_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

bool Checkpoint::has_tensor(std::string_view name) const {
  return location_.count(std::string(name)) != 0;
}

std::optional<TensorView> Checkpoint::find_tensor(std::string_view name) const {
  const auto it = location_.find(std::string(name));
  if (it == location_.end()) return std::nullopt;
  return shards_[it->second].tensor(name);
}

TensorView Checkpoint::tensor(std::string_view name) const {
  auto view = find_tensor(name);
  if (!view) fail(folder_.string(), fmt::format("tensor '{}'", name), "missing");
  return std::move(*view);
}

}  // namespace steermoe::model
