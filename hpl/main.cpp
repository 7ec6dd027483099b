// skt-hpl: HPL on selfckpt. Reads a netlib HPL.dat, runs every listed combination, prints HPL's
// output, and keeps the matrix in self-checkpointed shared memory: after a node is lost, the job
// relaunched with the same SKT_JOB resumes at the last checkpointed panel.
#include <fmt/format.h>
#include <mpi.h>
#include <toml++/toml.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <new>
#include <numeric>
#include <optional>
#include <sstream>

#include "common/mpi.hpp"
#include "hpl/blas.hpp"
#include "hpl/hpldat.hpp"
#include "hpl/lu.hpp"
#include "hpl/matgen.hpp"
#include "hpl/report.hpp"
#include "hpl/run.hpp"
#include "hpl/suggest.hpp"
#include "hpl/verify.hpp"
#include "selfckpt/selfckpt.hpp"

namespace skt::hpl {
namespace {

constexpr std::size_t kRecordText = 3000;

struct Options {
  std::string hpldat = "HPL.dat";
  std::optional<int> group_size;
  std::optional<std::string> scheme;
  std::optional<int> parity;
  std::optional<std::string> mode;
  std::optional<std::string> mtbf;
  CheckpointPolicy policy;
  bool timing = false;
  double progress = 60;  // seconds between progress lines on stderr; 0: none
  std::string progress_given;
  bool suggest = false;
  std::string mem_per_node;
  std::optional<int> ranks_per_node;  // for --suggest-n; none: a grid's ranks on one node
  std::string config;
  std::string from_job;  // a job of other grids whose tests this run continues
};

enum Verdict : std::int32_t { kFailed = 0, kPassed = 1, kSkipped = 2 };

// One finished test, in the progress record of the whole run.
struct TestRecord {
  std::uint64_t fingerprint;  // of the test and the threshold its verdict was judged by
  std::uint64_t problem;      // the same but the grid: what a run on other grids continues
  std::int32_t done;
  std::int32_t verdict;
  char text[kRecordText];
};

struct Tally {
  int passed = 0, failed = 0, skipped = 0;
  void add(std::int32_t verdict) {
    (verdict == kPassed ? passed : verdict == kSkipped ? skipped : failed) += 1;
  }
};

// Bad input: the run ends with exit code 2 and the message. Raised where every rank reaches the
// same verdict (it is printed once, by rank 0), or where one rank alone may (the options), which
// settings_agreed() turns into the same end on every rank.
struct UsageError {
  std::string message;
};

[[noreturn]] void usage_error(const std::string& message) {
  throw UsageError{message};
}

// Options from the environment (SKT_HPL_*) and the [hpl] table of a configuration file; flags
// given on the command line win.
void apply_settings(Options& o, const CLI::App& app) {
  auto given = [&](const char* flag) { return app.count(flag) > 0; };
  auto set_every = [&](const std::string& v, const std::string& origin) {
    try {
      o.policy.every = std::stoi(v);
    } catch (const std::exception&) {
      usage_error(fmt::format("{}: '{}' is not a number of panels", origin, v));
    }
    if (o.policy.every < 1) usage_error(fmt::format("{}: must be at least 1", origin));
  };
  auto set_progress = [&](const std::string& v, const std::string& origin) {
    std::size_t used = 0;
    try {
      o.progress = std::stod(v, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != v.size() || !(o.progress >= 0) || !std::isfinite(o.progress)) {
      usage_error(
          fmt::format("{}: '{}' is not a number of seconds (0: no progress lines)", origin, v));
    }
  };
  auto set_strategy = [&](const std::string& v, const std::string& origin) {
    if (v == "corner") {
      o.policy.strategy = Strategy::corner;
    } else if (v == "side") {
      o.policy.strategy = Strategy::side;
    } else if (v == "full") {
      o.policy.strategy = Strategy::full;
    } else {
      usage_error(fmt::format("{}: '{}' is not corner, side or full", origin, v));
    }
  };
  if (given("--progress")) set_progress(o.progress_given, "--progress");
  if (!o.config.empty()) {
    try {
      const auto file = toml::parse_file(o.config);
      if (const auto* hpl = file["hpl"].as_table()) {
        for (const auto& [key, node] : *hpl) {
          const std::string origin = fmt::format("{}: [hpl] {}", o.config, std::string_view(key));
          const std::string value = node.is_string()    ? node.as_string()->get()
                                    : node.is_integer() ? std::to_string(node.as_integer()->get())
                                    : node.is_boolean()
                                        ? (node.as_boolean()->get() ? "true" : "false")
                                        : "";
          if (key == "checkpoint_every") {
            if (!given("--checkpoint-every")) set_every(value, origin);
          } else if (key == "checkpoint_interval") {
            if (value != "auto") usage_error(origin + ": only 'auto' is supported");
            if (!given("--checkpoint-interval")) o.policy.automatic = true;
          } else if (key == "checkpoint_strategy") {
            if (!given("--checkpoint-strategy")) set_strategy(value, origin);
          } else if (key == "no_checkpoint") {
            if (!given("--no-checkpoint")) o.policy.none = value == "true";
          } else {
            usage_error(origin +
                        ": unknown key (checkpoint_every, checkpoint_interval, "
                        "checkpoint_strategy, no_checkpoint)");
          }
        }
      }
    } catch (const toml::parse_error& e) {
      usage_error(fmt::format("{}:{}: {}", o.config, e.source().begin.line, e.description()));
    }
    setenv("SKT_CONFIG", o.config.c_str(), 1);
  }
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry(*e);
    if (entry.rfind("SKT_HPL_", 0) != 0) continue;
    const auto eq = entry.find('=');
    const std::string name = entry.substr(0, eq), value = entry.substr(eq + 1);
    if (name == "SKT_HPL_CHECKPOINT_EVERY") {
      if (!given("--checkpoint-every")) set_every(value, name);
    } else if (name == "SKT_HPL_CHECKPOINT_INTERVAL") {
      if (value != "auto") usage_error(name + ": only 'auto' is supported");
      o.policy.automatic = true;
    } else if (name == "SKT_HPL_CHECKPOINT_STRATEGY") {
      if (!given("--checkpoint-strategy")) set_strategy(value, name);
    } else if (name == "SKT_HPL_NO_CHECKPOINT") {
      o.policy.none = o.policy.none || value == "1" || value == "true";
    } else if (name == "SKT_HPL_TIMING") {
      o.timing = value == "1" || value == "true";
    } else if (name == "SKT_HPL_PROGRESS") {
      if (!given("--progress")) set_progress(value, name);
    } else if (name != "SKT_HPL_CRASH" && name != "SKT_HPL_PAUSE") {  // read where they act
      usage_error(name +
                  ": unknown variable (SKT_HPL_CHECKPOINT_EVERY, "
                  "SKT_HPL_CHECKPOINT_INTERVAL, SKT_HPL_CHECKPOINT_STRATEGY, "
                  "SKT_HPL_NO_CHECKPOINT, SKT_HPL_TIMING, SKT_HPL_PROGRESS, SKT_HPL_CRASH, "
                  "SKT_HPL_PAUSE)");
    }
  }
  // The library's own settings travel as its variables.
  if (o.group_size) setenv("SKT_GROUP_SIZE", std::to_string(*o.group_size).c_str(), 1);
  if (o.scheme) setenv("SKT_SCHEME", o.scheme->c_str(), 1);
  if (o.parity) setenv("SKT_PARITY", std::to_string(*o.parity).c_str(), 1);
  if (o.mode) setenv("SKT_MODE", o.mode->c_str(), 1);
  if (o.mtbf) setenv("SKT_MTBF", o.mtbf->c_str(), 1);
  // The corner strategy's declared ranges are exact (e2e-hpl checks every one of its fault cases
  // with SKT_CHECK_DECLARED=all), and a benchmark's time should not pay for the library's sample of
  // them; the environment can still ask for it.
  setenv("SKT_CHECK_DECLARED", "off", 0);
  if (o.policy.automatic && std::getenv("SKT_MTBF") == nullptr) {
    usage_error(
        "--checkpoint-interval auto needs the mean time between failures: "
        "--mtbf SECONDS (or SKT_MTBF)");
  }
  if (!o.from_job.empty() && o.policy.none) {
    usage_error(
        "--from-job continues a job from its checkpoints: it needs them (no "
        "--no-checkpoint)");
  }
  if (o.policy.none && (o.policy.automatic || o.policy.every > 0)) {
    usage_error("--no-checkpoint contradicts --checkpoint-every / --checkpoint-interval");
  }
  // Without checkpoints nothing needs a group: run wherever the ranks are, like plain HPL.
  if (o.policy.none) setenv("SKT_GROUP_SIZE", "1", 1);
}

// HPL's loop order (HPL_pddriver): grid, N, NB, depth, broadcast, recursive factorization, panel
// factorization, NBMIN, NDIV.
std::vector<Test> tests_of(const HplDat& d) {
  std::vector<Test> out;
  for (std::size_t g = 0; g < d.ps.size(); ++g) {
    for (const int n : d.ns) {
      for (const int nb : d.nbs) {
        for (const int depth : d.depths) {
          for (const Bcast bcast : d.bcasts) {
            for (const Fact rfact : d.rfacts) {
              for (const Fact pfact : d.pfacts) {
                for (const int nbmin : d.nbmins) {
                  for (const int ndiv : d.ndivs) {
                    Algorithm a;
                    a.pfact = pfact;
                    a.rfact = rfact;
                    a.nbmin = nbmin;
                    a.ndiv = ndiv;
                    a.bcast = bcast;
                    a.depth = depth;
                    a.swap = d.swap;
                    a.swap_threshold = d.swap_threshold;
                    a.l1_notrans = d.l1_notrans;
                    a.u_notrans = d.u_notrans;
                    a.equil = d.equil;
                    a.align = d.align;
                    out.push_back({n, nb, d.ps[g], d.qs[g], a});
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  return out;
}

// The tests that cannot run here: a grid larger than the job. netlib HPL stops the whole run
// then; SKT-HPL says so in netlib's words, skips that grid's tests and runs the rest.
std::vector<bool> skipped_tests(const std::vector<Test>& tests, int size, Report& report) {
  std::vector<bool> skipped(tests.size(), false);
  int warned_grid = -1;
  for (std::size_t i = 0; i < tests.size(); ++i) {
    const Test& t = tests[i];
    if (t.p * t.q <= size) continue;
    skipped[i] = true;
    if (t.p * 1000 + t.q != warned_grid) {
      warned_grid = t.p * 1000 + t.q;
      report.line(
          fmt::format("SKT-HPL: the {}x{} grid is skipped: Need at least {} processes "
                      "for these tests (mpirun started {})",
                      t.p, t.q, t.p * t.q, size));
    }
  }
  return skipped;
}

// The job's own tag once its parts (TAG+hpl, TAG+t<i>) have contexts: what to name when the library
// names a part.
std::string& job_tag_of_parts() {
  static std::string tag;
  return tag;
}

// Rank 0's tag, on every rank: where the environment differs between ranks (an mpirun -x that
// reached only some of them), the ranks still agree, and the library then compares the rest.
// Empty where neither SKT_JOB nor Slurm names the job: no relaunch can name it either.
std::string base_job_tag(MPI_Comm world) {
  std::array<char, 64> tag{};
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  if (rank == 0) {
    std::string t;
    if (const char* j = std::getenv("SKT_JOB")) {
      t = j;
    } else if (const char* s = std::getenv("SLURM_JOB_ID")) {
      t = std::string("slurm-") + s;
    }
    std::memcpy(tag.data(), t.data(), std::min(t.size(), tag.size() - 1));
  }
  MPI_Bcast(tag.data(), static_cast<int>(tag.size()), MPI_CHAR, 0, world);
  return tag.data();
}

// Names the context made next: the job's tag and `part`, or, for a job without a tag, none, so that
// the library makes it ephemeral: its segments go with the processes however the run ends.
void name_next_context(const std::string& base, const std::string& part) {
  if (base.empty()) {
    unsetenv("SKT_JOB");
  } else {
    setenv("SKT_JOB", (base + part).c_str(), 1);
  }
}

// Collective: the records of the tests job `job` finished, as the last drained epoch of its record
// (TAG+hpl) has them, copied into `records` where each is the test of this HPL.dat with other grids
// (`problem` of each record says), and the test it was running checked as one this run can
// continue. Why not, the same on every rank; empty when adopted.
std::string adopt_finished_tests(const std::string& job, const std::vector<Test>& tests,
                                 TestRecord* records,
                                 const std::function<std::uint64_t(const Test&)>& problem) {
  std::string refusal;
  std::size_t finished = 0;
  std::uint64_t epoch = 0;
  int old_ranks = 0;
  try {
    skt::Epoch old(MPI_COMM_WORLD, job + "+hpl");
    epoch = old.number();
    old_ranks = old.ranks();
    const std::size_t bytes = old.region_bytes(0, "tests");
    if (bytes != tests.size() * sizeof(TestRecord)) {
      refusal = fmt::format(
          "--from-job {}: it ran {} tests, this HPL.dat has {}: give the HPL.dat "
          "it ran, with other grids",
          job, bytes / sizeof(TestRecord), tests.size());
    } else {
      old.read({{0, "tests", 0, bytes, records}});
    }
  } catch (const skt::Error& e) {
    refusal = fmt::format("--from-job {}: {}", job, e.what());
  }
  for (; refusal.empty() && finished < tests.size() && records[finished].done != 0; ++finished) {
    if (records[finished].problem != problem(tests[finished])) {
      refusal = fmt::format(
          "--from-job {}: test {} of HPL.dat (N={} NB={}) is not the one it finished: only the "
          "grids may change (P, Q, PMAP); give the HPL.dat it ran with other grids",
          job, finished + 1, tests[finished].n, tests[finished].nb);
    }
  }
  // Agreed before the collective check below: a rank whose file read failed must not skip it.
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int first = refusal.empty() ? size : rank;
  MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (first < size) return broadcast_string(MPI_COMM_WORLD, refusal, first);
  if (finished < tests.size()) {
    refusal =
        continuation_refusal(MPI_COMM_WORLD, job + fmt::format("+t{}", finished), tests[finished]);
    if (!refusal.empty()) return fmt::format("--from-job {}: {}", job, refusal);
  }
  if (rank == 0) {
    fmt::print(stderr,
               "skt-hpl: continuing job {} from its epoch {} ({} ranks): {} of its {} tests "
               "finished there\n",
               job, epoch, old_ranks, finished, tests.size());
  }
  return {};
}

// What each rank's options decide about the collective course of the run, in one comparable
// line (only rank 0 reads HPL.dat and prints, so the file's path and --timing may differ).
std::string settings_line(const Options& o) {
  const CheckpointPolicy& p = o.policy;
  return fmt::format(
      "checkpoint every={} automatic={} none={} strategy={} suggest-n={} from-job={}", p.every,
      p.automatic, p.none, strategy_name(p.strategy), o.suggest, o.from_job);
}

// Collective: the same verdict on every rank about the options, which each rank read from its own
// command line and environment. False (after the message, once) when any rank's were bad, or when
// they differ from rank 0's: a rank that checkpoints where another does not would wait forever.
bool settings_agreed(const std::optional<UsageError>& error, const Options& o, int rank, int size) {
  int first_bad = error ? rank : size;
  MPI_Allreduce(MPI_IN_PLACE, &first_bad, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (first_bad < size) {
    if (rank == first_bad) {
      fmt::print(stderr, "skt-hpl{}: {}\n", rank == 0 ? "" : fmt::format(" rank {}", rank),
                 error->message);
    }
    return false;
  }
  const std::string mine = settings_line(o);
  const std::string reference = broadcast_string(MPI_COMM_WORLD, mine);
  int first_different = mine != reference ? rank : size;
  MPI_Allreduce(MPI_IN_PLACE, &first_different, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (first_different < size && rank == first_different) {
    fmt::print(stderr,
               "skt-hpl: the options differ between ranks: rank {} has [{}], rank 0 has [{}]; "
               "give every rank the same options and SKT_HPL_* variables (in a command of several "
               "programs, a : b, mpirun's -x reaches only the first)\n",
               rank, mine, reference);
  }
  return first_different == size;
}

// Collective: the first rank whose OpenBLAS runs kernels below its processor's says so, once.
// Collective: the first rank that has `warning` prints it, so that it is said once.
void warn_once(const std::optional<std::string>& warning, int rank, int size) {
  int first = warning ? rank : size;
  SKT_MPI(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  if (first == rank) {
    fmt::print(stderr, "skt-hpl{}: warning: {}\n", rank == 0 ? "" : fmt::format(" rank {}", rank),
               *warning);
  }
}

void warn_of_slow_kernels(int rank, int size) {
  warn_once(slow_kernels_warning(openblas_core(), this_processor()), rank, size);
}

// Collective: the first host whose BLAS threads outnumber its cores says so, once.
void warn_of_oversubscribed_threads(int rank, int size) {
  const Comm host = Comm::split_shared(MPI_COMM_WORLD);
  // The host's cores: the union of the CPU sets its ranks may run on.
  constexpr int kWords = CPU_SETSIZE / 64;
  std::array<std::uint64_t, kWords> cpus{};
  for (const int cpu : allowed_cpus())
    cpus[static_cast<std::size_t>(cpu / 64)] |= std::uint64_t{1} << (cpu % 64);
  SKT_MPI(MPI_Allreduce(MPI_IN_PLACE, cpus.data(), kWords, MPI_UINT64_T, MPI_BOR, host.get()));
  int threads = openblas_threads();
  int most = threads;
  SKT_MPI(MPI_Allreduce(MPI_IN_PLACE, &threads, 1, MPI_INT, MPI_SUM, host.get()));
  SKT_MPI(MPI_Allreduce(MPI_IN_PLACE, &most, 1, MPI_INT, MPI_MAX, host.get()));
  HostThreads facts{.ranks = host.size(), .threads = threads, .most_in_one_rank = most};
  for (const std::uint64_t word : cpus)
    facts.cores += std::popcount(word);
  warn_once(oversubscribed_threads_warning(facts), rank, size);
}

int run(int argc, char** argv) {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  CLI::App app{
      "skt-hpl: HPL with self-checkpointing. Reads a netlib HPL.dat (default ./HPL.dat),\n"
      "runs every combination it lists, and prints HPL's output. The matrix lives in\n"
      "self-checkpointed shared memory: a job relaunched with the same SKT_JOB after a\n"
      "node is lost resumes at the last checkpoint. Every option has an environment\n"
      "variable (SKT_GROUP_SIZE, SKT_SCHEME, SKT_PARITY, SKT_MODE, SKT_MTBF,\n"
      "SKT_HPL_CHECKPOINT_EVERY, SKT_HPL_CHECKPOINT_INTERVAL, SKT_HPL_CHECKPOINT_STRATEGY,\n"
      "SKT_HPL_NO_CHECKPOINT) and a configuration-file key (--config; [hpl] table for the\n"
      "checkpoint_* keys). Exit codes: 0 passed, 2 bad input, 3 unrecoverable, 4 a\n"
      "residual check failed."};
  app.footer(
      "For testing: SKT_FAULT=<step>:<rank>[:<epoch>[:<launch>[:kill|term]]] kills a process\n"
      "at a checkpoint protocol step (term: cancels the whole job there); SKT_HPL_CRASH=\n"
      "<panel>:<rank> kills one in the middle of a panel's iteration, and SKT_HPL_PAUSE=<panel>\n"
      "stops every rank there until killed (first launch only). SKT_JOB names the job;\n"
      "SKT_RESTART=1 requires a restore.");
  Options o;
  app.add_option("hpldat", o.hpldat, "the HPL.dat to run");
  app.add_option("--group-size", o.group_size, "ranks per checkpoint group (SKT_GROUP_SIZE)");
  app.add_option("--scheme", o.scheme, "checksum scheme: xor, rs or sum (SKT_SCHEME)");
  app.add_option("--parity", o.parity, "Reed-Solomon parity chunks per row (SKT_PARITY)");
  app.add_option("--mode", o.mode, "self, double or single (SKT_MODE)");
  app.add_option("--checkpoint-every", o.policy.every,
                 "checkpoint every K panels (without this, --checkpoint-interval or "
                 "--no-checkpoint: every tenth of a test's panels)")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()));
  app.add_option_function<std::string>(
      "--checkpoint-interval",
      [&](const std::string& v) {
        if (v != "auto")
          throw CLI::ValidationError("--checkpoint-interval", "only 'auto' is supported");
        o.policy.automatic = true;
      },
      "auto: checkpoint at Daly's optimum interval (needs --mtbf)");
  app.add_option("--mtbf", o.mtbf, "mean time between failures, seconds or 30m, 6h... (SKT_MTBF)");
  app.add_option_function<std::string>(
      "--checkpoint-strategy",
      [&](const std::string& v) {
        if (v == "corner")
          o.policy.strategy = Strategy::corner;
        else if (v == "side")
          o.policy.strategy = Strategy::side;
        else if (v == "full")
          o.policy.strategy = Strategy::full;
        else
          throw CLI::ValidationError("--checkpoint-strategy", "corner, side or full");
      },
      "what a checkpoint encodes: corner (the trailing submatrix, default), side (every column "
      "from the first changed one), full (the whole matrix, whose changed blocks the library finds "
      "by comparison with the committed copy)");
  app.add_flag("--no-checkpoint", o.policy.none,
               "never checkpoint: plain HPL, the matrix in the process's own memory as netlib's");
  app.add_flag("--timing", o.timing, "also print the time of each phase (SKT_HPL_TIMING)");
  app.add_option("--progress", o.progress_given,
                 "seconds between progress lines on stderr during a test (default 60): the "
                 "panel, the share of the flops done and the time to go (0: none; "
                 "SKT_HPL_PROGRESS)");
  app.add_flag("--suggest-n", o.suggest,
               "print the largest N of each grid and NB of HPL.dat that this machine's memory (or "
               "--mem-per-node) holds, in each mode, and exit");
  app.add_option("--mem-per-node", o.mem_per_node,
                 "a node's memory for --suggest-n (bytes, or 64G; default: what this machine, or "
                 "the memory cgroup the job runs in, has available now)");
  app.add_option("--ranks-per-node", o.ranks_per_node,
                 "ranks per node for --suggest-n, in launch order (default: every rank of a grid "
                 "on this host, each its own SKT_NODE)")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()));
  app.add_option("--config", o.config, "a TOML configuration file (SKT_CONFIG)");
  app.add_option("--from-job", o.from_job,
                 "continue job TAG, which ran the same HPL.dat on other grids (after losing nodes "
                 "with no spare, 2x2 -> 2x1): its finished tests are reported as it printed them, "
                 "and the one it was running goes on from its last drained epoch (SKT_DRAIN_DIR), "
                 "the matrix redistributed onto this run's grid. This run needs a tag of its own "
                 "(SKT_JOB); the old job stays until removed");
  std::optional<UsageError> bad;
  try {
    app.parse(argc, argv);
    apply_settings(o, app);
  } catch (const CLI::CallForHelp& e) {
    if (rank == 0) app.exit(e);
    return 0;
  } catch (const CLI::ParseError& e) {
    bad = UsageError{e.what()};
  } catch (const UsageError& e) {
    bad = e;
  }
  if (!settings_agreed(bad, o, rank, size)) return 2;

  // Rank 0 reads HPL.dat; everyone parses the same text.
  std::string text;
  int length = 0;
  if (rank == 0) {
    std::ifstream in(o.hpldat);
    if (in) {
      std::stringstream s;
      s << in.rdbuf();
      text = s.str();
      length = static_cast<int>(text.size());
    } else {
      length = -1;
    }
  }
  MPI_Bcast(&length, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (length < 0) {
    usage_error(
        fmt::format("cannot open {}: give the path of an HPL.dat (see skt-hpl --help)", o.hpldat));
  }
  text.resize(static_cast<std::size_t>(length));
  MPI_Bcast(text.data(), length, MPI_CHAR, 0, MPI_COMM_WORLD);
  HplDat dat;
  try {
    dat = parse_hpldat(text, o.hpldat);
  } catch (const HplDatError& e) {
    usage_error(e.what());
  }
  if (o.suggest) {
    if (rank == 0) {
      std::optional<NodeMemory> node;
      try {
        node = o.mem_per_node.empty() ? this_node_memory() : given_node_memory(o.mem_per_node);
      } catch (const std::invalid_argument& e) {
        usage_error(e.what());
      }
      if (!node)
        usage_error(
            "--suggest-n: /proc/meminfo does not say this machine's memory; give --mem-per-node");
      print_suggestions(dat, *node, o.ranks_per_node, group_settings_from_environment());
    }
    return 0;
  }
  const std::vector<Test> tests = tests_of(dat);
  Report report(dat, rank == 0);
  // Rank 0 alone opens it: every rank ends alike, with exit 2, before any segment is made.
  const std::string unopened = broadcast_string(MPI_COMM_WORLD, report.open_error());
  if (!unopened.empty()) usage_error(unopened);
  report.banner_and_parameters(dat);
  if (rank == 0) {
    for (const auto& substitution : dat.substitutions)
      fmt::print(stderr, "skt-hpl: warning: {}\n", substitution);
  }
  warn_of_slow_kernels(rank, size);
  warn_of_oversubscribed_threads(rank, size);
  const std::vector<bool> skipped = skipped_tests(tests, size, report);
  const int skipped_count = static_cast<int>(std::count(skipped.begin(), skipped.end(), true));

  // The run's progress: which tests are done, and what they printed, kept like the matrices.
  const std::string base = base_job_tag(MPI_COMM_WORLD);
  const char* restart_env = std::getenv("SKT_RESTART");
  const std::string restart = restart_env != nullptr ? restart_env : "";
  if (!o.from_job.empty() && (base.empty() || base == o.from_job)) {
    usage_error(
        fmt::format("--from-job {}: this run needs a tag of its own (SKT_JOB=<another "
                    "tag>), so that the job it continues stays as it is",
                    o.from_job));
  }
  job_tag_of_parts() = base;
  name_next_context(base, "+hpl");
  skt::Context progress(MPI_COMM_WORLD);
  auto records = progress.alloc<TestRecord>("tests", tests.size());
  auto record_fingerprint = [&](const Test& t) {
    return std::hash<std::string>{}(
        fmt::format("{} threshold {}", test_fingerprint(t, dat.column_major_map), dat.threshold));
  };
  auto record_problem = [&](const Test& t) {
    return std::hash<std::string>{}(
        fmt::format("{} threshold {}", problem_fingerprint(t), dat.threshold));
  };
  // Committed at once on a first launch, so that a relaunch finds it even when no test finished.
  const bool relaunched = progress.recover() != 0;
  if (!relaunched) {
    if (!o.from_job.empty()) {
      const std::string refusal =
          adopt_finished_tests(o.from_job, tests, records.data(), record_problem);
      if (!refusal.empty()) {
        progress.finalize(true);  // this job holds nothing yet; the old one stays for a retry
        usage_error(refusal);
      }
      for (std::size_t i = 0; i < tests.size(); ++i)
        records[i].fingerprint = record_fingerprint(tests[i]);
    }
    progress.checkpoint();
  } else {
    // A file edited between launches, its list of tests as long as before, would have the finished
    // tests reprinted under other parameters and the rest run: every rank holds the same records.
    // A test not finished is free to change: the interrupted one refuses a checkpoint of other
    // parameters itself, and one refused before it started (a machine too small for its N) is run
    // as the file now says.
    for (std::size_t i = 0; i < tests.size(); ++i) {
      if (records[i].done != 0 && records[i].fingerprint != record_fingerprint(tests[i])) {
        usage_error(fmt::format(
            "test {} of HPL.dat (N={} NB={} P={} Q={}) is not what this job was first launched "
            "with (its parameters, PMAP or threshold changed); relaunch with the same HPL.dat, or "
            "remove the job's segments to start afresh (skt-shm clean --job {})",
            i + 1, tests[i].n, tests[i].nb, tests[i].p, tests[i].q, base));
      }
    }
    // The testing faults act on a first launch only: a relaunch goes through every test.
    unsetenv("SKT_HPL_CRASH");
    unsetenv("SKT_HPL_PAUSE");
  }
  Tally tally;
  tally.skipped = skipped_count;
  std::size_t resume = 0;
  while (resume < tests.size() && (skipped[resume] || records[resume].done != 0)) {
    if (!skipped[resume]) {
      report.raw(records[resume].text);
      tally.add(records[resume].verdict);
    }
    ++resume;
  }
  for (std::size_t i = resume; i < tests.size(); ++i) {
    if (skipped[i]) continue;
    const Test& t = tests[i];
    // Only the test that was running can have checkpoints; later ones are first launches.
    name_next_context(base, fmt::format("+t{}", i));
    if (i > resume && !restart.empty()) setenv("SKT_RESTART", "0", 1);
    std::string printed;
    std::int32_t verdict = kFailed;
    {
      Grid grid(MPI_COMM_WORLD, t.p, t.q, dat.column_major_map);
      if (grid.in()) {
        RunOptions run;
        run.policy = o.policy;
        run.column_major_map = dat.column_major_map;
        run.threshold = dat.threshold;
        run.report = &report;
        run.timing = o.timing;
        run.progress_every = o.progress;
        run.resuming = relaunched && i == resume;
        // Only the test the old job was running can have epochs there.
        if (!o.from_job.empty() && i == resume) run.from_job = o.from_job + fmt::format("+t{}", i);
        const TestResult r = run_test(t, grid, run);
        // As netlib, a test it could not get the memory for counts among the skipped ones.
        verdict = r.passed ? kPassed : r.singular || r.out_of_memory ? kSkipped : kFailed;
        printed = r.text;
      }
    }
    MPI_Bcast(&verdict, 1, MPI_INT32_T, 0, MPI_COMM_WORLD);
    tally.add(verdict);
    if (rank == 0) {
      std::strncpy(records[i].text, printed.c_str(), kRecordText - 1);
    }
    MPI_Bcast(records[i].text, static_cast<int>(kRecordText), MPI_CHAR, 0, MPI_COMM_WORLD);
    records[i].fingerprint = record_fingerprint(t);
    records[i].problem = record_problem(t);
    records[i].done = 1;
    records[i].verdict = verdict;
    progress.checkpoint();
  }
  report.summary(static_cast<int>(tests.size()), tally.passed, tally.failed, tally.skipped);
  progress.finalize(true);
  return tally.failed > 0 ? 4 : 0;
}

}  // namespace
}  // namespace skt::hpl

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int code = 0;
  try {
    code = skt::hpl::run(argc, argv);
  } catch (const skt::hpl::UsageError& e) {
    // Raised alike on every rank (HPL.dat is the same text everywhere), or on rank 0 alone.
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) fmt::print(stderr, "skt-hpl: {}\n", e.message);
    code = 2;
  } catch (const skt::Error& e) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    fmt::print(stderr, "skt-hpl rank {}: {}\n", rank, e.what());
    const std::string& job = skt::hpl::job_tag_of_parts();
    if (rank == 0 && e.code() == SKT_ERR_UNRECOVERABLE && !job.empty()) {
      // The library names the part whose context failed; starting afresh needs every part gone.
      fmt::print(stderr,
                 "skt-hpl: job {} keeps its tests' progress and matrices as {}+hpl and {}+t<i>: "
                 "skt-shm clean --job {} removes them all\n",
                 job, job, job, job);
    }
    std::fflush(stderr);
    // Collective errors stop every rank with this code; a local one ends the job through mpirun.
    std::exit(e.exit_code());
  } catch (const std::bad_alloc&) {
    // What this machine cannot hold, a relaunch cannot either: a resource refusal (exit 2), which
    // skt-run does not retry, rather than a crash it would relaunch again and again.
    fmt::print(stderr,
               "skt-hpl: out of memory for the test's work buffers (N, NB and the grid decide "
               "their size): run it with a smaller N or NB, or on more ranks\n");
    std::fflush(stderr);
    std::exit(2);
  } catch (const std::exception& e) {
    fmt::print(stderr, "skt-hpl: {}\n", e.what());
    std::fflush(stderr);
    std::exit(1);
  }
  MPI_Finalize();
  return code;
}
