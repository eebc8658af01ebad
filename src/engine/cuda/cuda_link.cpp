// The `cuda` link and its device slot store (see cuda_backend_factory.hpp).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "common/error.hpp"
#include "engine/cuda/cuda_util.hpp"
#include "engine/cuda_backend_factory.hpp"
#include "model/expert_ranges.hpp"
#include "schedule/scheduler.hpp"

namespace steermoe::engine {
namespace {

class CudaLink final : public link::Link {
 public:
  CudaLink(const link::ExpertLayout& layout, std::byte* slots, int cache_slots, double delay_max_s,
           uint64_t delay_seed)
      : layout_(layout),
        slots_(slots),
        cache_slots_(cache_slots),
        delay_max_s_(delay_max_s),
        rng_(delay_seed),
        delays_(static_cast<size_t>(kRing), 0.0),
        origin_(std::chrono::steady_clock::now()) {
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    events_.resize(kRing);
    for (cudaEvent_t& e : events_)
      check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  }
  ~CudaLink() override {
    cudaStreamSynchronize(stream_);
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    cudaStreamDestroy(stream_);
  }
  CudaLink(const CudaLink&) = delete;
  CudaLink& operator=(const CudaLink&) = delete;

  link::Ticket enqueue(const link::CopyRequest& c) override {
    // A ring position is reused only once its previous copy has completed.
    if (last_ - completed() >= kRing) wait(last_ - kRing + 1);
    std::byte* dst = slot(c.layer, c.slot);
    if (delay_max_s_ > 0) {
      double& d = delays_[static_cast<size_t>((last_ + 1) % kRing)];
      d = std::uniform_real_distribution<double>(0.0, delay_max_s_)(rng_);
      check(cudaLaunchHostFunc(stream_, &CudaLink::sleep_for, &d), "cudaLaunchHostFunc");
    }
    for (const link::ExpertPart& p : layout_.parts(c.layer, c.expert)) {
      SM_ASSERT(p.source != nullptr);
      check(
          cudaMemcpyAsync(dst + p.slot_offset, p.source, p.bytes, cudaMemcpyHostToDevice, stream_),
          "cudaMemcpyAsync");
    }
    ++last_;
    check(cudaEventRecord(events_[static_cast<size_t>(last_ % kRing)], stream_), "cudaEventRecord");
    return last_;
  }

  link::Ticket completed() override {
    while (done_ < last_) {
      const cudaError_t q = cudaEventQuery(events_[static_cast<size_t>((done_ + 1) % kRing)]);
      if (q == cudaErrorNotReady) break;
      check(q, "cudaEventQuery");
      ++done_;
    }
    return done_;
  }

  void wait(link::Ticket t) override {
    SM_ASSERT(t <= last_);
    while (done_ < t) {
      check(cudaEventSynchronize(events_[static_cast<size_t>((done_ + 1) % kRing)]),
            "cudaEventSynchronize");
      ++done_;
    }
  }

  double now() override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - origin_).count();
  }

  std::byte* slot(int layer, int s) const {
    return slots_ + (static_cast<size_t>(layer) * static_cast<size_t>(cache_slots_) +
                     static_cast<size_t>(s)) *
                        layout_.slot_bytes();
  }

 private:
  static void CUDART_CB sleep_for(void* seconds) {
    std::this_thread::sleep_for(std::chrono::duration<double>(*static_cast<double*>(seconds)));
  }
  static constexpr int64_t kRing = 4096;
  const link::ExpertLayout& layout_;
  std::byte* slots_;
  int cache_slots_;
  double delay_max_s_ = 0;
  std::mt19937_64 rng_;
  std::vector<double> delays_;  // [kRing] test-hook delay of each in-flight copy
  cudaStream_t stream_ = nullptr;
  std::vector<cudaEvent_t> events_;
  link::Ticket last_ = 0;
  link::Ticket done_ = 0;
  std::chrono::steady_clock::time_point origin_;
};

// Device slots, checked like the host slot store: the slot must physically hold the selected
// expert and its copy must have completed.
class DeviceSlotStore final : public ExpertStore {
 public:
  DeviceSlotStore(const model::Model& model, const link::ExpertLayout& layout, CudaLink& link,
                  int cache_slots)
      : model_(model),
        layout_(layout),
        link_(link),
        cache_slots_(cache_slots),
        rebased_(static_cast<size_t>(layout.layers()) * static_cast<size_t>(cache_slots)) {}
  void attach(const schedule::TransferScheduler* s) { scheduler_ = s; }
  const model::SwigluWeights& expert(int moe_layer, int layer, int expert, int slot) override {
    SM_ASSERT_MSG(scheduler_ != nullptr, "slot store used before the scheduler was attached");
    SM_ASSERT_MSG(scheduler_->physical_expert(moe_layer, slot) == expert,
                  "slot does not physically hold the expert the policy selected");
    SM_ASSERT_MSG(link_.is_complete(scheduler_->slot_ticket(moe_layer, slot)),
                  "expert used before its copy completed");
    model::SwigluWeights& w =
        rebased_[static_cast<size_t>(moe_layer) * static_cast<size_t>(cache_slots_) +
                 static_cast<size_t>(slot)];
    w = model::rebase_expert(model_.layer(layer).experts[static_cast<size_t>(expert)], layout_,
                             moe_layer, expert, link_.slot(moe_layer, slot));
    return w;
  }
  bool all_resident() const override { return false; }

 private:
  const model::Model& model_;
  const link::ExpertLayout& layout_;
  CudaLink& link_;
  int cache_slots_;
  const schedule::TransferScheduler* scheduler_ = nullptr;
  std::vector<model::SwigluWeights> rebased_;
};

class CudaExpertsImpl final : public CudaExperts {
 public:
  CudaExpertsImpl(const model::Model& model, const link::ExpertLayout& layout, int cache_slots,
                  double delay_max_s, uint64_t delay_seed) {
    if (!layout.in_memory())
      fail(model.path().string(), "experts",
           "expected every expert in the host mapping for the cuda link");
    bytes_ = static_cast<uint64_t>(layout.layers()) * static_cast<uint64_t>(cache_slots) *
             layout.slot_bytes();
    size_t free_b = 0, total_b = 0;
    check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
    if (bytes_ + (512ull << 20) > free_b)
      fail(
          model.path().string(), "device memory",
          "expected {} MoE layers x {} slots x {} bytes ({:.2f} GiB) of device slots to fit, found "
          "{:.2f} GiB free; lower --residency or --cache",
          layout.layers(), cache_slots, layout.slot_bytes(),
          static_cast<double>(bytes_) / (1 << 30), static_cast<double>(free_b) / (1 << 30));
    check(cudaMalloc(&slots_, bytes_), "cudaMalloc");
    pin(layout);
    link_ = std::make_unique<CudaLink>(layout, static_cast<std::byte*>(slots_), cache_slots,
                                       delay_max_s, delay_seed);
    store_ = std::make_unique<DeviceSlotStore>(model, layout, *link_, cache_slots);
  }
  ~CudaExpertsImpl() override {
    store_.reset();
    link_.reset();
    for (void* p : registered_) cudaHostUnregister(p);
    if (slots_ != nullptr) cudaFree(slots_);
  }
  link::Link& link() override { return *link_; }
  ExpertStore& store() override { return *store_; }
  void attach(const schedule::TransferScheduler* s) override { store_->attach(s); }
  uint64_t device_bytes() const override { return bytes_; }
  bool pinned() const override { return pinned_; }

 private:
  // Registers the page span of every file's mapped parts (read-only): copies from it are then
  // DMA from pinned memory. Parts not in a file (converted at load time) stay pageable.
  void pin(const link::ExpertLayout& layout) {
    std::map<int32_t, std::pair<uintptr_t, uintptr_t>> spans;
    for (int32_t m = 0; m < layout.layers(); ++m)
      for (int32_t e = 0; e < layout.experts(); ++e)
        for (const link::ExpertPart& p : layout.parts(m, e)) {
          if (p.file < 0) continue;
          const auto b = reinterpret_cast<uintptr_t>(p.source);
          auto [it, fresh] = spans.try_emplace(p.file, b, b + p.bytes);
          if (!fresh) {
            it->second.first = std::min(it->second.first, b);
            it->second.second = std::max(it->second.second, static_cast<uintptr_t>(b + p.bytes));
          }
        }
    pinned_ = !spans.empty();
    for (const auto& [file, span] : spans) {
      const uintptr_t begin = span.first / 4096 * 4096;
      const uintptr_t end = (span.second + 4095) / 4096 * 4096;
      void* p = reinterpret_cast<void*>(begin);
      const cudaError_t err =
          cudaHostRegister(p, end - begin, cudaHostRegisterPortable | cudaHostRegisterReadOnly);
      if (err == cudaSuccess) {
        registered_.push_back(p);
      } else {
        cudaGetLastError();  // clear it; copies from pageable memory still work, slower
        pinned_ = false;
        std::fprintf(
            stderr,
            "cuda link: cudaHostRegister failed (%s): experts copied from pageable memory\n",
            cudaGetErrorString(err));
      }
    }
  }

  void* slots_ = nullptr;
  uint64_t bytes_ = 0;
  bool pinned_ = false;
  std::vector<void*> registered_;
  std::unique_ptr<CudaLink> link_;
  std::unique_ptr<DeviceSlotStore> store_;
};

}  // namespace

std::unique_ptr<CudaExperts> make_cuda_experts(const model::Model& model,
                                               const link::ExpertLayout& layout, int cache_slots,
                                               double test_delay_max_s, uint64_t test_delay_seed) {
  std::string why;
  if (!cuda_backend_available(&why))
    fail("--link", "cuda", "expected a usable CUDA backend, found {}", why);
  return std::make_unique<CudaExpertsImpl>(model, layout, cache_slots, test_delay_max_s,
                                           test_delay_seed);
}

}  // namespace steermoe::engine
