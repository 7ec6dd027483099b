// bench-checkpoint: what a checkpoint and a recovery cost through the library, by mode, scheme and
// group size, next to a memcpy of the workspace by the same ranks in the same run; the shared
// memory per rank next to the formulas of the three modes; and the time a recovery spends verifying
// memory against the block CRCs. (What the CRCs cost a checkpoint is measured by bench-encode,
// encoding with and without them: they are taken in the encoding's pass.)
//
//   mpirun -n 16 bench-checkpoint --mib 32
//
// Each rank is its own node (SKT_NODE). A full checkpoint writes the whole workspace; an
// incremental one declares a slice of it (the same place on every rank, as in LU) as changed. A
// recovery follows the loss of one node: the workspace was changed after the checkpoint, so every
// survivor rolls back and the lost rank is rebuilt by its group. These run with SKT_FIND_CHANGES=0,
// so that a checkpoint without declared ranges is a full one.
//
// A second table measures checkpoints that find what changed by themselves (skt_checkpoint, self
// mode, xor and rs): a workspace of which a third (a "mesh") is written once and the rest (a
// "field") changes between checkpoints, checkpointed in full, by finding the changes, and by
// finding them with the mesh marked static (skt_mark_static); time, bytes sent to the group and
// the time spent comparing, side by side.
#include <fmt/format.h>
#include <mpi.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "bench/mpi_timing.hpp"
#include "bench/table.hpp"
#include "libselfckpt/internal/segment.hpp"
#include "selfckpt/selfckpt.hpp"

namespace {

struct Variant {
  std::string mode;
  std::string scheme;
  int parity;
};

std::vector<std::string> split(const std::string& text, char separator = ',') {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, separator))
    out.push_back(item);
  return out;
}

// Every group size of `groups` that the job can form, with every variant that fits in it.
std::vector<std::pair<int, Variant>> configurations(const std::string& groups,
                                                    const std::string& variants, int size) {
  std::vector<std::pair<int, Variant>> out;
  for (const auto& g_text : split(groups)) {
    const int g = std::stoi(g_text);
    if (g < 2 || g > size) continue;
    for (const auto& v_text : split(variants)) {
      const auto parts = split(v_text, ':');
      const Variant v{parts.at(0), parts.at(1), std::stoi(parts.at(2))};
      if (v.parity < g) out.emplace_back(g, v);
    }
  }
  return out;
}

void remove_job(const std::string& job, int rank) {
  for (const auto& s : skt::list_own_segments()) {
    if (s.header.identity.job == job && s.header.identity.rank == rank) {
      if (auto seg = skt::Segment::attach(s.shmid, true)) seg->remove();
    }
  }
}

double usable_fraction(const std::string& mode, int g, int m) {
  const double k = g - m;
  if (mode == "self") return k / (2.0 * g);
  if (mode == "double") return k / (3.0 * g - m);
  return k / (2.0 * g - m);
}

// How this machine backs shared memory: what the recovery's first touches cost depends on it.
std::string page_setting() {
  std::ifstream file("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
  std::string line;
  std::getline(file, line);
  const auto open = line.find('['), close = line.find(']');
  const std::string thp = open != std::string::npos && close != std::string::npos
                              ? line.substr(open + 1, close - open - 1)
                              : "unknown";
  const char* huge = std::getenv("SKT_HUGE_PAGES");
  return fmt::format("transparent huge pages for shared memory: {}{}", thp,
                     huge != nullptr ? fmt::format(", SKT_HUGE_PAGES={}", huge) : "");
}

double slowest(double seconds) {
  MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return seconds;
}

// The slowest rank's time to make `bytes` of new shared memory ready for writing at full speed,
// every rank at once, the fastest of: writing each page, or mapping them all
// (MADV_POPULATE_WRITE) and then writing each (which some virtual machines charge apart); with
// huge pages wherever the kernel gives them to shared memory (MADV_HUGEPAGE).
double fastest_population(std::size_t bytes) {
  double best = 1e30;
  for (const bool map_first : {false, true}) {
    const int id = shmget(IPC_PRIVATE, bytes, IPC_CREAT | 0600);
    if (id < 0) return 0;
    auto* p = static_cast<volatile std::byte*>(shmat(id, nullptr, 0));
    shmctl(id, IPC_RMID, nullptr);
    MPI_Barrier(MPI_COMM_WORLD);
    const double start = MPI_Wtime();
    madvise(const_cast<std::byte*>(p), bytes, MADV_HUGEPAGE);
    if (map_first) madvise(const_cast<std::byte*>(p), bytes, MADV_POPULATE_WRITE);
    for (std::size_t at = 0; at < bytes; at += 4096)
      p[at] = std::byte{1};
    best = std::min(best, slowest(MPI_Wtime() - start));
    shmdt(const_cast<std::byte*>(p));
  }
  return best;
}

std::string shared_job_tag(const std::string& prefix) {
  std::array<char, 64> tag{};
  const auto t = fmt::format("{}-{}", prefix, getpid());
  std::memcpy(tag.data(), t.data(), std::min(t.size(), tag.size() - 1));
  MPI_Bcast(tag.data(), static_cast<int>(tag.size()), MPI_CHAR, 0, MPI_COMM_WORLD);
  return tag.data();
}

// How one way of checkpointing the mesh-and-field workload did: the best of `repeats`
// checkpoints after the first (slowest rank), and rank 0's bytes sent and time comparing.
struct ChangesResult {
  double seconds = 1e30;
  double sent_mib = 0;
  double scan_seconds = 0;
};

ChangesResult checkpoint_changes(const std::string& job, std::size_t doubles, int repeats,
                                 double changing_percent, bool find, bool mark_static, int rank) {
  setenv("SKT_JOB", job.c_str(), 1);
  setenv("SKT_FIND_CHANGES", find ? "1" : "0", 1);
  ChangesResult result;
  {
    skt::Context ctx(MPI_COMM_WORLD);
    auto mesh = ctx.alloc<double>("mesh", doubles / 3);
    auto field = ctx.alloc<double>("field", doubles - doubles / 3);
    ctx.recover();
    for (std::size_t i = 0; i < mesh.size(); ++i)
      mesh[i] = static_cast<double>(i % 977) + rank;
    for (std::size_t i = 0; i < field.size(); ++i)
      field[i] = static_cast<double>(i % 1000);
    if (mark_static) ctx.mark_static(mesh.data());
    ctx.checkpoint();
    const auto changing = static_cast<std::size_t>(field.size() * changing_percent / 100.0);
    for (int i = 0; i < repeats; ++i) {
      for (std::size_t j = 0; j < changing; ++j)
        field[j] += 1.0;
      ctx.checkpoint();
      const skt_stats s = ctx.stats();
      const double scan = slowest(s.last_scan_seconds);
      if (s.last_checkpoint_seconds < result.seconds) {  // the slowest rank's: the same everywhere
        result.seconds = s.last_checkpoint_seconds;
        result.sent_mib = static_cast<double>(s.last_sent_bytes) / (1 << 20);
        result.scan_seconds = scan;
      }
    }
    ctx.finalize(true);
  }
  unsetenv("SKT_FIND_CHANGES");
  return result;
}

int run(int rank, int size, int argc, char** argv) {
  CLI::App app{"bench-checkpoint: checkpoint and recovery through the library vs memcpy"};
  std::size_t mib = 32;
  std::string groups = "4,8,16";
  std::string variants_text = "self:xor:1,self:rs:2,self:sum:1,double:xor:1,single:xor:1";
  double dirty_percent = 10;
  int repeats = 3;
  std::string chunk = "256K";
  std::string csv = "checkpoint.csv";
  std::string changes_csv = "checkpoint-changes.csv";
  double changing_percent = 100;
  app.add_option("--mib", mib, "workspace per rank in MiB");
  app.add_option("--groups", groups, "group sizes, comma separated");
  app.add_option("--variants", variants_text, "mode:scheme:parity, comma separated");
  app.add_option("--dirty-percent", dirty_percent,
                 "share of the workspace an incremental checkpoint declares")
      ->check(CLI::Range(0.0, 100.0));
  app.add_option("--repeats", repeats, "timed repetitions (best kept)");
  app.add_option("--chunk", chunk, "SKT_CHUNK_SIZE");
  app.add_option("--csv", csv, "CSV output (rank 0)");
  app.add_option("--changes-csv", changes_csv, "CSV output of the second table (rank 0)");
  std::string tables = "checkpoint,changes";
  app.add_option("--tables", tables,
                 "which tables: checkpoint (modes, schemes, recovery), recovery (a recovery's "
                 "phases), changes (checkpoints that find what changed), comma separated");
  std::string recovery_csv = "recovery.csv";
  app.add_option("--recovery-csv", recovery_csv, "CSV output of the recovery table (rank 0)");
  std::string spares = "cold";
  app.add_option("--spares", spares,
                 "the spare nodes the lost ranks are relaunched on: cold (nothing there), warm "
                 "(memory reserved for them ahead, as skt-run does), or cold,warm");
  bool lose_all_tolerated = false;
  app.add_flag("--lose-tolerated", lose_all_tolerated,
               "lose as many nodes of a group as its code tolerates (m), not one");
  app.add_option("--changing-percent", changing_percent,
                 "share of the field (two thirds of the workspace) that changes between "
                 "checkpoints in the second table")
      ->check(CLI::Range(0.0, 100.0));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return rank == 0 ? app.exit(e) : 0;
  }
  setenv("SKT_NODE", fmt::format("b{}", rank).c_str(), 1);
  setenv("SKT_CHUNK_SIZE", chunk.c_str(), 1);
  setenv("SKT_LOG", "warn", 0);  // a default; the caller's SKT_LOG wins
  const std::size_t bytes = mib << 20;
  const std::size_t doubles = bytes / sizeof(double);
  const auto wanted = split(tables);
  auto wants = [&](const char* name) {
    return std::find(wanted.begin(), wanted.end(), name) != wanted.end();
  };
  for (const auto& name : wanted) {
    if (name != "checkpoint" && name != "recovery" && name != "changes") {
      if (rank == 0) {
        fmt::print(stderr,
                   "bench-checkpoint: --tables: unknown table '{}' (checkpoint, recovery, "
                   "changes)\n",
                   name);
      }
      return 2;
    }
  }
  std::unique_ptr<skt::bench::Table> table;

  if (wants("checkpoint") || wants("recovery")) {
    setenv("SKT_FIND_CHANGES", "0", 1);
    // Its buffers are freed before the library's segments are made, which need the memory.
    const double memcpy_time = [&] {
      std::vector<double> scratch(doubles, 1.0), target(doubles);
      return skt::bench::slowest(MPI_COMM_WORLD, repeats,
                                 [&] { std::memcpy(target.data(), scratch.data(), bytes); });
    }();
    std::unique_ptr<skt::bench::Table> recovery_table;
    if (rank == 0) {
      fmt::print(
          "{} ranks, {} MiB workspace per rank; memcpy of it by every rank at once: {:.4f} s; "
          "shared memory: {}\n",
          size, mib, memcpy_time, page_setting());
      if (wants("checkpoint")) {
        table = std::make_unique<skt::bench::Table>(
            std::vector<std::string>{"mode", "scheme", "m", "G", "ckpt_s", "ckpt/memcpy", "incr_s",
                                     "incr/full", "recover_s", "recover/ckpt", "verify_s",
                                     "verify/ckpt", "relaunch_s", "mem_usable", "formula"},
            csv);
      }
    }

    std::vector<std::pair<std::pair<int, Variant>, bool>> runs;
    for (const auto& configuration : configurations(groups, variants_text, size)) {
      for (const auto& kind : split(spares))
        runs.push_back({configuration, kind == "warm"});
    }
    for (const auto& [configuration, warm] : runs) {
      const auto& [g, v] = configuration;
      setenv("SKT_MODE", v.mode.c_str(), 1);
      setenv("SKT_SCHEME", v.scheme.c_str(), 1);
      setenv("SKT_PARITY", std::to_string(v.parity).c_str(), 1);
      setenv("SKT_GROUP_SIZE", std::to_string(g).c_str(), 1);
      const std::string job =
          shared_job_tag(fmt::format("bench-{}-{}-{}-{}", v.mode, v.scheme, v.parity, g));
      setenv("SKT_JOB", job.c_str(), 1);
      // The ranks whose nodes are lost: rank 1, and as many more of its group as the code
      // tolerates when asked (every (size/g)-th rank is in its group: groups are dealt round
      // robin over distinct nodes).
      const int losses = lose_all_tolerated ? std::max(1, v.parity) : 1;
      std::vector<int> lost;
      for (int i = 0; i < losses; ++i)
        lost.push_back(1 + i * (size / g));

      double full = 1e30, incremental = 1e30, recover = 0, relaunch = 0, usable = 0, verify = 0;
      double start_seconds = 0, populate_seconds = 0;
      skt_recovery slowest_phases{};
      int slowest_rank = 0;
      {
        // The start: from skt_init to the end of skt_recover, where a first launch has every
        // segment in place; against making the same bytes of shared memory ready the fastest way
        // this machine has.
        // Just before, of the bytes the mode's formula gives, so that both find the machine's
        // free memory alike (a virtual machine's host backs memory not used lately only at its
        // first touch).
        populate_seconds = fastest_population(static_cast<std::size_t>(
            static_cast<double>(bytes) / usable_fraction(v.mode, g, v.parity)));
        MPI_Barrier(MPI_COMM_WORLD);
        const double started = MPI_Wtime();
        skt::Context ctx(MPI_COMM_WORLD);
        auto data = ctx.alloc<double>("data", doubles);
        long step = 0;
        ctx.protect("step", step);
        ctx.recover();
        start_seconds = slowest(MPI_Wtime() - started);
        for (std::size_t i = 0; i < doubles; ++i)
          data[i] = static_cast<double>(i % 1000) + rank;
        for (int i = 0; i < repeats; ++i) {
          ctx.checkpoint();
          full = std::min(full, ctx.stats().last_checkpoint_seconds);
        }
        const auto slice = static_cast<std::size_t>(doubles * dirty_percent / 100.0);
        const std::size_t begin = std::min(doubles / 3, doubles - slice);
        const skt_range range{"data", begin * sizeof(double), slice * sizeof(double)};
        for (int i = 0; i < repeats; ++i) {
          for (std::size_t j = begin; j < begin + slice; ++j)
            data[j] += 1.0;
          ++step;
          ctx.checkpoint_dirty(&range, 1);
          incremental = std::min(incremental, ctx.stats().last_checkpoint_seconds);
        }
        const skt_stats s = ctx.stats();
        const double total = static_cast<double>(s.workspace_bytes + s.checkpoint_bytes) +
                             static_cast<double>(s.checksum_bytes) * (v.mode == "self"     ? 2
                                                                      : v.mode == "double" ? 2
                                                                                           : 1);
        usable = static_cast<double>(s.workspace_bytes) / total;
        for (std::size_t i = 0; i < doubles; ++i)
          data[i] = -1;  // work after the checkpoint
        ctx.finalize(false);
      }
      // The lost ranks' nodes go: their memory with them, and spares take their places.
      const bool i_am_lost = std::find(lost.begin(), lost.end(), rank) != lost.end();
      if (i_am_lost) {
        std::vector<std::size_t> sizes;
        for (const auto& s : skt::list_own_segments()) {
          if (s.header.identity.job == job && s.header.identity.rank == rank)
            sizes.push_back(s.header.data_bytes);
        }
        remove_job(job, rank);
        const std::string spare = fmt::format("spare{}", rank);
        setenv("SKT_NODE", spare.c_str(), 1);
        // A warm spare: what skt-run sets aside on its spare nodes ahead of a failure.
        if (warm) {
          for (const std::size_t bytes : sizes)
            skt::create_reserve(job, spare, bytes, false);
        }
      }
      {
        // The relaunch: attaching (or, on the spare, creating) the segments, then recovering.
        MPI_Barrier(MPI_COMM_WORLD);
        const double start = MPI_Wtime();
        skt::Context ctx(MPI_COMM_WORLD);
        ctx.alloc<double>("data", doubles);
        long step = 0;
        ctx.protect("step", step);
        ctx.recover();
        relaunch = slowest(MPI_Wtime() - start);
        recover = slowest(ctx.stats().last_recover_seconds);
        verify = slowest(ctx.stats().last_verify_seconds);
        const skt_recovery mine = ctx.recovery();
        std::vector<skt_recovery> all(static_cast<std::size_t>(size));
        MPI_Gather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, 0,
                   MPI_COMM_WORLD);
        for (int r = 0; r < size; ++r) {
          if (all[static_cast<std::size_t>(r)].seconds > slowest_phases.seconds) {
            slowest_phases = all[static_cast<std::size_t>(r)];
            slowest_rank = r;
          }
        }
        ctx.finalize(true);
      }
      setenv("SKT_NODE", fmt::format("b{}", rank).c_str(), 1);
      remove_job(job, rank);
      if (rank != 0) continue;
      const bool self = v.mode == "self";
      if (table && !warm) {  // the first table is of cold spares
        table->row({v.mode, v.scheme, std::to_string(v.parity), std::to_string(g),
                    skt::bench::num(full, 4), skt::bench::num(full / memcpy_time, 2),
                    skt::bench::num(incremental, 4),
                    self && v.scheme != "sum" ? skt::bench::num(incremental / full, 3) : "-",
                    skt::bench::num(recover, 4), skt::bench::num(recover / full, 2),
                    skt::bench::num(verify, 4), skt::bench::num(verify / full, 3),
                    skt::bench::num(relaunch, 4), skt::bench::num(usable, 4),
                    skt::bench::num(usable_fraction(v.mode, g, v.parity), 4)});
      }
      if (wants("recovery")) {
        if (!recovery_table) {
          if (table) fmt::print("\n");
          fmt::print(
              "Recovery after {} lost, by phase on the slowest rank (s; the phases of "
              "skt_get_recovery)\n",
              lose_all_tolerated ? "as many nodes as each code tolerates" : "one node");
          recovery_table = std::make_unique<skt::bench::Table>(
              std::vector<std::string>{"mode",           "scheme",  "m",         "G",
                                       "lost",           "spare",   "start_s",   "populate_s",
                                       "start/populate", "ckpt_s",  "recover_s", "recover/ckpt",
                                       "relaunch_s",     "slowest", "attach",    "join",
                                       "verify",         "fetch",   "decode",    "restore",
                                       "agree"},
              recovery_csv);
        }
        const skt_recovery& p = slowest_phases;
        const auto cell = [](double x) { return skt::bench::num(x, 4); };
        recovery_table->row(
            {v.mode,
             v.scheme,
             std::to_string(v.parity),
             std::to_string(g),
             std::to_string(lost.size()),
             warm ? "warm" : "cold",
             cell(start_seconds),
             cell(populate_seconds),
             skt::bench::num(start_seconds / populate_seconds, 2),
             cell(full),
             cell(recover),
             skt::bench::num(recover / full, 2),
             cell(relaunch),
             fmt::format("{}:{}", slowest_rank, p.lost != 0 ? "rebuilt" : "survivor"),
             cell(p.attach),
             cell(p.join),
             cell(p.verify),
             cell(p.fetch),
             cell(p.decode),
             cell(p.restore),
             cell(p.agree)});
      }
    }
    unsetenv("SKT_FIND_CHANGES");
  }

  if (wants("changes")) {
    if (rank == 0) {
      fmt::print(
          "\nCheckpoints that find what changed: a third of the workspace written once (mesh), "
          "{:.0f} %"
          " of the rest changed between checkpoints\n",
          changing_percent);
      table = std::make_unique<skt::bench::Table>(
          std::vector<std::string>{"scheme", "m", "G", "full_s", "found_s", "found/full",
                                   "static_s", "static/full", "full_sent_MiB", "found_sent_MiB",
                                   "static_sent_MiB", "found_scan_s", "static_scan_s"},
          changes_csv);
    }
    for (const auto& [g, v] : configurations(groups, variants_text, size)) {
      if (v.mode != "self" || v.scheme == "sum") continue;
      setenv("SKT_MODE", "self", 1);
      setenv("SKT_SCHEME", v.scheme.c_str(), 1);
      setenv("SKT_PARITY", std::to_string(v.parity).c_str(), 1);
      setenv("SKT_GROUP_SIZE", std::to_string(g).c_str(), 1);
      const std::string job = shared_job_tag(fmt::format("bench-changes-{}-{}", v.scheme, g));
      const auto full =
          checkpoint_changes(job, doubles, repeats, changing_percent, false, false, rank);
      const auto found =
          checkpoint_changes(job, doubles, repeats, changing_percent, true, false, rank);
      const auto fixed =
          checkpoint_changes(job, doubles, repeats, changing_percent, true, true, rank);
      if (rank == 0) {
        table->row(
            {v.scheme, std::to_string(v.parity), std::to_string(g),
             skt::bench::num(full.seconds, 4), skt::bench::num(found.seconds, 4),
             skt::bench::num(found.seconds / full.seconds, 3), skt::bench::num(fixed.seconds, 4),
             skt::bench::num(fixed.seconds / full.seconds, 3), skt::bench::num(full.sent_mib, 1),
             skt::bench::num(found.sent_mib, 1), skt::bench::num(fixed.sent_mib, 1),
             skt::bench::num(found.scan_seconds, 4), skt::bench::num(fixed.scan_seconds, 4)});
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int code = 0;
  try {
    code = run(rank, size, argc, argv);
  } catch (const std::exception& e) {
    // A configuration this machine cannot hold (the library refuses it on every rank alike):
    // said, and the run stops with the others, instead of std::terminate's abort.
    fmt::print(stderr, "bench-checkpoint: rank {}: {}\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return code;
}
