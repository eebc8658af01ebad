// llama.cpp's split GGUF models (gguf.hpp: open_gguf_split).
#include <fmt/format.h>

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/error.hpp"
#include "model/gguf.hpp"

namespace steermoe::model {
namespace {

struct SplitName {
  std::string prefix;     // the path up to "-00001-of-0000N.gguf"
  std::string extension;  // ".gguf" as spelled in the name (".GGUF" too)
  int number = 0;         // 1-based, as in the name
  int count = 0;
};

// llama.cpp names file i (0-based) of n "%s-%05d-of-%05d.gguf" with i + 1 and n: the name ends in
// "-" 5 digits "-of-" 5 digits ".gguf" (the extension in any case, as is_gguf_path). (Parsed by
// hand: std::regex trips GCC 12's maybe-uninitialized warning under the sanitizer build.)
std::optional<SplitName> split_name(const std::filesystem::path& path) {
  const std::string s = path.string();
  constexpr size_t kTail = 1 + 5 + 4 + 5 + 5;  // "-00001-of-00003.gguf"
  if (s.size() < kTail || !is_gguf_path(path)) return std::nullopt;
  const size_t at = s.size() - kTail;
  auto digits = [&](size_t from, int* out) {
    int v = 0;
    for (size_t i = from; i < from + 5; ++i) {
      if (s[i] < '0' || s[i] > '9') return false;
      v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
  };
  SplitName n;
  if (s[at] != '-' || s.compare(at + 6, 4, "-of-") != 0 || !digits(at + 1, &n.number) ||
      !digits(at + 10, &n.count))
    return std::nullopt;
  n.prefix = s.substr(0, at);
  n.extension = s.substr(s.size() - 5);
  if (n.count < 1 || n.number < 1 || n.number > n.count) return std::nullopt;
  return n;
}

std::filesystem::path split_path(const SplitName& name, int number, int count) {
  return fmt::format("{}-{:05d}-of-{:05d}{}", name.prefix, number, count, name.extension);
}

// split.no / split.count: uint16 as llama.cpp writes them (any integer type read, range checked).
int split_key(const GgufFile& f, const char* key, int64_t max) {
  const std::optional<int64_t> v = f.find_int(key);
  if (!v || *v < 0 || *v > max)
    fail(f.name(), fmt::format("metadata key '{}'", key), "expected an integer in [0, {}]{}", max,
         v ? fmt::format(", found {}", *v) : std::string(", missing"));
  return static_cast<int>(*v);
}

}  // namespace

std::filesystem::path gguf_split_first(const std::filesystem::path& path) {
  const std::optional<SplitName> n = split_name(path);
  return n ? split_path(*n, 1, n->count) : path;
}

std::vector<std::filesystem::path> gguf_split_paths(const std::filesystem::path& path) {
  const std::optional<SplitName> n = split_name(path);
  if (!n) return {path};
  std::vector<std::filesystem::path> paths;
  for (int i = 1; i <= n->count; ++i) paths.push_back(split_path(*n, i, n->count));
  return paths;
}

std::vector<GgufFile> open_gguf_split(const std::filesystem::path& path, const GgufLimits& limits) {
  const std::optional<SplitName> name = split_name(path);
  const std::filesystem::path first = gguf_split_first(path);
  std::vector<GgufFile> files;
  files.push_back(GgufFile::open(first, limits));
  if (!files.front().has("split.count")) {
    if (name && name->count > 1)
      fail(files.front().name(), "metadata key 'split.count'",
           "missing (the name says file 1 of {}: expected a file written by gguf-split)",
           name->count);
    return files;
  }
  const int count = split_key(files.front(), "split.count", 65535);
  if (count <= 1) return files;               // a set of one: an ordinary file
  files.reserve(static_cast<size_t>(count));  // `head` stays valid while the others are added
  const GgufFile& head = files.front();
  if (!name || name->count != count)
    fail(head.name(), "file name",
         "expected PREFIX-00001-of-{:05d}.gguf for a model split into {} files (split.count)",
         count, count);
  if (split_key(head, "split.no", 65535) != 0)
    fail(head.name(), "metadata key 'split.no'", "expected 0 in the first file, found {}",
         split_key(head, "split.no", 65535));
  for (int i = 1; i < count; ++i) {
    const std::filesystem::path p = split_path(*name, i + 1, count);
    std::error_code ec;
    if (!std::filesystem::exists(p, ec))
      fail(p.string(), "file", "missing: {} is file 1 of {} of a split model", head.name(), count);
    files.push_back(GgufFile::open(p, limits));
    const GgufFile& f = files.back();
    if (split_key(f, "split.count", 65535) != count || split_key(f, "split.no", 65535) != i)
      fail(f.name(), "metadata key 'split.no'",
           "expected file {} of {} (split.no {}, split.count {}), found split.no {} of {}", i + 1,
           count, i, count, split_key(f, "split.no", 65535), split_key(f, "split.count", 65535));
  }
  // Every tensor in one file only, and as many as split.tensors.count says when it is given.
  std::unordered_map<std::string_view, size_t> owner;
  size_t total = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    for (const GgufTensorInfo& t : files[i].tensor_infos()) {
      const auto [it, added] = owner.emplace(t.name, i);
      if (!added)
        fail(files[i].name(), "tensor '" + t.name + "'", "expected in one file only, also in {}",
             files[it->second].name());
    }
    total += files[i].tensor_infos().size();
  }
  if (const std::optional<int64_t> n = head.find_int("split.tensors.count");
      n && *n != static_cast<int64_t>(total))
    fail(head.name(), "metadata key 'split.tensors.count'",
         "expected the {} tensors the {} files hold, found {}", total, count, *n);
  return files;
}

}  // namespace steermoe::model
