// Backend selection: --backend cuda on a build or machine without CUDA is a clear error that
// says why; an unknown backend is an error; cpu always works. (The CUDA backend's own tests are
// tests/cuda/, built with -DSTEERMOE_CUDA=ON.)
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "common/error.hpp"
#include "engine/cuda_backend_factory.hpp"
#include "engine/engine.hpp"

namespace steermoe::engine {
namespace {

const std::filesystem::path kModel =
    std::filesystem::path(STEERMOE_ORACLE_DIR) / "olmoe" / "model.gguf";

std::string error_of(const model::Model& m, const std::string& backend) {
  EngineParams p;
  p.context = 8;
  p.backend = backend;
  p.quiet = true;
  try {
    Engine e(m, p);
    (void)e.decode(1);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(BackendSelect, CudaWithoutADeviceOrBuildIsAClearError) {
  const auto m = model::Model::load(kModel);
  std::string why;
  if (cuda_backend_available(&why)) {
    EXPECT_EQ(error_of(*m, "cuda"), "");  // a GPU is here: the backend must construct and run
    return;
  }
  EXPECT_FALSE(why.empty());
  const std::string err = error_of(*m, "cuda");
  EXPECT_NE(err.find("--backend: cuda: expected"), std::string::npos) << err;
  EXPECT_NE(err.find(why), std::string::npos) << err;
}

TEST(BackendSelect, UnknownBackendIsAnErrorAndCpuWorks) {
  const auto m = model::Model::load(kModel);
  EXPECT_NE(error_of(*m, "tpu").find("expected cpu or cuda, found 'tpu'"), std::string::npos);
  EXPECT_EQ(error_of(*m, "cpu"), "");
}

}  // namespace
}  // namespace steermoe::engine
