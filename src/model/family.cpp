// The list of families, and what the generic code asks of a family.
#include "model/family.hpp"

#include "common/error.hpp"
#include "model/family_def.hpp"

namespace steermoe::model {

// The family of each file under families/.
const FamilyDef& olmoe_family();
const FamilyDef& qwen3moe_family();
const FamilyDef& deepseek_family();
const FamilyDef& qwen3next_family();
const FamilyDef& qwen35moe_family();

std::span<const FamilyDef* const> family_defs() {
  // In Family order. A new family: its file under families/, its accessor here (declared above
  // and listed), one Family value.
  static const FamilyDef* const kAll[] = {&olmoe_family(), &qwen3moe_family(), &deepseek_family(),
                                          &qwen3next_family(), &qwen35moe_family()};
  return kAll;
}

const FamilyDef& family_def(Family family) {
  for (const FamilyDef* def : family_defs()) {
    if (def->id == family) return *def;
  }
  SM_ASSERT_MSG(false, "a Family without a FamilyDef");
  return *family_defs().front();
}

void FamilyDef::layout_mixer(LayoutBuilder& b, const ModelConfig& c, int layer) const {
  layout_gqa_attention(b, c, layer);
}

void FamilyDef::bind_mixer(WeightBinder& b, const ModelConfig& c, int layer,
                           LayerWeights& w) const {
  bind_gqa_attention(b, c, layer, w);
}

bool FamilyDef::produce(const Model& /*m*/, const TensorSlot& /*s*/, DType /*dtype*/,
                        OutputFile& /*out*/) const {
  return false;
}

std::optional<DType> FamilyDef::stored_dtype(const Model& /*m*/, const TensorSlot& /*s*/) const {
  return std::nullopt;
}

bool FamilyDef::shape(std::string_view /*name*/, ModelConfig& /*c*/) const {
  return false;
}

Mixer layer_mixer(const ModelConfig& c, int layer) {
  if (c.is_linear(layer)) return Mixer::kGatedDeltaNet;
  return family_def(c.family).attention;
}

std::string join_or(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += i + 1 == items.size() ? " or " : ", ";
    out += items[i];
  }
  return out;
}

}  // namespace steermoe::model
