#include "libselfckpt/internal/call_order.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

namespace skt {

const char* call_name(CollectiveCall call) {
  switch (call) {
    case CollectiveCall::recover:
      return "skt_recover";
    case CollectiveCall::checkpoint:
      return "skt_checkpoint";
    case CollectiveCall::checkpoint_dirty:
      return "skt_checkpoint_dirty";
    case CollectiveCall::need_checkpoint:
      return "skt_need_checkpoint";
    case CollectiveCall::finalize:
      return "skt_finalize";
  }
  return nullptr;
}

std::string rank_ranges(std::span<const int> ranks) {
  std::vector<std::string> runs;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1)
      ++j;
    runs.push_back(j == i ? fmt::format("{}", ranks[i]) : fmt::format("{}-{}", ranks[i], ranks[j]));
    i = j + 1;
  }
  if (runs.size() <= 1) return runs.empty() ? std::string() : runs.front();
  std::string text;
  for (std::size_t k = 0; k + 1 < runs.size(); ++k)
    text += (k == 0 ? "" : ", ") + runs[k];
  return text + " and " + runs.back();
}

std::optional<std::string> calls_out_of_step(std::span<const std::int32_t> calls) {
  if (std::all_of(calls.begin(), calls.end(), [&](std::int32_t c) { return c == calls[0]; })) {
    return std::nullopt;
  }
  std::vector<std::string> names;
  for (const std::int32_t c : calls) {
    const char* name = call_name(static_cast<CollectiveCall>(c));
    names.push_back(name != nullptr ? name : fmt::format("an unknown call ({})", c));
  }
  return ranks_by_label(names);
}

std::string ranks_by_label(std::span<const std::string> labels) {
  std::vector<std::string> seen;  // each label once, in the order of its lowest rank
  for (const auto& label : labels) {
    if (std::find(seen.begin(), seen.end(), label) == seen.end()) seen.push_back(label);
  }
  std::vector<std::string> parts;
  for (const auto& label : seen) {
    std::vector<int> ranks;
    for (std::size_t r = 0; r < labels.size(); ++r) {
      if (labels[r] == label) ranks.push_back(static_cast<int>(r));
    }
    parts.push_back(
        fmt::format("{} on rank{} {}", label, ranks.size() == 1 ? "" : "s", rank_ranges(ranks)));
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

}  // namespace skt
