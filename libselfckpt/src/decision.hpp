// Which epoch a relaunched job restores, and from what: a pure function of what every rank found,
// so that every rank reaches the same answer from the same allgathered facts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "libselfckpt/src/format.hpp"
#include "libselfckpt/src/planner.hpp"

namespace skt {

struct RankFinding {
  bool valid = false;  // the rank's segments survived and are consistent
  ControlState state;
};

enum class RecoverySource {
  fresh,      // nothing was ever committed: start from scratch
  committed,  // rebuild from B and C, then roll W and D back to them
  workspace,  // rebuild from W and D, then finish the flush into B and C
  redo,       // single mode: nobody lost memory during an update, so every rank finishes it from W
  unrecoverable,
};

struct RecoveryDecision {
  RecoverySource source = RecoverySource::fresh;
  std::int64_t epoch = 0;
  std::vector<int> rebuild;  // ranks whose data must be rebuilt by their group, ascending
  std::string reason;        // for unrecoverable: which group lost what
};

// `plan` assigns every rank; `nodes` names each rank's node for messages; `tolerance` is the
// number of lost members per group the scheme survives.
RecoveryDecision decide_recovery(const std::vector<RankFinding>& findings, const GroupPlan& plan,
                                 int tolerance, const std::vector<std::string>& nodes);

// The same for the baselines that keep `copies` (1: single, 2: double) full checkpoints, each with
// its checksum, and update them in place: epoch e lives in copy e mod `copies`.
RecoveryDecision decide_recovery_copies(const std::vector<RankFinding>& findings,
                                        const GroupPlan& plan, int tolerance,
                                        const std::vector<std::string>& nodes, int copies);

}  // namespace skt
