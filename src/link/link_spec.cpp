#include "link/link_spec.hpp"

#include <charconv>
#include <cmath>

#include "common/error.hpp"

namespace steermoe::link {

namespace {

double parse_number(std::string_view text, std::string_view spec, const char* field) {
  double v = 0;
  const char* end = text.data() + text.size();
  const auto r = std::from_chars(text.data(), end, v);
  if (text.empty() || r.ec != std::errc() || r.ptr != end || !std::isfinite(v)) {
    fail("--link", field, "expected a number in '{}', found '{}'", spec, text);
  }
  return v;
}

}  // namespace

EmulatedLinkParams parse_emulated_spec(std::string_view spec) {
  constexpr std::string_view kPrefix = "emulated:";
  if (spec.substr(0, kPrefix.size()) != kPrefix) {
    fail("--link", "form", "expected emulated:GBPS[,LATENCY_US], found '{}'", spec);
  }
  std::string_view rest = spec.substr(kPrefix.size());
  std::string_view gbps = rest, latency;
  if (const size_t comma = rest.find(','); comma != std::string_view::npos) {
    gbps = rest.substr(0, comma);
    latency = rest.substr(comma + 1);
    if (latency.empty()) fail("--link", "latency", "expected microseconds after ',' in '{}'", spec);
  }
  EmulatedLinkParams p;
  const double bw = parse_number(gbps, spec, "bandwidth");
  if (!(bw > 0) || bw > 1e6)
    fail("--link", "bandwidth", "expected GB/s in (0, 1e6] in '{}', found {}", spec, bw);
  p.bandwidth_bytes_per_s = bw * 1e9;
  if (!latency.empty()) {
    const double us = parse_number(latency, spec, "latency");
    if (!(us >= 0) || us > 1e7)
      fail("--link", "latency", "expected microseconds in [0, 1e7] in '{}', found {}", spec, us);
    p.latency_s = us * 1e-6;
  }
  return p;
}

LinkSpec parse_link_spec(std::string_view text) {
  LinkSpec spec;
  spec.text = std::string(text);
  if (text == "resident") {
    spec.kind = LinkKind::kResident;
  } else if (text == "disk") {
    spec.kind = LinkKind::kDisk;
  } else if (text == "cuda") {
    spec.kind = LinkKind::kCuda;
  } else if (text.starts_with("sim:")) {
    spec.kind = LinkKind::kSim;
    spec.profile = std::string(text.substr(4));
    if (spec.profile.empty())
      fail("--link", "sim", "expected sim:PROFILE (a name or a .json path)");
  } else if (text.starts_with("emulated:")) {
    spec.kind = LinkKind::kEmulated;
    spec.emulated = parse_emulated_spec(text);
  } else {
    fail("--link", "value",
         "expected resident, disk, emulated:GBPS[,LATENCY_US], sim:PROFILE or cuda, found '{}'",
         text);
  }
  return spec;
}

}  // namespace steermoe::link
