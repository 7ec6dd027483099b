#include "libselfckpt/src/decision.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "libselfckpt/internal/layout.hpp"
#include "selfckpt/selfckpt.hpp"

namespace skt {

std::vector<int> stale_ranks(std::span<const Finding> findings) {
  std::uint64_t newest = 0;
  for (const auto& f : findings) {
    if (f.valid != 0) newest = std::max(newest, f.lineage);
  }
  std::vector<int> stale;
  for (std::size_t r = 0; r < findings.size(); ++r) {
    if (findings[r].valid != 0 && findings[r].lineage != newest) {
      stale.push_back(static_cast<int>(r));
    }
  }
  return stale;
}

std::vector<Misplaced> needed_elsewhere(std::span<const Finding> findings,
                                        std::span<const Misplaced> misplaced) {
  if (completed_epoch(findings)) return {};
  std::uint64_t newest = 0;
  for (const auto& f : findings) {
    if (f.valid != 0) newest = std::max(newest, f.lineage);
  }
  for (const auto& m : misplaced) {
    if (m.newest > 0) newest = std::max(newest, m.lineage);
  }
  std::vector<Misplaced> needed;
  for (const auto& m : misplaced) {
    const auto rank = static_cast<std::size_t>(m.rank);
    if (m.newest > 0 && m.lineage == newest && rank < findings.size() &&
        findings[rank].valid == 0) {
      needed.push_back(m);
    }
  }
  std::sort(needed.begin(), needed.end(),
            [](const Misplaced& a, const Misplaced& b) { return a.rank < b.rank; });
  return needed;
}

std::string misplacement_refusal(std::span<const Misplaced> needed,
                                 const std::vector<std::string>& nodes, const std::string& job) {
  std::string list;
  for (const auto& m : needed) {
    list += fmt::format(
        "{}rank {}'s is on node {}, where this launch runs rank {} (and rank {} on node {})",
        list.empty() ? "" : "; ", m.rank, nodes[static_cast<std::size_t>(m.holder)], m.holder,
        m.rank, nodes[static_cast<std::size_t>(m.rank)]);
  }
  return fmt::format(
      "the checkpoint of job '{}' lies on this launch's nodes, but not where it places the ranks: "
      "{}. A rank restores only the checkpoint on its own node, and without these the job "
      "would start afresh or could not be restored. Relaunch with each rank on the node that "
      "holds its checkpoint (the node order and mapping of the run that wrote it: mpirun --host "
      "or a rankfile; a requeued Slurm job: scontrol update JobId=ID ReqNodeList=NODES; skt-run "
      "keeps each rank on its node, a lost one's on a spare), or remove the checkpoint to start "
      "afresh (skt-shm clean --job {})",
      job, list, job);
}

Candidates restore_candidates(Mode mode, std::span<const Finding> findings) {
  Candidates c;
  std::int64_t newest = -1;
  bool updating = false;
  for (const auto& f : findings) {
    if (f.valid == 0) continue;
    const ControlState& s = f.state;
    newest = std::max(newest, mode == Mode::self ? std::max(s.agreed, s.committed) : s.committed);
    updating = updating || (mode == Mode::single && s.encoded > s.committed);
  }
  if (mode == Mode::single) {
    // The only copy is rewritten in place: the epoch before is gone wherever the update began.
    if (updating) {
      c.epochs.push_back(newest + 1);
      c.redo = true;
    }
    if (newest > 0) c.epochs.push_back(newest);
    return c;
  }
  if (newest <= 0) return c;
  c.epochs.push_back(newest);
  // The epoch before, wherever the newest cannot be rebuilt: B still holds it until its rank
  // flushes the newest, and its digest is kept until the epoch after the newest begins.
  if (newest > 1) c.epochs.push_back(newest - 1);
  return c;
}

bool holds_epoch(std::span<const Finding> findings) {
  return std::any_of(findings.begin(), findings.end(), [](const Finding& f) {
    const ControlState& s = f.state;
    return f.valid != 0 && std::max({s.committed, s.encoded, s.agreed}) >= 1;
  });
}

std::optional<std::int64_t> completed_epoch(std::span<const Finding> findings) {
  for (const auto& f : findings) {
    if (f.valid != 0 && f.state.finished >= 0) return f.state.finished;
  }
  return std::nullopt;
}

GroupPlan recorded_plan(std::span<const Finding> findings, const std::vector<std::string>& nodes,
                        const std::string& job) {
  const auto n = findings.size();
  GroupPlan plan;
  plan.group_of.assign(n, -1);
  plan.index_of.assign(n, -1);
  std::vector<std::uint64_t> recorded_layout(n, 0);
  int groups = 0;
  for (std::size_t r = 0; r < n; ++r) {
    const Finding& f = findings[r];
    if (f.valid == 0) continue;
    groups = std::max(groups, f.groups);
    for (int i = 0; i < f.group_size; ++i) {
      const auto member = static_cast<std::size_t>(f.members[i]);
      if (member >= n || f.group < 0 || f.group >= f.groups) {
        throw Error(SKT_ERR_MISMATCH,
                    fmt::format("the checkpoint of rank {} names a rank or group beyond the job; "
                                "remove the job's segments (skt-shm clean --job {})",
                                r, job));
      }
      if ((plan.group_of[member] >= 0 && plan.group_of[member] != f.group) ||
          (plan.index_of[member] >= 0 && plan.index_of[member] != i) ||
          (plan.group_of[member] >= 0 && recorded_layout[member] != f.recorded_layouts[i])) {
        throw Error(SKT_ERR_MISMATCH,
                    fmt::format("the surviving checkpoints disagree about the group of rank {}; "
                                "remove the job's segments (skt-shm clean --job {})",
                                member, job));
      }
      plan.group_of[member] = f.group;
      plan.index_of[member] = i;
      recorded_layout[member] = f.recorded_layouts[i];
    }
  }
  std::vector<int> orphans;
  std::vector<bool> seen(static_cast<std::size_t>(groups), false);
  for (std::size_t r = 0; r < n; ++r) {
    if (plan.group_of[r] < 0) {
      orphans.push_back(static_cast<int>(r));
    } else {
      seen[static_cast<std::size_t>(plan.group_of[r])] = true;
    }
  }
  if (!orphans.empty()) {
    // Nobody is left to say which group each orphan belonged to, only which groups vanished.
    std::string missing, list;
    for (int g = 0; g < groups; ++g) {
      if (!seen[static_cast<std::size_t>(g)]) {
        missing += fmt::format("{}{}", missing.empty() ? "" : ", ", g);
      }
    }
    for (const int r : orphans) {
      list += fmt::format("{}rank {} on node {}", list.empty() ? "" : ", ", r,
                          nodes[static_cast<std::size_t>(r)]);
    }
    throw Error(SKT_ERR_UNRECOVERABLE,
                fmt::format("group {} lost all of its members ({}), so their data cannot be "
                            "rebuilt; start the job again from the beginning (skt-shm clean "
                            "--job {})",
                            missing.empty() ? "?" : missing, list, job));
  }
  plan.members.assign(static_cast<std::size_t>(groups), {});
  for (std::size_t r = 0; r < n; ++r) {
    auto& list = plan.members[static_cast<std::size_t>(plan.group_of[r])];
    const auto index = static_cast<std::size_t>(plan.index_of[r]);
    if (list.size() <= index) list.resize(index + 1, -1);
    list[index] = static_cast<int>(r);
  }
  for (std::size_t g = 0; g < plan.members.size(); ++g) {
    const auto& list = plan.members[g];
    if (list.empty() || std::find(list.begin(), list.end(), -1) != list.end()) {
      throw Error(SKT_ERR_MISMATCH,
                  fmt::format("the surviving checkpoints describe group {} incompletely; remove "
                              "the job's segments (skt-shm clean --job {})",
                              g, job));
    }
  }
  // A relaunched rank (a replacement above all) must declare what its group recorded for it.
  for (std::size_t r = 0; r < n; ++r) {
    if (findings[r].layout_hash != recorded_layout[r]) {
      throw Error(SKT_ERR_MISMATCH,
                  fmt::format("rank {} declared regions that differ from those its group recorded "
                              "for it; a relaunch must declare the same regions with the same "
                              "sizes, and protect the same private objects",
                              r));
    }
  }
  return plan;
}

namespace {

// A byte writer and reader for the records ranks exchange.
class Out {
 public:
  template <class T>
  void put(const T& v) {
    const auto* p = reinterpret_cast<const std::byte*>(&v);
    bytes.insert(bytes.end(), p, p + sizeof v);
  }
  void put_ranges(const std::vector<ChunkRange>& ranges) {
    put(static_cast<std::uint64_t>(ranges.size()));
    for (const auto& r : ranges) {
      put(r.begin);
      put(r.end);
    }
  }
  void put_text(const std::string& s) {
    put(static_cast<std::uint64_t>(s.size()));
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    bytes.insert(bytes.end(), p, p + s.size());
  }
  std::vector<std::byte> bytes;
};

class In {
 public:
  explicit In(std::span<const std::byte> bytes) : bytes_(bytes) {}
  template <class T>
  T get() {
    T v{};
    if (at_ + sizeof v > bytes_.size()) throw Error(SKT_ERR_INTERNAL, "short holdings record");
    std::memcpy(&v, bytes_.data() + at_, sizeof v);
    at_ += sizeof v;
    return v;
  }
  std::vector<ChunkRange> ranges() {
    std::vector<ChunkRange> out(get<std::uint64_t>());
    for (auto& r : out) {
      r.begin = get<std::uint64_t>();
      r.end = get<std::uint64_t>();
    }
    return out;
  }
  std::string text() {
    const auto n = get<std::uint64_t>();
    if (at_ + n > bytes_.size()) throw Error(SKT_ERR_INTERNAL, "short holdings record");
    std::string s(reinterpret_cast<const char*>(bytes_.data() + at_), n);
    at_ += n;
    return s;
  }

 private:
  std::span<const std::byte> bytes_;
  std::size_t at_ = 0;
};

}  // namespace

std::vector<std::byte> Holdings::serialize() const {
  Out out;
  out.put(static_cast<std::uint8_t>(whole ? 1 : 0));
  out.put_ranges(data_erased);
  out.put_ranges(parity_erased);
  out.put(written_blocks);
  out.put_text(first_erased);
  out.put(static_cast<std::uint8_t>(first_erased_written ? 1 : 0));
  return std::move(out.bytes);
}

Holdings Holdings::deserialize(std::span<const std::byte> bytes) {
  In in(bytes);
  Holdings h;
  h.whole = in.get<std::uint8_t>() != 0;
  h.data_erased = in.ranges();
  h.parity_erased = in.ranges();
  h.written_blocks = in.get<std::uint64_t>();
  h.first_erased = in.text();
  h.first_erased_written = in.get<std::uint8_t>() != 0;
  return h;
}

std::vector<GroupShape> group_shapes(const GroupPlan& plan,
                                     std::span<const std::uint64_t> chunks_by_rank, int parity,
                                     std::size_t chunk_bytes, int tolerance) {
  std::vector<GroupShape> out;
  for (const auto& members : plan.members) {
    GroupShape g;
    g.ranks = members;
    std::uint64_t longest = 0;
    for (const int r : members) {
      g.chunks.push_back(chunks_by_rank[static_cast<std::size_t>(r)]);
      longest = std::max(longest, g.chunks.back());
    }
    const int size = static_cast<int>(members.size());
    const int m = size > 1 ? parity : 0;
    g.geometry = enc::StripeGeometry::plan(size, m, chunk_bytes, longest);
    g.tolerance = size > 1 ? tolerance : 0;
    out.push_back(std::move(g));
  }
  return out;
}

std::uint64_t stage_period(enc::Scheme scheme, int group_size, int parity) noexcept {
  if (scheme != enc::Scheme::sum || group_size < 2) return 1;
  return static_cast<std::uint64_t>(group_size - parity);
}

RestorePlan plan_restore(std::span<const Finding> findings, const std::vector<std::string>& nodes,
                         const Config& config) {
  RestorePlan out;
  out.candidates = restore_candidates(config.mode, findings);
  if (!out.fresh()) {
    for (const auto& f : findings) {
      if (f.valid != 0) out.lineage = std::max(out.lineage, f.lineage);
    }
  }
  out.groups = out.fresh() ? plan_groups(nodes, config.group_size, config.parity + 1)
                           : recorded_plan(findings, nodes, config.job);
  std::vector<std::uint64_t> chunks(findings.size());
  for (std::size_t r = 0; r < findings.size(); ++r) {
    const int size = out.groups.size_of(out.groups.group_of[r]);
    chunks[r] =
        StreamLayout::plan({}, findings[r].stage_bytes, findings[r].regions_bytes,
                           config.chunk_bytes, stage_period(config.scheme, size, config.parity))
            .chunks;
  }
  out.shapes = group_shapes(out.groups, chunks, config.parity, config.chunk_bytes,
                            enc::tolerance(config.scheme, config.parity));
  for (auto& shape : out.shapes) {
    for (const int r : shape.ranks)
      shape.layouts.push_back(findings[static_cast<std::size_t>(r)].layout_hash);
  }
  return out;
}

Verdict assess(std::span<const GroupShape> groups, std::span<const Holdings> holdings, bool redo,
               std::int64_t epoch, const std::vector<std::string>& nodes) {
  Verdict v;
  v.lost.resize(groups.size());
  v.repairs.resize(groups.size());
  auto refuse = [&](std::string why) {
    if (v.feasible) v.reason = std::move(why);
    v.feasible = false;
  };
  auto who = [&](int rank) {
    return fmt::format("rank {} on node {}", rank, nodes[static_cast<std::size_t>(rank)]);
  };
  auto why_erased = [&](int rank) {
    const Holdings& h = holdings[static_cast<std::size_t>(rank)];
    if (!h.whole) return fmt::format("{} holds nothing of epoch {}", who(rank), epoch);
    if (h.first_erased.empty()) {
      return fmt::format("{}: its checksum does not match epoch {}", who(rank), epoch);
    }
    return fmt::format("{}: {} {}", who(rank), h.first_erased,
                       h.first_erased_written
                           ? fmt::format("was changed in its workspace after epoch {} (do not "
                                         "write into regions before skt_recover) and its "
                                         "committed copy does not hold it",
                                         epoch)
                           : fmt::format("is neither in its workspace nor in its committed copy "
                                         "as of epoch {}",
                                         epoch));
  };

  for (std::size_t g = 0; g < groups.size(); ++g) {
    const GroupShape& shape = groups[g];
    const auto& geometry = shape.geometry;
    const int size = static_cast<int>(shape.ranks.size());
    std::vector<int> lost;
    for (int i = 0; i < size; ++i) {
      if (!holdings[static_cast<std::size_t>(shape.ranks[static_cast<std::size_t>(i)])].whole) {
        lost.push_back(i);
      }
    }
    if (redo) {
      // No checksum: every member must hold all of its data itself.
      for (int i = 0; i < size; ++i) {
        const int rank = shape.ranks[static_cast<std::size_t>(i)];
        const Holdings& h = holdings[static_cast<std::size_t>(rank)];
        if (!h.whole || !h.data_erased.empty()) {
          refuse(
              fmt::format("group {}: finishing the interrupted update of epoch {} needs every "
                          "rank's data, but {}",
                          g, epoch, why_erased(rank)));
        }
      }
      continue;
    }
    if (static_cast<int>(lost.size()) > shape.tolerance) {
      std::string list;
      for (const int i : lost) {
        list += fmt::format("{}{}", list.empty() ? "" : ", ",
                            who(shape.ranks[static_cast<std::size_t>(i)]));
      }
      refuse(
          fmt::format("group {} lost {} of its {} members ({}) as of epoch {}; its code "
                      "tolerates {}",
                      g, lost.size(), size, list, epoch, shape.tolerance));
      continue;
    }
    // Rows with erasures of members that are not lost as a whole.
    std::map<std::uint64_t, std::vector<int>> rows;
    for (int i = 0; i < size; ++i) {
      const Holdings& h =
          holdings[static_cast<std::size_t>(shape.ranks[static_cast<std::size_t>(i)])];
      if (!h.whole) continue;
      for (const auto& range : h.data_erased) {
        for (std::uint64_t j = range.begin; j < range.end; ++j)
          rows[geometry.row_of_chunk(i, j)].push_back(i);
      }
      for (const auto& range : h.parity_erased) {
        for (std::uint64_t p = range.begin; p < range.end; ++p)
          rows[geometry.parity_row(i, p)].push_back(i);
      }
    }
    for (auto& [row, erased] : rows) {
      for (const int l : lost) {
        const auto j = geometry.chunk_of_row(l, row);
        if (!j || *j < shape.chunks[static_cast<std::size_t>(l)]) erased.push_back(l);
      }
      std::sort(erased.begin(), erased.end());
      erased.erase(std::unique(erased.begin(), erased.end()), erased.end());
      if (static_cast<int>(erased.size()) > shape.tolerance) {
        std::string list;
        for (const int i : erased) {
          list += fmt::format("{}{}", list.empty() ? "" : "; ",
                              why_erased(shape.ranks[static_cast<std::size_t>(i)]));
        }
        refuse(
            fmt::format("group {} cannot rebuild row {}: {} of its items are gone ({}); its "
                        "code tolerates {}",
                        g, row, erased.size(), list, shape.tolerance));
        break;
      }
      v.repairs[g].push_back({row, erased});
    }
    v.lost[g] = lost;
  }
  return v;
}

}  // namespace skt
