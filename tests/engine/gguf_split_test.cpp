// Split GGUF models (llama.cpp's gguf-split: PREFIX-0000k-of-0000N.gguf): the oracle OLMoE file
// split into three files as gguf-split writes them loads from any of its files and decodes the
// same bits as the single file, resident and with its experts read from the several files by
// the disk link; a set with a file missing, misnumbered, a tensor twice or a wrong tensor count
// is refused naming the file and the key.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "../error_text.hpp"
#include "../offload_params.hpp"
#include "common/error.hpp"
#include "engine/engine.hpp"
#include "model/gguf.hpp"
#include "model/weights.hpp"
#include "tokenizer/tokenizer.hpp"

namespace steermoe::model {
namespace {

namespace fs = std::filesystem;

const fs::path kOracle = fs::path(STEERMOE_ORACLE_DIR) / "olmoe" / "model.gguf";

struct SplitOptions {
  int files = 3;
  // Called per written file with its index, to change what gguf-split would have written.
  std::function<void(int, GgufWriter&)> extra_keys;
  int duplicate_in_last = -1;  // a tensor index also written into the last file
  int tensors_count_delta = 0;
  bool drop_split_keys = false;
};

// Writes kOracle as gguf-split does: the metadata in the first file, split.no / split.count /
// split.tensors.count in every file, the tensors in consecutive runs (the experts of different
// layers land in different files). Returns the files' paths.
std::vector<fs::path> split(const std::string& name, const SplitOptions& o = {}) {
  const GgufFile src = GgufFile::open(kOracle);
  const fs::path dir = fs::path(testing::TempDir()) / ("split-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto& tensors = src.tensor_infos();
  std::vector<fs::path> paths;
  const size_t per_file = (tensors.size() + o.files - 1) / static_cast<size_t>(o.files);
  for (int i = 0; i < o.files; ++i) {
    paths.push_back(dir / fmt::format("model-{:05d}-of-{:05d}.gguf", i + 1, o.files));
    GgufWriter w(paths.back());
    if (i == 0)
      for (const auto& [k, v] : src.metadata())
        if (k != "general.alignment") w.add(k, v);
    if (!o.drop_split_keys) {
      w.add("split.no", GgufValue::u16(static_cast<uint16_t>(i)));
      w.add("split.count", GgufValue::u16(static_cast<uint16_t>(o.files)));
      w.add("split.tensors.count",
            GgufValue::i32(static_cast<int32_t>(tensors.size()) + o.tensors_count_delta));
    }
    if (o.extra_keys) o.extra_keys(i, w);
    for (size_t t = i * per_file; t < std::min(tensors.size(), (i + 1) * per_file); ++t) {
      const TensorView v = src.tensor(tensors[t].name);
      w.add_tensor(v.name, v.dtype, v.shape, v.bytes());
    }
    if (i == o.files - 1 && o.duplicate_in_last >= 0) {
      const TensorView v = src.tensor(tensors[static_cast<size_t>(o.duplicate_in_last)].name);
      w.add_tensor(v.name, v.dtype, v.shape, v.bytes());
    }
    w.finish();
  }
  return paths;
}

std::vector<float> logits(const Model& m, const std::string& link, int cache) {
  engine::EngineParams params = test_support::offload_params(m, "psr:lambda=0.3,n=1", cache, link);
  params.context = 32;
  engine::Engine e(m, params);
  const std::vector<int32_t> tokens = {1, 17, 5, 99, 3, 42, 7, 8, 250, 11};
  std::vector<float> out;
  for (const int32_t t : tokens) {
    const std::span<const float> step = e.decode(t);
    out.insert(out.end(), step.begin(), step.end());
  }
  return out;
}

TEST(GgufSplit, LoadsFromAnyFileAndDecodesTheSameBits) {
  const std::vector<fs::path> files = split("same");
  const auto whole = Model::load(kOracle);
  const int experts = whole->config().experts;
  for (const fs::path& named : {files[0], files[2]}) {
    SCOPED_TRACE(named.string());
    const auto m = Model::load(named);
    ASSERT_EQ(m->gguf_files().size(), 3u);
    EXPECT_EQ(m->gguf()->name(), files[0].string());  // the metadata's file
    EXPECT_EQ(m->config().layers, whole->config().layers);
    EXPECT_EQ(logits(*m, "resident", experts), logits(*whole, "resident", experts));
    // Offloaded: the disk link reads each expert from the file that holds it.
    EXPECT_EQ(logits(*m, "disk", experts / 2), logits(*whole, "resident", experts));
    EXPECT_EQ(tokenizer::Tokenizer::load(named).size(), tokenizer::Tokenizer::load(kOracle).size());
  }
  EXPECT_EQ(gguf_split_first(files[1]), files[0]);
  // The extension as the files spell it: a set named .GGUF is found as such.
  std::vector<fs::path> upper;
  for (const fs::path& f : files) {
    upper.push_back(fs::path(f).replace_extension(".GGUF"));
    fs::rename(f, upper.back());
  }
  EXPECT_EQ(Model::load(upper[1])->gguf_files().size(), 3u);
  EXPECT_EQ(gguf_split_first(upper[2]), upper[0]);
  EXPECT_EQ(gguf_split_first(kOracle), kOracle);  // not a split name: itself
  EXPECT_EQ(gguf_split_paths(files[1]), files);   // every file of the set, from any of them
  EXPECT_EQ(gguf_split_paths(kOracle), std::vector<fs::path>{kOracle});
}

TEST(GgufSplit, ABrokenSetIsRefusedNamingTheFileAndKey) {
  const auto error_of = [](const fs::path& p) {
    return test_support::error_text([&] { Model::load(p); });
  };
  {  // a file missing
    const std::vector<fs::path> files = split("missing");
    fs::remove(files[1]);
    const std::string e = error_of(files[0]);
    EXPECT_NE(e.find(files[1].string() + ": file: missing"), std::string::npos) << e;
  }
  {  // a file numbered as another
    SplitOptions o;
    const std::vector<fs::path> files = split("renumbered", o);
    fs::rename(files[2], files[1].parent_path() / "x.gguf");
    fs::copy_file(files[1], files[2]);
    const std::string e = error_of(files[0]);
    EXPECT_NE(e.find(files[2].string() + ": metadata key 'split.no'"), std::string::npos) << e;
  }
  {  // a tensor in two files
    SplitOptions o;
    o.duplicate_in_last = 0;
    const std::vector<fs::path> files = split("duplicate", o);
    const std::string e = error_of(files[0]);
    EXPECT_NE(e.find(files[2].string() + ": tensor '"), std::string::npos) << e;
    EXPECT_NE(e.find("expected in one file only"), std::string::npos) << e;
  }
  {  // split.tensors.count that is not the files' total
    SplitOptions o;
    o.tensors_count_delta = 1;
    const std::vector<fs::path> files = split("count", o);
    const std::string e = error_of(files[0]);
    EXPECT_NE(e.find("metadata key 'split.tensors.count'"), std::string::npos) << e;
  }
  {  // named as a split but written without its keys
    SplitOptions o;
    o.drop_split_keys = true;
    const std::vector<fs::path> files = split("nokeys", o);
    const std::string e = error_of(files[0]);
    EXPECT_NE(e.find(files[0].string() + ": metadata key 'split.count'"), std::string::npos) << e;
  }
  {  // split keys in a file not named as one of the set
    const std::vector<fs::path> files = split("renamed");
    const fs::path lone = files[0].parent_path() / "model.gguf";
    fs::rename(files[0], lone);
    const std::string e = error_of(lone);
    EXPECT_NE(e.find(lone.string() + ": file name: expected PREFIX-00001-of-00003.gguf"),
              std::string::npos)
        << e;
  }
}

}  // namespace
}  // namespace steermoe::model
