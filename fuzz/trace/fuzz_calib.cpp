// Fuzzes the .smcal reader. Bad input must be rejected with steermoe::Error; input that decodes
// must encode back to exactly the same bytes (the format has one encoding per calibration).
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/error.hpp"
#include "trace/calibration_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  steermoe::trace::CalibrationLimits limits;
  limits.max_prior_rows = uint64_t{1} << 16;  // keep allocations small under the fuzzer
  try {
    const steermoe::policy::Calibration calibration =
        steermoe::trace::decode_calibration(bytes, "fuzz.smcal", limits);
    const std::vector<uint8_t> again = steermoe::trace::encode_calibration(calibration);
    SM_ASSERT(again.size() == size && std::equal(again.begin(), again.end(), bytes.begin()));
  } catch (const steermoe::Error&) {
  }
  return 0;
}
