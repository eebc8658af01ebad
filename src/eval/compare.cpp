#include "eval/compare.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "common/error.hpp"
#include "common/input_file.hpp"
#include "common/json_input.hpp"

namespace steermoe::eval {

namespace {

using nlohmann::json;

std::string id_text(const json& id, const std::string& where, const std::string& field) {
  if (id.is_string()) return id.get<std::string>();
  if (id.is_number_integer()) return std::to_string(id.get<int64_t>());
  fail(where, field, "expected a string or an integer id, found {}", json_excerpt(id));
}

// A per-item score: number or bool; a list of them is averaged (the item is the unit).
double score_value(const json& v, const std::string& where, const std::string& field) {
  if (v.is_boolean()) return v.get<bool>() ? 1.0 : 0.0;
  if (v.is_number()) {
    const double x = v.get<double>();
    if (!std::isfinite(x)) fail(where, field, "expected a finite number, found {}", json_excerpt(v));
    return x;
  }
  if (v.is_array() && !v.empty()) {
    double s = 0.0;
    for (const json& e : v) s += score_value(e, where, field);
    return s / static_cast<double>(v.size());
  }
  fail(where, field, "expected a number, a bool or a non-empty list of them, found {}",
       json_excerpt(v));
}

json parse_line(const std::string& line, const std::string& where) {
  check_json_depth(line, where);  // before anything can recurse over a hostile nesting
  json j = parse_json_or_discarded(line);
  if (j.is_discarded() || !j.is_object()) {
    // Python's json.dumps writes NaN / Infinity, which JSON does not have: name them.
    for (const char* word : {"NaN", "Infinity", "1e999"})
      if (j.is_discarded() && line.find(word) != std::string::npos)
        fail(where, "line",
             "expected a JSON object of finite numbers, found {} (not JSON: Python's json.dumps "
             "writes it for a non-finite float; score the item or drop it)",
             word);
    fail(where, "line", "expected a JSON object");
  }
  return j;
}

std::string fmt_num(double v, int digits) {
  if (std::isnan(v)) return "-";
  return fmt::format("{:.{}f}", v, digits);
}

std::string fmt_p(double p) {
  if (std::isnan(p)) return "-";
  // A p-value that underflowed is below the smallest double, not zero: "0.0e+00" read as
  // certainty.
  if (p < std::numeric_limits<double>::min()) return "< 2.2e-308";
  if (p < 1e-4) return fmt::format("{:.1e}", p);
  return fmt::format("{:.4f}", p);
}

json num_or_null(double v) {
  return std::isfinite(v) ? json(v) : json(nullptr);
}

}  // namespace

std::vector<ScoreItem> read_scores_jsonl(const std::string& path) {
  require_regular_file(path, "a JSON-lines file");  // no FIFO or directory
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "open", "expected a readable JSON-lines file of {{task, id, score}}");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_scores_jsonl(text.str(), path);
}

std::vector<ScoreItem> parse_scores_jsonl(std::string_view text, const std::string& where_file) {
  std::vector<ScoreItem> items;
  std::set<std::pair<std::string, std::string>> seen;
  size_t pos = 0;
  for (int64_t no = 1; pos < text.size(); ++no) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string line(text.substr(pos, end - pos));
    pos = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{}:{}", where_file, no);
    const json j = parse_line(line, where);
    for (const char* key : {"task", "id", "score"})
      if (!j.contains(key)) fail(where, key, "expected the field (each line: task, id, score)");
    if (!j["task"].is_string())
      fail(where, "task", "expected a string, found {}", json_excerpt(j["task"]));
    ScoreItem item{j["task"].get<std::string>(), id_text(j["id"], where, "id"),
                   score_value(j["score"], where, "score")};
    if (!seen.emplace(item.task, item.id).second)
      fail(where, "id", "expected each (task, id) once, found ({}, {}) again", item.task, item.id);
    items.push_back(std::move(item));
  }
  return items;
}

std::vector<ScoreItem> read_lm_eval_dir(const std::string& dir, const LmEvalOptions& options,
                                        std::vector<std::string>* notes) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    fail(dir, "directory", "expected an lm-evaluation-harness --output_path folder");
  // task -> newest samples file
  std::map<std::string, fs::path> files;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("samples_") || !name.ends_with(".jsonl")) continue;
    const std::string stem = name.substr(8, name.size() - 8 - 6);
    const size_t cut = stem.rfind('_');
    if (cut == std::string::npos || cut == 0)
      fail(entry.path().string(), "file name", "expected samples_<task>_<date>.jsonl");
    const std::string task = stem.substr(0, cut);
    auto [it, inserted] = files.emplace(task, entry.path());
    if (!inserted) {
      const fs::path older = std::min(it->second, entry.path(), [](const auto& x, const auto& y) {
        return x.filename() < y.filename();
      });
      if (older == it->second) it->second = entry.path();
      if (notes)
        notes->push_back(fmt::format("{}: several samples files for task {}; using {}", dir, task,
                                     it->second.filename().string()));
    }
  }
  if (files.empty())
    fail(dir, "samples", "expected samples_<task>_<date>.jsonl files (lm_eval --log_samples)");
  std::vector<ScoreItem> items;
  for (const auto& [task, path] : files) {
    require_regular_file(path, "an lm_eval samples file");  // no FIFO or directory
    std::ifstream in(path, std::ios::binary);
    if (!in) fail(path.string(), "open", "expected a readable file");
    std::string metric = options.metric, filter = options.filter;
    std::set<std::string> filters;
    std::set<std::string> seen;
    std::string line;
    for (int64_t no = 1; std::getline(in, line); ++no) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const std::string where = fmt::format("{}:{}", path.string(), no);
      const json j = parse_line(line, where);
      if (!j.contains("doc_id")) fail(where, "doc_id", "expected the field");
      const std::string line_filter =
          j.contains("filter") && j["filter"].is_string() ? j["filter"].get<std::string>() : "none";
      filters.insert(line_filter);
      if (filter.empty()) filter = line_filter;
      if (line_filter != filter) continue;
      if (metric.empty()) {
        if (j.contains("acc")) {
          metric = "acc";
        } else if (j.contains("metrics") && j["metrics"].is_array() && !j["metrics"].empty() &&
                   j["metrics"][0].is_string()) {
          metric = j["metrics"][0].get<std::string>();
        } else {
          fail(where, "metrics", "expected an \"acc\" field or a \"metrics\" list naming one");
        }
      }
      if (!j.contains(metric))
        fail(where, metric, "expected the metric in every sample (choose one with --metric)");
      ScoreItem item{task, id_text(j["doc_id"], where, "doc_id"),
                     score_value(j[metric], where, metric)};
      if (!seen.insert(item.id).second)
        fail(where, "doc_id", "expected each doc_id once per filter, found {} again", item.id);
      items.push_back(std::move(item));
    }
    if (seen.empty())
      fail(path.string(), "filter", "expected samples with filter \"{}\", found none", filter);
    if (notes && filters.size() > 1)
      notes->push_back(fmt::format("{}: task {} has {} filters; using \"{}\" (--filter)",
                                   path.string(), task, filters.size(), filter));
    if (notes) notes->push_back(fmt::format("{}: task {}: metric {}", dir, task, metric));
  }
  return items;
}

std::vector<PairedTask> pair_scores(const std::vector<ScoreItem>& a, const std::string& a_name,
                                    const std::vector<ScoreItem>& b, const std::string& b_name,
                                    bool intersect, std::vector<std::string>* notes) {
  std::map<std::pair<std::string, std::string>, double> b_by_key;
  for (const ScoreItem& it : b) b_by_key.emplace(std::make_pair(it.task, it.id), it.score);
  std::map<std::string, PairedTask> tasks;
  std::set<std::pair<std::string, std::string>> used;
  int64_t dropped_a = 0, dropped_b = 0;
  for (const ScoreItem& it : a) {
    const auto key = std::make_pair(it.task, it.id);
    const auto found = b_by_key.find(key);
    if (found == b_by_key.end()) {
      if (!intersect)
        fail(b_name, "id", "expected task {} id {} (present in {}); --intersect drops unpaired",
             it.task, it.id, a_name);
      ++dropped_a;
      continue;
    }
    PairedTask& t = tasks[it.task];
    t.task = it.task;
    t.ids.push_back(it.id);
    t.a.push_back(it.score);
    t.b.push_back(found->second);
    used.insert(key);
  }
  for (const ScoreItem& it : b) {
    if (used.count({it.task, it.id})) continue;
    if (!intersect)
      fail(a_name, "id", "expected task {} id {} (present in {}); --intersect drops unpaired",
           it.task, it.id, b_name);
    ++dropped_b;
  }
  if (notes && (dropped_a || dropped_b))
    notes->push_back(fmt::format("--intersect: dropped {} items only in {} and {} only in {}",
                                 dropped_a, a_name, dropped_b, b_name));
  std::vector<PairedTask> out;
  for (auto& [name, t] : tasks) out.push_back(std::move(t));
  if (out.empty()) fail(a_name, "items", "expected at least one item paired with {}", b_name);
  return out;
}

std::vector<TaskRow> compare_tasks(const std::vector<PairedTask>& tasks,
                                   const CompareOptions& options) {
  std::vector<TaskRow> rows;
  for (const PairedTask& t : tasks) {
    TaskRow row;
    row.task = t.task;
    row.n = static_cast<int64_t>(t.a.size());
    std::vector<double> d(t.a.size());
    bool binary = true;
    double sa = 0, sb = 0;
    for (size_t i = 0; i < t.a.size(); ++i) {
      d[i] = t.b[i] - t.a[i];
      sa += t.a[i];
      sb += t.b[i];
      for (double v : {t.a[i], t.b[i]}) binary = binary && (v == 0.0 || v == 1.0);
      if (t.a[i] == 1.0 && t.b[i] == 0.0) ++row.a_only;
      if (t.a[i] == 0.0 && t.b[i] == 1.0) ++row.b_only;
    }
    row.mean_a = sa / static_cast<double>(row.n);
    row.mean_b = sb / static_cast<double>(row.n);
    row.diff = mean_t_interval(d, options.level);
    if (binary) {
      row.test = "mcnemar";
      row.p = mcnemar_exact_p(row.a_only, row.b_only);
      row.patterns = row.a_only + row.b_only;
    } else {
      row.test = "sign-flip";
      row.a_only = row.b_only = 0;
      const SignFlipResult s = sign_flip_test(d, options.exact_limit, options.draws, options.seed);
      row.p = s.p;
      row.exact = s.exact;
      row.patterns = s.patterns;
    }
    rows.push_back(std::move(row));
  }
  std::vector<double> p;
  for (const TaskRow& r : rows) p.push_back(r.p);
  const std::vector<double> adjusted = holm(p);
  for (size_t i = 0; i < rows.size(); ++i) rows[i].p_holm = adjusted[i];
  return rows;
}

TaskSummary summarize_tasks(const std::vector<TaskRow>& rows, double level) {
  std::vector<double> means, ses;
  for (const TaskRow& r : rows) {
    means.push_back(r.diff.mean);
    ses.push_back(r.diff.se);
  }
  TaskSummary s;
  s.mean = mean_over_tasks(means, ses, level);
  if (!std::isfinite(s.mean.se)) {
    s.p = std::numeric_limits<double>::quiet_NaN();
  } else if (s.mean.se == 0.0) {
    s.p = s.mean.mean == 0.0 ? 1.0 : 0.0;
  } else {
    s.p = 2.0 * normal_cdf(-std::fabs(s.mean.mean / s.mean.se));
  }
  return s;
}

std::string tasks_markdown(const std::vector<TaskRow>& rows, const TaskSummary& summary,
                           const std::string& a_name, const std::string& b_name,
                           const CompareOptions& options) {
  const double k = options.scale;
  const int pct = static_cast<int>(std::lround(options.level * 100));
  std::string out = fmt::format(
      "A = {}\nB = {}\n\n| task | n | A | B | B - A | {}% interval | test | p | p (Holm) |\n"
      "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
      a_name, b_name, pct);
  for (const TaskRow& r : rows) {
    std::string test = r.test;
    if (r.test == "mcnemar") test += fmt::format(" ({} vs {} discordant)", r.a_only, r.b_only);
    if (r.test == "sign-flip")
      test += r.exact ? " (exact)" : fmt::format(" ({} draws)", r.patterns);
    out += fmt::format("| {} | {} | {} | {} | {:+.{}f} | [{}, {}] | {} | {} | {} |\n", r.task, r.n,
                       fmt_num(r.mean_a * k, 4), fmt_num(r.mean_b * k, 4), r.diff.mean * k, 4,
                       fmt_num(r.diff.ci_low * k, 4), fmt_num(r.diff.ci_high * k, 4), test,
                       fmt_p(r.p), fmt_p(r.p_holm));
  }
  out += fmt::format(
      "| mean over {} tasks | | | | {:+.4f} | [{}, {}] | normal, tasks independent | {} | |\n\n",
      summary.mean.tasks, summary.mean.mean * k, fmt_num(summary.mean.ci_low * k, 4),
      fmt_num(summary.mean.ci_high * k, 4), fmt_p(summary.p));
  out += fmt::format(
      "Mean difference over tasks {:+.4f}, {}% lower bound {}. Intervals: t interval on the "
      "paired differences per task; the mean over tasks uses a normal interval with "
      "se = sqrt(sum se_t^2) / T. Holm's correction over the {} tasks.\n",
      summary.mean.mean * k, pct, fmt_num(summary.mean.ci_low * k, 4), rows.size());
  return out;
}

json tasks_json(const std::vector<TaskRow>& rows, const TaskSummary& summary,
                const CompareOptions& options) {
  const double k = options.scale;
  json out = json::array();
  for (const TaskRow& r : rows) {
    json row{{"task", r.task},
             {"n", r.n},
             {"test", r.test},
             {"mean_diff", num_or_null(r.diff.mean * k)},
             {"ci_low", num_or_null(r.diff.ci_low * k)},
             {"ci_high", num_or_null(r.diff.ci_high * k)},
             {"p", num_or_null(r.p)},
             {"p_holm", num_or_null(r.p_holm)},
             {"se", num_or_null(r.diff.se * k)},
             {"mean_a", num_or_null(r.mean_a * k)},
             {"mean_b", num_or_null(r.mean_b * k)},
             {"exact", r.exact}};
    if (r.test == "mcnemar") {
      row["a_only"] = r.a_only;
      row["b_only"] = r.b_only;
    } else {
      row["patterns"] = r.patterns;
    }
    out.push_back(std::move(row));
  }
  out.push_back({{"task", "mean"},
                 {"n", summary.mean.tasks},
                 {"test", "normal"},
                 {"mean_diff", num_or_null(summary.mean.mean * k)},
                 {"ci_low", num_or_null(summary.mean.ci_low * k)},
                 {"ci_high", num_or_null(summary.mean.ci_high * k)},
                 {"p", num_or_null(summary.p)},
                 {"p_holm", nullptr},
                 {"se", num_or_null(summary.mean.se * k)}});
  return out;
}

std::vector<RatioRow> compare_latency(const json& bench, const std::string& path,
                                      const std::string& baseline, double level) {
  // Another steermoe report (kl --json, sim --json, ...) is named as such, not by its first
  // field that bench's schema lacks.
  if (bench.is_object() && bench.contains("schema") && bench["schema"].is_string() &&
      bench["schema"] != "steermoe.bench/1") {
    fail(path, "schema", "expected \"steermoe.bench/1\" (bench --json), found \"{}\"",
         bench["schema"].get<std::string>());
  }
  if (!bench.is_object() || !bench.contains("configurations") ||
      !bench["configurations"].is_array() || bench["configurations"].empty())
    fail(path, "configurations", "expected a non-empty list (bench --json, steermoe.bench/1)");
  // Pairing round r of one configuration with round r of another is sound only where the rounds
  // alternated in one run (drift hits both alike). A sweep times each point in its own run.
  const bool sweep_note =
      bench.contains("note") && bench["note"].is_string() &&
      bench["note"].get<std::string>().find("not interleaved") != std::string::npos;
  if ((bench.contains("interleaved") && bench["interleaved"] == false) || sweep_note)
    fail(path, "interleaved",
         "expected configurations timed in one bench run, their rounds alternating: these were "
         "timed in separate runs (steermoe sweep), so round r of one does not pair with round r "
         "of another; run one `steermoe bench --policy A B ...` to compare them");
  struct Config {
    std::string name;
    std::map<int64_t, double> ms;  // round -> mean ms/token
  };
  std::vector<Config> configs;
  for (size_t c = 0; c < bench["configurations"].size(); ++c) {
    const json& cj = bench["configurations"][c];
    const std::string field = fmt::format("configurations[{}]", c);
    if (!cj.is_object() || !cj.contains("name") || !cj["name"].is_string())
      fail(path, field + ".name", "expected a string");
    if (!cj.contains("rounds") || !cj["rounds"].is_array() || cj["rounds"].empty())
      fail(path, field + ".rounds", "expected a non-empty list");
    Config config{cj["name"].get<std::string>(), {}};
    for (size_t r = 0; r < cj["rounds"].size(); ++r) {
      const json& rj = cj["rounds"][r];
      const std::string rf = fmt::format("{}.rounds[{}]", field, r);
      if (!rj.contains("round") || !rj["round"].is_number_integer())
        fail(path, rf + ".round", "expected an integer");
      if (!rj.contains("ms_per_token") || !rj["ms_per_token"].contains("mean") ||
          !rj["ms_per_token"]["mean"].is_number() ||
          !(rj["ms_per_token"]["mean"].get<double>() > 0))
        fail(path, rf + ".ms_per_token.mean", "expected a positive number");
      if (!config.ms.emplace(rj["round"].get<int64_t>(), rj["ms_per_token"]["mean"].get<double>())
               .second)
        fail(path, rf + ".round", "expected each round once");
    }
    configs.push_back(std::move(config));
  }
  size_t base = 0;
  if (!baseline.empty()) {
    base = configs.size();
    for (size_t i = 0; i < configs.size(); ++i)
      if (configs[i].name == baseline) base = i;
    if (base == configs.size()) {
      std::string names;
      for (const Config& c : configs) names += (names.empty() ? "" : ", ") + c.name;
      fail(path, "baseline", "expected one of {}, found {}", names, baseline);
    }
  }
  std::vector<RatioRow> rows;
  for (size_t i = 0; i < configs.size(); ++i) {
    if (i == base) continue;
    std::vector<double> a, b;
    for (const auto& [round, ms] : configs[base].ms) {
      const auto found = configs[i].ms.find(round);
      if (found == configs[i].ms.end())
        fail(path, "rounds", "expected round {} for {} (as for {})", round, configs[i].name,
             configs[base].name);
      a.push_back(ms);
      b.push_back(found->second);
    }
    if (configs[i].ms.size() != configs[base].ms.size())
      fail(path, "rounds", "expected the same rounds for {} as for {}", configs[i].name,
           configs[base].name);
    RatioRow row;
    row.a = configs[base].name;
    row.b = configs[i].name;
    row.ratio = latency_ratio(a, b, level);
    for (double v : a) row.mean_a_ms += v / static_cast<double>(a.size());
    for (double v : b) row.mean_b_ms += v / static_cast<double>(b.size());
    rows.push_back(std::move(row));
  }
  std::vector<double> p;
  for (const RatioRow& r : rows) p.push_back(r.ratio.p);
  const std::vector<double> adjusted = holm(p);
  for (size_t i = 0; i < rows.size(); ++i) rows[i].p_holm = adjusted[i];
  return rows;
}

std::string latency_markdown(const std::vector<RatioRow>& rows) {
  std::string out =
      "| configuration | vs | rounds | ms/token | baseline ms/token | ratio | 95% interval | p | "
      "p (Holm) |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
  for (const RatioRow& r : rows) {
    out += fmt::format("| {} | {} | {} | {:.3f} | {:.3f} | {:.4f} | [{}, {}] | {} | {} |\n", r.b,
                       r.a, r.ratio.rounds, r.mean_b_ms, r.mean_a_ms, r.ratio.ratio,
                       fmt_num(r.ratio.ci_low, 4), fmt_num(r.ratio.ci_high, 4), fmt_p(r.ratio.p),
                       fmt_p(r.p_holm));
  }
  out +=
      "\nRatio = exp(mean over rounds of log(b) - log(a)); interval: t interval on the log "
      "differences, exponentiated; p: paired t-test on log latency (the round is the unit).\n";
  return out;
}

json latency_json(const std::vector<RatioRow>& rows) {
  json out = json::array();
  for (const RatioRow& r : rows) {
    out.push_back({{"a", r.a},
                   {"b", r.b},
                   {"rounds", r.ratio.rounds},
                   {"ms_a", r.mean_a_ms},
                   {"ms_b", r.mean_b_ms},
                   {"ratio", num_or_null(r.ratio.ratio)},
                   {"ci_low", num_or_null(r.ratio.ci_low)},
                   {"ci_high", num_or_null(r.ratio.ci_high)},
                   {"p", num_or_null(r.ratio.p)},
                   {"p_holm", num_or_null(r.p_holm)}});
  }
  return out;
}

}  // namespace steermoe::eval
