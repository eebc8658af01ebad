// EngineParams with an offload configuration resolved the way every command resolves one
// (engine::resolve_offload), for tests that name a policy, a cache size, a link and a
// calibration. The calibration is borrowed: it must outlive the engine. Without one, the engine
// runs on an uninformed calibration (warm order = expert index), as the engine library always
// allowed; only the commands insist on a calibration for cache-aware policies.
#pragma once

#include <memory>
#include <string>

#include "engine/engine.hpp"
#include "policy/calibration.hpp"

namespace steermoe::test_support {

inline engine::EngineParams offload_params(const model::Model& model, const std::string& policy,
                                           int cache, const std::string& link = "resident",
                                           const policy::Calibration* calibration = nullptr) {
  schedule::OffloadRequest request{.policy = policy, .cache = cache, .link = link};
  if (calibration != nullptr) {
    request.calibration =
        std::shared_ptr<const policy::Calibration>(calibration, [](const policy::Calibration*) {});
    request.calibration_source = "test calibration";
  } else {
    request.calibration = std::make_shared<const policy::Calibration>(
        policy::uninformed_calibration(engine::router_spec(model.config())));
  }
  return {.offload = engine::resolve_offload(model, request)};
}

}  // namespace steermoe::test_support
