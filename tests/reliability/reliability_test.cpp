// Bad input and faults, run against the built binary as a child process: each test is one class
// of defect (a model truncated while running, deep JSON in every JSON reader, counts that would
// allocate without bound, non-regular files, inconsistent inputs, exit codes, interrupts).
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../json_test_util.hpp"

extern char** environ;

namespace steermoe {
namespace {

namespace fs = std::filesystem;
using testing::HasSubstr;
using testing::Not;

const fs::path kSource = fs::path(STEERMOE_SOURCE_DIR);
const fs::path kOracle = kSource / "tests" / "data" / "oracle";

struct Child {
  int exit_status = -1;  // WEXITSTATUS, -1 if killed by a signal
  int signal = 0;        // WTERMSIG
  bool timed_out = false;
  long max_rss_kb = 0;
  double seconds = 0;
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class Scratch {
 public:
  Scratch() {
    char tmpl[] = "/tmp/steermoe_reliability_XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  const fs::path& dir() const { return dir_; }
  fs::path operator/(const std::string& name) const { return dir_ / name; }

 private:
  fs::path dir_;
};

// Runs the steermoe binary with `args`; `during(pid)` runs while it does (then it is waited
// for). Killed after `timeout_s`.
Child run_binary(const std::vector<std::string>& args, const Scratch& scratch,
                 const std::vector<std::string>& env_extra = {}, double timeout_s = 60,
                 const std::function<void(pid_t)>& during = {}) {
  const fs::path out_path = scratch / "child.out", err_path = scratch / "child.err";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  std::vector<std::string> all{STEERMOE_BINARY};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_strings{"STEERMOE_QUIET=1"};
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  env_strings.insert(env_strings.end(), env_extra.begin(), env_extra.end());
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  Child c;
  pid_t pid = 0;
  const auto t0 = std::chrono::steady_clock::now();
  if (posix_spawn(&pid, STEERMOE_BINARY, &actions, nullptr, argv.data(), envp.data()) != 0) {
    ADD_FAILURE() << "cannot spawn " << STEERMOE_BINARY;
    return c;
  }
  posix_spawn_file_actions_destroy(&actions);
  if (during) during(pid);
  int status = 0;
  struct rusage usage {};
  for (;;) {
    const pid_t r = wait4(pid, &status, WNOHANG, &usage);
    if (r == pid) break;
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (elapsed > timeout_s) {
      c.timed_out = true;
      kill(pid, SIGKILL);
      wait4(pid, &status, 0, &usage);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  c.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  c.max_rss_kb = usage.ru_maxrss;
  if (WIFEXITED(status)) c.exit_status = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) c.signal = WTERMSIG(status);
  c.out = slurp(out_path);
  c.err = slurp(err_path);
  return c;
}

fs::path oracle_gguf() {
  for (const auto& e : fs::directory_iterator(kOracle / "olmoe"))
    if (e.path().extension() == ".gguf") return e.path();
  return {};
}

fs::path copy_writable(const fs::path& from, const fs::path& to) {
  fs::copy_file(from, to, fs::copy_options::overwrite_existing);
  fs::permissions(to, fs::perms::owner_read | fs::perms::owner_write);
  return to;
}

void write(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}

std::string deep(int depth) {
  return std::string(static_cast<size_t>(depth), '[') +
         std::string(static_cast<size_t>(depth), ']');
}

// A small synthetic trace (and its calibration) for the trace/calibration readers.
void make_trace(const Scratch& s, const fs::path& dir, int tokens = 64) {
  const Child c = run_binary({"trace-synth", "--shape", "olmoe", "--tokens", std::to_string(tokens),
                              "--sequences", "1", "-o", dir.string()},
                             s);
  ASSERT_EQ(c.exit_status, 0) << c.err;
}

// ---- 1. A model file truncated while in use: a clean error naming the file, never SIGBUS.
TEST(Reliability, ModelTruncatedWhileRunningExitsCleanly) {
  Scratch s;
  const fs::path model = copy_writable(oracle_gguf(), s / "model.gguf");
  const Child c = run_binary(
      {"run", "-m", model.string(), "-p", "hello", "-n", "150000", "--ignore-eos", "-c", "200000"},
      s, {}, 120, [&](pid_t) {
        // Wait until generation has started (text on stdout), then cut the file short.
        for (int i = 0; i < 2000 && fs::file_size(s / "child.out") < 64; ++i)
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        fs::resize_file(model, 4096);
      });
  EXPECT_EQ(c.signal, 0) << "killed by signal " << c.signal;
  EXPECT_EQ(c.exit_status, 1);
  EXPECT_THAT(c.err, HasSubstr(model.string() + ": the file changed or shrank while mapped"));
  EXPECT_THAT(c.err, HasSubstr("expected it unchanged while in use"));
}

// ---- 2. Deeply nested JSON in every JSON reader: an error, no stack overflow.
TEST(Reliability, DeepJsonInEveryReaderIsAnError) {
  Scratch s;
  const std::string bomb = "{\"a\": " + deep(200000) + "}";
  // config.json of an HF folder.
  fs::create_directory(s / "hf");
  write(s / "hf" / "config.json", bomb);
  // tokenizer.json (loaded alone) and tokenizer_config.json next to a valid tokenizer.
  write(s / "tokenizer.json", bomb);
  // trace meta.json.
  make_trace(s, s / "trace");
  fs::copy(s / "trace", s / "deep_trace", fs::copy_options::recursive);
  write(s / "deep_trace" / "meta.json", bomb);
  // hardware profile.
  write(s / "profile.json", bomb);
  ASSERT_EQ(run_binary(
                {"calibrate", "--trace", (s / "trace").string(), "-o", (s / "c.smcal").string()}, s)
                .exit_status,
            0);
  struct Case {
    std::vector<std::string> args;
    std::string file;
  };
  const std::vector<Case> cases = {
      {{"run", "-m", (s / "hf").string(), "-p", "x"}, (s / "hf" / "config.json").string()},
      {{"tokenize", "-m", (s / "tokenizer.json").string(), "--text", "x"},
       (s / "tokenizer.json").string()},
      {{"calibrate", "--trace", (s / "deep_trace").string(), "-o", (s / "x.smcal").string()},
       (s / "deep_trace" / "meta.json").string()},
      {{"sim", "--trace", (s / "trace").string(), "--calib", (s / "c.smcal").string(), "--profile",
        (s / "profile.json").string(), "--cache", "32", "--policy", "exact"},
       (s / "profile.json").string()},
  };
  for (const Case& k : cases) {
    const Child c = run_binary(k.args, s);
    EXPECT_EQ(c.signal, 0) << k.file;
    EXPECT_EQ(c.exit_status, 1) << k.file << ": " << c.err;
    EXPECT_THAT(c.err, HasSubstr(k.file + ": JSON: expected arrays/objects nested at most 64"));
  }
  // tokenizer_config.json beside a valid tokenizer.json (converted from the oracle GGUF).
  ASSERT_EQ(run_binary({"convert", "-m", oracle_gguf().string(), "-o", (s / "conv").string()}, s)
                .exit_status,
            0);
  write(s / "conv" / "tokenizer_config.json", bomb);
  const Child c = run_binary({"tokenize", "-m", (s / "conv").string(), "--text", "x"}, s);
  EXPECT_EQ(c.exit_status, 1) << c.err;
  EXPECT_THAT(c.err, HasSubstr("tokenizer_config.json: JSON: expected arrays/objects nested"));
}

// Error messages quote a short excerpt of an offending value, not the whole value.
TEST(Reliability, ErrorMessagesQuoteShortExcerpts) {
  Scratch s;
  fs::create_directory(s / "hf");
  nlohmann::json config =
      steermoe::parse_json_or_throw(slurp(kOracle / "olmoe" / "hf" / "config.json"));
  config["hidden_size"] = std::string(100000, 'x');
  write(s / "hf" / "config.json", steermoe::dump_json(config));
  const Child c = run_binary({"run", "-m", (s / "hf").string(), "-p", "x"}, s);
  EXPECT_EQ(c.exit_status, 1);
  EXPECT_THAT(c.err, HasSubstr("hidden_size"));
  EXPECT_LT(c.err.size(), 400u) << c.err.substr(0, 400);
}

// ---- 3. Counts from files or flags are checked before anything is allocated from them.
// A child may use at most 150 MB more than a plain small run of the same binary (a baseline
// measured once, so sanitizer builds with their larger footprint are judged fairly).
long rss_bound_kb() {
  static const long bound = [] {
    Scratch s;
    const Child c = run_binary({"run", "-m", oracle_gguf().string(), "-p", "hello", "-n", "1"}, s);
    return c.max_rss_kb + 150 * 1024;
  }();
  return bound;
}

// Patches the u32 value of GGUF key `key` (type id 4 follows the key) in a copy of the oracle.
fs::path patched_gguf(const Scratch& s, const std::string& key, uint32_t value) {
  std::string bytes = slurp(oracle_gguf());
  const size_t at = bytes.find(key);
  EXPECT_NE(at, std::string::npos);
  const size_t type_at = at + key.size();
  uint32_t type = 0;
  std::memcpy(&type, bytes.data() + type_at, 4);
  EXPECT_EQ(type, 4u) << "expected a u32 value for " << key;
  std::memcpy(bytes.data() + type_at + 4, &value, 4);
  const fs::path out = s / "patched.gguf";
  write(out, bytes);
  return out;
}

TEST(Reliability, HugeCountsAreRefusedWithinAnRssBound) {
  Scratch s;
  {  // GGUF layer count 1e9: the GGUF key is named, nothing of that size is allocated.
    const fs::path model = patched_gguf(s, "olmoe.block_count", 1000000000);
    const Child c = run_binary({"run", "-m", model.string(), "-p", "x", "-n", "1"}, s);
    EXPECT_EQ(c.exit_status, 1) << c.err;
    EXPECT_THAT(c.err, HasSubstr("metadata key 'olmoe.block_count'"));
    EXPECT_LT(c.max_rss_kb, rss_bound_kb());
  }
  {  // A tokenizer id of 2^24 - 1 among two tokens.
    write(s / "tok.json",
          R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 16777215}, "merges": []}})");
    const Child c = run_binary({"tokenize", "-m", (s / "tok.json").string(), "--text", "a"}, s);
    EXPECT_EQ(c.exit_status, 1) << c.err;
    EXPECT_THAT(c.err, HasSubstr("without gaps"));
    EXPECT_LT(c.max_rss_kb, rss_bound_kb());
  }
  make_trace(s, s / "trace");
  {  // calibrate --vocab 2e9.
    const Child c = run_binary({"calibrate", "--trace", (s / "trace").string(), "--vocab",
                                "2000000000", "-o", (s / "c.smcal").string()},
                               s);
    EXPECT_EQ(c.exit_status, 1) << c.err;
    EXPECT_THAT(c.err, HasSubstr("--vocab"));
    EXPECT_LT(c.max_rss_kb, rss_bound_kb());
    EXPECT_FALSE(fs::exists(s / "c.smcal"));
  }
  {  // A huge context: the KV cache is committed as used (a 4M-position context costs nothing
     // until filled) ...
    const Child c = run_binary(
        {"run", "-m", oracle_gguf().string(), "-p", "hello", "-n", "2", "-c", "4194304"}, s);
    EXPECT_EQ(c.exit_status, 0) << c.err;
    EXPECT_LT(c.max_rss_kb, rss_bound_kb());
  }
  {  // ... and checked against the memory cap with a message naming -c.
    const Child c =
        run_binary({"run", "-m", oracle_gguf().string(), "-p", "hello", "-n", "2", "-c", "4194304"},
                   s, {"STEERMOE_MAX_ALLOC_BYTES=100000000"});
    EXPECT_EQ(c.exit_status, 1) << c.err;
    EXPECT_THAT(c.err, HasSubstr("context (-c): a KV cache of 4194304 positions"));
  }
  {  // A huge --window on a short text allocates for the text, not the window.
    write(s / "text.txt", "hello world, this is a short text for a perplexity run.");
    const Child c = run_binary({"perplexity", "-m", oracle_gguf().string(), "-f",
                                (s / "text.txt").string(), "--window", "1048576"},
                               s);
    EXPECT_EQ(c.exit_status, 0) << c.err;
    EXPECT_LT(c.max_rss_kb, rss_bound_kb());
  }
  {  // trace-synth --tokens 2^32: refused up front (tens of TB), not streamed.
    const Child c = run_binary(
        {"trace-synth", "--shape", "qwen36", "--tokens", "4294967296", "-o", (s / "huge").string()},
        s, {}, 20);
    EXPECT_FALSE(c.timed_out);
    EXPECT_EQ(c.exit_status, 1) << c.err;
    EXPECT_THAT(c.err, HasSubstr("without --force"));
    EXPECT_FALSE(fs::exists(s / "huge"));
  }
}

// ---- 4. Non-regular files are refused at once, for every file input.
TEST(Reliability, FifoAndDirectoryInputsAreRefusedWithoutBlocking) {
  Scratch s;
  make_trace(s, s / "trace");
  ASSERT_EQ(run_binary(
                {"calibrate", "--trace", (s / "trace").string(), "-o", (s / "c.smcal").string()}, s)
                .exit_status,
            0);
  ASSERT_EQ(mkfifo((s / "fifo.gguf").c_str(), 0644), 0);
  ASSERT_EQ(mkfifo((s / "fifo").c_str(), 0644), 0);
  ASSERT_EQ(mkfifo((s / "fifo.json").c_str(), 0644), 0);
  fs::copy(s / "trace", s / "fifo_trace", fs::copy_options::recursive);
  fs::remove(s / "fifo_trace" / "meta.json");
  ASSERT_EQ(mkfifo((s / "fifo_trace" / "meta.json").c_str(), 0644), 0);
  fs::copy(s / "trace", s / "fifo_scores", fs::copy_options::recursive);
  fs::remove(s / "fifo_scores" / "scores.npy");
  ASSERT_EQ(mkfifo((s / "fifo_scores" / "scores.npy").c_str(), 0644), 0);
  fs::create_directory(s / "adir");
  const std::string model = oracle_gguf().string(), fifo = (s / "fifo").string();
  const std::vector<std::vector<std::string>> cases = {
      {"run", "-m", (s / "fifo.gguf").string(), "-p", "x"},
      {"tokenize", "-m", model, "--file", fifo},
      {"tokenize", "-m", fifo, "--text", "x"},
      {"perplexity", "-m", model, "-f", fifo},
      {"trace", "-m", model, "-f", fifo, "-o", (s / "t2").string()},
      {"run", "-m", model, "-p", "x", "--calib", fifo},
      {"calibrate", "--trace", (s / "fifo_trace").string(), "-o", (s / "x.smcal").string()},
      {"calibrate", "--trace", (s / "fifo_scores").string(), "-o", (s / "x.smcal").string()},
      {"sim", "--trace", (s / "trace").string(), "--calib", (s / "c.smcal").string(), "--profile",
       (s / "fifo.json").string(), "--cache", "32", "--policy", "exact"},
  };
  for (const auto& args : cases) {
    const Child c = run_binary(args, s, {}, 10);
    EXPECT_FALSE(c.timed_out) << args[0] << " " << args[2] << " blocked";
    EXPECT_EQ(c.exit_status, 1) << c.err;
    EXPECT_THAT(c.err, HasSubstr("found a FIFO")) << args[0];
    EXPECT_LT(c.seconds, 5.0);
  }
  // A directory as --file is an error, not an empty text.
  const Child c = run_binary({"tokenize", "-m", model, "--file", (s / "adir").string()}, s);
  EXPECT_EQ(c.exit_status, 1);
  EXPECT_THAT(c.err, HasSubstr("expected a regular file (a text file), found a directory"));
}

// ---- 5. Inconsistent inputs are refused at load, naming the file.
TEST(Reliability, TokenizerLargerThanTheModelIsRefusedAtLoad) {
  Scratch s;
  ASSERT_EQ(run_binary({"convert", "-m", oracle_gguf().string(), "-o", (s / "hf").string()}, s)
                .exit_status,
            0);
  nlohmann::json tok = steermoe::parse_json_or_throw(slurp(s / "hf" / "tokenizer.json"));
  const int vocab =
      static_cast<int>(tok["model"]["vocab"].size()) + static_cast<int>(tok["added_tokens"].size());
  tok["added_tokens"].push_back(
      {{"id", vocab + 3}, {"content", "<extra>"}, {"special", true}, {"normalized", false}});
  write(s / "hf" / "tokenizer.json", steermoe::dump_json(tok));
  const Child c = run_binary({"run", "-m", (s / "hf").string(), "-p", "hello", "-n", "4"}, s);
  EXPECT_EQ(c.exit_status, 1) << c.err;
  EXPECT_THAT(c.err, HasSubstr((s / "hf").string() + ": tokenizer: expected at most"));
  EXPECT_EQ(c.out, "") << "nothing may be printed before the check";
}

TEST(Reliability, CalibrationOfTheWrongShapeNamesTheFile) {
  Scratch s;
  make_trace(s, s / "trace");  // olmoe shape: 16 x 64, not the oracle model's
  ASSERT_EQ(run_binary(
                {"calibrate", "--trace", (s / "trace").string(), "-o", (s / "c.smcal").string()}, s)
                .exit_status,
            0);
  const std::string calib = (s / "c.smcal").string();
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"run", "-m", oracle_gguf().string(), "-p", "x", "-n", "1",
                                 "--calib", calib},
        std::vector<std::string>{"perplexity", "-m", oracle_gguf().string(), "-f", calib, "--calib",
                                 calib}}) {
    const Child c = run_binary(args, s);
    EXPECT_EQ(c.exit_status, 1) << c.err;
    EXPECT_THAT(c.err, HasSubstr(calib + ": "));
    EXPECT_THAT(c.err, HasSubstr("expected a calibration"));
  }
  // sim: against the trace's shape.
  const Child t = run_binary(
      {"trace-synth", "--shape", "moonlight", "--tokens", "16", "-o", (s / "moon").string()}, s);
  ASSERT_EQ(t.exit_status, 0) << t.err;
  const Child c = run_binary({"sim", "--trace", (s / "moon").string(), "--calib", calib, "--cache",
                              "32", "--policy", "exact"},
                             s);
  EXPECT_EQ(c.exit_status, 1) << c.err;
  EXPECT_THAT(c.err, HasSubstr(calib + ": shape: expected a calibration of"));
}

// ---- 6. One exit-status rule and readable range messages.
TEST(Reliability, ParseAndRangeErrorsExitWithStatusOne) {
  Scratch s;
  const std::string model = oracle_gguf().string();
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"run"}, "required"},
      {{"run", "-m", model, "-p", "x", "--no-such-flag"}, "no-such-flag"},
      {{"run", "-m", model, "-p", "x", "-n", "-5"}, "-n"},
      {{"run", "-m", model, "-p", "x", "--temp", "nan"}, "expected a finite number"},
      {{"run", "-m", model, "-p", "x", "--top-p", "nan"}, "expected a number in (0, 1], found nan"},
      {{"run", "-m", model, "-p", "x", "--seed", "-1"}, "non-negative"},
      {{"run", "-m", model, "-p", "x", "--seed", "18446744073709551616"},
       "[0, 18446744073709551615]"},
      {{"sim", "--trace", "t", "--calib", "c", "--cache", "1", "--policy", "exact", "--link-GBps",
        "-1"},
       "expected a number >= 0, found -1"},
      {{"nonexistent-command"}, "unknown command 'nonexistent-command'"},
      {{"compare", "--latency", "x.json", "--scale", "-1"}, "--scale"},
      // kl does not use --link, but a value no command takes is still an error.
      {{"kl", "-m", model, "-f", (kSource / "data" / "text" / "eval.txt").string(), "--policy",
        "exact", "--link", "floppy"},
       "--link: value: expected resident"},
      {{"make-model", "--arch", "olmoe", "--shape", "olmoe-small", "--random", "--layers", "50",
        "-o", (s / "m.gguf").string()},
       "--layers: count: expected at most the shape's 3 layers, found 50"},
  };
  for (const Case& k : cases) {
    const Child c = run_binary(k.args, s);
    EXPECT_EQ(c.exit_status, 1) << k.args.back() << ": " << c.err;
    EXPECT_THAT(c.err, HasSubstr(k.message));
    // One format for every error, CLI11's parse errors included.
    EXPECT_THAT(c.err, testing::StartsWith("steermoe: error: "));
    EXPECT_LT(c.err.size(), 300u) << "long message (DBL_MAX digits?): " << c.err;
  }
  EXPECT_EQ(run_binary({"--help"}, s).exit_status, 0);
  EXPECT_EQ(run_binary({"run", "--help"}, s).exit_status, 0);
  // quantize in place would replace the source with its lossy copy: refused, the file untouched
  // (also through another spelling of the same path).
  std::filesystem::copy_file(model, s / "src.gguf");
  const auto before = std::filesystem::file_size(s / "src.gguf");
  for (const fs::path& out : {s / "src.gguf", s / "." / "src.gguf"}) {
    const Child q = run_binary(
        {"quantize", "-m", (s / "src.gguf").string(), "--type", "q8_0", "-o", out.string()}, s);
    EXPECT_EQ(q.exit_status, 1) << q.err;
    EXPECT_THAT(q.err, HasSubstr("is the input model"));
    EXPECT_EQ(std::filesystem::file_size(s / "src.gguf"), before);
  }
  // Output folder problems are clear errors, not raw filesystem_error text.
  write(s / "file", "x");
  const Child c = run_binary({"make-model", "--arch", "olmoe", "--shape", "olmoe-small", "--random",
                              "-o", (s / "file" / "sub").string()},
                             s);
  EXPECT_EQ(c.exit_status, 1);
  EXPECT_THAT(c.err, HasSubstr("output"));
  EXPECT_THAT(c.err, Not(HasSubstr("filesystem error")));
}

// ---- 7. Ctrl-C: status 130, and no output that looks complete.
TEST(Reliability, InterruptLeavesNoPartialOutput) {
  Scratch s;
  const fs::path out = s / "synth";
  const Child c =
      run_binary({"trace-synth", "--shape", "olmoe", "--tokens", "300000", "-o", out.string()}, s,
                 {}, 60, [&](pid_t pid) {
                   // Wait until the staging folder has data, then interrupt.
                   for (int i = 0; i < 2000; ++i) {
                     bool started = false;
                     for (const auto& e : fs::directory_iterator(s.dir()))
                       if (e.path().filename().string().rfind("synth.partial-", 0) == 0)
                         started = true;
                     if (started) break;
                     std::this_thread::sleep_for(std::chrono::milliseconds(5));
                   }
                   std::this_thread::sleep_for(std::chrono::milliseconds(300));
                   kill(pid, SIGINT);
                 });
  EXPECT_EQ(c.exit_status, 130) << c.err;
  EXPECT_THAT(c.err, HasSubstr("interrupted"));
  EXPECT_FALSE(fs::exists(out)) << "an interrupted trace must not appear under its name";
  for (const auto& e : fs::directory_iterator(s.dir()))
    EXPECT_EQ(e.path().filename().string().find(".partial-"), std::string::npos)
        << "staging left behind: " << e.path();
}

// The commands that compute (run, bench, kl, ...) stop at their next forward pass on the first
// SIGINT or SIGTERM, with 130: a generation asked for 150,000 tokens ends long before them.
TEST(Reliability, InterruptStopsAGenerationAtTheNextToken) {
  for (const int sig : {SIGINT, SIGTERM}) {
    Scratch s;
    const Child c =
        run_binary({"run", "-m", oracle_gguf().string(), "-p", "hello", "-n", "150000",
                    "--ignore-eos", "-c", "200000"},
                   s, {}, 120, [&](pid_t pid) {
                     // Once tokens stream (text on stdout), one signal.
                     for (int i = 0; i < 2000 && fs::file_size(s / "child.out") < 64; ++i)
                       std::this_thread::sleep_for(std::chrono::milliseconds(5));
                     kill(pid, sig);
                   });
    EXPECT_EQ(c.signal, 0) << "killed by signal " << c.signal;
    EXPECT_EQ(c.exit_status, 130) << "signal " << sig << ": " << c.err;
    EXPECT_THAT(c.err, HasSubstr("interrupted"));
    EXPECT_LT(c.seconds, 30) << "signal " << sig;
  }
}

// sweep runs each point as a child process: SIGINT to the sweep alone is passed on and stops it
// with 130 (it was ignored: every point still ran), and the finished points are kept, so a
// rerun resumes from them.
TEST(Reliability, InterruptStopsASweepWhichThenResumes) {
  Scratch s;
  const fs::path out = s / "sweep";
  const std::vector<std::string> args = {"sweep",
                                         "-m",
                                         (kSource / "models" / "steer-olmoe-tiny").string(),
                                         "-f",
                                         (kSource / "data" / "text" / "eval.txt").string(),
                                         "--grid",
                                         "psr:lambda=0.1|0.2|0.3|0.4|0.5|0.6,n=1",
                                         "--cache",
                                         "32,16",
                                         "--no-bench",
                                         "--window-len",
                                         "24",
                                         "--max-windows",
                                         "2",
                                         "--plot",
                                         "none",
                                         "-o",
                                         out.string()};
  const Child c = run_binary(args, s, {}, 120, [&](pid_t pid) {
    // Once the first point is in, interrupt the sweep process only.
    for (int i = 0; i < 4000; ++i) {
      bool one = false;
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(out / "points", ec))
        one = one || e.path().string().ends_with(".kl.json");
      if (one) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    kill(pid, SIGINT);
  });
  EXPECT_EQ(c.exit_status, 130) << c.err;
  EXPECT_THAT(c.err, HasSubstr("interrupted"));
  EXPECT_THAT(c.err, Not(HasSubstr("[12/12]")));
  const Child again = run_binary(args, s, {}, 300);
  EXPECT_EQ(again.exit_status, 0) << again.err;
  EXPECT_THAT(again.err, HasSubstr("done earlier"));
  EXPECT_TRUE(fs::exists(out / "kl.json"));
}

}  // namespace
}  // namespace steermoe
