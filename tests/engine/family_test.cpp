// The family list (model/family.cpp) against the families' own definitions: every Family value
// has exactly one definition, in order; every name a family claims (config.json model_type, GGUF
// architecture, named shape) leads back to it through the generic code.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "model/family_def.hpp"
#include "model/hf_config.hpp"
#include "model/weights_layout.hpp"

namespace steermoe::model {
namespace {

TEST(Families, EveryFamilyIsListedOnceInFamilyOrder) {
  int expected = 0;
  for (const FamilyDef* def : family_defs()) {
    EXPECT_EQ(static_cast<int>(def->id), expected++) << def->name;
    EXPECT_EQ(&family_def(def->id), def);
    EXPECT_EQ(family_name(def->id), def->name);
    EXPECT_FALSE(def->hf_types.empty()) << def->name;
    EXPECT_FALSE(def->gguf_archs.empty()) << def->name;
  }
  EXPECT_EQ(expected, static_cast<int>(Family::kQwen35Moe) + 1);  // the last Family value
}

TEST(Families, NamedShapesWriteBackToTheirFamilysNames) {
  int shapes = 0;
  for (const FamilyDef* def : family_defs()) {
    for (const auto* list : {&def->shapes, &def->small_shapes}) {
      for (const std::string_view name : *list) {
        SCOPED_TRACE(std::string(name));
        const ModelConfig c = shape_config(std::string(name));
        const FamilyDef& made = family_def(c.family);
        EXPECT_EQ(made.hybrid, def->hybrid);
        // The GGUF architecture and the config.json written for it are the family's own, and
        // read back as the same family.
        const std::string arch = gguf_arch_name(c);
        EXPECT_TRUE(arch == made.dense_gguf_arch ||
                    std::find(made.gguf_archs.begin(), made.gguf_archs.end(), arch) !=
                        made.gguf_archs.end())
            << arch;
        const ModelConfig back = parse_hf_config(hf_config_json(c, "float32"), "written");
        EXPECT_EQ(back.family, c.family);
        EXPECT_EQ(back.summary(), c.summary());
        ++shapes;
      }
    }
  }
  EXPECT_EQ(shapes, 12);
}

TEST(Families, UnknownNamesListEveryFamilysNames) {
  try {
    (void)parse_hf_config(R"({"model_type": "llama"})", "cfg.json");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    for (const FamilyDef* def : family_defs()) {
      for (const std::string_view t : def->hf_types)
        EXPECT_NE(std::string(e.what()).find("\"" + std::string(t) + "\""), std::string::npos) << t;
    }
  }
}

}  // namespace
}  // namespace steermoe::model
