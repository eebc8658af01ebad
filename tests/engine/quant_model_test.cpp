// Quantized models end to end: `steermoe quantize` of a made model (every scheme) loads with the
// weights in their stored types, and its logits stay within a bound derived from the measured
// weight quantization error; argmax agrees where the margin allows. An FP8 block-scaled HF
// checkpoint runs and matches its dequantized twin; bad FP8 scale tensors are rejected.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "engine/engine.hpp"
#include "kernels/kernels.hpp"
#include "model/expert_ranges.hpp"
#include "model/gguf.hpp"
#include "model/quant_mix.hpp"
#include "model/safetensors.hpp"
#include "model/weights.hpp"
#include "quant/quant.hpp"

namespace steermoe::engine {
namespace {

namespace fs = std::filesystem;

int run_cli(const std::string& args) {
  const std::string cmd = std::string(STEERMOE_BINARY) + " " + args + " > /dev/null 2>&1";
  const int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

fs::path temp(const std::string& name) {
  return fs::path(testing::TempDir()) / ("quant_" + name);
}

// OLMoE with every matrix row a multiple of 256 (so every K type applies without fallback).
const char* kConfig = R"({
  "architectures": ["OlmoeForCausalLM"], "model_type": "olmoe", "hidden_size": 256,
  "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
  "num_key_value_heads": 4, "num_experts": 8, "num_experts_per_tok": 2, "norm_topk_prob": false,
  "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "max_position_embeddings": 64,
  "vocab_size": 512, "tie_word_embeddings": false, "bos_token_id": 0, "eos_token_id": 1
})";

const fs::path& source_model() {
  static const fs::path path = [] {
    const fs::path cfg = temp("config.json");
    std::ofstream(cfg) << kConfig;
    const fs::path out = temp("src.gguf");
    EXPECT_EQ(run_cli("make-model --arch olmoe --config " + cfg.string() +
                      " --random --dtype f32 --seed 3 -o " + out.string()),
              0);
    return out;
  }();
  return path;
}

std::vector<int32_t> prompt(int vocab) {
  std::vector<int32_t> ids;
  for (int i = 0; i < 16; ++i) ids.push_back((i * 37 + 5) % vocab);
  return ids;
}

std::vector<float> decode_logits(const fs::path& path) {
  auto m = model::Model::load(path);
  Engine e(*m, {.context = 32});
  const auto ids = prompt(m->config().vocab);
  const auto V = static_cast<size_t>(m->config().vocab);
  std::vector<float> out(ids.size() * V);
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::span<const float> l = e.decode(ids[i]);
    std::copy(l.begin(), l.end(), out.begin() + static_cast<long>(i * V));
  }
  return out;
}

// Largest relative RMS error of any quantized matrix against the source's f32 values.
double weight_error(const fs::path& src, const fs::path& q) {
  const model::GgufFile a = model::GgufFile::open(src), b = model::GgufFile::open(q);
  double worst = 0;
  for (const auto& info : b.tensor_infos()) {
    const model::TensorView tb = b.tensor(info.name);
    if (tb.shape.size() < 2) continue;
    const std::vector<float> va = a.tensor(info.name).to_f32(), vb = tb.to_f32();
    double err = 0, ref = 0;
    for (size_t i = 0; i < va.size(); ++i) {
      err += (va[i] - vb[i]) * (va[i] - vb[i]);
      ref += va[i] * va[i];
    }
    worst = std::max(worst, std::sqrt(err / ref));
  }
  return worst;
}

class QuantScheme : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantScheme, LogitsWithinTheQuantizationErrorOfTheSource) {
  const std::string scheme = GetParam();
  const fs::path q = temp(scheme + ".gguf");
  ASSERT_EQ(
      run_cli("quantize -m " + source_model().string() + " --type " + scheme + " -o " + q.string()),
      0);
  // Stored types: the base type for experts, F32 for the router and norms; mixtures keep the
  // embedding at Q8_0 and the output at Q6_K.
  const model::GgufFile f = model::GgufFile::open(q);
  const bool mix = scheme.ends_with("_m") || scheme.ends_with("_l") || scheme == "q2_k";
  std::string base = scheme.substr(0, 4);
  for (auto& ch : base) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  EXPECT_EQ(model::dtype_name(f.tensor("blk.0.ffn_gate_exps.weight").dtype), base);
  EXPECT_EQ(f.tensor("blk.0.ffn_gate_inp.weight").dtype, model::DType::kF32);
  EXPECT_EQ(f.tensor("blk.0.attn_norm.weight").dtype, model::DType::kF32);
  EXPECT_EQ(model::dtype_name(f.tensor("token_embd.weight").dtype), mix ? "Q8_0" : base);
  EXPECT_EQ(model::dtype_name(f.tensor("output.weight").dtype), mix ? "Q6_K" : base);
  // llama.cpp's llama_ftype, as its tools print the file's type.
  const std::map<std::string, uint32_t> kFileType = {
      {"q8_0", 7},  {"q4_0", 2},  {"q4_1", 3},    {"q5_0", 8},    {"q5_1", 9},
      {"q4_k", 14}, {"q5_k", 16}, {"q6_k", 18},   {"q4_k_m", 15}, {"q5_k_m", 17},
      {"q2_k", 10}, {"q3_k", 11}, {"q3_k_m", 12}, {"q3_k_l", 13}};
  EXPECT_EQ(f.get_u32("general.file_type"), kFileType.at(scheme));
  // ffn_down / attn_v / attn_output of layers 0 and 1 (the model has 2 layers, one query head per
  // kv head): q4_k_m / q5_k_m give the last layer more bits (llama.cpp's use_more_bits); q2_k
  // Q3_K; q3_k_m Q4_K (attn_v Q5_K in the first two layers); q3_k_l Q5_K.
  struct Want {
    const char* scheme;
    const char* down[2];
    const char* v[2];
    const char* o[2];
  };
  static const Want kWant[] = {
      {"q4_k_m", {"Q4_K", "Q6_K"}, {"Q4_K", "Q6_K"}, {"Q4_K", "Q4_K"}},
      {"q5_k_m", {"Q5_K", "Q6_K"}, {"Q5_K", "Q6_K"}, {"Q5_K", "Q5_K"}},
      {"q2_k", {"Q3_K", "Q3_K"}, {"Q3_K", "Q3_K"}, {"Q3_K", "Q3_K"}},
      {"q3_k_m", {"Q4_K", "Q4_K"}, {"Q5_K", "Q5_K"}, {"Q4_K", "Q4_K"}},
      {"q3_k_l", {"Q5_K", "Q5_K"}, {"Q5_K", "Q5_K"}, {"Q5_K", "Q5_K"}},
  };
  for (const Want& w : kWant) {
    if (scheme != w.scheme) continue;
    for (int l = 0; l < 2; ++l) {
      const std::string blk = "blk." + std::to_string(l) + ".";
      EXPECT_EQ(model::dtype_name(f.tensor(blk + "ffn_down_exps.weight").dtype), w.down[l]) << l;
      EXPECT_EQ(model::dtype_name(f.tensor(blk + "attn_v.weight").dtype), w.v[l]) << l;
      EXPECT_EQ(model::dtype_name(f.tensor(blk + "attn_output.weight").dtype), w.o[l]) << l;
    }
  }
  if (!mix) {
    EXPECT_EQ(model::dtype_name(f.tensor("blk.1.ffn_down_exps.weight").dtype), base);
    EXPECT_EQ(model::dtype_name(f.tensor("blk.1.attn_v.weight").dtype), base);
  }

  // In memory the experts keep the stored type, and their byte size says so.
  auto m = model::Model::load(q);
  const kernels::Matrix& gate = m->layer(0).experts[0].gate;
  EXPECT_EQ(model::dtype_name(model::model_dtype(gate.dtype)), base);
  EXPECT_EQ(model::matrix_bytes(gate),
            gate.rows * quant::bytes_for(*quant::from_name(base), gate.cols));

  const std::vector<float> ref = decode_logits(source_model());
  const std::vector<float> got = decode_logits(q);
  ASSERT_EQ(ref.size(), got.size());
  double diff2 = 0, ref2 = 0, max_diff = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    diff2 += (ref[i] - got[i]) * (ref[i] - got[i]);
    ref2 += ref[i] * ref[i];
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(ref[i] - got[i])));
  }
  const double rms_diff = std::sqrt(diff2 / static_cast<double>(ref.size()));
  const double rms_ref = std::sqrt(ref2 / static_cast<double>(ref.size()));
  // Bound: each of the ~15 matrices on a token's path (7 per layer + output) perturbs its output
  // by its relative weight error e (plus the int8 activations' ~2^-9 relative rounding), the
  // perturbations adding in quadrature; 3x margin.
  const double e = weight_error(source_model(), q);
  const double e_act = 1.0 / 512;
  const double bound = 3.0 * std::sqrt(e * e + e_act * e_act) * std::sqrt(15.0) * rms_ref;
  EXPECT_GT(rms_diff, 0.0);
  EXPECT_LT(rms_diff, bound) << scheme << ": weight error " << e;
  std::printf(
      "[ %s ] weight rel. error %.4f, logits rms diff %.4g (rel %.4f), max %.4g, bound %.4g\n",
      scheme.c_str(), e, rms_diff, rms_diff / rms_ref, max_diff, bound);
  RecordProperty("logits_rel_rms_error", std::to_string(rms_diff / rms_ref));

  // Argmax agrees wherever the source's top-2 margin exceeds 8x the rms difference.
  const auto V = static_cast<size_t>(m->config().vocab);
  int checked = 0;
  for (size_t t = 0; t < ref.size() / V; ++t) {
    const float* r = ref.data() + t * V;
    const float* g = got.data() + t * V;
    std::vector<float> sorted(r, r + V);
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
    if (sorted[0] - sorted[1] < 8 * rms_diff) continue;
    ++checked;
    EXPECT_EQ(std::max_element(r, r + V) - r, std::max_element(g, g + V) - g) << "position " << t;
  }
  RecordProperty("argmax_positions_checked", std::to_string(checked));
}

INSTANTIATE_TEST_SUITE_P(Schemes, QuantScheme,
                         ::testing::Values("q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k",
                                           "q6_k", "q4_k_m", "q5_k_m", "q2_k", "q3_k", "q3_k_m",
                                           "q3_k_l"));

// The mixtures' per-layer and per-shape rules on a 32-layer grouped-query shape (the end-to-end
// test above has 2 layers and no grouping).
TEST(Quantize, LowBitMixturesFollowLlamaCppsRules) {
  model::ModelConfig c;
  c.layers = 32;
  c.heads = 32;
  c.kv_heads = 8;  // 4 query heads per kv head
  auto type = [&](const char* scheme, model::Role role, int layer) {
    const auto s = model::parse_quant_scheme(scheme);
    EXPECT_TRUE(s.has_value()) << scheme;
    const model::TensorSlot slot{"t", {4096, 4096}, role, layer};
    return model::dtype_name(model::choose_quant_dtype(*s, c, slot, nullptr));
  };
  using R = model::Role;
  EXPECT_EQ(type("q2_k", R::kWv, 5), "Q4_K");  // grouped
  EXPECT_EQ(type("q2_k", R::kWq, 5), "Q2_K");
  EXPECT_EQ(type("q2_k", R::kExpDown, 5), "Q3_K");
  EXPECT_EQ(type("q2_k", R::kEmbed, -1), "Q8_0");
  EXPECT_EQ(type("q3_k_m", R::kExpDown, 1), "Q5_K");  // the first sixteenth: layers 0, 1
  EXPECT_EQ(type("q3_k_m", R::kExpDown, 2), "Q4_K");
  EXPECT_EQ(type("q3_k_m", R::kSharedDown, 31), "Q4_K");
  EXPECT_EQ(type("q3_k_m", R::kWv, 1), "Q5_K");  // the first two layers
  EXPECT_EQ(type("q3_k_m", R::kWv, 2), "Q4_K");
  EXPECT_EQ(type("q3_k_m", R::kWo, 9), "Q4_K");
  EXPECT_EQ(type("q3_k_m", R::kExpGate, 9), "Q3_K");
  EXPECT_EQ(type("q3_k_l", R::kWo, 9), "Q5_K");
  EXPECT_EQ(type("q3_k_l", R::kOutput, -1), "Q6_K");
  EXPECT_EQ(type("Q3_K_S", R::kOutput, -1), "Q3_K");  // plain: every matrix the base type
  EXPECT_EQ(type("q4_k_m", R::kExpDown, 5), "Q4_K");  // past the first eighth, (5 - 4) % 3 == 1
  EXPECT_EQ(type("q4_k_m", R::kExpDown, 6), "Q6_K");  // (6 - 4) % 3 == 2
  EXPECT_EQ(type("q4_k_m", R::kWv, 31), "Q6_K");
}

TEST(Quantize, RejectsUnknownSchemesAndNonGgufOutputs) {
  EXPECT_EQ(run_cli("quantize -m " + source_model().string() + " --type q3_x -o " +
                    temp("x.gguf").string()),
            1);
  EXPECT_EQ(run_cli("quantize -m " + source_model().string() + " --type q8_0 -o " +
                    temp("x_folder").string()),
            1);
}

TEST(Quantize, FallsBackWhereRowsAreNotWholeBlocks) {
  // olmoe-small: hidden 64, so no K-quant super-block fits a row: Q8_0 instead.
  const fs::path src = temp("small.gguf"), q = temp("small_q4k.gguf");
  ASSERT_EQ(run_cli("make-model --arch olmoe --shape olmoe-small --random --dtype bf16 -o " +
                    src.string()),
            0);
  ASSERT_EQ(run_cli("quantize -m " + src.string() + " --type q4_k -o " + q.string()), 0);
  const model::GgufFile f = model::GgufFile::open(q);
  EXPECT_EQ(f.tensor("blk.0.ffn_gate_exps.weight").dtype, model::DType::kQ8_0);
  EXPECT_NO_THROW(decode_logits(q));
}

TEST(Convert, QuantizedGgufToHfDequantizesAndSaysSo) {
  const fs::path q = temp("conv_q4k.gguf"), hf = temp("conv_q4k_hf");
  ASSERT_EQ(run_cli("quantize -m " + source_model().string() + " --type q4_k -o " + q.string()), 0);
  ASSERT_EQ(run_cli("convert -m " + q.string() + " -o " + hf.string()), 0);
  const std::vector<float> a = decode_logits(q), b = decode_logits(hf);
  // F32 holds the dequantized values exactly; only the products differ (f32 x vs int8 x).
  double diff = 0, mag = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
    mag = std::max(mag, static_cast<double>(std::fabs(a[i])));
  }
  EXPECT_LT(diff, 0.05 * mag);
  const model::Checkpoint c = model::Checkpoint::open(hf);
  EXPECT_EQ(c.tensor("model.layers.0.mlp.experts.0.gate_proj.weight").dtype, model::DType::kF32);
  // GGUF -> GGUF keeps the types and bytes.
  const fs::path again = temp("conv_q4k_again.gguf");
  ASSERT_EQ(run_cli("convert -m " + q.string() + " -o " + again.string()), 0);
  const model::GgufFile f1 = model::GgufFile::open(q), f2 = model::GgufFile::open(again);
  const auto t1 = f1.tensor("blk.1.ffn_up_exps.weight"), t2 = f2.tensor("blk.1.ffn_up_exps.weight");
  EXPECT_EQ(t2.dtype, model::DType::kQ4_K);
  ASSERT_EQ(t1.nbytes, t2.nbytes);
  EXPECT_EQ(std::memcmp(t1.data, t2.data, t1.nbytes), 0);
}

// Largest logit difference relative to the largest logit of `a`.
double max_relative_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, mag = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
    mag = std::max(mag, static_cast<double>(std::fabs(a[i])));
  }
  return diff / mag;
}

// Every tensor of `a` against the same-named one of `b`, as f32 values: equal.
void expect_same_values(const fs::path& a, const fs::path& b) {
  const model::GgufFile fa = model::GgufFile::open(a), fb = model::GgufFile::open(b);
  for (const auto& info : fa.tensor_infos()) {
    const std::vector<float> va = fa.tensor(info.name).to_f32(), vb = fb.tensor(info.name).to_f32();
    EXPECT_EQ(va, vb) << info.name;
  }
}

// The Gated DeltaNet models store some projections otherwise than bound (value heads in the
// file's order, Qwen3-Next's fused rows): those slots are written by the family, and must honour
// the dtype asked for like every other slot. They were copied in the source's dtype whatever was
// asked: `convert --dtype f16` labelled BF16 bits F16 (garbage logits), `quantize` failed on its
// byte count, and a quantized source aborted on an assertion. Compared on f32 activations (the
// bf16 kernel path rounds them for BF16 weights only, which this small random hybrid amplifies
// to ~5% of the logits).
TEST(Convert, GatedDeltaNetProjectionsTakeTheDtypeAskedFor) {
  const kernels::Isa isa = kernels::active_isa();
  if (isa == kernels::Isa::kAvx512Bf16) kernels::set_active_isa(kernels::Isa::kAvx512);
  for (const char* arch : {"qwen35moe", "qwen3next"}) {
    SCOPED_TRACE(arch);
    const std::string a(arch);
    const fs::path src = temp(a + "_src.gguf");
    ASSERT_EQ(run_cli("make-model --arch " + a + " --shape " + a + "-small --random --dtype bf16 " +
                      "-o " + src.string()),
              0);
    const std::vector<float> reference = decode_logits(src);
    // F32 holds the BF16 values exactly: the same logits; in HF (another head order, so
    // another summation order) within rounding.
    const fs::path f32 = temp(a + "_f32.gguf"), f32_hf = temp(a + "_f32_hf");
    ASSERT_EQ(run_cli("convert -m " + src.string() + " -o " + f32.string() + " --dtype f32"), 0);
    ASSERT_EQ(run_cli("convert -m " + src.string() + " -o " + f32_hf.string() + " --dtype f32"), 0);
    expect_same_values(src, f32);
    EXPECT_EQ(decode_logits(f32), reference);
    EXPECT_LT(max_relative_diff(reference, decode_logits(f32_hf)), 1e-5);
    // F16 too, but for the few values below its normal range.
    const fs::path f16 = temp(a + "_f16.gguf");
    ASSERT_EQ(run_cli("convert -m " + src.string() + " -o " + f16.string() + " --dtype f16"), 0);
    EXPECT_LT(weight_error(src, f16), 1e-3);
    // Quantized: every matrix within Q8_0's error, and it runs.
    const fs::path q8 = temp(a + "_q8.gguf");
    ASSERT_EQ(run_cli("quantize -m " + src.string() + " --type q8_0 -o " + q8.string()), 0);
    EXPECT_EQ(model::GgufFile::open(q8).tensor("blk.0.attn_qkv.weight").dtype, model::DType::kQ8_0);
    EXPECT_LT(weight_error(src, q8), 0.01);
    const std::vector<float> quantized = decode_logits(q8);
    // A quantized source: dequantized exactly (f32 GGUF, HF), or kept (whole blocks moved).
    const fs::path q8_f32 = temp(a + "_q8_f32.gguf"), q8_hf = temp(a + "_q8_hf"),
                   kept = temp(a + "_q8_kept.gguf");
    ASSERT_EQ(run_cli("convert -m " + q8.string() + " -o " + q8_f32.string() + " --dtype f32"), 0);
    ASSERT_EQ(run_cli("convert -m " + q8.string() + " -o " + q8_hf.string()), 0);
    ASSERT_EQ(run_cli("convert -m " + q8.string() + " -o " + kept.string()), 0);
    expect_same_values(q8, q8_f32);
    EXPECT_LT(max_relative_diff(decode_logits(q8_f32), decode_logits(q8_hf)), 1e-5);
    EXPECT_EQ(decode_logits(kept), quantized);
  }
  kernels::set_active_isa(isa);
}

std::vector<char> file_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Quantized experts through the offloading links: the disk and emulated links copy the Q4_K
// bytes into cache slots; the logits are bit-identical to the resident run.
TEST(QuantizedExperts, LinksMoveTheQuantizedBytesAndKeepTheLogits) {
  const fs::path q = temp("links_q4km.gguf");
  ASSERT_EQ(run_cli("quantize -m " + source_model().string() + " --type q4_k_m -o " + q.string()),
            0);
  const std::string common =
      "logits -m " + q.string() +
      " --tokens 5,17,300,42,99,100,7,8,9,10 --cache 4 --policy exact:evict=lru";
  ASSERT_EQ(run_cli(common + " -o " + temp("l_res.bin").string()), 0);
  ASSERT_EQ(run_cli(common + " --link disk -o " + temp("l_disk.bin").string()), 0);
  ASSERT_EQ(run_cli(common + " --link emulated:5 -o " + temp("l_emu.bin").string()), 0);
  // The expert layout the links copy by: the stored Q4_K bytes (down is Q6_K in the last layer).
  auto m = model::Model::load(q);
  const link::ExpertLayout layout = model::expert_layout(*m);
  const kernels::Matrix& gate = m->layer(0).experts[3].gate;
  ASSERT_EQ(gate.dtype, kernels::DType::kQ4_K);
  EXPECT_EQ(layout.parts(0, 3)[0].bytes, gate.rows * (gate.cols / 256) * 144);
  EXPECT_EQ(layout.parts(1, 3)[2].bytes, 256u * (256 / 256) * 210);
  const auto res = file_bytes(temp("l_res.bin"));
  ASSERT_EQ(res.size(), 10u * 512 * 4);
  EXPECT_EQ(res, file_bytes(temp("l_disk.bin")));
  EXPECT_EQ(res, file_bytes(temp("l_emu.bin")));
}

// ---- FP8 block-scaled safetensors -------------------------------------------------------------

// Rewrites an HF folder's matrices (except embedding, router and lm_head) as F8_E4M3 with
// 128 x 128 f32 scales (amax / 448 per block), and writes the dequantized twin as F32.
// `corrupt` damages one scale tensor: "shape" (one scale row short) or "nan".
void make_fp8_twins(const fs::path& hf, const fs::path& fp8, const fs::path& twin,
                    const std::string& corrupt = "") {
  const model::Checkpoint c = model::Checkpoint::open(hf);
  fs::create_directories(fp8);
  fs::create_directories(twin);
  std::ifstream in(hf / "config.json");
  std::string cfg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream(twin / "config.json") << cfg;
  const size_t brace = cfg.rfind('}');
  cfg.insert(brace, R"(, "quantization_config": {"quant_method": "fp8", "fmt": "e4m3",
    "activation_scheme": "dynamic", "weight_block_size": [128, 128]})");
  std::ofstream(fp8 / "config.json") << cfg;
  model::SafetensorsWriter w8(fp8 / "model.safetensors"), wt(twin / "model.safetensors");
  std::vector<std::vector<std::byte>> keep;
  std::vector<std::vector<float>> keepf;
  bool corrupted = false;
  for (const std::string& name : c.tensor_names()) {
    const model::TensorView t = c.tensor(name);
    const bool matrix = t.shape.size() == 2 && name.find("embed") == std::string::npos &&
                        name.find("lm_head") == std::string::npos &&
                        name.find("mlp.gate.") == std::string::npos;
    const std::vector<float> v = t.to_f32();
    if (!matrix) {
      keepf.push_back(v);
      w8.add_tensor_f32(name, model::DType::kF32, t.shape, keepf.back());
      wt.add_tensor_f32(name, model::DType::kF32, t.shape, keepf.back());
      continue;
    }
    const size_t rows = t.shape[0], cols = t.shape[1];
    const size_t sr = (rows + 127) / 128, sc = (cols + 127) / 128;
    std::vector<float> scales(sr * sc, 0.0f);
    for (size_t i = 0; i < rows * cols; ++i) {
      float& s = scales[(i / cols / 128) * sc + (i % cols) / 128];
      s = std::max(s, std::fabs(v[i]) / 448.0f);
    }
    std::vector<std::byte> q(rows * cols);
    std::vector<float> deq(rows * cols);
    for (size_t i = 0; i < rows * cols; ++i) {
      const float s = scales[(i / cols / 128) * sc + (i % cols) / 128];
      const uint8_t code = quant::f32_to_fp8_e4m3(s > 0 ? v[i] / s : 0.0f);
      q[i] = static_cast<std::byte>(code);
      deq[i] = quant::fp8_e4m3_to_f32(code) * s;
    }
    keep.push_back(std::move(q));
    w8.add_tensor(name, model::DType::kF8E4M3, t.shape, keep.back());
    std::vector<uint64_t> sshape = {sr, sc};
    if (!corrupted && corrupt == "nan") scales[0] = NAN;
    if (!corrupted && corrupt == "shape") sshape = {sr, sc + 1}, scales.resize(sr * (sc + 1));
    corrupted = !corrupt.empty();
    keepf.push_back(scales);
    w8.add_tensor_f32(name + "_scale_inv", model::DType::kF32, sshape, keepf.back());
    keepf.push_back(deq);
    wt.add_tensor_f32(name, model::DType::kF32, t.shape, keepf.back());
  }
  w8.finish();
  wt.finish();
}

const fs::path& hf_source() {
  static const fs::path path = [] {
    const fs::path cfg = temp("config.json");
    std::ofstream(cfg) << kConfig;
    const fs::path out = temp("src_hf");
    EXPECT_EQ(run_cli("make-model --arch olmoe --config " + cfg.string() +
                      " --random --dtype bf16 --seed 4 -o " + out.string()),
              0);
    return out;
  }();
  return path;
}

TEST(Fp8, BlockScaledCheckpointMatchesItsDequantizedTwin) {
  const fs::path fp8 = temp("fp8"), twin = temp("fp8_twin");
  make_fp8_twins(hf_source(), fp8, twin);
  auto m = model::Model::load(fp8);
  const kernels::Matrix& gate = m->layer(0).experts[0].gate;
  EXPECT_EQ(gate.dtype, kernels::DType::kF8E4M3);
  EXPECT_EQ(model::matrix_bytes(gate), 256u * 256 + 2 * 2 * 4);  // bytes + f32 scales
  EXPECT_EQ(kernels::matrix_ranges(gate).count, 2u);
  const std::vector<float> a = decode_logits(fp8), b = decode_logits(twin);
  double diff = 0, mag = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
    mag = std::max(mag, static_cast<double>(std::fabs(b[i])));
  }
  // Same weights, f32 activations in both: only the order of f32 sums differs.
  EXPECT_LT(diff, 1e-4 * mag) << diff;
}

TEST(Fp8, BadScaleTensorsAreRejectedByName) {
  for (const std::string corrupt : {"shape", "nan"}) {
    SCOPED_TRACE(corrupt);
    const fs::path fp8 = temp("fp8_bad_" + corrupt), twin = temp("fp8_bad_twin_" + corrupt);
    make_fp8_twins(hf_source(), fp8, twin, corrupt);
    try {
      model::Model::load(fp8);
      ADD_FAILURE() << "loaded";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("_scale_inv"), std::string::npos) << msg;
      EXPECT_NE(msg.find(corrupt == "nan" ? "finite" : "expected shape"), std::string::npos) << msg;
    }
  }
}

TEST(Fp8, MissingScalesAndBadQuantizationConfigAreRejected) {
  const fs::path fp8 = temp("fp8_cfg"), twin = temp("fp8_cfg_twin");
  make_fp8_twins(hf_source(), fp8, twin);
  // Wrong block size in config.json.
  std::ifstream in(fp8 / "config.json");
  std::string cfg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string good = "[128, 128]";
  const std::string bad =
      cfg.substr(0, cfg.find(good)) + "[64, 64]" + cfg.substr(cfg.find(good) + good.size());
  std::ofstream(fp8 / "config.json") << bad;
  try {
    model::Model::load(fp8);
    ADD_FAILURE() << "loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("weight_block_size"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace steermoe::engine
