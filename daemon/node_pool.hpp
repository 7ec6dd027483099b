// The nodes skt-run found dead, and what became of them: lost (out of the job until it answers
// again, passes its check and has sat out its quarantine), back among the spares, or barred (lost
// again within the quarantine after it came back: a node that fails that often is not taken back).
// Pure functions of the records and the time, so that each rule is tested case by case.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace skt::run {

enum class Standing { lost, returned, barred };

struct NodeRecord {
  std::string node;
  Standing standing = Standing::lost;
  std::int64_t lost_at = 0;      // seconds since the epoch: the last time a probe found it dead
  int losses = 0;                // how many times it was found dead
  std::int64_t back_after = 0;   // lost: the end of its quarantine
  std::int64_t returned_at = 0;  // returned (or barred after it): when it went back to the spares

  bool operator==(const NodeRecord&) const = default;
};

// The records' clock: seconds since the epoch, now.
std::int64_t epoch_seconds();

// Records the nodes found dead at `now`: one that went back to the spares less than `quarantine`
// seconds before is barred; any other is lost (again) until now + quarantine.
void record_losses(std::vector<NodeRecord>& records, const std::set<std::string>& dead,
                   std::int64_t now, std::int64_t quarantine);

// The lost nodes whose quarantine is over at `now`, in the order they were recorded: what skt-run
// checks, and takes back among the spares if they pass.
std::vector<std::string> due_back(const std::vector<NodeRecord>& records, std::int64_t now);

// The node went back to the spares at `now`.
void mark_returned(std::vector<NodeRecord>& records, const std::string& node, std::int64_t now);

// The record of a node, if skt-run ever found it dead.
const NodeRecord* record_of(const std::vector<NodeRecord>& records, const std::string& node);

// One "node NAME STANDING LOST_AT LOSSES BACK_AFTER RETURNED_AT" line of the state file, and back;
// nothing when the text is not one.
std::string format_record(const NodeRecord& record);
std::optional<NodeRecord> parse_record(const std::string& text);

// Why a node is where it is, in words, at `now`: its ranks, a spare, a spare that came back, lost
// (and when it may come back), barred.
std::string standing_text(const std::vector<std::string>& ranklist,
                          const std::vector<std::string>& spares,
                          const std::vector<NodeRecord>& records, const std::string& node,
                          std::int64_t now);

// The jobs other than `job` (and its sub-jobs) with segments in an `skt-shm list` output, and
// their bytes: a node that comes back holding them has not the memory the job's ranks need.
std::map<std::string, std::uint64_t> other_jobs_segments(const std::string& job,
                                                         const std::string& listing);

}  // namespace skt::run
