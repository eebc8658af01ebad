// `steermoe kl`: per configuration, the KL divergence of its next-token distributions from exact
// routing's over the same teacher-forced windows (eval/kl.hpp); markdown and --json.
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli/checks.hpp"
#include "cli/commands.hpp"
#include "cli/engine_options.hpp"
#include "cli/speculative.hpp"
#include "cli/validators.hpp"
#include "common/error.hpp"
#include "common/input_file.hpp"
#include "common/json_input.hpp"
#include "common/output_file.hpp"
#include "common/progress.hpp"
#include "eval/kl.hpp"
#include "tokenizer/tokenizer.hpp"

namespace steermoe::cli {

void add_kl_command(CLI::App& root) {
  struct Options {
    std::string model;
    std::string file;
    std::vector<std::string> policies;
    int window_len = 256;
    int max_windows = 0;
    int threads = 1;
    std::string json;
    EngineOptions engine;
    SpecOptions spec;
    bool counterfactual = false;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = root.add_subcommand(
      "kl", "KL divergence from exact routing per configuration (teacher forced, same windows)");
  cmd->add_option("-m,--model", o->model, "Model: a .gguf file or a HuggingFace folder")
      ->required();
  cmd->add_option("-f,--file", o->file, "Text file")->required();
  cmd->add_option("--policy", o->policies, "Routing policies, one configuration each")
      ->expected(1, -1)
      ->required()
      ->default_str("");  // required: no default to show (it printed "=[]")
  cmd->add_option("--window-len", o->window_len, "Tokens per window (each a fresh sequence)")
      ->check(CLI::Range(2, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--max-windows", o->max_windows, "Score at most this many windows (0: all)")
      ->check(CLI::Range(0, 1 << 30));
  cmd->add_option("-t,--threads", o->threads, "Threads")->check(CLI::Range(1, 1024));
  cmd->add_option("--json", o->json,
                  "Write the rows (steermoe.kl/1) here ('-' = stdout, the table then on stderr)")
      ->check(WritablePath);
  add_engine_options(cmd, o->engine, /*with_policy=*/false);
  // Teacher forced: the committed tokens are the text's, drafts accepted while they match it.
  add_speculative_options(cmd, o->spec);
  cmd->add_flag("--counterfactual", o->counterfactual,
                "With --draft and a block rule: verify each block also with the text's tokens at "
                "the draft positions (from the same state, then undone) and report the share of "
                "committed token-layers whose executed expert set the rejected drafts changed");
  cmd->final_callback([o] {
    // kl runs its configurations side by side with every expert resident (output does not
    // depend on the link): a budget would not hold what it means elsewhere.
    if (!o->engine.mem_limit.empty())
      fail("kl", "--mem-limit",
           "expected no memory budget: kl computes with every expert resident, one engine per "
           "configuration (routing and logits are the same on every link); bench and run take "
           "--mem-limit");
    auto model = model::Model::load(o->model);
    require_moe_layers(o->model, model->config(), "kl");
    const model::ModelConfig& cfg = model->config();
    const tokenizer::Tokenizer tok = load_tokenizer_for(o->model, *model);
    const std::vector<int32_t> ids = tok.encode(read_text_file(o->file), {.parse_special = false});
    // Output never depends on the link, so every configuration runs with experts resident.
    schedule::OffloadRequest request = offload_request(o->engine, *model, o->model);
    {  // unused, but a value no command takes is still an error (resolved as every command does)
      schedule::OffloadRequest probe = request;
      probe.cache = cfg.experts;
      probe.residency = 0;
      resolve_policy(probe, "exact:evict=lru", *model);
    }
    if (request.link != "resident")
      std::fprintf(stderr,
                   "kl: note: --link %s is not used: routing and logits are the same on every "
                   "link, so kl runs with every expert resident; its copies are the policy's "
                   "logical insertions (bench measures a link)\n",
                   request.link.c_str());
    request.link = "resident";
    const std::string& calib_path = request.calibration_source;
    schedule::OffloadRequest exact_request = request;
    exact_request.cache = cfg.experts;
    exact_request.residency = 0;
    apply_speculative(o->spec, request);  // the configurations' verification rule, not exact's
    engine::Engine exact(
        *model, engine_params(o->engine, resolve_policy(exact_request, "exact:evict=lru", *model),
                              o->threads, o->window_len));
    std::vector<std::unique_ptr<engine::Engine>> engines;
    std::vector<engine::Engine*> pointers;
    for (const std::string& p : o->policies) {
      engines.push_back(std::make_unique<engine::Engine>(
          *model,
          engine_params(o->engine, resolve_policy(request, p, *model), o->threads, o->window_len)));
      pointers.push_back(engines.back().get());
    }
    // Rate and ETA on stderr (quiet with -q / STEERMOE_QUIET=1); Ctrl-C checked there too.
    Progress kl_progress("kl", 0, "windows");
    const auto progress = [&kl_progress](int64_t done, int64_t total) {
      kl_progress.set_total(total);
      kl_progress.advance(done - kl_progress.done());
    };
    if (o->counterfactual && o->spec.draft.empty())
      fail("kl", "--counterfactual", "expected --draft MODEL with a block rule (--spec-select)");
    Drafter drafter;
    if (!o->spec.draft.empty())
      drafter = load_drafter(o->spec, o->threads, o->window_len, tok, /*teacher_forced=*/true);
    const std::vector<eval::KlRow> rows = eval::kl_divergence(exact, pointers, cfg.vocab, ids,
                                                              {.window = o->window_len,
                                                               .max_windows = o->max_windows,
                                                               .drafter = drafter.engine.get(),
                                                               .synthetic = drafter.synthetic,
                                                               .draft_k = o->spec.draft_k,
                                                               .counterfactual = o->counterfactual},
                                                              progress);
    std::fprintf(table_stream(o->json), "%s", eval::kl_table(rows).c_str());
    if (!o->json.empty()) {
      nlohmann::json doc = eval::kl_json(rows);
      doc["model"] = o->model;
      doc["file"] = o->file;
      doc["window_len"] = o->window_len;
      doc["calibration"] = calib_path;
      write_json_report(o->json, dump_json(doc, 1) + "\n");
    }
  });
}

}  // namespace steermoe::cli
