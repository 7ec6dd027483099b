// bench-drain: the storage level (SKT_DRAIN_DIR) against its peers, in one run.
//
//   mpirun -n 2 --bind-to core bench-drain --mib 256 --dir /var/tmp/skt-bench
//
// 1. Bandwidth: every rank writes a committed copy of --mib MiB as a drained file (the drain's own
//    writer: block CRCs, then a sync and a rename) and, alternating with it, the same bytes as a
//    plain sequential file (write, fdatasync, close) into the same directory, all ranks at once.
//    Per rank MB/s of each and their ratio, medians of --repeats.
// 2. Slowdown: a memory-bound stencil over --mib MiB of regions per rank (what heat3d does),
//    checkpointed every --steps-per-checkpoint sweeps, run alternately without drains and with a
//    drain of every --drain-every-th checkpoint in the background, of the copy alone (a shared
//    directory) and of the copy and its checksum (a directory per node, as node-local disks): time
//    of the run, of its sweeps and of its checkpoints (which include waiting for a drain still in
//    flight), and the ratio.
// 3. Recovery: a relaunch restoring from memory after a node loss, and from storage when every
//    node's memory is gone (drained with checksums: and the last node's disk too, its files rebuilt
//    from its group's), the same workspace at the same epoch, checked equal.

#include <fcntl.h>
#include <fmt/format.h>
#include <mpi.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <vector>

#include "bench/table.hpp"
#include "libselfckpt/internal/drain.hpp"
#include "libselfckpt/internal/segment.hpp"
#include "selfckpt/selfckpt.hpp"

namespace fs = std::filesystem;

namespace {

struct Options {
  std::size_t mib = 256;
  std::string dir = "/var/tmp/skt-bench-drain";
  int repeats = 5;
  int runs = 3;
  int checkpoints = 10;
  int steps_per_checkpoint = 40;
  int drain_every = 2;
  std::string csv;
  std::string slowdown_csv;
  std::string restore_csv;
};

// What a drain writes: the copy to a directory every rank sees, or the copy and its checksum to a
// directory per node.
enum class DrainWrite { none, copy, copy_and_checksum };
const char* write_name(DrainWrite w) {
  return w == DrainWrite::copy_and_checksum ? "copy+checksum" : "copy";
}

fs::path write_config(const Options& o, int rank, const std::string& job, int restart,
                      DrainWrite drain);
fs::path drain_root(const Options& o) {
  return fs::path(o.dir) / "drains";
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Time from a common start until every rank is done.
double slowest(MPI_Comm comm, const std::function<void()>& step) {
  MPI_Barrier(comm);
  const double start = MPI_Wtime();
  step();
  double elapsed = MPI_Wtime() - start;
  MPI_Allreduce(MPI_IN_PLACE, &elapsed, 1, MPI_DOUBLE, MPI_MAX, comm);
  return elapsed;
}

// As `dd bs=1M conv=fdatasync` writes: sequential pieces of the drain's block size, then a sync.
void plain_write(const fs::path& path, const std::byte* bytes, std::size_t n) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot create " + path.string());
  while (n > 0) {
    const ssize_t done = ::write(fd, bytes, std::min(n, skt::kDrainBlockBytes));
    if (done <= 0) throw std::runtime_error("cannot write " + path.string());
    bytes += done;
    n -= static_cast<std::size_t>(done);
  }
  if (::fdatasync(fd) != 0 || ::close(fd) != 0)
    throw std::runtime_error("cannot sync " + path.string());
}

void bandwidth(const Options& o, MPI_Comm comm, int rank, int size) {
  const std::size_t bytes = o.mib << 20;
  std::vector<std::byte> copy(bytes);
  for (std::size_t i = 0; i < bytes; ++i)
    copy[i] = static_cast<std::byte>((i * 2654435761u) >> 13);
  const fs::path root = fs::path(o.dir) / "bandwidth";
  skt::DrainFileHeader h;
  h.job = "bench";
  h.run = 1;
  h.rank = rank;
  h.nranks = size;
  h.copy_bytes = bytes;
  h.regions_bytes = bytes;
  std::vector<double> drained, plain;
  for (int k = 0; k < o.repeats; ++k) {
    h.epoch = static_cast<std::uint64_t>(k);
    const fs::path epoch_dir = skt::drain_epoch_dir(root, h.job, h.epoch);
    const fs::path file = root / fmt::format("plain-{}-{}", k, rank);
    if (rank == 0) fs::create_directories(root);
    MPI_Barrier(comm);
    // Alternating which goes first, so that neither always meets the other's writeback.
    for (int turn = 0; turn < 2; ++turn) {
      if ((turn + k) % 2 == 0) {
        drained.push_back(slowest(comm, [&] { skt::write_drain_file(epoch_dir, h, copy.data()); }));
      } else {
        plain.push_back(slowest(comm, [&] { plain_write(file, copy.data(), bytes); }));
      }
    }
    MPI_Barrier(comm);
    if (rank == 0) fs::remove_all(root);
    MPI_Barrier(comm);
  }
  if (rank != 0) return;
  const double mb = static_cast<double>(bytes) / 1e6;
  const double d = mb / median(drained), p = mb / median(plain);
  skt::bench::Table table({"ranks", "MiB/rank", "drain MB/s", "plain MB/s", "drain/plain"}, o.csv);
  table.row({std::to_string(size), std::to_string(o.mib), fmt::format("{:.0f}", d),
             fmt::format("{:.0f}", p), fmt::format("{:.3f}", d / p)});
}

struct Timings {
  double total = 0;
  double sweeps = 0;
  double checkpoints = 0;
};

// One run of the stencil through the library, draining as told.
Timings stencil_run(const Options& o, MPI_Comm comm, int rank, const std::string& job,
                    DrainWrite drain) {
  const fs::path config = write_config(o, rank, job, 0, drain);
  skt::Context ctx(comm, config.c_str());
  const std::size_t n = (o.mib << 20) / sizeof(double) / 2;
  double* a = ctx.alloc<double>("a", n).data();
  double* b = ctx.alloc<double>("b", n).data();
  ctx.recover();
  for (std::size_t i = 0; i < n; ++i)
    a[i] = b[i] = static_cast<double>(i % 1000) / 1000.0;
  Timings t;
  MPI_Barrier(comm);
  const double start = MPI_Wtime();
  for (int c = 0; c < o.checkpoints; ++c) {
    const double sweeping = MPI_Wtime();
    for (int s = 0; s < o.steps_per_checkpoint; ++s) {
      for (std::size_t i = 1; i + 1 < n; ++i)
        b[i] = 0.25 * a[i - 1] + 0.5 * a[i] + 0.25 * a[i + 1];
      std::swap(a, b);
    }
    const double checkpointing = MPI_Wtime();
    t.sweeps += checkpointing - sweeping;
    ctx.checkpoint();
    t.checkpoints += MPI_Wtime() - checkpointing;
  }
  t.total = MPI_Wtime() - start;
  ctx.finalize(true);
  fs::remove(config);
  double all[3] = {t.total, t.sweeps, t.checkpoints};
  MPI_Allreduce(MPI_IN_PLACE, all, 3, MPI_DOUBLE, MPI_MAX, comm);
  return {all[0], all[1], all[2]};
}

void slowdown(const Options& o, MPI_Comm comm, int rank, int size) {
  std::vector<Timings> plain, drained, drained_checksum;
  for (int k = 0; k < o.runs; ++k) {
    plain.push_back(stencil_run(o, comm, rank, fmt::format("bench-plain-{}", k), DrainWrite::none));
    drained.push_back(
        stencil_run(o, comm, rank, fmt::format("bench-drain-{}", k), DrainWrite::copy));
    drained_checksum.push_back(stencil_run(o, comm, rank, fmt::format("bench-drainc-{}", k),
                                           DrainWrite::copy_and_checksum));
  }
  if (rank != 0) return;
  const auto med = [](const std::vector<Timings>& v, double Timings::*field) {
    std::vector<double> x;
    for (const auto& t : v)
      x.push_back(t.*field);
    return median(x);
  };
  skt::bench::Table table(
      {"drain write", "ranks", "MiB/rank", "ckpts", "drain every", "run plain s", "run drain s",
       "drain/plain", "sweeps plain", "sweeps drain", "ckpt plain s", "ckpt drain s"},
      o.slowdown_csv);
  const double p = med(plain, &Timings::total);
  for (const auto& [write, runs] : {std::pair{DrainWrite::copy, &drained},
                                    std::pair{DrainWrite::copy_and_checksum, &drained_checksum}}) {
    const double d = med(*runs, &Timings::total);
    table.row({write_name(write), std::to_string(size), std::to_string(o.mib),
               std::to_string(o.checkpoints), std::to_string(o.drain_every),
               fmt::format("{:.3f}", p), fmt::format("{:.3f}", d), fmt::format("{:.3f}", d / p),
               fmt::format("{:.3f}", med(plain, &Timings::sweeps)),
               fmt::format("{:.3f}", med(*runs, &Timings::sweeps)),
               fmt::format("{:.3f}", med(plain, &Timings::checkpoints)),
               fmt::format("{:.3f}", med(*runs, &Timings::checkpoints))});
  }
}

fs::path write_config(const Options& o, int rank, const std::string& job, int restart,
                      DrainWrite drain) {
  const fs::path config = fs::path(o.dir) / fmt::format("config-{}-{}.toml", job, rank);
  std::ofstream f(config);
  f << fmt::format("job = \"{}\"\nnode = \"bench-n{}\"\ngroup_size = 2\nrestart = {}\n", job, rank,
                   restart);
  if (drain == DrainWrite::copy) {
    f << fmt::format("drain_dir = \"{}\"\n", drain_root(o).string());
  } else if (drain == DrainWrite::copy_and_checksum) {
    f << fmt::format("drain_dir = \"{}\"\ndrain_write = \"copy+checksum\"\n",
                     (drain_root(o) / "{node}").string());
  }
  if (drain != DrainWrite::none) f << fmt::format("drain_every = \"{}\"\n", o.drain_every);
  return config;
}

void remove_own_segments(const std::string& job, int rank) {
  for (const auto kind : {skt::SegmentKind::workspace, skt::SegmentKind::checkpoint}) {
    const skt::SegmentIdentity id{static_cast<std::uint32_t>(geteuid()),
                                  job,
                                  fmt::format("bench-n{}", rank),
                                  rank,
                                  kind,
                                  skt::kind_name(kind)};
    if (auto found = skt::find_segment(id).segment) found->remove();
  }
}

// A relaunch's recovery: from memory after the last rank's node was lost (its group rebuilds
// it), and from storage with every node's memory gone (and the page cache dropped when this user
// may: then the files are read from the device); drained with checksums, the last node's disk is
// gone too, and its files are rebuilt from its group's. Both restore epoch 2 of the same workspace.
struct RestoreTimes {
  double memory = 0;
  double storage = 0;
  bool cold = false;
};

RestoreTimes restore_times(const Options& o, MPI_Comm comm, int rank, int size, DrainWrite drain) {
  const std::string job = fmt::format("bench-restore-{}", drain == DrainWrite::copy ? "b" : "bc");
  const std::size_t n = (o.mib << 20) / sizeof(double);
  double committed_sum = 0;
  {
    skt::Context ctx(comm, write_config(o, rank, job, 0, drain).c_str());
    double* a = ctx.alloc<double>("a", n).data();
    ctx.recover();
    for (int epoch = 1; epoch <= 2; ++epoch) {
      for (std::size_t i = 0; i < n; ++i)
        a[i] = static_cast<double>((i + static_cast<std::size_t>(epoch * rank)) % 977);
      ctx.checkpoint();
    }
    committed_sum = std::accumulate(a, a + n, 0.0);
    ctx.finalize(false);  // finishes the drain of epoch 2
  }
  const auto relaunch = [&](const char* level) {
    skt::Context ctx(comm, write_config(o, rank, job, 1, drain).c_str());
    double* a = ctx.alloc<double>("a", n).data();
    const std::uint64_t epoch = ctx.recover();
    double seconds = ctx.stats().last_recover_seconds;
    MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, comm);
    int exact = epoch == 2 && std::accumulate(a, a + n, 0.0) == committed_sum ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &exact, 1, MPI_INT, MPI_MIN, comm);
    if (!exact)
      throw std::runtime_error(fmt::format("the {} level restored something else", level));
    ctx.finalize(std::string(level) == "storage");
    return seconds;
  };
  RestoreTimes t;
  if (rank == size - 1) remove_own_segments(job, rank);
  MPI_Barrier(comm);
  t.memory = relaunch("memory");
  remove_own_segments(job, rank);
  if (drain == DrainWrite::copy_and_checksum && rank == size - 1)
    fs::remove_all(drain_root(o) / fmt::format("bench-n{}", rank));
  MPI_Barrier(comm);
  int cold = 0;
  if (rank == 0) {
    ::sync();
    std::ofstream drop("/proc/sys/vm/drop_caches");
    cold = (drop << "1" << std::flush) ? 1 : 0;
  }
  MPI_Bcast(&cold, 1, MPI_INT, 0, comm);
  t.cold = cold != 0;
  t.storage = relaunch("storage");
  for (int r = 0; r < size; ++r)
    fs::remove(fs::path(o.dir) / fmt::format("config-{}-{}.toml", job, r));
  return t;
}

void restore_table(const Options& o, MPI_Comm comm, int rank, int size) {
  std::vector<std::pair<DrainWrite, RestoreTimes>> measured;
  for (const auto drain : {DrainWrite::copy, DrainWrite::copy_and_checksum})
    measured.emplace_back(drain, restore_times(o, comm, rank, size, drain));
  if (rank != 0) return;
  skt::bench::Table table({"drain write", "ranks", "MiB/rank", "memory s", "storage s",
                           "storage/memory", "lost from storage", "page cache"},
                          o.restore_csv);
  for (const auto& [drain, t] : measured) {
    table.row({write_name(drain), std::to_string(size), std::to_string(o.mib),
               fmt::format("{:.3f}", t.memory), fmt::format("{:.3f}", t.storage),
               fmt::format("{:.1f}", t.storage / t.memory),
               drain == DrainWrite::copy ? "nothing" : "the last node's files (rebuilt)",
               t.cold ? "dropped" : "warm (cannot drop)"});
  }
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Options o;
  CLI::App app{"bench-drain: drains to storage against a plain write, and what they slow down"};
  app.add_option("--mib", o.mib, "MiB per rank (the committed copy; the stencil's regions)");
  app.add_option("--dir", o.dir, "directory to drain and write into (created, then emptied)");
  app.add_option("--repeats", o.repeats, "alternating pairs of writes");
  app.add_option("--runs", o.runs, "alternating pairs of stencil runs");
  app.add_option("--checkpoints", o.checkpoints, "checkpoints per stencil run");
  app.add_option("--steps-per-checkpoint", o.steps_per_checkpoint, "sweeps between checkpoints");
  app.add_option("--drain-every", o.drain_every, "drain every k-th checkpoint");
  app.add_option("--csv", o.csv, "bandwidth table as CSV");
  app.add_option("--slowdown-csv", o.slowdown_csv, "slowdown table as CSV");
  app.add_option("--restore-csv", o.restore_csv, "restore table as CSV");
  int code = 0;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    code = app.exit(e);
    MPI_Finalize();
    return code;
  }
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  try {
    if (rank == 0) fs::create_directories(o.dir);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
      fmt::print("drained file vs plain file, {} MiB per rank, {} ranks, {}\n", o.mib, size, o.dir);
    bandwidth(o, MPI_COMM_WORLD, rank, size);
    if (rank == 0) fmt::print("stencil with and without drains\n");
    slowdown(o, MPI_COMM_WORLD, rank, size);
    if (rank == 0) fmt::print("recovery from memory (a node lost) and from storage (all lost)\n");
    restore_table(o, MPI_COMM_WORLD, rank, size);
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench-drain: {}\n", e.what());
    code = 1;
  }
  MPI_Finalize();
  return code;
}
