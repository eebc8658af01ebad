// `steermoe compare`: paired comparisons of two configurations from the files other tools write
// (per-item scores as JSON lines, lm-evaluation-harness --log_samples folders, bench --json
// timing rounds). Statistics are in stats.hpp; this file reads, pairs and reports.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "eval/stats.hpp"

namespace steermoe::eval {

// One scored item of one configuration.
struct ScoreItem {
  std::string task;
  std::string id;  // the JSON id as text (numbers and strings both accepted)
  double score = 0.0;
};

// Reads JSON lines {"task": str, "id": str|int, "score": number|bool}; blank lines skipped.
// Duplicated (task, id) is an error naming the line.
std::vector<ScoreItem> read_scores_jsonl(const std::string& path);
// The same from text in memory; `where` names the input in messages (fuzzing, tests).
std::vector<ScoreItem> parse_scores_jsonl(std::string_view text, const std::string& where);

// Reads an lm-evaluation-harness --log_samples output folder (searched recursively):
// samples_<task>_<date>.jsonl, one line per (doc_id, filter) with the per-sample metrics at the
// top level. `metric` empty: "acc" when the task logs it, else the first of its "metrics" list.
// `filter` empty: the first filter in the file (a note when there are several). A metric that
// is a list (e.g. IFEval's instruction-level accuracy) is averaged per document (the document
// is the unit). Several files for one task: the newest name (a note). Notes go to `notes`.
struct LmEvalOptions {
  std::string metric;
  std::string filter;
};
std::vector<ScoreItem> read_lm_eval_dir(const std::string& dir, const LmEvalOptions& options,
                                        std::vector<std::string>* notes);

// Scores of both configurations of one task, aligned by id (in A's order).
struct PairedTask {
  std::string task;
  std::vector<std::string> ids;
  std::vector<double> a, b;
};
// Pairs by (task, id). An id present on one side only is an error naming it, unless
// `intersect` (then it is dropped and counted in a note). Tasks sorted by name.
std::vector<PairedTask> pair_scores(const std::vector<ScoreItem>& a, const std::string& a_name,
                                    const std::vector<ScoreItem>& b, const std::string& b_name,
                                    bool intersect, std::vector<std::string>* notes);

struct CompareOptions {
  double level = 0.95;
  int exact_limit = 20;    // sign-flip: exact enumeration up to 2^exact_limit patterns
  int64_t draws = 100000;  // else this many seeded random sign vectors
  uint64_t seed = 20260101;
  double scale = 1.0;  // multiplies scores in the report (100: points); tests are unaffected
};

// Per task: mean difference B - A with the t interval on the paired differences; the exact
// McNemar test when every score is 0 or 1, else the paired sign-flip test; Holm over tasks.
struct TaskRow {
  std::string task;
  int64_t n = 0;
  std::string test;  // "mcnemar" | "sign-flip"
  double mean_a = 0, mean_b = 0;
  MeanInterval diff;
  double p = 0.0, p_holm = 0.0;
  int64_t a_only = 0, b_only = 0;  // McNemar discordant pairs: A right B wrong, and reverse
  bool exact = true;
  int64_t patterns = 0;
};
std::vector<TaskRow> compare_tasks(const std::vector<PairedTask>& tasks,
                                   const CompareOptions& options);
// Mean over tasks (stats.hpp mean_over_tasks) with its two-sided normal p-value.
struct TaskSummary {
  TaskMean mean;
  double p = 0.0;
};
TaskSummary summarize_tasks(const std::vector<TaskRow>& rows, double level = 0.95);

std::string tasks_markdown(const std::vector<TaskRow>& rows, const TaskSummary& summary,
                           const std::string& a_name, const std::string& b_name,
                           const CompareOptions& options);
// The --json rows: one per task, then the mean over tasks (task "mean", test "normal").
nlohmann::json tasks_json(const std::vector<TaskRow>& rows, const TaskSummary& summary,
                          const CompareOptions& options);

// Latency ratios from one `bench --json` report (schema steermoe.bench/1, README.md): each
// configuration against `baseline` (its name; empty = the first configuration), rounds paired
// by their "round" index, ms/token mean per round; Holm over the ratios.
struct RatioRow {
  std::string a, b;  // ratio = b / a
  RatioResult ratio;
  double mean_a_ms = 0.0, mean_b_ms = 0.0;
  double p_holm = 0.0;
};
std::vector<RatioRow> compare_latency(const nlohmann::json& bench, const std::string& path,
                                      const std::string& baseline, double level = 0.95);
std::string latency_markdown(const std::vector<RatioRow>& rows);
nlohmann::json latency_json(const std::vector<RatioRow>& rows);

}  // namespace steermoe::eval
