// Hardware profiles: every shipped profile parses, and the paper's figures are what they say.
#include <gtest/gtest.h>

#include <filesystem>

#include "common/error.hpp"
#include "schedule/profile.hpp"

namespace steermoe::schedule {
namespace {

const std::filesystem::path kDir = std::filesystem::path(STEERMOE_SOURCE_DIR) / "data/profiles";

TEST(Profile, EveryShippedProfileParsesAndIsNamedAfterItsFile) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kDir)) {
    if (entry.path().extension() != ".json") continue;
    const HardwareProfile p = load_profile(entry.path().string());
    EXPECT_EQ(p.name, entry.path().stem().string());
    EXPECT_GT(p.link_bandwidth_bytes_per_s, 0);
    EXPECT_GT(p.expert_bytes, 0);
    EXPECT_GT(p.layers, 0);
    ++count;
  }
  EXPECT_GE(count, 5);
}

TEST(Profile, Rtx4090OlmoeMatchesThePaper) {
  const HardwareProfile p = load_profile("rtx4090-olmoe", kDir);
  const double copy = p.link_latency_s + p.expert_bytes / p.link_bandwidth_bytes_per_s;
  EXPECT_NEAR(copy * 1e3, 0.55, 0.005);  // one 12.6 MB expert copy, 0.55 ms
  EXPECT_NEAR(p.resident_token_seconds(16, 8) * 1e3, 6.8, 1e-9);
  EXPECT_NEAR(p.host_policy_s * 1e6, 20, 1e-9);
}

// A machine running 1.25x slower than profiled: every compute and host duration, and so the
// all-resident token, 1.25x; the link as it was.
TEST(Profile, ComputeScaledKeepsTheLink) {
  const HardwareProfile p = load_profile("cpu-disk-olmoe", kDir);
  const HardwareProfile q = p.with_compute_scaled(1.25);
  EXPECT_NEAR(q.resident_token_seconds(16, 8), 1.25 * p.resident_token_seconds(16, 8), 1e-15);
  EXPECT_DOUBLE_EQ(q.attention_s, 1.25 * p.attention_s);
  EXPECT_DOUBLE_EQ(q.moe_per_expert_s, 1.25 * p.moe_per_expert_s);
  EXPECT_DOUBLE_EQ(q.head_s, 1.25 * p.head_s);
  EXPECT_DOUBLE_EQ(q.host_policy_s, 1.25 * p.host_policy_s);
  EXPECT_EQ(q.link_bandwidth_bytes_per_s, p.link_bandwidth_bytes_per_s);
  EXPECT_EQ(q.link_latency_s, p.link_latency_s);
  EXPECT_EQ(q.link_channels, p.link_channels);
  EXPECT_EQ(q.expert_bytes, p.expert_bytes);
}

TEST(Profile, Qwen36IsComputeBound) {
  const HardwareProfile p = load_profile("rtx4090-qwen36", kDir);
  EXPECT_NEAR(p.resident_token_seconds(40, 8) * 1e3, 22.9, 1e-9);
  const double copy = p.link_latency_s + p.expert_bytes / p.link_bandwidth_bytes_per_s;
  EXPECT_NEAR(copy * 1e3, 0.14, 0.005);
}

TEST(Profile, ErrorsNameTheFieldAndTheKnownProfiles) {
  try {
    load_profile("no-such-machine", kDir);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rtx4090-olmoe"), std::string::npos) << e.what();
  }
  nlohmann::json j = {
      {"name", "x"},
      {"link", {{"bandwidth_GBps", -1}}},
      {"expert_bytes", 10},
      {"compute_us", {{"attention", 1}, {"moe_fixed", 1}, {"moe_per_expert", 1}, {"head", 1}}},
      {"host_policy_us", 1}};
  try {
    parse_profile(j, "x.json");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bandwidth_GBps"), std::string::npos) << e.what();
  }
  j["link"]["bandwidth_GBps"] = 10;
  j["compute_us"].erase("head");
  EXPECT_THROW(parse_profile(j, "x.json"), Error);
  j["compute_us"]["head"] = 1;
  const HardwareProfile ok = parse_profile(j, "x.json");
  EXPECT_NEAR(parse_profile(ok.to_json(), "round trip").link_bandwidth_bytes_per_s, 10e9, 1e-3);
  // The compute slowdown while the link transfers: optional (0), a fraction below 1.
  EXPECT_EQ(ok.link_compute_slowdown, 0.0);
  EXPECT_EQ(ok.link_params().compute_slowdown, 0.0);
  j["link"]["compute_slowdown"] = 0.25;
  const HardwareProfile shared = parse_profile(j, "x.json");
  EXPECT_EQ(parse_profile(shared.to_json(), "round trip").link_compute_slowdown, 0.25);
  EXPECT_EQ(shared.link_params().compute_slowdown, 0.25);
  for (const double bad : {1.0, -0.5}) {
    j["link"]["compute_slowdown"] = bad;
    try {
      parse_profile(j, "x.json");
      FAIL() << "accepted compute_slowdown " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("compute_slowdown"), std::string::npos) << e.what();
    }
  }
  j["link"]["compute_slowdown"] = 0.25;
  // And its converse, the link's speed lost while compute runs: optional (0), below 1.
  EXPECT_EQ(ok.link_params().transfer_slowdown, 0.0);
  j["link"]["transfer_slowdown"] = 0.125;
  const HardwareProfile starved = parse_profile(j, "x.json");
  EXPECT_EQ(parse_profile(starved.to_json(), "round trip").link_transfer_slowdown, 0.125);
  EXPECT_EQ(starved.link_params().transfer_slowdown, 0.125);
  for (const double bad : {1.0, -0.5}) {
    j["link"]["transfer_slowdown"] = bad;
    try {
      parse_profile(j, "x.json");
      FAIL() << "accepted transfer_slowdown " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("transfer_slowdown"), std::string::npos) << e.what();
    }
  }
  j["link"].erase("transfer_slowdown");
  // Channels: optional (1), an integer of at least 1, carried to the link.
  EXPECT_EQ(ok.link_channels, 1);
  j["link"]["channels"] = 3;
  const HardwareProfile three = parse_profile(j, "x.json");
  EXPECT_EQ(parse_profile(three.to_json(), "round trip").link_channels, 3);
  EXPECT_EQ(three.link_params().channels, 3);
  for (const nlohmann::json& bad :
       {nlohmann::json(0), nlohmann::json(2.5), nlohmann::json("2"), nlohmann::json(5000)}) {
    j["link"]["channels"] = bad;
    try {
      parse_profile(j, "x.json");
      FAIL() << "accepted channels " << bad.dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("channels"), std::string::npos) << e.what();
    }
  }
}

// Counts and sizes are whole numbers in range (a cast of 1e300 or 2.5 to an integer type would be
// undefined or silently truncated), durations and bandwidths finite and bounded, and the text
// form names the file for syntax errors, hostile nesting and numbers beyond double range.
TEST(Profile, CountsAreWholeAndNumbersBounded) {
  const nlohmann::json good = {
      {"name", "x"},
      {"model", {{"layers", 16}, {"experts", 64.0}, {"top_k", 8}}},
      {"link", {{"bandwidth_GBps", 10}}},
      {"expert_bytes", 4096},
      {"compute_us", {{"attention", 1}, {"moe_fixed", 1}, {"moe_per_expert", 1}, {"head", 1}}},
      {"host_policy_us", 1}};
  const HardwareProfile ok = parse_profile(good, "x.json");
  EXPECT_EQ(ok.experts, 64);  // 64.0 is a whole number
  EXPECT_EQ(ok.expert_bytes, 4096);
  const auto refused = [&](const nlohmann::json& profile, const char* field) {
    try {
      parse_profile(profile, "x.json");
      ADD_FAILURE() << "accepted " << profile.dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("x.json"), std::string::npos) << e.what();
    }
  };
  for (const nlohmann::json& bad :
       {nlohmann::json(2.5), nlohmann::json(1e300), nlohmann::json(-1), nlohmann::json("16"),
        nlohmann::json(uint64_t{1} << 63), nlohmann::json(int64_t{1} << 40)}) {
    nlohmann::json j = good;
    j["model"]["layers"] = bad;
    refused(j, "layers");
  }
  for (const nlohmann::json& bad : {nlohmann::json(1e300), nlohmann::json(0.5),
                                    nlohmann::json(uint64_t{1} << 63), nlohmann::json(0)}) {
    nlohmann::json j = good;
    j["expert_bytes"] = bad;
    refused(j, "expert_bytes");
  }
  nlohmann::json j = good;
  j["compute_us"]["attention"] = 1e300;
  refused(j, "attention");
  j = good;
  j["link"]["bandwidth_GBps"] = 1e300;
  refused(j, "bandwidth_GBps");
  j = good;
  j["host_policy_us"] = 1e300;
  refused(j, "host_policy_us");

  EXPECT_EQ(parse_profile_text(good.dump(), "x.json").layers, 16);
  for (const std::string& text : {std::string("{\"name\": "), std::string(100000, '['),
                                  std::string("{\"name\": \"x\", \"expert_bytes\": 1e999}")}) {
    try {
      parse_profile_text(text, "x.json");
      ADD_FAILURE() << "accepted " << text.substr(0, 40);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("x.json"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace steermoe::schedule
