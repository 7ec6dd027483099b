// skt-drain: the epochs that selfckpt drained to storage (SKT_DRAIN_DIR): list them, verify their
// files against their manifests (or, drained with checksums, against themselves) and block CRCs,
// remove them.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include "libselfckpt/internal/drain.hpp"
#include "libselfckpt/internal/names.hpp"
#include "selfckpt/selfckpt.hpp"

namespace fs = std::filesystem;

namespace {

struct Selection {
  std::string dir;
  std::string job;
  std::optional<std::uint64_t> epoch;
  // remove --exactly: these tags and no others, where --job takes its sub-jobs too.
  std::vector<std::string> exactly;
};

std::uint64_t bytes_under(const fs::path& dir) {
  std::uint64_t total = 0;
  std::error_code error;
  for (const auto& entry : fs::recursive_directory_iterator(dir, error)) {
    if (entry.is_regular_file(error)) total += entry.file_size(error);
  }
  return total;
}

// The jobs with drains in the directory: every one, or --job's and its sub-jobs' (TAG+<name>, the
// contexts a program derives from its tag).
std::vector<std::string> jobs_in(const Selection& s) {
  std::vector<std::string> jobs;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(s.dir, error)) {
    const std::string tag = entry.path().filename().string();
    if (entry.is_directory() && skt::valid_job_tag(tag) &&
        (s.job.empty() || skt::job_covers(s.job, tag))) {
      jobs.push_back(tag);
    }
  }
  std::sort(jobs.begin(), jobs.end());
  return jobs;
}

// The headers of the rank files an epoch directory holds here, by rank (nothing for a file whose
// header is damaged).
std::vector<std::pair<fs::path, std::optional<skt::DrainFileHeader>>> files_in(
    const fs::path& dir) {
  std::vector<std::pair<fs::path, std::optional<skt::DrainFileHeader>>> out;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    if (entry.path().extension() == ".skt")
      out.emplace_back(entry.path(), skt::read_drain_header(entry.path()));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

bool with_checksums(const fs::path& dir) {
  const auto files = files_in(dir);
  return std::any_of(files.begin(), files.end(),
                     [](const auto& f) { return f.second && f.second->with_checksum; });
}

int list(const Selection& s) {
  fmt::print("{:<24} {:>12} {:<14} {:>6} {:>14}\n", "job", "epoch", "state", "ranks", "bytes");
  for (const auto& job : jobs_in(s)) {
    const auto complete = skt::complete_epochs(s.dir, job);
    for (const auto& dir : skt::epoch_dirs(s.dir, job)) {
      const auto it = std::find_if(complete.begin(), complete.end(),
                                   [&](const skt::DrainedEpoch& d) { return d.dir == dir; });
      const std::size_t files = files_in(dir).size();
      const std::string epoch = dir.filename().string().substr(6);
      // Drained with checksums, an epoch is complete when its groups can rebuild what is missing,
      // which only the ranks together know at a restart: this lists the files seen here.
      const char* state = it != complete.end()  ? "complete"
                          : with_checksums(dir) ? "copy+checksum"
                                                : "incomplete";
      fmt::print(
          "{:<24} {:>12} {:<14} {:>6} {:>14}\n", job, std::stoull(epoch), state,
          it != complete.end() ? std::to_string(it->manifest.nranks()) : fmt::format("{} f", files),
          bytes_under(dir));
    }
  }
  return 0;
}

// Exit 0: every file of the epoch is whole; 1: some file is damaged or missing; 2: no complete
// epoch to verify.
// Drained with checksums: each file seen here checks itself (header, CRC table, blocks).
int verify_self_checked(const Selection& s, const fs::path& dir) {
  int damaged = 0;
  const auto files = files_in(dir);
  for (const auto& [path, header] : files) {
    try {
      if (!header) throw std::runtime_error(path.string() + " has no valid header (damaged)");
      const auto h = skt::read_rank_file(
          path, {s.job, header->run, header->epoch, header->rank, header->nranks, std::nullopt},
          {});
      fmt::print(
          "rank {:>5}: ok, {} bytes of copy and {} of checksum in {} blocks (group {} "
          "member {})\n",
          h.rank, h.copy_bytes, h.checksum_bytes, h.blocks(), h.group, h.member);
    } catch (const std::exception& e) {
      ++damaged;
      fmt::print("{}: DAMAGED: {}\n", path.filename().string(), e.what());
    }
  }
  fmt::print(
      "epoch {} of job '{}' (copy+checksum): {} of the {} files here whole; the group rebuilds "
      "a missing or damaged one at restart if it tolerates the loss\n",
      std::stoull(dir.filename().string().substr(6)), s.job,
      files.size() - static_cast<std::size_t>(damaged), files.size());
  return damaged == 0 ? 0 : 1;
}

int verify(const Selection& s) {
  const auto complete = skt::complete_epochs(s.dir, s.job);
  const auto it = std::find_if(complete.begin(), complete.end(), [&](const skt::DrainedEpoch& d) {
    return !s.epoch || d.manifest.epoch == *s.epoch;
  });
  if (it == complete.end()) {
    const auto dirs = skt::epoch_dirs(s.dir, s.job);
    for (auto d = dirs.rbegin(); d != dirs.rend(); ++d) {
      if ((!s.epoch || *d == skt::drain_epoch_dir(s.dir, s.job, *s.epoch)) && with_checksums(*d))
        return verify_self_checked(s, *d);
    }
    auto others = jobs_in(s);
    others.erase(std::remove(others.begin(), others.end(), s.job), others.end());
    fmt::print(stderr, "skt-drain: {} holds no complete drained epoch{} of job '{}'{}\n",
               skt::drain_job_dir(s.dir, s.job).string(),
               s.epoch ? fmt::format(" {}", *s.epoch) : std::string(), s.job,
               others.empty() ? std::string()
                              : fmt::format(" (its sub-job{} {} {} drains: give one to --job)",
                                            others.size() == 1 ? "" : "s", fmt::join(others, ", "),
                                            others.size() == 1 ? "has" : "have"));
    return 2;
  }
  int damaged = 0;
  for (int rank = 0; rank < it->manifest.nranks(); ++rank) {
    try {
      const auto header = skt::read_drain_file(*it, rank, {});
      fmt::print("rank {:>5}: ok, {} bytes in {} blocks (group {} member {})\n", rank,
                 header.copy_bytes, header.blocks(), header.group, header.member);
    } catch (const std::exception& e) {
      ++damaged;
      fmt::print("rank {:>5}: DAMAGED: {}\n", rank, e.what());
    }
  }
  fmt::print("epoch {} of job '{}': {} of {} files whole\n", it->manifest.epoch, s.job,
             it->manifest.nranks() - damaged, it->manifest.nranks());
  return damaged == 0 ? 0 : 1;
}

int remove(const Selection& s) {
  std::error_code error;
  if (s.epoch) {
    const fs::path dir = skt::drain_epoch_dir(s.dir, s.job, *s.epoch);
    if (!fs::exists(dir)) {
      fmt::print(stderr, "skt-drain: no drained epoch {} of job '{}' in {}\n", *s.epoch, s.job,
                 s.dir);
      return 1;
    }
    const auto removed = fs::remove_all(dir, error);
    fmt::print("removed epoch {} of job '{}' ({} files)\n", *s.epoch, s.job, removed);
    return error ? 1 : 0;
  }
  auto jobs = s.exactly.empty() ? jobs_in(s) : s.exactly;
  if (jobs.empty()) jobs.push_back(s.job);
  int code = 0;
  for (const auto& job : jobs) {
    const fs::path dir = skt::drain_job_dir(s.dir, job);
    const auto removed = fs::remove_all(dir, error);
    if (error) {
      fmt::print(stderr, "skt-drain: cannot remove {}: {}\n", dir.string(), error.message());
      code = 1;
      continue;
    }
    fmt::print("removed the drained epochs of job '{}' ({} files and directories)\n", job, removed);
  }
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "skt-drain: the checkpoints selfckpt drained to storage (SKT_DRAIN_DIR), one directory per "
      "job and epoch. Drained as a copy alone, an epoch is complete once its manifest is written, "
      "as soon as every rank's file is; drained with checksums (node-local disks), once its groups "
      "hold enough whole files to rebuild the others, which the ranks decide at restart. A "
      "relaunch restores the newest complete one when memory cannot serve. A {node} in the "
      "directory stands for --node."};
  app.require_subcommand(1);
  Selection s;
  if (const char* env = std::getenv("SKT_DRAIN_DIR")) s.dir = env;
  std::string node;
  if (const char* env = std::getenv("SKT_NODE")) node = env;
  if (node.empty()) node = skt::default_node_name();
  const auto common = [&](CLI::App* command, bool job_required) {
    command->add_option("--dir", s.dir, "the drain directory (default: $SKT_DRAIN_DIR)");
    command->add_option("--node", node,
                        "the node a {node} in the directory stands for (default: $SKT_NODE, "
                        "Slurm's node name, or this host's name)");
    auto* job = command->add_option(
        "--job", s.job,
        "job tag (SKT_JOB); list and remove take its sub-jobs too (TAG+NAME: the contexts a "
        "program derives from its tag, as skt-hpl's TAG+hpl and TAG+t0)");
    if (job_required) job->required();
  };
  auto* list_cmd = app.add_subcommand("list", "drained epochs, complete or not, per job");
  common(list_cmd, false);
  auto* verify_cmd = app.add_subcommand(
      "verify",
      "read every rank's file of the newest complete epoch (or --epoch) and check it against the "
      "manifest and its block CRCs; for an epoch drained with checksums, every file here against "
      "its own CRCs. Exit status 0: whole; 1: a file is damaged or missing; 2: no epoch to "
      "verify");
  common(verify_cmd, true);
  verify_cmd->add_option("--epoch", s.epoch, "this epoch instead of the newest complete one");
  auto* remove_cmd = app.add_subcommand(
      "remove", "remove a job's drained epochs, its sub-jobs' too (or one epoch)");
  common(remove_cmd, true);
  remove_cmd->add_option("--epoch", s.epoch, "only this epoch");
  remove_cmd
      ->add_option("--exactly", s.exactly,
                   "only these job tags (comma separated; --job's and these), none of their "
                   "sub-jobs unnamed: skt-run names the sub-jobs its own ranks reported, so that "
                   "another job whose tag happens to begin with TAG+ is left alone")
      ->delimiter(',');
  CLI11_PARSE(app, argc, argv);
  if (s.dir.empty()) {
    fmt::print(stderr, "skt-drain: no drain directory: give --dir or set SKT_DRAIN_DIR\n");
    return 2;
  }
  s.dir = skt::expand_node(s.dir, node);
  if (!s.job.empty() && !skt::valid_job_tag(s.job)) {
    fmt::print(stderr, "skt-drain: '{}' is not a job tag\n", s.job);
    return 2;
  }
  for (const auto& tag : s.exactly) {
    if (!skt::valid_job_tag(tag) || !skt::job_covers(s.job, tag)) {
      fmt::print(stderr, "skt-drain: --exactly '{}' is not job '{}' or one of its sub-jobs\n", tag,
                 s.job);
      return 2;
    }
  }
  if (!s.exactly.empty() &&
      std::find(s.exactly.begin(), s.exactly.end(), s.job) == s.exactly.end()) {
    s.exactly.push_back(s.job);
  }
  try {
    if (list_cmd->parsed()) return list(s);
    if (verify_cmd->parsed()) return verify(s);
    return remove(s);
  } catch (const skt::Error& e) {
    fmt::print(stderr, "skt-drain: {}\n", e.what());
    return 2;
  }
}
