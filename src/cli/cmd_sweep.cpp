// `steermoe sweep`: `kl` and `bench` over a policy grid (eval/grid.hpp) and cache sizes, one
// point per (policy, cache) run as its own `steermoe kl` / `steermoe bench` process with the
// point's JSON kept under DIR/points/ (a finished point is not recomputed), then the points
// merged into DIR/kl.json and DIR/bench.json (schemas in src/eval/README.md) and the frontier
// drawn with tools/plot/plot.py when it is found.
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.hpp"
#include "cli/validators.hpp"
#include "common/error.hpp"
#include "common/interrupt.hpp"
#include "common/json_input.hpp"
#include "common/output_file.hpp"
#include "common/progress.hpp"
#include "engine/model_facts.hpp"
#include "eval/grid.hpp"
#include "model/weights.hpp"
#include "policy/config.hpp"

namespace steermoe::cli {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct SweepCli {
  std::string model, file, out;
  std::vector<std::string> grids;
  std::vector<int> caches;
  std::vector<double> residencies;
  int rounds = 3, windows = 4, window_len = 256, max_windows = 0, threads = 1, max_inflight = 2;
  std::string link = "resident", calib, plot = "tools/plot/plot.py", python = "/usr/bin/python3";
  bool plot_given = false;                          // --plot on the command line
  std::string pacing = "fifo", issue = "boundary";  // bench/kl --prefetch-pacing / -issue
  std::string moe_wait = "all";                     // bench/kl --moe-wait
  bool token_ms = false, no_bench = false, no_kl = false;
};

// Runs argv[0..] and waits; throws naming the command on a non-zero exit. Ctrl-C: a signal to
// this process alone is passed on to the point running and stops the sweep (130); a point that
// itself stopped on one (a terminal's Ctrl-C reaches the whole process group) stops it too,
// rather than reading as a failed point. Finished points stay: a rerun resumes.
void run_process(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) fail("sweep", "fork", "could not start {}", args[0]);
  if (pid == 0) {
    execv(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  bool forwarded = false;
  for (;;) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR)
      fail("sweep", "wait", "lost {} ({})", args[0], std::strerror(errno));
    if (interrupt_requested() && !forwarded) {
      kill(pid, SIGINT);
      forwarded = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (forwarded || (WIFEXITED(status) && WEXITSTATUS(status) == kInterruptExitStatus) ||
      (WIFSIGNALED(status) && (WTERMSIG(status) == SIGINT || WTERMSIG(status) == SIGTERM)))
    throw Interrupted();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string cmd;
    for (const std::string& a : args) cmd += (cmd.empty() ? "" : " ") + a;
    fail("sweep", "point", "expected `{}` to succeed, it exited with status {}", cmd,
         WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  }
}

std::string tag(const std::string& policy, const std::string& cache) {
  std::string t = policy + "_" + cache;
  for (char& c : t)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-') c = '_';
  return t;
}

json read_json(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  json j = parse_json_or_discarded(text);
  if (j.is_discarded()) fail(p.string(), "json", "expected valid JSON (delete it to recompute)");
  return j;
}

void write_json(const fs::path& p, const json& j) {
  write_file_atomic(p, dump_json(j, 1) + "\n");  // complete or absent; write errors checked
}

void run_sweep(const SweepCli& o) {
  if (o.caches.empty() == o.residencies.empty())
    fail("sweep", "--cache/--residency", "expected exactly one of --cache and --residency");
  // On the resident link no expert is copied: bench then times the policies' compute alone and
  // the frontier's latency axis is noise around one value (a README example did this).
  if (!o.no_bench && (o.link == "resident" || o.link.empty()))
    std::fprintf(stderr,
                 "sweep: warning: --link resident copies no expert: the latencies time the "
                 "policies' compute only (give --link disk, emulated:GBPS or sim:PROFILE to time "
                 "the copies)\n");
  std::vector<std::string> policies;
  std::vector<std::string> canonical;  // one point per policy, however the grids spell it
  for (const std::string& g : o.grids)
    for (std::string& p : eval::expand_grid(g)) {
      const std::string c = policy::parse_policy(p).to_string();
      if (std::find(canonical.begin(), canonical.end(), c) != canonical.end()) {
        std::fprintf(stderr, "sweep: note: %s is %s again: computed once\n", p.c_str(), c.c_str());
        continue;
      }
      canonical.push_back(c);
      policies.push_back(std::move(p));
    }
  {
    // Every point checked against the model before the first is computed (a bad --cache failed
    // only when its first point ran). Loading maps the file; nothing is copied into memory.
    const auto model = model::Model::load(o.model);
    const policy::RouterSpec spec = engine::router_spec(model->config());
    for (const int c : o.caches) {
      if (spec.layers > 0 && (c < spec.top_k || c > spec.experts))
        fail("sweep", "--cache",
             "expected cache sizes in [{}, {}] (top-k .. experts of {}), found {}", spec.top_k,
             spec.experts, o.model, c);
      for (const std::string& p : policies) policy::validate(policy::parse_policy(p), spec, c);
    }
  }
  std::vector<std::pair<std::string, std::string>> cache_args;  // (option, value)
  for (int c : o.caches) cache_args.emplace_back("--cache", std::to_string(c));
  for (double r : o.residencies) cache_args.emplace_back("--residency", fmt::format("{}", r));

  const fs::path dir(o.out), points = dir / "points";
  fs::create_directories(points);
  // Options every point depends on: a rerun with other options must not mix old points in.
  const json options{{"model", o.model},
                     {"file", o.file},
                     {"rounds", o.rounds},
                     {"windows", o.windows},
                     {"window_len", o.window_len},
                     {"max_windows", o.max_windows},
                     {"threads", o.threads},
                     {"link", o.link},
                     {"max_inflight", o.max_inflight},
                     {"calib", o.calib},
                     {"token_ms", o.token_ms}};
  // Options added later are recorded only when not at their default, so that a folder written
  // before them (which ran at the default) stays resumable.
  json recorded = options;
  if (o.pacing != "fifo") recorded["prefetch_pacing"] = o.pacing;
  if (o.issue != "boundary") recorded["prefetch_issue"] = o.issue;
  if (o.moe_wait != "all") recorded["moe_wait"] = o.moe_wait;
  const fs::path meta = dir / "sweep.json";
  if (fs::exists(meta)) {
    const json old = read_json(meta);
    json keys = recorded;  // both ways: an option this run leaves at its default counts too
    for (const auto& [key, value] : old.items()) keys[key] = value;
    for (const auto& [key, unused] : keys.items())
      if (old.value(key, json()) != recorded.value(key, json()))
        fail(meta.string(), key,
             "expected {} as in the earlier run of this folder, found {} (use "
             "another -o)",
             old.contains(key) ? dump_json(old[key]) : "the default",
             recorded.contains(key) ? dump_json(recorded[key]) : "the default");
  } else {
    write_json(meta, recorded);
  }

  const std::string self = fs::read_symlink("/proc/self/exe").string();
  std::vector<std::string> common{"-m", o.model, "-t", std::to_string(o.threads)};
  if (progress_quiet()) common.push_back("-q");  // the points are quiet too
  std::vector<std::string> engine{"--link",
                                  o.link,
                                  "--max-inflight",
                                  std::to_string(o.max_inflight),
                                  "--prefetch-pacing",
                                  o.pacing,
                                  "--prefetch-issue",
                                  o.issue,
                                  "--moe-wait",
                                  o.moe_wait};
  if (!o.calib.empty()) engine.insert(engine.end(), {"--calib", o.calib});

  const size_t total =
      policies.size() * cache_args.size() * (2 - o.no_bench - o.no_kl) + (o.no_bench ? 0 : 1);
  size_t done = 0, skipped = 0;
  auto step = [&](const fs::path& file, const std::string& what, std::vector<std::string> args) {
    check_interrupt();
    ++done;
    if (fs::exists(file)) {
      ++skipped;
      if (!progress_quiet())
        std::fprintf(stderr, "sweep: [%zu/%zu] %s: done earlier (%s)\n", done, total, what.c_str(),
                     file.filename().c_str());
      return;
    }
    if (!progress_quiet()) std::fprintf(stderr, "sweep: [%zu/%zu] %s\n", done, total, what.c_str());
    const fs::path tmp = file.string() + ".part";
    args.insert(args.end(), {"--json", tmp.string()});
    run_process(args);
    fs::rename(tmp, file);  // only a finished point gets its final name
  };

  // One point's command: `steermoe NAME -m M -t T -f FILE --policy P OPT VALUE EXTRA... ENGINE...`.
  auto point_args = [&](const char* name, const std::string& policy, const std::string& opt,
                        const std::string& value, std::vector<std::string> extra) {
    std::vector<std::string> args{self, name};
    args.insert(args.end(), common.begin(), common.end());
    args.insert(args.end(), {"-f", o.file, "--policy", policy, opt, value});
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.end(), engine.begin(), engine.end());
    return args;
  };
  json kl_configs = json::array(), bench_configs = json::array();
  for (const auto& [opt, value] : cache_args) {
    for (const std::string& policy : policies) {
      const std::string t = tag(policy, value);
      if (!o.no_kl) {
        const fs::path f = points / (t + ".kl.json");
        step(f, fmt::format("kl {} {}={}", policy, opt, value),
             point_args("kl", policy, opt, value,
                        {"--window-len", std::to_string(o.window_len), "--max-windows",
                         std::to_string(o.max_windows)}));
        const json point = read_json(f);  // kept alive: the loop reads into it
        for (const json& c : point.at("configurations")) kl_configs.push_back(c);
      }
      if (!o.no_bench) {
        const fs::path f = points / (t + ".bench.json");
        std::vector<std::string> extra{
            "--rounds",     std::to_string(o.rounds),     "--windows", std::to_string(o.windows),
            "--window-len", std::to_string(o.window_len), "--no-floor"};
        if (o.token_ms) extra.push_back("--token-ms");
        step(f, fmt::format("bench {} {}={}", policy, opt, value),
             point_args("bench", policy, opt, value, extra));
        const json point = read_json(f);
        for (const json& c : point.at("configurations")) bench_configs.push_back(c);
      }
    }
  }
  if (!o.no_bench) {  // the all-experts-resident floor, once
    const fs::path f = points / "floor.bench.json";
    std::vector<std::string> args{self,           "bench",
                                  "-f",           o.file,
                                  "--policy",     "exact:evict=lru",
                                  "--rounds",     std::to_string(o.rounds),
                                  "--windows",    std::to_string(o.windows),
                                  "--window-len", std::to_string(o.window_len)};
    args.insert(args.begin() + 2, common.begin(), common.end());
    if (o.token_ms) args.push_back("--token-ms");
    step(f, "bench all-experts-resident floor", args);
    const json point = read_json(f);
    for (const json& c : point.at("configurations"))
      if (c.value("resident", false)) bench_configs.push_back(c);
  }
  if (!o.no_kl) {
    json k = options;  // what the points measured (plot.py frontier names it)
    k["schema"] = "steermoe.kl/1";
    k["configurations"] = kl_configs;
    write_json(dir / "kl.json", k);
  }
  if (!o.no_bench) {
    json b = options;
    b["prefetch_pacing"] = o.pacing;
    b["prefetch_issue"] = o.issue;
    b["moe_wait"] = o.moe_wait;
    b["schema"] = "steermoe.bench/1";
    b["note"] = "each point timed by its own `steermoe bench` run (not interleaved across points)";
    b["interleaved"] = false;  // compare --latency refuses to pair its rounds
    b["configurations"] = bench_configs;
    write_json(dir / "bench.json", b);
  }
  std::fprintf(stderr, "sweep: %zu points, %zu done earlier; %s%s\n", total, skipped,
               o.no_kl ? "" : (dir / "kl.json").c_str(),
               o.no_bench ? "" : (" " + (dir / "bench.json").string()).c_str());
  if (o.no_kl || o.no_bench) return;
  // The default script is relative to the repository; run elsewhere, the one of the checkout
  // this binary was built from (STEERMOE_PLOT names another).
  std::string script = o.plot;
  if (!o.plot_given && !fs::exists(script)) {
    const char* env = std::getenv("STEERMOE_PLOT");
    script = env != nullptr && *env != '\0' ? env : STEERMOE_PLOT_SCRIPT;
  }
  const std::vector<std::string> plot{o.python,
                                      script,
                                      "frontier",
                                      "--kl",
                                      (dir / "kl.json").string(),
                                      "--bench",
                                      (dir / "bench.json").string(),
                                      "-o",
                                      (dir / "frontier.png").string(),
                                      "-o",
                                      (dir / "frontier.svg").string()};
  if (fs::exists(script) && fs::exists(o.python)) {
    run_process(plot);
    std::fprintf(stderr, "sweep: frontier %s\n", (dir / "frontier.png").c_str());
  } else {
    std::fprintf(stderr,
                 "sweep: %s not found; draw the frontier with: %s %s frontier --kl %s "
                 "--bench %s -o frontier.png\n",
                 script.c_str(), o.python.c_str(), script.c_str(), (dir / "kl.json").c_str(),
                 (dir / "bench.json").c_str());
  }
}

}  // namespace

void add_sweep_command(CLI::App& root) {
  auto o = std::make_shared<SweepCli>();
  CLI::App* cmd = root.add_subcommand(
      "sweep",
      "kl and bench over a policy grid and cache sizes, resumable (a finished point is not "
      "recomputed); merged kl.json, bench.json and the frontier plot in -o DIR");
  cmd->add_option("-m,--model", o->model, "Model: a .gguf file or a HuggingFace folder")
      ->required();
  cmd->add_option("-f,--file", o->file, "Text file (kl windows and bench windows)")->required();
  cmd->add_option("--grid", o->grids,
                  "Policy grid, e.g. \"psr:lambda=0.1..0.5:0.1,n=1|2\" (repeat, or ';' between)")
      ->required()
      ->take_all()
      ->default_str("");  // required: no default to show
  cmd->add_option("--cache", o->caches, "Cache slots per layer, several: 32,16")
      ->delimiter(',')
      ->default_str("");  // one of --cache and --residency is required: no default to show
  cmd->add_option("--residency", o->residencies,
                  "Or fractions of the experts, each in (0, 1]: 0.5,0.25")
      ->delimiter(',')
      ->check(Fraction)
      ->default_str("");
  cmd->add_option("-o,--out", o->out, "Output folder (points/, kl.json, bench.json, frontier)")
      ->required();
  cmd->add_option("--rounds", o->rounds, "bench: timing rounds")->check(CLI::Range(1, 1000));
  cmd->add_option("--windows", o->windows, "bench: text windows per round")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--window-len", o->window_len, "Tokens per window (kl and bench)")
      ->check(CLI::Range(2, 1 << 20));
  cmd->add_option("--max-windows", o->max_windows, "kl: at most this many windows (0: all)")
      ->check(CLI::Range(0, 1 << 30));
  cmd->add_option("-t,--threads", o->threads, "Threads")->check(CLI::Range(1, 1024));
  cmd->add_option("--link", o->link, "Where experts live (bench/kl --link)");
  cmd->add_option("--max-inflight", o->max_inflight, "Prefetch copies in flight")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--prefetch-pacing", o->pacing,
                  "bench/kl --prefetch-pacing of every point: fifo | defer | demand (latency only)")
      ->check(CLI::IsMember({"fifo", "defer", "demand"}))
      ->capture_default_str();
  cmd->add_option("--prefetch-issue", o->issue,
                  "bench/kl --prefetch-issue of every point: boundary | early (latency only)")
      ->check(CLI::IsMember({"boundary", "early"}))
      ->capture_default_str();
  cmd->add_option("--moe-wait", o->moe_wait,
                  "bench/kl --moe-wait of every point: all | ready (latency only)")
      ->check(CLI::IsMember({"all", "ready"}))
      ->capture_default_str();
  cmd->add_option("--calib", o->calib, "Calibration (.smcal); default: the model's calib.smcal");
  cmd->add_flag("--token-ms", o->token_ms, "bench: keep every token's latency (CDF plots)");
  cmd->add_flag("--no-bench", o->no_bench, "Only kl");
  cmd->add_flag("--no-kl", o->no_kl, "Only bench");
  cmd->add_option("--plot", o->plot,
                  "The plot script (frontier drawn when it exists; default: tools/plot/plot.py "
                  "here, else the one of the checkout this binary was built from, or "
                  "$STEERMOE_PLOT)")
      ->each([o](const std::string&) { o->plot_given = true; });
  cmd->add_option("--python", o->python, "Python with matplotlib for the plot");
  cmd->final_callback([o] { run_sweep(*o); });
}

}  // namespace steermoe::cli
