// `steermoe compare`: paired statistics between two configurations (per-item scores or
// lm-evaluation-harness samples) or latency ratios between configurations (bench --json rounds).
// Markdown on stdout, JSON rows with --json. The statistics live in src/eval/.
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/validators.hpp"
#include "common/error.hpp"
#include "common/json_input.hpp"
#include "common/output_file.hpp"
#include "eval/compare.hpp"

namespace steermoe::cli {

namespace {

struct CompareCli {
  std::vector<std::string> scores;
  std::vector<std::string> lm_eval;
  std::string latency;
  std::string baseline;
  std::string metric, filter;
  std::string json;
  bool intersect = false;
  eval::CompareOptions options;
};

void write_json(const std::string& path, const nlohmann::json& j) {
  if (path.empty()) return;
  if (path == "-") {
    std::printf("%s\n", dump_json(j, 2).c_str());
    return;
  }
  write_file_atomic(path, dump_json(j, 2) + "\n");  // complete or absent
}

void run_compare(const CompareCli& o) {
  const int modes = !o.scores.empty() + !o.lm_eval.empty() + !o.latency.empty();
  if (modes != 1) fail("compare", "mode", "expected exactly one of --scores, --lm-eval, --latency");
  FILE* table = o.json == "-" ? stderr : stdout;
  std::vector<std::string> notes;
  if (!o.latency.empty()) {
    // Regular file only, depth-limited parse (common/json_input.hpp).
    const nlohmann::json bench = read_json_file(o.latency, "a bench --json report");
    const auto rows = eval::compare_latency(bench, o.latency, o.baseline, o.options.level);
    std::fprintf(table, "%s", eval::latency_markdown(rows).c_str());
    write_json(o.json, eval::latency_json(rows));
    return;
  }
  std::vector<eval::ScoreItem> a, b;
  std::string a_name, b_name;
  if (!o.scores.empty()) {
    a_name = o.scores[0];
    b_name = o.scores[1];
    a = eval::read_scores_jsonl(a_name);
    b = eval::read_scores_jsonl(b_name);
  } else {
    a_name = o.lm_eval[0];
    b_name = o.lm_eval[1];
    const eval::LmEvalOptions lo{o.metric, o.filter};
    a = eval::read_lm_eval_dir(a_name, lo, &notes);
    b = eval::read_lm_eval_dir(b_name, lo, &notes);
  }
  const auto tasks = eval::pair_scores(a, a_name, b, b_name, o.intersect, &notes);
  const auto rows = eval::compare_tasks(tasks, o.options);
  const auto summary = eval::summarize_tasks(rows, o.options.level);
  for (const std::string& note : notes) std::fprintf(stderr, "compare: note: %s\n", note.c_str());
  std::fprintf(table, "%s", eval::tasks_markdown(rows, summary, a_name, b_name, o.options).c_str());
  write_json(o.json, eval::tasks_json(rows, summary, o.options));
}

}  // namespace

void add_compare_command(CLI::App& root) {
  auto o = std::make_shared<CompareCli>();
  CLI::App* cmd = root.add_subcommand(
      "compare",
      "Paired comparison of two configurations: per-task mean difference B - A with a 95% t "
      "interval, exact McNemar (0/1 scores) or sign-flip permutation test, Holm over tasks, mean "
      "over tasks; or latency ratios from bench --json rounds (paired t-test on log latency)");
  cmd->add_option("--scores", o->scores,
                  "A.jsonl B.jsonl: JSON lines {task, id, score}, paired by task and id")
      ->expected(2);
  cmd->add_option("--lm-eval", o->lm_eval,
                  "DIR_A DIR_B: lm-evaluation-harness --output_path folders written with "
                  "--log_samples (samples_<task>_<date>.jsonl)")
      ->expected(2);
  cmd->add_option("--latency", o->latency,
                  "bench --json report: every configuration against --baseline over its rounds");
  cmd->add_option("--baseline", o->baseline,
                  "Latency: name of the reference configuration (default: the first)");
  cmd->add_option("--metric", o->metric,
                  "lm-eval: per-sample metric (default: acc, else the task's first metric)");
  cmd->add_option("--filter", o->filter,
                  "lm-eval: filter name, e.g. strict-match (default: the first in each file)");
  cmd->add_flag("--intersect", o->intersect,
                "Drop items present on one side only (default: such an item is an error)");
  cmd->add_option("--scale", o->options.scale,
                  "Multiply scores in the report (100: accuracy in points)")
      ->check(Positive);
  cmd->add_option("--draws", o->options.draws,
                  "Sign-flip test: random sign vectors when n > 20 (at least 100000)")
      ->check(CLI::Range(int64_t{100000}, int64_t{1} << 40));
  cmd->add_option("--seed", o->options.seed, "Sign-flip test: seed of the random sign vectors");
  cmd->add_option("--json", o->json, "Write the JSON rows to this file ('-' = stdout)")
      ->check(WritablePath);
  cmd->final_callback([o] { run_compare(*o); });
}

}  // namespace steermoe::cli
