// Fuzzes the chat-template parser and renderer: any bytes either parse and render within the
// bounds or raise TemplateError; nothing else may escape (no crash, no hang, no huge allocation).
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "template/jinja.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const nlohmann::ordered_json context = {
      {"messages",
       {{{"role", "system"}, {"content", "sys"}},
        {{"role", "user"}, {"content", "hi <think>x</think>"}},
        {{"role", "assistant"},
         {"content", nullptr},
         {"tool_calls",
          {{{"type", "function"}, {"function", {{"name", "f"}, {"arguments", "{}"}}}}}}},
        {{"role", "tool"}, {"content", "{\"a\": 1}"}}}},
      {"tools", {{{"type", "function"}, {"function", {{"name", "f"}}}}}},
      {"add_generation_prompt", true},
      {"bos_token", "<s>"},
      {"eos_token", "</s>"}};
  steermoe::jinja::Limits limits;
  limits.max_output = 1 << 16;
  limits.max_steps = 200000;
  try {
    steermoe::jinja::Template t(std::string_view(reinterpret_cast<const char*>(data), size),
                                limits);
    (void)t.render(context);
  } catch (const steermoe::jinja::TemplateError&) {
  }
  return 0;
}
