// Every collective call of a context starts by comparing which call each rank made. MPI matches
// collectives by their order alone: ranks that disagree (one in skt_checkpoint, another in
// skt_finalize; skt_need_checkpoint called on some ranks only; a checkpoint decided by each rank's
// own clock) would pair unrelated operations, and a broadcast of one could be read as part of
// another's agreement: a hang at best, a checkpoint that is not one at worst. Compared first, they
// end as the same error on every rank, naming who called what.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace skt {

enum class CollectiveCall : std::int32_t {
  recover = 1,
  checkpoint,
  checkpoint_dirty,
  need_checkpoint,
  finalize,
};

// How ranks come to make different calls, and the way out: both the error and the warning of a
// long wait say it.
inline constexpr const char* kDecisionsOfTheirOwn =
    "a decision to checkpoint that each rank takes by itself, from its own clock or count, "
    "splits them (skt_need_checkpoint takes one for all)";

// The API function, as a program calls it: "skt_checkpoint", ...
const char* call_name(CollectiveCall call);

// Ranks in order as the text a person reads: "3", "0 and 2", "0, 2 and 5-7".
std::string rank_ranges(std::span<const int> ranks);

// Nothing when every rank made the same call (calls[r] is rank r's); otherwise which ranks made
// which, the calls in the order of their lowest rank: "skt_checkpoint on ranks 0 and 2-3,
// skt_finalize on rank 1". A value that names no call reads as "an unknown call (N)".
std::optional<std::string> calls_out_of_step(std::span<const std::int32_t> calls);

// The ranks grouped by their label (labels[r] is rank r's), the labels in the order of their
// lowest rank: "skt_checkpoint on ranks 0 and 2-3, none on rank 1".
std::string ranks_by_label(std::span<const std::string> labels);

}  // namespace skt
