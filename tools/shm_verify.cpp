#include "tools/shm_verify.hpp"

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <map>
#include <sstream>
#include <type_traits>
#include <vector>

#include "common/mpi.hpp"
#include "libselfckpt/internal/names.hpp"
#include "libselfckpt/internal/scrub.hpp"
#include "libselfckpt/internal/segment.hpp"

namespace skt::tools {

namespace {

constexpr std::size_t kJobBytes = 64;
// Received chunks held at once: rows are checked a batch at a time.
constexpr std::size_t kBatchBytes = std::size_t{64} << 20;

struct Local {
  Segment segment;
  CheckpointView view;
};

// What a process tells the others about each checkpoint segment it holds.
struct Record {
  char job[kJobBytes] = {};
  std::int32_t process = 0;
  std::int32_t rank = 0;
  std::int32_t has_state = 0;
  ControlState state;
  CheckpointInfo info;
};
static_assert(std::is_trivially_copyable_v<Record>);

struct Mismatch {
  std::uint64_t row;
  std::int32_t slot;
  std::int32_t holder;  // rank holding the checksum chunk
  std::uint64_t first, last, differing;
};
static_assert(std::is_trivially_copyable_v<Mismatch>);

template <class T>
std::vector<T> allgather(MPI_Comm comm, const std::vector<T>& mine) {
  int n = 0;
  MPI_Comm_size(comm, &n);
  const int bytes = static_cast<int>(mine.size() * sizeof(T));
  std::vector<int> counts(static_cast<std::size_t>(n)), offsets(static_cast<std::size_t>(n));
  SKT_MPI(MPI_Allgather(&bytes, 1, MPI_INT, counts.data(), 1, MPI_INT, comm));
  int total = 0;
  for (int p = 0; p < n; ++p) {
    offsets[static_cast<std::size_t>(p)] = total;
    total += counts[static_cast<std::size_t>(p)];
  }
  std::vector<T> all(static_cast<std::size_t>(total) / sizeof(T));
  SKT_MPI(MPI_Allgatherv(mine.data(), bytes, MPI_BYTE, all.data(), counts.data(), offsets.data(),
                         MPI_BYTE, comm));
  return all;
}

// Every process's text, concatenated in process order, on every process.
std::string gather_text(MPI_Comm comm, const std::string& mine) {
  const auto all = allgather(comm, std::vector<char>(mine.begin(), mine.end()));
  return {all.begin(), all.end()};
}

class Verifier {
 public:
  Verifier(const std::function<bool(const SegmentHeader&)>& wanted, int max_rows_shown, bool repair)
      : comm_(MPI_COMM_WORLD), max_rows_shown_(max_rows_shown), repair_(repair) {
    MPI_Comm_rank(comm_, &me_);
    load(wanted);
  }

  int run();

 private:
  using GroupKey = std::pair<std::string, std::uint32_t>;

  void load(const std::function<bool(const SegmentHeader&)>& wanted);
  void say(const std::string& text) const {
    if (me_ == 0) fmt::print("{}", text);
  }
  // Returns whether the group's checksums matched its copies (nothing when it could not be
  // checked); prints the outcome.
  std::optional<bool> verify_group(const GroupKey& key, const std::vector<Record>& members);
  void check_rows(const std::vector<Record>& members, std::uint64_t epoch,
                  std::vector<Mismatch>& found);
  std::vector<std::vector<std::string>> locate(const std::vector<Record>& members,
                                               const std::vector<Mismatch>& shown);
  // Lines naming what each bad item holds, from the processes that hold them, in item order;
  // `bytes` narrows an item to the bytes the row's checksum says differ.
  std::vector<std::string> describe(const std::vector<Record>& members,
                                    const std::vector<BadItem>& items,
                                    const std::vector<Mismatch>& found, std::uint64_t epoch);
  // Rebuilds every bad item from the other items of its row; returns the items rebuilt, or
  // nothing (and says why) when a row lost more than the code tolerates.
  std::optional<std::size_t> repair(const std::vector<Record>& members,
                                    const std::vector<BadItem>& items, std::uint64_t epoch,
                                    const std::string& title);
  const Local* local_of(const Record& r) const;

  MPI_Comm comm_;
  int me_ = 0;
  int max_rows_shown_;
  bool repair_;
  std::vector<Local> local_;
  std::map<std::pair<std::string, int>, std::size_t> local_index_;  // (job, rank) -> local_
  std::vector<Record> records_;
  std::string damaged_;  // one line per unreadable segment, all processes'
  std::uint64_t checked_bytes_ = 0;
};

void Verifier::load(const std::function<bool(const SegmentHeader&)>& wanted) {
  std::vector<Record> mine;
  std::string damaged;
  for (const auto& listing : list_own_segments()) {
    const auto& id = listing.header.identity;
    if (id.kind != SegmentKind::checkpoint || !wanted(listing.header)) continue;
    std::string why;
    auto segment = Segment::attach(listing.shmid, !repair_, &why, false);
    std::optional<CheckpointView> view;
    if (segment) view = read_checkpoint_view(*segment, &why);
    if (!view) {
      damaged += fmt::format("  job '{}' rank {} (node {}, shmid {}): {}\n", id.job, id.rank,
                             id.domain, listing.shmid, why);
      continue;
    }
    Record r;
    std::memcpy(r.job, id.job.data(), std::min(id.job.size(), kJobBytes - 1));
    r.process = me_;
    r.rank = id.rank;
    r.has_state = view->state ? 1 : 0;
    if (view->state) r.state = *view->state;
    r.info = view->info;
    mine.push_back(r);
    local_index_[{id.job, id.rank}] = local_.size();
    local_.push_back({std::move(*segment), std::move(*view)});
  }
  records_ = allgather(comm_, mine);
  damaged_ = gather_text(comm_, damaged);
}

int Verifier::run() {
  // One entry per (job, rank): a node seen by two processes counts once, the first one's.
  std::map<GroupKey, std::vector<Record>> groups;
  std::map<std::pair<std::string, int>, bool> seen;
  for (const auto& r : records_) {
    if (seen.emplace(std::make_pair(std::string(r.job), r.rank), true).second) {
      groups[{r.job, r.info.group}].push_back(r);
    }
  }
  if (!damaged_.empty()) say("damaged checkpoint segments:\n" + damaged_);
  if (groups.empty()) {
    say(damaged_.empty() ? "no checkpoint segments of this job on the nodes of this run\n" : "");
    return damaged_.empty() ? 2 : 1;
  }
  int clean = 0, corrupt = 0, unchecked = 0;
  const double start = MPI_Wtime();
  for (const auto& [key, members] : groups) {
    const auto outcome = verify_group(key, members);
    if (!outcome) {
      ++unchecked;
    } else if (*outcome) {
      ++clean;
    } else {
      ++corrupt;
    }
  }
  std::uint64_t bytes = checked_bytes_;
  SKT_MPI(MPI_Allreduce(MPI_IN_PLACE, &bytes, 1, MPI_UINT64_T, MPI_SUM, comm_));
  say(fmt::format(
      "{} group{}: {} clean, {} corrupt, {} not verified{}; {:.1f} MiB of committed "
      "copies read in {:.2f} s\n",
      groups.size(), groups.size() == 1 ? "" : "s", clean, corrupt, unchecked,
      damaged_.empty() ? "" : "; damaged segments found", bytes / 1048576.0, MPI_Wtime() - start));
  if (corrupt > 0 || !damaged_.empty()) return 1;
  return unchecked > 0 ? 2 : 0;
}

std::optional<bool> Verifier::verify_group(const GroupKey& key,
                                           const std::vector<Record>& members) {
  std::vector<MemberStatus> statuses;
  for (const auto& r : members) {
    statuses.push_back(
        {r.rank, r.info, r.has_state != 0 ? std::optional<ControlState>(r.state) : std::nullopt});
  }
  const CheckpointInfo& info = members[0].info;
  std::string ranks;
  for (std::uint32_t k = 0; k < info.group_size; ++k)
    ranks += fmt::format("{}{}", k == 0 ? "" : " ", info.members[k]);
  const std::string title =
      fmt::format("job '{}' group {} (ranks {}, {} m={})", key.first, key.second, ranks,
                  enc::scheme_name(static_cast<enc::Scheme>(info.scheme)), info.parity);
  std::uint64_t epoch = 0;
  if (const auto obstacle = scrub_obstacle(statuses, &epoch)) {
    say(fmt::format("{}: not verified: {}\n", title, *obstacle));
    return std::nullopt;
  }

  std::vector<Record> ordered = members;
  std::sort(ordered.begin(), ordered.end(),
            [](const Record& a, const Record& b) { return a.info.member < b.info.member; });
  // Each member's copy and checksum against the epoch's digest, where it is held.
  std::vector<BadItem> bad;
  std::string undigested;
  for (const auto& r : ordered) {
    const Local* l = local_of(r);
    if (l == nullptr) continue;
    std::string why;
    const auto items = check_digests(l->view, l->segment.data(), epoch, &why);
    if (!items) {
      undigested += fmt::format("  rank {}: {}\n", r.rank, why);
      continue;
    }
    bad.insert(bad.end(), items->begin(), items->end());
  }
  bad = allgather(comm_, bad);
  std::sort(bad.begin(), bad.end(), [](const BadItem& a, const BadItem& b) {
    return std::tie(a.row, a.member, a.parity) < std::tie(b.row, b.member, b.parity);
  });
  undigested = gather_text(comm_, undigested);
  std::vector<Mismatch> found;
  check_rows(ordered, epoch, found);
  // A job that checkpointed meanwhile may have changed B under the scrub: its verdict is void.
  int changed = 0;
  for (const auto& r : members) {
    const Local* l = local_of(r);
    if (l == nullptr) continue;
    changed |= read_control(l->segment.base()) != r.state ? 1 : 0;
  }
  SKT_MPI(MPI_Allreduce(MPI_IN_PLACE, &changed, 1, MPI_INT, MPI_LOR, comm_));
  if (changed != 0) {
    say(
        fmt::format("{}: not verified: the job wrote a checkpoint during the scrub; verify again "
                    "when it is stopped or between checkpoints\n",
                    title));
    return std::nullopt;
  }
  if (!undigested.empty()) {
    say(fmt::format("{}: epoch {}: not verified against the digests:\n{}", title, epoch,
                    undigested));
  }
  auto all = allgather(comm_, found);
  std::sort(all.begin(), all.end(), [](const Mismatch& a, const Mismatch& b) {
    return std::tie(a.row, a.slot) < std::tie(b.row, b.slot);
  });
  if (all.empty() && bad.empty()) {
    say(fmt::format("{}: epoch {}: clean ({} rows{})\n", title, epoch, info.rows,
                    undigested.empty() ? ", every block matches its CRC" : ""));
    return undigested.empty() ? std::optional<bool>(true) : std::nullopt;
  }
  say(
      fmt::format("{}: epoch {}: CORRUPT: {} item{} of the committed copies and checksums do{} "
                  "not match {} CRCs; {} of {} checksum chunks disagree{} with the committed "
                  "copies\n",
                  title, epoch, bad.size(), bad.size() == 1 ? "" : "s", bad.size() == 1 ? "es" : "",
                  bad.size() == 1 ? "its" : "their", all.size(), info.rows * info.parity,
                  all.size() == 1 ? "s" : ""));
  // The damage the digests locate, item by item.
  const std::vector<BadItem> shown_items(
      bad.begin(), bad.begin() + std::min<std::ptrdiff_t>(max_rows_shown_,
                                                          static_cast<std::ptrdiff_t>(bad.size())));
  for (const auto& line : describe(ordered, shown_items, all, epoch))
    say(fmt::format("  {}\n", line));
  if (bad.size() > shown_items.size()) {
    say(fmt::format("  ... and {} more (--show N prints more)\n", bad.size() - shown_items.size()));
  }
  // Rows whose checksum disagrees although every item matches its CRC: the old way of locating.
  std::vector<Mismatch> unexplained;
  for (const auto& m : all) {
    if (std::none_of(bad.begin(), bad.end(), [&](const BadItem& b) { return b.row == m.row; })) {
      unexplained.push_back(m);
    }
  }
  const std::vector<Mismatch> shown(
      unexplained.begin(),
      unexplained.begin() + std::min<std::ptrdiff_t>(
                                max_rows_shown_, static_cast<std::ptrdiff_t>(unexplained.size())));
  const auto where = locate(ordered, shown);
  for (std::size_t i = 0; i < shown.size(); ++i) {
    const auto& m = shown[i];
    const std::string bytes = m.last - m.first == 1
                                  ? fmt::format("at byte {}", m.first)
                                  : fmt::format("in bytes {}..{}", m.first, m.last - 1);
    say(
        fmt::format("  row {} slot {} (checksum held by rank {}): {} byte{} differ{} {} of the "
                    "chunk, though every item matches its CRC; one of these changed:\n",
                    m.row, m.slot, m.holder, m.differing, m.differing == 1 ? "" : "s",
                    m.differing == 1 ? "s" : "", bytes));
    say(fmt::format("    rank {}: its checksum chunk\n", m.holder));
    for (const auto& line : where[i])
      say(fmt::format("    {}\n", line));
  }
  if (!repair_) {
    if (!bad.empty()) {
      say(fmt::format("  skt-shm verify --repair rebuilds the damaged items from their groups\n"));
    }
    return false;
  }
  const auto repaired = repair(ordered, bad, epoch, title);
  if (!repaired) return false;
  // Verified again: the rebuilt items must now match.
  std::vector<BadItem> left;
  for (const auto& r : ordered) {
    const Local* l = local_of(r);
    if (l == nullptr) continue;
    const auto items = check_digests(l->view, l->segment.data(), epoch, nullptr);
    if (items) left.insert(left.end(), items->begin(), items->end());
  }
  left = allgather(comm_, left);
  std::vector<Mismatch> again;
  check_rows(ordered, epoch, again);
  again = allgather(comm_, again);
  say(fmt::format("{}: repaired {} item{} from the group; {}\n", title, *repaired,
                  *repaired == 1 ? "" : "s",
                  left.empty() && again.empty()
                      ? "every block matches its CRC and every checksum its copies now"
                      : fmt::format("{} items and {} checksum chunks still disagree", left.size(),
                                    again.size())));
  return left.empty() && again.empty();
}

const Local* Verifier::local_of(const Record& r) const {
  if (r.process != me_) return nullptr;
  const auto it = local_index_.find({r.job, r.rank});
  return it == local_index_.end() ? nullptr : &local_[it->second];
}

std::vector<std::string> Verifier::describe(const std::vector<Record>& members,
                                            const std::vector<BadItem>& items,
                                            const std::vector<Mismatch>& found,
                                            std::uint64_t epoch) {
  std::string lines;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const BadItem& b = items[i];
    const Record& r = members[static_cast<std::size_t>(b.member)];
    const Local* l = local_of(r);
    if (l == nullptr) continue;
    const auto& g = l->view.geometry;
    const std::size_t block = g.block_bytes();
    // The row's checksum narrows the damage to bytes, when it disagrees there.
    std::size_t first = static_cast<std::size_t>(std::countr_zero(b.blocks)) * block;
    std::size_t last = std::min<std::size_t>(
        g.chunk_bytes, static_cast<std::size_t>(64 - std::countl_zero(b.blocks)) * block);
    std::string precise;
    for (const auto& m : found) {
      if (m.row != b.row || m.first < first || m.last > last) continue;
      first = m.first;
      last = m.last;
      precise = fmt::format(" ({} byte{} differ{} from what the rest of the row gives)",
                            m.differing, m.differing == 1 ? "" : "s", m.differing == 1 ? "s" : "");
      break;
    }
    const std::string what =
        b.parity != 0
            ? fmt::format("its checksum chunk {} bytes {}..{}", b.index, first, last - 1)
            : fmt::format("its committed copy: {}", l->view.layout.describe(b.index, first, last));
    lines += fmt::format("{}\trow {}: rank {}, {}{}\n", i, b.row, r.rank, what, precise);
  }
  (void)epoch;
  std::vector<std::string> out(items.size());
  std::istringstream all(gather_text(comm_, lines));
  std::size_t index = 0;
  std::string line;
  while (all >> index && std::getline(all.ignore(1), line))
    out[index] = line;
  return out;
}

std::optional<std::size_t> Verifier::repair(const std::vector<Record>& members,
                                            const std::vector<BadItem>& items, std::uint64_t epoch,
                                            const std::string& title) {
  const CheckpointInfo& info = members[0].info;
  const int size = static_cast<int>(info.group_size);
  const int parity = static_cast<int>(info.parity);
  const enc::StripeGeometry g = recorded_geometry(info);
  const std::size_t chunk = g.chunk_bytes;
  // Rows and the members whose item there is damaged, the same list on every process.
  std::map<std::uint64_t, std::vector<int>> rows;
  for (const auto& b : items)
    rows[b.row].push_back(b.member);
  for (auto& [row, erased] : rows) {
    std::sort(erased.begin(), erased.end());
    erased.erase(std::unique(erased.begin(), erased.end()), erased.end());
    if (static_cast<int>(erased.size()) > parity) {
      say(fmt::format("{}: not repaired: row {} lost {} items, and the code tolerates {}\n", title,
                      row, erased.size(), parity));
      return std::nullopt;
    }
  }
  const auto codec = enc::make_codec(static_cast<enc::Scheme>(info.scheme), size, parity);
  std::vector<int> owner(static_cast<std::size_t>(size));
  for (const auto& r : members)
    owner[static_cast<std::size_t>(r.info.member)] = r.process;
  // A member's item of a row, where it is, and how many of its bytes count.
  auto item = [&](int member, std::uint64_t row) -> std::pair<std::byte*, std::size_t> {
    const Local* l = local_of(members[static_cast<std::size_t>(member)]);
    std::byte* data = l->segment.data();
    if (const auto p = g.parity_index(member, row)) {
      return {data + l->view.areas.checksum_of_epoch(epoch) + *p * chunk, chunk};
    }
    const std::uint64_t j = *g.chunk_of_row(member, row);
    const enc::ChunkList copy = l->view.layout.copy_chunks(
        data + l->view.areas.copy_offset(l->view.areas.copy_of_epoch(epoch)));
    if (j >= copy.size()) return {nullptr, 0};
    return {copy.data[j], copy.bytes[j]};
  };
  std::vector<std::vector<std::byte>> row_items(static_cast<std::size_t>(size),
                                                std::vector<std::byte>(chunk));
  std::vector<std::byte> rebuilt(chunk);
  std::size_t count = 0;
  for (const auto& [row, erased] : rows) {
    const int computer = owner[static_cast<std::size_t>(erased.front())];
    auto is_erased = [&](int d) { return std::binary_search(erased.begin(), erased.end(), d); };
    // Every other item of the row goes to the process that rebuilds it, in member order.
    for (int d = 0; d < size; ++d) {
      if (is_erased(d)) continue;
      const int from = owner[static_cast<std::size_t>(d)];
      auto& buffer = row_items[static_cast<std::size_t>(d)];
      if (from == me_) {
        const auto [p, n] = item(d, row);
        if (me_ == computer) {
          std::fill(buffer.begin(), buffer.end(), std::byte{0});
          if (p != nullptr) std::memcpy(buffer.data(), p, n);
        } else {
          SKT_MPI(MPI_Send(p != nullptr ? p : buffer.data(), p != nullptr ? static_cast<int>(n) : 0,
                           MPI_BYTE, computer, d, comm_));
        }
      } else if (me_ == computer) {
        std::fill(buffer.begin(), buffer.end(), std::byte{0});
        SKT_MPI(MPI_Recv(buffer.data(), static_cast<int>(chunk), MPI_BYTE, from, d, comm_,
                         MPI_STATUS_IGNORE));
      }
    }
    for (const int e : erased) {
      const int to = owner[static_cast<std::size_t>(e)];
      if (me_ == computer) {
        const auto coefs = codec->rebuild_coefs(
            static_cast<int>(row % static_cast<std::uint64_t>(size)), erased, e);
        bool started = false;
        for (int d = 0; d < size; ++d) {
          const enc::Coef c = coefs[static_cast<std::size_t>(d)];
          if (c == 0) continue;
          const std::byte* from = row_items[static_cast<std::size_t>(d)].data();
          if (started) {
            codec->combine(rebuilt.data(), rebuilt.data(), from, chunk, c);
          } else {
            codec->scale(rebuilt.data(), from, chunk, c);
            started = true;
          }
        }
        if (to != me_) {
          SKT_MPI(MPI_Send(rebuilt.data(), static_cast<int>(chunk), MPI_BYTE, to, kMaxGroupSize + e,
                           comm_));
        }
      } else if (me_ == to) {
        SKT_MPI(MPI_Recv(rebuilt.data(), static_cast<int>(chunk), MPI_BYTE, computer,
                         kMaxGroupSize + e, comm_, MPI_STATUS_IGNORE));
      }
      if (me_ == to) {
        const auto [p, n] = item(e, row);
        if (p != nullptr) std::memcpy(p, rebuilt.data(), n);
        // A sum rebuild is within rounding of what was lost, not bit for bit: its CRCs follow it.
        const Local* l = local_of(members[static_cast<std::size_t>(e)]);
        const DigestSlot slot{l->segment.data() + l->view.areas.digest_offset(epoch),
                              l->view.layout.chunks, g.parity_chunks(), g.blocks_per_chunk()};
        const auto blocks = static_cast<std::uint64_t>(g.blocks_per_chunk());
        const std::uint64_t all = g.block_mask(0, chunk);
        if (const auto q = g.parity_index(e, row)) {
          enc::chunk_crcs(g, p, static_cast<std::uint32_t>(chunk), all,
                          slot.parity() + *q * blocks);
        } else if (p != nullptr) {
          enc::chunk_crcs(g, p, static_cast<std::uint32_t>(n), all,
                          slot.data() + *g.chunk_of_row(e, row) * blocks);
        }
      }
      ++count;
    }
  }
  return count;
}

void Verifier::check_rows(const std::vector<Record>& members, std::uint64_t epoch,
                          std::vector<Mismatch>& found) {
  const CheckpointInfo& info = members[0].info;
  const int size = static_cast<int>(info.group_size);
  const int parity = static_cast<int>(info.parity);
  const int width = size - parity;
  const std::size_t chunk = info.chunk_bytes;
  const enc::StripeGeometry geometry = recorded_geometry(info);
  const auto codec = enc::make_codec(static_cast<enc::Scheme>(info.scheme), size, parity);

  // Per member: the process holding it and, when that is this one, its committed copy and checksum.
  std::vector<int> owner(static_cast<std::size_t>(size));
  std::vector<enc::ChunkList> copy(static_cast<std::size_t>(size));
  std::vector<const std::byte*> checksum(static_cast<std::size_t>(size), nullptr);
  for (const auto& r : members) {
    const auto k = static_cast<std::size_t>(r.info.member);
    owner[k] = r.process;
    if (r.process != me_) continue;
    const Local& l = local_[local_index_.at({r.job, r.rank})];
    const int c = l.view.areas.copy_of_epoch(epoch);
    copy[k] = l.view.layout.copy_chunks(l.segment.data() + l.view.areas.copy_offset(c));
    checksum[k] = l.segment.data() + l.view.areas.checksum_of_epoch(epoch);
    checked_bytes_ += l.view.layout.copy_bytes();
  }

  const std::size_t per_row = static_cast<std::size_t>(parity * width) * chunk;
  const std::uint64_t batch = std::max<std::uint64_t>(1, kBatchBytes / per_row);
  std::vector<std::byte> buffers(static_cast<std::size_t>(std::min(batch, info.rows)) * per_row);
  std::vector<std::byte> recomputed(chunk);
  std::vector<const std::byte*> sources(static_cast<std::size_t>(std::min(batch, info.rows)) *
                                        static_cast<std::size_t>(parity * width));
  Requests requests;
  for (std::uint64_t first = 0; first < info.rows; first += batch) {
    const std::uint64_t last = std::min(info.rows, first + batch);
    // Sends and receives are posted in the same order everywhere, which is what pairs them.
    for (std::uint64_t row = first; row < last; ++row) {
      for (int slot = 0; slot < parity; ++slot) {
        const int holder = geometry.holder(row, slot);
        const bool checking = owner[static_cast<std::size_t>(holder)] == me_;
        for (int j = 0; j < size; ++j) {
          const int position = geometry.data_position(j, row);
          const auto k = static_cast<std::size_t>(j);
          if (position < 0 || (!checking && owner[k] != me_)) continue;
          const std::uint64_t c = *geometry.chunk_of_row(j, row);
          const std::byte* data = nullptr;
          std::size_t bytes = 0;
          if (owner[k] == me_ && c < copy[k].size()) {
            data = copy[k].data[c];
            bytes = copy[k].bytes[c];
          }
          const int tag = j * kMaxGroupSize + slot;
          if (!checking) {
            requests.isend(data, bytes, owner[static_cast<std::size_t>(holder)], tag, comm_);
            continue;
          }
          const std::size_t index =
              ((row - first) * static_cast<std::size_t>(parity) + static_cast<std::size_t>(slot)) *
                  static_cast<std::size_t>(width) +
              static_cast<std::size_t>(position);
          if (owner[k] == me_ && bytes == chunk) {
            sources[index] = data;
            continue;
          }
          std::byte* buffer = buffers.data() + index * chunk;
          std::memset(buffer, 0, chunk);
          sources[index] = buffer;
          if (owner[k] == me_) {
            if (bytes > 0) std::memcpy(buffer, data, bytes);
          } else {
            requests.irecv(buffer, chunk, owner[k], tag, comm_);
          }
        }
      }
    }
    requests.wait_all();
    for (std::uint64_t row = first; row < last; ++row) {
      for (int slot = 0; slot < parity; ++slot) {
        const int holder = geometry.holder(row, slot);
        if (owner[static_cast<std::size_t>(holder)] != me_) continue;
        const std::size_t index =
            ((row - first) * static_cast<std::size_t>(parity) + static_cast<std::size_t>(slot)) *
            static_cast<std::size_t>(width);
        const std::byte* stored = checksum[static_cast<std::size_t>(holder)] +
                                  *geometry.parity_index(holder, row) * chunk;
        const auto mismatch =
            check_row(*codec, row, slot,
                      std::span<const std::byte* const>(sources.data() + index,
                                                        static_cast<std::size_t>(width)),
                      stored, chunk, recomputed.data());
        if (mismatch) {
          found.push_back({row, slot, info.members[holder], mismatch->first, mismatch->last,
                           mismatch->differing});
        }
      }
    }
  }
}

// For each shown mismatch, lines "rank R: <what>" saying which data bytes it covers, from the
// processes that hold the members (only they have the region tables).
std::vector<std::vector<std::string>> Verifier::locate(const std::vector<Record>& members,
                                                       const std::vector<Mismatch>& shown) {
  const enc::StripeGeometry geometry = recorded_geometry(members[0].info);
  std::string lines;
  for (std::size_t i = 0; i < shown.size(); ++i) {
    for (const auto& r : members) {
      if (r.process != me_) continue;
      const auto c = geometry.chunk_of_row(static_cast<int>(r.info.member), shown[i].row);
      if (!c) continue;
      const Local& l = local_[local_index_.at({r.job, r.rank})];
      lines += fmt::format("{}\trank {}: {}\n", i, r.rank,
                           l.view.layout.describe(*c, shown[i].first, shown[i].last));
    }
  }
  // Gathered as "<index>\t<line>\n", in process order.
  std::vector<std::vector<std::string>> out(shown.size());
  std::istringstream all(gather_text(comm_, lines));
  std::size_t index = 0;
  std::string line;
  while (all >> index && std::getline(all.ignore(1), line))
    out[index].push_back(line);
  return out;
}

}  // namespace

int verify_job(const std::function<bool(const SegmentHeader&)>& wanted, int max_rows_shown,
               bool repair) {
  Verifier verifier(wanted, max_rows_shown, repair);
  return verifier.run();
}

}  // namespace skt::tools
