#include "daemon/node_pool.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <sstream>

#include "daemon/state.hpp"
#include "libselfckpt/internal/names.hpp"

namespace skt::run {
namespace {

NodeRecord* find(std::vector<NodeRecord>& records, const std::string& node) {
  return const_cast<NodeRecord*>(record_of(records, node));
}

constexpr const char* kStandingNames[] = {"lost", "returned", "barred"};

std::string losses_text(int losses) {
  return fmt::format("{} loss{}", losses, losses == 1 ? "" : "es");
}

}  // namespace

std::int64_t epoch_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void record_losses(std::vector<NodeRecord>& records, const std::set<std::string>& dead,
                   std::int64_t now, std::int64_t quarantine) {
  for (const auto& node : dead) {
    NodeRecord* r = find(records, node);
    if (r == nullptr) {
      records.push_back(NodeRecord{node});
      r = &records.back();
    }
    if (r->standing == Standing::barred) continue;
    const bool back_too_soon =
        r->standing == Standing::returned && now - r->returned_at < quarantine;
    r->standing = back_too_soon ? Standing::barred : Standing::lost;
    r->lost_at = now;
    ++r->losses;
    r->back_after = back_too_soon ? 0 : now + quarantine;
  }
}

std::vector<std::string> due_back(const std::vector<NodeRecord>& records, std::int64_t now) {
  std::vector<std::string> due;
  for (const auto& r : records) {
    if (r.standing == Standing::lost && now >= r.back_after) due.push_back(r.node);
  }
  return due;
}

void mark_returned(std::vector<NodeRecord>& records, const std::string& node, std::int64_t now) {
  if (NodeRecord* r = find(records, node); r != nullptr && r->standing == Standing::lost) {
    r->standing = Standing::returned;
    r->returned_at = now;
  }
}

const NodeRecord* record_of(const std::vector<NodeRecord>& records, const std::string& node) {
  const auto it = std::find_if(records.begin(), records.end(),
                               [&](const NodeRecord& r) { return r.node == node; });
  return it == records.end() ? nullptr : &*it;
}

std::string format_record(const NodeRecord& r) {
  return fmt::format("{} {} {} {} {} {}", r.node, kStandingNames[static_cast<int>(r.standing)],
                     r.lost_at, r.losses, r.back_after, r.returned_at);
}

std::optional<NodeRecord> parse_record(const std::string& text) {
  std::istringstream in(text);
  NodeRecord r;
  std::string standing, rest;
  if (!(in >> r.node >> standing >> r.lost_at >> r.losses >> r.back_after >> r.returned_at) ||
      (in >> rest) || r.losses < 0) {
    return std::nullopt;
  }
  const auto* name = std::find(std::begin(kStandingNames), std::end(kStandingNames), standing);
  if (name == std::end(kStandingNames)) return std::nullopt;
  r.standing = static_cast<Standing>(name - std::begin(kStandingNames));
  return r;
}

std::string standing_text(const std::vector<std::string>& ranklist,
                          const std::vector<std::string>& spares,
                          const std::vector<NodeRecord>& records, const std::string& node,
                          std::int64_t now) {
  std::vector<std::size_t> ranks;
  for (std::size_t r = 0; r < ranklist.size(); ++r) {
    if (ranklist[r] == node) ranks.push_back(r);
  }
  const NodeRecord* record = record_of(records, node);
  const std::string history =
      record == nullptr ? std::string()
                        : fmt::format(", came back {} s ago after {}", now - record->returned_at,
                                      losses_text(record->losses));
  if (!ranks.empty()) {
    return fmt::format("rank{} {}{}", ranks.size() == 1 ? "" : "s", fmt::join(ranks, ","), history);
  }
  if (std::find(spares.begin(), spares.end(), node) != spares.end()) return "spare" + history;
  if (record == nullptr) return "not in the job";
  if (record->standing == Standing::barred) {
    return fmt::format("barred: lost again {} s after it came back, within the quarantine ({})",
                       record->lost_at - record->returned_at, losses_text(record->losses));
  }
  if (record->standing == Standing::lost) {
    return fmt::format(
        "lost {} s ago ({}); {}", now - record->lost_at, losses_text(record->losses),
        now >= record->back_after
            ? std::string("its quarantine is over: taken back once it answers and passes its "
                          "check (at the next probe while a run is up, or the next failure)")
            : fmt::format("its quarantine ends in {} s", record->back_after - now));
  }
  return "came back, no longer in the job";
}

std::map<std::string, std::uint64_t> other_jobs_segments(const std::string& job,
                                                         const std::string& listing) {
  std::map<std::string, std::uint64_t> out;
  std::istringstream lines(listing);
  for (std::string line; std::getline(lines, line);) {
    const auto words = split_words(line);
    std::uint64_t bytes = 0;
    if (words.size() < 8 || words[0].find_first_not_of("0123456789") != std::string::npos ||
        skt::job_covers(job, words[2]) ||
        std::from_chars(words[7].data(), words[7].data() + words[7].size(), bytes).ec !=
            std::errc()) {
      continue;
    }
    out[words[2]] += bytes;
  }
  return out;
}

}  // namespace skt::run
