// `bench --scores-from TRACE`: a model of real size with random weights routes without locality,
// so its copy pattern says nothing about a trained model. This maps a trace of a trained model
// onto it: the policy sees the trace's router and pre-gate rows (model MoE layer m takes trace
// layer m mod L_trace), the tokens are the trace's, and the calibration is the trace model's
// with its layers mapped the same way. At a wrap (trace layer L_trace - 1 -> 0) the trace has no
// pre-gate for the next layer, so part 1 is skipped there: conservative for the prefetching
// policies. Expert counts must match (the trace's E and K are the model's).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/score_source.hpp"
#include "policy/calibration.hpp"
#include "trace/trace.hpp"

namespace steermoe::eval {

class TraceScores final : public engine::ScoreSource {
 public:
  // `trace` must outlive this; `model_moe_layers` is the model's MoE layer count.
  TraceScores(const trace::Trace& trace, int model_moe_layers);

  // Windows of `len` consecutive steps inside the trace's sequences (at most `count`), as token
  // lists; remembers each window's first step for begin_window().
  std::vector<std::vector<int32_t>> windows(int count, int len);
  // The next decoded sequence is window `index` (position 0 = its first step).
  void begin_window(size_t index) { base_ = starts_.at(index); }

  bool scores(int position, int moe_layer, std::span<float> z,
              std::span<float> pregate_next) override;
  bool has_weight_scores() const override { return trace_.has_weights_scores(); }
  void weight_scores(int position, int moe_layer, std::span<float> out) override;

 private:
  const trace::Trace& trace_;
  int model_layers_;
  std::vector<int64_t> starts_;
  int64_t base_ = 0;
};

// `calibration` (of the trace's model) with its layers mapped onto `layers` layers: layer m
// takes layer m mod calibration.layers (warm order, counts, range, token prior).
policy::Calibration map_calibration_layers(const policy::Calibration& calibration, int layers);

}  // namespace steermoe::eval
