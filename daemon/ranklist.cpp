#include "daemon/ranklist.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <sstream>

namespace skt::run {

bool valid_node_name(const std::string& name) {
  if (name.empty() || name.size() > 63) return false;
  if (!std::isalnum(static_cast<unsigned char>(name.front()))) return false;
  return std::all_of(name.begin(), name.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '.' || c == '_' || c == '-';
  });
}

std::vector<std::string> parse_node_list(const std::string& text, const std::string& what) {
  std::vector<std::string> names;
  std::stringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    line = line.substr(0, line.find('#'));
    std::replace(line.begin(), line.end(), ',', ' ');
    std::stringstream words(line);
    std::string word;
    while (words >> word) {
      if (word.rfind("slots=", 0) == 0 || word.rfind("max_slots=", 0) == 0) continue;
      if (!valid_node_name(word)) {
        throw std::invalid_argument(
            fmt::format("{}: '{}' is not a node name (letters, digits, "
                        "'.', '_', '-')",
                        what, word));
      }
      if (std::find(names.begin(), names.end(), word) != names.end()) {
        throw std::invalid_argument(fmt::format("{}: node '{}' is listed twice", what, word));
      }
      names.push_back(word);
    }
  }
  if (names.empty()) throw std::invalid_argument(what + ": no nodes");
  return names;
}

std::vector<std::string> initial_ranklist(const std::vector<std::string>& nodes,
                                          int ranks_per_node) {
  if (ranks_per_node < 1) throw std::invalid_argument("ranks per node must be at least 1");
  std::vector<std::string> out;
  for (const auto& node : nodes)
    out.insert(out.end(), static_cast<std::size_t>(ranks_per_node), node);
  return out;
}

Replacement replace_dead_nodes(const std::vector<std::string>& ranklist,
                               const std::set<std::string>& dead,
                               const std::vector<std::string>& spares) {
  Replacement r;
  r.ranklist = ranklist;
  std::vector<std::string> pool;
  for (const auto& s : spares) {
    if (dead.count(s) == 0) pool.push_back(s);
  }
  std::map<std::string, std::string> moved;
  std::size_t next = 0;
  for (auto& node : r.ranklist) {
    if (dead.count(node) == 0) continue;
    auto it = moved.find(node);
    if (it == moved.end()) {
      if (next == pool.size()) {
        std::vector<std::string> lost;
        for (const auto& n : nodes_of(ranklist)) {
          if (dead.count(n) != 0) lost.push_back(n);
        }
        throw OutOfSpares(fmt::format("{} node{} dead ({}) but {} live spare{} left", lost.size(),
                                      lost.size() == 1 ? "" : "s", fmt::join(lost, ", "),
                                      pool.size(), pool.size() == 1 ? "" : "s"));
      }
      it = moved.emplace(node, pool[next++]).first;
      r.replaced.emplace_back(node, it->second);
    }
    node = it->second;
  }
  r.spares_left.assign(pool.begin() + static_cast<std::ptrdiff_t>(next), pool.end());
  return r;
}

namespace {

std::string mib(std::uint64_t bytes) {
  return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20));
}

std::string no_room_for(std::size_t rank, const NodeRoom& room,
                        const std::vector<std::string>& live,
                        const std::map<std::string, std::uint64_t>& room_left) {
  std::vector<std::string> offers;
  for (const auto& node : live) {
    offers.push_back(room.free.count(node) == 0
                         ? fmt::format("{} did not say", node)
                         : fmt::format("{} {}", node, mib(room_left.at(node))));
  }
  return fmt::format(
      "no spare left, and no live node has the memory for rank {}'s segments ({}): what they can "
      "still give is {}",
      rank, mib(room.per_rank), fmt::join(offers, ", "));
}

}  // namespace

Replacement continue_on_survivors(const std::vector<std::string>& ranklist,
                                  const std::set<std::string>& dead,
                                  const std::vector<std::string>& spares,
                                  const std::vector<int>& group_of_rank,
                                  const std::optional<NodeRoom>& room) {
  std::vector<std::string> dead_nodes;
  for (const auto& node : nodes_of(ranklist)) {
    if (dead.count(node) != 0) dead_nodes.push_back(node);
  }
  const auto live_spares = static_cast<std::size_t>(std::count_if(
      spares.begin(), spares.end(), [&](const std::string& s) { return dead.count(s) == 0; }));
  const std::size_t replaced = std::min(live_spares, dead_nodes.size());
  const std::set<std::string> to_spares(dead_nodes.begin(),
                                        dead_nodes.begin() + static_cast<std::ptrdiff_t>(replaced));
  Replacement r = replace_dead_nodes(ranklist, to_spares, spares);
  const std::set<std::string> left(dead_nodes.begin() + static_cast<std::ptrdiff_t>(replaced),
                                   dead_nodes.end());
  std::vector<std::string> live;
  for (const auto& node : nodes_of(r.ranklist)) {
    if (left.count(node) == 0) live.push_back(node);
  }
  if (live.empty()) {
    throw OutOfSpares(fmt::format("every node of the job is dead ({}) and no live spare is left",
                                  fmt::join(dead_nodes, ", ")));
  }
  const auto group = [&](std::size_t rank) {
    return rank < group_of_rank.size() && group_of_rank[rank] >= 0 ? group_of_rank[rank]
                                                                   : -1 - static_cast<int>(rank);
  };
  std::map<std::string, std::multiset<int>> groups_on;  // the live nodes' ranks' groups
  for (std::size_t rank = 0; rank < r.ranklist.size(); ++rank) {
    if (left.count(r.ranklist[rank]) == 0) groups_on[r.ranklist[rank]].insert(group(rank));
  }
  if (room) {
    for (const auto& node : live) {
      const auto it = room->free.find(node);
      r.room_left[node] = it == room->free.end() ? 0 : it->second;
    }
  }
  for (std::size_t rank = 0; rank < r.ranklist.size(); ++rank) {
    if (left.count(r.ranklist[rank]) == 0) continue;
    std::vector<std::string> can_hold;
    std::copy_if(live.begin(), live.end(), std::back_inserter(can_hold),
                 [&](const auto& node) { return !room || r.room_left[node] >= room->per_rank; });
    if (can_hold.empty()) throw OutOfSpares(no_room_for(rank, *room, live, r.room_left));
    const auto cost = [&](const std::string& node) {
      const auto& here = groups_on[node];
      return std::pair{here.count(group(rank)) != 0, here.size()};
    };
    const std::string to = *std::min_element(
        can_hold.begin(), can_hold.end(),
        [&](const std::string& a, const std::string& b) { return cost(a) < cost(b); });
    r.ranklist[rank] = to;
    groups_on[to].insert(group(rank));
    if (room) r.room_left[to] -= room->per_rank;
    r.doubled_up.emplace_back(static_cast<int>(rank), to);
  }
  std::set<int> sharing;
  for (const auto& [node, groups] : groups_on) {
    for (const int g : groups) {
      if (g >= 0 && groups.count(g) > 1) sharing.insert(g);
    }
  }
  r.groups_sharing_a_node.assign(sharing.begin(), sharing.end());
  r.groups_known =
      std::all_of(group_of_rank.begin(), group_of_rank.end(), [](int g) { return g >= 0; }) &&
      group_of_rank.size() >= r.ranklist.size();
  return r;
}

std::vector<std::pair<std::string, int>> runs_of_ranks(const std::vector<std::string>& ranklist) {
  std::vector<std::pair<std::string, int>> runs;
  for (const auto& node : ranklist) {
    if (runs.empty() || runs.back().first != node) runs.emplace_back(node, 0);
    ++runs.back().second;
  }
  return runs;
}

int most_ranks_on_a_node(const std::vector<std::string>& ranklist) {
  std::map<std::string, int> count;
  int most = 0;
  for (const auto& node : ranklist)
    most = std::max(most, ++count[node]);
  return most;
}

Replacement place_after_losses(const std::vector<std::string>& ranklist,
                               const std::set<std::string>& dead,
                               const std::vector<std::string>& spares, bool continue_on_survivors,
                               const std::vector<int>& group_of_rank,
                               const std::optional<NodeRoom>& room) {
  return continue_on_survivors
             ? skt::run::continue_on_survivors(ranklist, dead, spares, group_of_rank, room)
             : replace_dead_nodes(ranklist, dead, spares);
}

Replacement resume_on_nodes(const std::vector<std::string>& ranklist,
                            const std::vector<std::string>& nodes) {
  const std::set<std::string> given(nodes.begin(), nodes.end());
  const std::set<std::string> used(ranklist.begin(), ranklist.end());
  std::set<std::string> gone;
  for (const auto& node : used) {
    if (given.count(node) == 0) gone.insert(node);
  }
  std::vector<std::string> unused;
  for (const auto& node : nodes) {
    if (used.count(node) == 0) unused.push_back(node);
  }
  if (gone.size() > unused.size()) {
    throw OutOfSpares(fmt::format(
        "{} node{} of the last launch ({}) {} not given now, and {} other node{} {}", gone.size(),
        gone.size() == 1 ? "" : "s", fmt::join(gone, ", "), gone.size() == 1 ? "is" : "are",
        unused.size(), unused.size() == 1 ? "" : "s", unused.size() == 1 ? "is" : "are"));
  }
  return replace_dead_nodes(ranklist, gone, unused);
}

std::optional<std::vector<std::string>> layout_of_segments(const std::vector<std::string>& seen,
                                                           int ranks_per_node) {
  if (std::all_of(seen.begin(), seen.end(), [](const auto& node) { return node.empty(); })) {
    return std::nullopt;
  }
  const auto block = static_cast<std::size_t>(std::max(ranks_per_node, 1));
  std::vector<std::string> layout(seen.size());
  for (std::size_t first = 0; first < seen.size(); first += block) {
    const std::size_t end = std::min(first + block, seen.size());
    const auto known = std::find_if(seen.begin() + first, seen.begin() + end,
                                    [](const auto& node) { return !node.empty(); });
    const std::string unseen =
        known != seen.begin() + end ? *known : fmt::format("(the node of rank {})", first);
    for (std::size_t r = first; r < end; ++r)
      layout[r] = seen[r].empty() ? unseen : seen[r];
  }
  return layout;
}

std::vector<std::string> nodes_of(const std::vector<std::string>& ranklist) {
  std::vector<std::string> out;
  for (const auto& n : ranklist) {
    if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  }
  return out;
}

std::string seq_host_list(const std::vector<std::string>& ranklist) {
  return fmt::format("{}", fmt::join(ranklist, ","));
}

}  // namespace skt::run
