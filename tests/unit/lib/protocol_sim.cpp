#include "tests/unit/lib/protocol_sim.hpp"

#include <fmt/format.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "encoders/crc.hpp"
#include "encoders/link.hpp"
#include "libselfckpt/internal/layout.hpp"

namespace skt::sim {

namespace {

constexpr std::size_t kChunk = 4096;

std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The last version, up to v, that rewrote area chunk c of a rank whose region spans `chunks`
// chunks: version u rewrites chunk u mod chunks.
std::int64_t last_write(std::int64_t v, std::uint64_t c, std::uint64_t chunks) {
  if (v <= 0) return 0;
  const auto back =
      static_cast<std::int64_t>((static_cast<std::uint64_t>(v) + chunks - c) % chunks);
  return v - back >= 1 ? v - back : 0;
}

// Each version also rewrites the first bytes of every chunk, so that no chunk holds the same data
// in two epochs.
constexpr std::size_t kTouched = 64;

// Fills bytes [from, to) of rank r's region as version v has them.
void fill(std::vector<std::byte>& region, int rank, std::int64_t version, bool doubles,
          std::size_t from, std::size_t to) {
  const std::uint64_t chunks = (region.size() + kChunk - 1) / kChunk;
  for (std::size_t i = from; i < to; i += doubles ? 8 : 1) {
    const std::int64_t written =
        i % kChunk < kTouched ? version : last_write(version, i / kChunk, chunks);
    const std::uint64_t h = mix((static_cast<std::uint64_t>(rank) << 48) ^
                                (static_cast<std::uint64_t>(written) << 32) ^ i);
    if (doubles) {
      const double v = static_cast<double>(h >> 11) * 0x1p-53 * 2 - 1;
      std::memcpy(region.data() + i, &v, sizeof v);
    } else {
      region[i] = static_cast<std::byte>(h);
    }
  }
}

// The program's one private object is 8 bytes, staged in 64 (under sum, a double per byte).
constexpr std::size_t kStagedBytes = 64;

// Whether the digests of `epoch` are the CRCs of its copy and checksum, block by block.
bool digests_describe(const RankStore& store, std::uint64_t epoch) {
  const enc::StripeGeometry& geometry = store.geometry;
  const auto blocks = static_cast<std::uint64_t>(geometry.blocks_per_chunk());
  const DigestSlot slot = store.digest_of(epoch);
  const enc::ChunkList& copy = store.copy_of(epoch);
  for (std::uint64_t j = 0; j < copy.size(); ++j) {
    if (enc::mismatched_blocks(geometry, copy.data[j], copy.bytes[j], slot.data() + j * blocks))
      return false;
  }
  if (store.codec == nullptr) return true;
  const auto chunk = static_cast<std::uint32_t>(geometry.chunk_bytes);
  for (std::uint64_t p = 0; p < geometry.parity_chunks(); ++p) {
    if (enc::mismatched_blocks(geometry, store.checksum_of(epoch) + p * chunk, chunk,
                               slot.parity() + p * blocks))
      return false;
  }
  return true;
}

}  // namespace

std::string describe(const Shape& s) {
  return fmt::format("{} {} G={} m={} ranks={}{}", mode_name(s.mode), enc::scheme_name(s.scheme),
                     s.group_size, s.parity, s.ranks, s.incremental ? " incremental" : "");
}

// ---- World -------------------------------------------------------------------------------------

namespace {

// The simulated ranks run one at a time, handing the turn over through condition variables. On
// one CPU a hand-off is a switch there; across two it is a wake-up sent to the other, which a
// virtual machine charges as an interrupt: the crash tests took twice as long. The calling
// thread keeps to the CPU it is on, and the rank threads it starts inherit that.
void keep_to_one_cpu() {
  const int cpu = sched_getcpu();
  if (cpu < 0) return;  // the ranks run as before, only slower
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  sched_setaffinity(0, sizeof one, &one);
}

}  // namespace

World::World(int ranks, const Schedule& schedule)
    : ranks_(ranks),
      schedule_(schedule),
      waiting_(static_cast<std::size_t>(ranks), false),
      finished_(static_cast<std::size_t>(ranks), false),
      wake_(static_cast<std::size_t>(ranks)),
      groups_(static_cast<std::size_t>(ranks)) {
  keep_to_one_cpu();
  for (int r = 0; r < ranks; ++r)
    order_.push_back(schedule.reversed ? ranks - 1 - r : r);
  turn_ = order_.front();
}

int World::budget(int rank) const {
  if (!schedule_.seeded) return schedule_.budget;
  return static_cast<int>(mix(schedule_.seed * 131 + static_cast<std::uint64_t>(rank)) %
                          static_cast<std::uint64_t>(schedule_.budget + 1));
}

void World::wake_all() {
  for (auto& w : wake_)
    w.notify_one();
}

void World::pass(int from) {
  const auto at =
      static_cast<std::size_t>(std::find(order_.begin(), order_.end(), from) - order_.begin());
  turn_ = -1;
  for (std::size_t k = 1; k <= order_.size(); ++k) {
    const int r = order_[(at + k) % order_.size()];
    if (!finished_[static_cast<std::size_t>(r)] && !waiting_[static_cast<std::size_t>(r)]) {
      turn_ = r;
      break;
    }
  }
  if (turn_ < 0 && !dead_ &&
      std::any_of(finished_.begin(), finished_.end(), [](bool f) { return !f; })) {
    hung_ = true;  // everyone left waits for someone: nobody will come
    wake_all();
  }
  if (turn_ >= 0) wake_[static_cast<std::size_t>(turn_)].notify_one();
}

void World::start(int rank) {
  std::unique_lock lock(mutex_);
  wake_[static_cast<std::size_t>(rank)].wait(lock, [&] { return turn_ == rank; });
}

void World::finish(int rank) {
  std::lock_guard lock(mutex_);
  finished_[static_cast<std::size_t>(rank)] = true;
  waiting_[static_cast<std::size_t>(rank)] = false;
  if (turn_ == rank || turn_ < 0) pass(rank);
}

void World::wait(std::unique_lock<std::mutex>& lock, int rank, const std::function<bool()>& done) {
  waiting_[static_cast<std::size_t>(rank)] = true;
  pass(rank);
  auto& wake = wake_[static_cast<std::size_t>(rank)];
  wake.wait(lock, [&] { return dead_ || hung_ || done(); });
  waiting_[static_cast<std::size_t>(rank)] = false;
  if (!done()) {
    if (hung_) throw Hung{};
    throw Crashed{};  // killed where it waited
  }
  // Woken by the rendezvous: runs when its turn comes (even in a dying job: it may have effects
  // left to begin).
  wake.wait(lock, [&] { return turn_ == rank; });
}

std::vector<std::vector<std::byte>> World::meet(int rank, std::vector<std::byte> mine) {
  std::unique_lock lock(mutex_);
  if (dead_) throw Crashed{};
  if (meeting_.arrived == 0) meeting_.payloads.assign(static_cast<std::size_t>(ranks_), {});
  meeting_.payloads[static_cast<std::size_t>(rank)] = std::move(mine);
  const std::uint64_t generation = meeting_.generation;
  if (++meeting_.arrived == ranks_) {
    meeting_.result = std::move(meeting_.payloads);
    meeting_.arrived = 0;
    ++meeting_.generation;
    // Every rank is here, so no group operation is under way: aborted ones are over.
    for (auto& g : groups_)
      g = GroupMeeting{g.generation + 1, 0, false, {}, {}};
    std::fill(waiting_.begin(), waiting_.end(), false);
    wake_all();
    return meeting_.result;
  }
  wait(lock, rank, [&] { return meeting_.generation != generation; });
  return meeting_.result;
}

void World::group(int rank, int group, int size, GroupCall call,
                  const std::function<void(std::vector<GroupCall>&)>& compute) {
  std::unique_lock lock(mutex_);
  if (dead_) throw Crashed{};
  GroupMeeting& m = groups_[static_cast<std::size_t>(group)];
  if (m.aborted) throw enc::MemberAborted(-1);
  m.calls.push_back(std::move(call));
  const std::uint64_t generation = m.generation;
  if (++m.arrived == size) {
    compute(m.calls);
    for (const int w : m.waiting) {
      waiting_[static_cast<std::size_t>(w)] = false;
      wake_[static_cast<std::size_t>(w)].notify_one();
    }
    m.calls.clear();
    m.waiting.clear();
    m.arrived = 0;
    ++m.generation;
    return;
  }
  m.waiting.push_back(rank);
  wait(lock, rank, [&] { return m.generation != generation || m.aborted; });
  if (m.generation == generation) throw enc::MemberAborted(-1);
}

void World::abort_group(int group) {
  std::lock_guard lock(mutex_);
  GroupMeeting& m = groups_[static_cast<std::size_t>(group)];
  m.aborted = true;
  for (const int w : m.waiting) {
    waiting_[static_cast<std::size_t>(w)] = false;
    wake_[static_cast<std::size_t>(w)].notify_one();
  }
  m.waiting.clear();
}

void World::kill() {
  std::lock_guard lock(mutex_);
  dead_ = true;
  wake_all();
}

bool World::dead() {
  std::lock_guard lock(mutex_);
  return dead_;
}

// ---- Effects -----------------------------------------------------------------------------------

class Effects : public skt::Effects {
 public:
  Effects(World& world, int rank, const Launch& launch, Outcome& out)
      : world_(world), rank_(rank), launch_(launch), out_(out) {}

  void set_activity(int activity) { activity_ = activity; }
  void set_control_page(std::byte* page) override { control_ = page; }
  // The group's size is the number of its members' chunk counts; the codec is the caller's (the
  // launch keeps a reference codec, written apart from the library's, for as long as it runs).
  void join(const GroupMembership& m) override {
    group_ = m.group;
    member_ = m.member;
    size_ = static_cast<int>(m.member_chunks.size());
    geometry_ = m.geometry;
    codec_ = m.codec;
  }

  void agree(const std::function<void()>& step) override {
    tick();
    int code = SKT_OK;
    bool own = true;
    std::string message;
    in_step_ = true;
    try {
      step();
    } catch (const enc::MemberAborted& e) {
      code = SKT_ERR_INTERNAL;
      own = false;
      message = e.what();
    } catch (const Error& e) {
      code = e.code();
      message = e.what();
    } catch (const std::exception& e) {
      code = SKT_ERR_INTERNAL;
      message = e.what();
    } catch (...) {
      in_step_ = false;
      throw;
    }
    in_step_ = false;
    if (code != SKT_OK && group_ >= 0) world_.abort_group(group_);
    std::vector<std::byte> mine(sizeof(int) * 2 + message.size());
    const int head[2] = {code, own ? 1 : 0};
    std::memcpy(mine.data(), head, sizeof head);
    std::memcpy(mine.data() + sizeof head, message.data(), message.size());
    const auto all = world_.meet(rank_, std::move(mine));
    int root = -1;
    for (int pass = 0; pass < 2 && root < 0; ++pass) {
      for (std::size_t r = 0; r < all.size() && root < 0; ++r) {
        int theirs[2];
        std::memcpy(theirs, all[r].data(), sizeof theirs);
        if (theirs[0] != SKT_OK && (pass == 1 || theirs[1] == 1)) root = static_cast<int>(r);
      }
    }
    if (root < 0) return;
    const auto& bytes = all[static_cast<std::size_t>(root)];
    int theirs[2];
    std::memcpy(theirs, bytes.data(), sizeof theirs);
    throw AgreedError(
        theirs[0],
        fmt::format("rank {}: {}", root,
                    std::string(reinterpret_cast<const char*>(bytes.data()) + sizeof theirs,
                                bytes.size() - sizeof theirs)));
  }

  void barrier() override {
    tick();
    world_.meet(rank_, {});
  }

  std::vector<std::vector<std::byte>> gather(std::span<const std::byte> mine) override {
    tick();
    return world_.meet(rank_, std::vector<std::byte>(mine.begin(), mine.end()));
  }

  // Simulated time does not pass: nobody waits long enough to be reported.
  std::vector<std::vector<std::byte>> gather_reporting(
      std::span<const std::byte> mine, double, const std::function<void(double)>&) override {
    return gather(mine);
  }

  // Every simulated rank has a machine of its own.
  std::vector<std::vector<std::byte>> gather_on_machine(std::span<const std::byte> mine) override {
    return {std::vector<std::byte>(mine.begin(), mine.end())};
  }

  void combine(std::span<std::int64_t> values, Combine how) override { reduce_all(values, how); }
  void combine(std::span<double> values, Combine how) override { reduce_all(values, how); }

  void broadcast(std::span<std::byte> bytes, int root) override {
    const auto all = gather(bytes);
    const auto& theirs = all[static_cast<std::size_t>(root)];
    std::copy(theirs.begin(), theirs.end(), bytes.begin());
  }

  template <class T>
  void reduce_all(std::span<T> values, Combine how) {
    const auto all = gather(std::as_bytes(values));
    for (std::size_t i = 0; i < values.size(); ++i) {
      for (const auto& theirs : all) {
        T value;
        std::memcpy(&value, theirs.data() + i * sizeof(T), sizeof(T));
        const bool first = &theirs == &all.front();
        values[i] = first                 ? value
                    : how == Combine::min ? std::min(values[i], value)
                    : how == Combine::max ? std::max(values[i], value)
                                          : values[i] + value;
      }
    }
  }

  enc::RowMasks row_masks(const enc::ChunkList& mine,
                          const std::vector<std::uint64_t>& changed) override {
    tick();
    GroupCall call;
    call.member = member_;
    call.data = &mine;
    call.changed = &changed;
    enc::RowMasks shared;
    call.masks = &shared;
    world_.group(rank_, group_, size_, std::move(call), [&](std::vector<GroupCall>& calls) {
      const auto& g = geometry_;
      std::vector<std::uint64_t> any(g.rows, 0), unchanged(g.rows, 0);
      const std::size_t block = g.block_bytes();
      for (const auto& c : calls) {
        for (std::uint64_t row = 0; row < g.rows; ++row) {
          const auto j = g.chunk_of_row(c.member, row);
          if (!j || *j >= c.data->size()) continue;
          const std::uint64_t past_end =
              g.block_mask((c.data->bytes[*j] + block - 1) / block * block, g.chunk_bytes);
          any[row] |= (*c.changed)[*j] & ~past_end;
          unchanged[row] |= g.block_mask(0, g.chunk_bytes) & ~((*c.changed)[*j] | past_end);
        }
      }
      enc::RowMasks masks;
      masks.any = any;
      masks.all.resize(g.rows);
      for (std::uint64_t row = 0; row < g.rows; ++row)
        masks.all[row] = ~unchanged[row];
      for (auto& c : calls)
        *c.masks = masks;
    });
    return shared;
  }

  std::uint64_t encode(const enc::ChunkList& source, std::byte* parity,
                       const enc::Incremental* incremental, const enc::Digests& digests,
                       const Progress& progress) override {
    tick();
    if (progress) progress(1, 2);
    const auto& g = geometry_;
    const auto blocks = static_cast<std::uint64_t>(g.blocks_per_chunk());
    const std::uint64_t all = g.block_mask(0, g.chunk_bytes);
    auto data_digests = [&](const GroupCall& c) {
      if (c.digests.data == nullptr) return;
      for (std::uint64_t j = 0; j < c.data->size(); ++j) {
        enc::chunk_crcs(g, c.data->data[j], c.data->bytes[j],
                        c.incremental != nullptr ? (*c.incremental->changed)[j] : all,
                        c.digests.data + j * blocks);
      }
    };
    GroupCall call;
    call.member = member_;
    call.data = &source;
    call.parity = parity;
    call.incremental = incremental;
    call.digests = digests;
    if (!codec_) {
      data_digests(call);
    } else {
      world_.group(rank_, group_, size_, std::move(call), [&](std::vector<GroupCall>& calls) {
        std::vector<const GroupCall*> by_member(static_cast<std::size_t>(size_));
        for (const auto& c : calls)
          by_member[static_cast<std::size_t>(c.member)] = &c;
        const int k = g.data_width();
        std::vector<std::vector<std::byte>> items(static_cast<std::size_t>(k),
                                                  std::vector<std::byte>(g.chunk_bytes));
        std::vector<const std::byte*> sources(static_cast<std::size_t>(k));
        std::vector<std::byte> out(g.chunk_bytes);
        for (const auto& c : calls) {
          data_digests(c);
          for (std::uint64_t p = 0; p < g.parity_chunks(); ++p) {
            const std::uint64_t row = g.parity_row(c.member, p);
            const int slot = g.parity_slot(c.member, row);
            const std::uint64_t mask =
                c.incremental != nullptr ? c.incremental->rows->any[row] : all;
            if (mask == 0) continue;
            for (int t = 0; t < k; ++t) {
              const int d = static_cast<int>((row + static_cast<std::uint64_t>(g.parity + t)) %
                                             static_cast<std::uint64_t>(g.group_size));
              const GroupCall& from = *by_member[static_cast<std::size_t>(d)];
              auto& item = items[static_cast<std::size_t>(t)];
              std::fill(item.begin(), item.end(), std::byte{0});
              const std::uint64_t j = *g.chunk_of_row(d, row);
              if (j < from.data->size() && from.data->bytes[j] > 0) {
                std::memcpy(item.data(), from.data->data[j], from.data->bytes[j]);
              }
              sources[static_cast<std::size_t>(t)] = item.data();
            }
            codec_->encode_row(out.data(), nullptr, sources, slot, g.chunk_bytes);
            std::byte* into = c.parity + p * g.chunk_bytes;
            for (const auto& run : g.segments(mask, mask))
              std::memcpy(into + run.begin, out.data() + run.begin, run.bytes());
            if (c.digests.parity != nullptr) {
              enc::chunk_crcs(g, into, static_cast<std::uint32_t>(g.chunk_bytes), mask,
                              c.digests.parity + p * blocks);
            }
          }
        }
      });
    }
    if (progress) progress(2, 2);
    return 0;
  }

  GroupWork rebuild(std::span<const int> lost, std::span<const std::uint64_t> skip_rows,
                    std::span<const enc::RowRepair> repairs, const enc::ChunkList& mine,
                    std::byte* parity, const Progress& progress,
                    const enc::RebuildHooks* hooks) override {
    tick();
    if (progress) progress(1, 2);
    if (!codec_) return {};
    GroupCall call;
    call.hooks = hooks;
    call.member = member_;
    call.data = &mine;
    call.parity = parity;
    call.lost.assign(lost.begin(), lost.end());
    call.skip.assign(skip_rows.begin(), skip_rows.end());
    call.repairs.assign(repairs.begin(), repairs.end());
    world_.group(rank_, group_, size_, std::move(call), [&](std::vector<GroupCall>& calls) {
      const auto& g = geometry_;
      std::vector<const GroupCall*> by_member(static_cast<std::size_t>(size_));
      for (const auto& c : calls)
        by_member[static_cast<std::size_t>(c.member)] = &c;
      const GroupCall& any = calls.front();
      auto item = [&](int d, std::uint64_t row) {
        std::vector<std::byte> out(g.chunk_bytes);
        const GroupCall& c = *by_member[static_cast<std::size_t>(d)];
        // As the pipeline does: a survivor's hook sees its item just before it is read.
        if (c.hooks != nullptr && c.hooks->before_read) c.hooks->before_read(row);
        if (const auto p = g.parity_index(d, row)) {
          std::memcpy(out.data(), c.parity + *p * g.chunk_bytes, g.chunk_bytes);
        } else if (const auto j = g.chunk_of_row(d, row); *j < c.data->size()) {
          if (c.data->bytes[*j] > 0) std::memcpy(out.data(), c.data->data[*j], c.data->bytes[*j]);
        }
        return out;
      };
      auto holds = [&](int d, std::uint64_t row) {
        const auto j = g.chunk_of_row(d, row);
        return !j || *j < by_member[static_cast<std::size_t>(d)]->data->size();
      };
      // The lost member's CRCs from the survivors', before any item lands, as rebuild_group does.
      if (any.lost.size() == 1) {
        const GroupCall& target = *by_member[static_cast<std::size_t>(any.lost.front())];
        if (target.hooks != nullptr && target.hooks->digests != nullptr) {
          const auto blocks = static_cast<std::size_t>(g.blocks_per_chunk());
          std::vector<std::uint64_t> chunks(static_cast<std::size_t>(size_));
          std::vector<std::vector<std::uint32_t>> data(chunks.size()), parity(chunks.size());
          for (int d = 0; d < size_; ++d) {
            const auto member = static_cast<std::size_t>(d);
            chunks[member] = by_member[member]->data->size();
            if (d == any.lost.front()) continue;
            const enc::Digests& theirs = *by_member[member]->hooks->digests;
            data[member].assign(theirs.data, theirs.data + chunks[member] * blocks);
            parity[member].assign(theirs.parity, theirs.parity + g.parity_chunks() * blocks);
          }
          enc::derive_lost_crcs(g, chunks, any.lost.front(), data, parity, *target.hooks->digests);
        }
      }
      for (std::uint64_t row = 0; row < g.rows; ++row) {
        std::vector<int> erased;
        const auto repair = std::find_if(any.repairs.begin(), any.repairs.end(),
                                         [&](const enc::RowRepair& r) { return r.row == row; });
        if (repair != any.repairs.end()) {
          erased = repair->erased;
        } else if (!std::binary_search(any.skip.begin(), any.skip.end(), row)) {
          for (const int l : any.lost) {
            if (holds(l, row)) erased.push_back(l);
          }
        }
        if (erased.empty()) continue;
        std::vector<std::vector<std::byte>> results;
        for (const int target : erased) {
          const auto coefs = codec_->rebuild_coefs(
              static_cast<int>(row % static_cast<std::uint64_t>(g.group_size)), erased, target);
          std::vector<std::byte> out(g.chunk_bytes, std::byte{0});
          bool started = false;
          for (int s = 0; s < size_; ++s) {
            const enc::Coef c = coefs[static_cast<std::size_t>(s)];
            if (c == 0) continue;
            const auto from = item(s, row);
            if (started) {
              codec_->combine(out.data(), out.data(), from.data(), g.chunk_bytes, c);
            } else {
              codec_->scale(out.data(), from.data(), g.chunk_bytes, c);
              started = true;
            }
          }
          results.push_back(std::move(out));
        }
        for (std::size_t t = 0; t < erased.size(); ++t) {
          const GroupCall& c = *by_member[static_cast<std::size_t>(erased[t])];
          if (const auto p = g.parity_index(erased[t], row)) {
            std::memcpy(c.parity + *p * g.chunk_bytes, results[t].data(), g.chunk_bytes);
          } else if (const auto j = g.chunk_of_row(erased[t], row); *j < c.data->size()) {
            if (c.data->bytes[*j] > 0) {
              std::memcpy(c.data->data[*j], results[t].data(), c.data->bytes[*j]);
            }
          }
          if (c.hooks != nullptr && c.hooks->landed) c.hooks->landed(row);
        }
      }
    });
    if (progress) progress(2, 2);
    return {};
  }

  void write_control(const ControlState& state) override {
    tick();
    skt::write_control(control_, state);
  }

  void clear_control() override {
    tick();
    skt::clear_control(control_);
  }

  // A segment of another rank removed from this rank's node.
  void remove_segment() { tick(); }

  void fault(FaultStep, std::uint64_t) override { tick(); }

  Progress midway(FaultStep, std::uint64_t) override {
    return [this](std::uint64_t, std::uint64_t) { tick(); };
  }

  bool in_step() const noexcept { return in_step_; }

 private:
  // An effect begins: the rank may be stopped here.
  void tick() {
    if (world_.dead()) {
      if (left_ < 0) left_ = world_.budget(rank_);
      if (left_-- == 0) throw Crashed{};
    }
    if (activity_ == launch_.count_activity &&
        std::find(launch_.count_effects_of.begin(), launch_.count_effects_of.end(), rank_) !=
            launch_.count_effects_of.end()) {
      ++out_.effects;
    }
    const auto& f = launch_.fault;
    if (!f || f->rank != rank_ || f->activity != activity_) return;
    if (++fault_count_ != f->at) return;
    if (f->raise) {
      // Failures happen in the work of collective phases; outside them the protocol only writes
      // memory and meets, which cannot fail.
      if (in_step_) throw Error(SKT_ERR_INTERNAL, fmt::format("injected at effect {}", f->at));
      return;
    }
    world_.kill();
    throw Crashed{};
  }

  World& world_;
  int rank_;
  const Launch& launch_;
  Outcome& out_;
  int activity_ = -1;
  int fault_count_ = 0;
  int left_ = -1;  // effects it may still begin, once the job is dead
  bool in_step_ = false;
  std::byte* control_ = nullptr;
  int group_ = -1;
  int member_ = 0;
  int size_ = 1;
  enc::StripeGeometry geometry_;
  const enc::Codec* codec_ = nullptr;
};

// ---- Job ---------------------------------------------------------------------------------------

Job::Job(Shape shape) : shape_(shape) {
  config_.mode = shape.mode;
  config_.scheme = shape.scheme;
  config_.group_size = shape.group_size;
  config_.parity = shape.parity;
  config_.chunk_bytes = kChunk;
  config_.job = "sim";
  for (int r = 0; r < shape.ranks; ++r)
    nodes_.push_back(fmt::format("n{}", r));
  memory_.resize(static_cast<std::size_t>(shape.ranks));
  for (int r = 0; r < shape.ranks; ++r)
    home_.push_back(r);
  private_version_.assign(static_cast<std::size_t>(shape.ranks), -1);
}

std::size_t Job::regions_bytes(int rank) const {
  // Uneven sizes, never whole chunks, whole doubles.
  return 3 * kChunk + 200 * static_cast<std::size_t>(rank) + 104;
}

std::vector<int> Job::group_of(int rank) const {
  const GroupPlan plan = plan_groups(nodes_, shape_.group_size, shape_.parity + 1);
  return plan.members[static_cast<std::size_t>(plan.group_of[static_cast<std::size_t>(rank)])];
}

bool Job::holds(int rank, std::int64_t version, bool approximate) const {
  const RankMemory& m = memory_[static_cast<std::size_t>(rank)];
  if (private_version_[static_cast<std::size_t>(rank)] != version) return false;
  std::vector<std::byte> expected(m.regions.size());
  const bool doubles = shape_.scheme == enc::Scheme::sum;
  fill(expected, rank, version, doubles, 0, expected.size());
  if (!approximate) return expected == m.regions;
  for (std::size_t i = 0; i + 8 <= expected.size(); i += 8) {
    double a, b;
    std::memcpy(&a, expected.data() + i, 8);
    std::memcpy(&b, m.regions.data() + i, 8);
    if (!(std::fabs(a - b) <= 1e-12)) return false;
  }
  return true;
}

const RankMemory* Job::left_on(int node, int rank) const {
  const auto it = left_.find({node, rank});
  return it == left_.end() ? nullptr : &it->second;
}

void Job::place(const std::vector<int>& placement) {
  for (int r = 0; r < shape_.ranks; ++r) {
    const auto k = static_cast<std::size_t>(r);
    const int node = placement.empty() ? r : placement[k];
    nodes_[k] = fmt::format("n{}", node);
    if (node == home_[k]) continue;
    if (memory_[k].present) left_[{home_[k], r}] = std::move(memory_[k]);
    memory_[k] = RankMemory{};
    if (const auto it = left_.find({node, r}); it != left_.end()) {
      memory_[k] = std::move(it->second);
      left_.erase(it);
    }
    home_[k] = node;
  }
}

std::vector<Misplaced> Job::gather_misplaced(skt::Effects& fx, int rank) {
  std::vector<Misplaced> mine;
  const int node = home_[static_cast<std::size_t>(rank)];
  const bool first_on_node = std::find(home_.begin(), home_.end(), node) - home_.begin() ==
                             static_cast<std::ptrdiff_t>(rank);
  if (first_on_node) {
    const std::lock_guard lock(left_mutex_);
    for (const auto& [where, mem] : left_) {
      if (where.first != node) continue;
      Misplaced m{.rank = where.second, .holder = rank};
      const auto state = mem.control.empty() ? std::nullopt : read_control(mem.control.data());
      if (state && state->finished < 0) {
        m.newest = std::max(state->committed, state->agreed);
        m.committed = state->committed;
        m.lineage = mem.recorded.lineage;
      }
      mine.push_back(m);
    }
  }
  return fx.gather_lists(std::span<const Misplaced>(mine));
}

void Job::remove_misplaced(Effects& fx, int rank, const std::vector<Misplaced>& misplaced) {
  const int node = home_[static_cast<std::size_t>(rank)];
  for (const Misplaced& m : misplaced) {
    if (m.holder != rank) continue;
    fx.remove_segment();
    {
      const std::lock_guard lock(left_mutex_);
      RankMemory& mem = left_.at({node, m.rank});
      mem.workspace_removed = true;
      mem.stage.clear();
      mem.regions.clear();
    }
    fx.remove_segment();
    const std::lock_guard lock(left_mutex_);
    left_.erase({node, m.rank});
  }
}

std::vector<Outcome> Job::run(const Launch& launch, const Schedule& schedule) {
  place(launch.placement);
  World world(shape_.ranks, schedule);
  std::vector<Outcome> outcomes(static_cast<std::size_t>(shape_.ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < shape_.ranks; ++r) {
    threads.emplace_back([&, r] {
      world.start(r);
      rank_main(world, r, launch, outcomes[static_cast<std::size_t>(r)]);
      world.finish(r);
    });
  }
  for (auto& t : threads)
    t.join();
  return outcomes;
}

// Runs a rank's part, recording how it ended: crashed, hung (the job is then killed), or with an
// error the program got.
void record_ending(World& world, Outcome& out, const std::function<void()>& part) {
  try {
    part();
  } catch (const Crashed&) {
    out.crashed = true;
  } catch (const Hung&) {
    out.hung = true;
    world.kill();
  } catch (const Error& e) {
    out.error = e.code();
    out.message = e.what();
  }
}

std::vector<Outcome> run_ranks(int ranks,
                               const std::function<void(skt::Effects& effects, int rank)>& body,
                               const Launch& launch, const Schedule& schedule) {
  World world(ranks, schedule);
  std::vector<Outcome> outcomes(static_cast<std::size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      world.start(r);
      Outcome& out = outcomes[static_cast<std::size_t>(r)];
      Effects fx(world, r, launch, out);
      fx.set_activity(0);
      record_ending(world, out, [&] { body(fx, r); });
      world.finish(r);
    });
  }
  for (auto& t : threads)
    t.join();
  return outcomes;
}

void Job::rank_main(World& world, int rank, const Launch& launch, Outcome& out) {
  Effects fx(world, rank, launch, out);
  fx.set_activity(0);  // the recovery, from the first look at its segments
  RankMemory& mem = memory_[static_cast<std::size_t>(rank)];
  const bool doubles = shape_.scheme == enc::Scheme::sum;
  // The program's private object, which the relaunched process starts without.
  std::int64_t version = -1;
  record_ending(world, out, [&] {
    const std::size_t region = regions_bytes(rank);
    const std::size_t stage = kStagedBytes;
    if (!mem.present || mem.workspace_removed) {
      mem.stage.assign(stage, std::byte{0});
      mem.regions.assign(region, std::byte{0});
    }
    if (launch.scribble) std::fill(mem.regions.begin(), mem.regions.end(), std::byte{0});
    const std::vector<RegionEntry> entries{{"version", true, 0, 8}, {"data", false, 0, region}};

    Finding mine;
    mine.layout_hash = StreamLayout::plan(entries, stage, region, kChunk).hash;
    mine.stage_bytes = stage;
    mine.regions_bytes = region;
    if (mem.present && !mem.workspace_removed && !mem.control.empty()) {
      if (const auto state = read_control(mem.control.data())) {
        const Finding declared = mine;
        mine = mem.recorded;
        mine.valid = 1;
        mine.state = *state;
        mine.layout_hash = declared.layout_hash;
        mine.stage_bytes = declared.stage_bytes;
        mine.regions_bytes = declared.regions_bytes;
      }
    }
    const auto gathered =
        fx.gather(std::span(reinterpret_cast<const std::byte*>(&mine), sizeof mine));
    std::vector<Finding> findings(gathered.size());
    for (std::size_t r = 0; r < gathered.size(); ++r)
      std::memcpy(&findings[r], gathered[r].data(), sizeof(Finding));
    // What a completed job left (its end interrupted) is no checkpoint: the job starts afresh.
    if (completed_epoch(findings)) {
      for (auto& f : findings)
        f.valid = 0;
    }
    // Segments on the wrong nodes: refused, every one kept, where this launch would need them
    // (the ranks placed otherwise than in the run that wrote them), else removed below.
    const std::vector<Misplaced> misplaced = gather_misplaced(fx, rank);
    if (!needed_elsewhere(findings, misplaced).empty()) {
      throw AgreedError(SKT_ERR_MISMATCH, "checkpoints of this launch lie on other nodes");
    }
    RestorePlan setup;
    fx.agree([&] { setup = plan_restore(findings, nodes_, config_); });
    remove_misplaced(fx, rank, misplaced);
    const int group = setup.groups.group_of[static_cast<std::size_t>(rank)];
    const int member = setup.groups.index_of[static_cast<std::size_t>(rank)];
    const GroupShape& shape = setup.shapes[static_cast<std::size_t>(group)];
    const bool survivor = !setup.fresh() && mine.valid != 0;
    const int size = static_cast<int>(shape.ranks.size());

    RankStore store;
    store.mode = shape_.mode;
    store.layout = StreamLayout::plan(entries, stage, region, kChunk,
                                      stage_period(shape_.scheme, size, shape_.parity));
    store.geometry = shape.geometry;
    const auto codec = shape.geometry.parity > 0
                           ? enc::make_codec(shape_.scheme, size, shape.geometry.parity)
                           : nullptr;
    store.codec = codec.get();
    store.member = member;
    const int copies = shape_.mode == Mode::twin ? 2 : 1;
    store.areas = checkpoint_areas(store.layout, store.geometry, copies, shape_.mode == Mode::self);
    const auto reference =
        shape.geometry.parity > 0
            ? enc::make_reference_codec(shape_.scheme, size, shape.geometry.parity)
            : nullptr;
    fx.join(GroupMembership{group, member, shape.geometry, reference.get(), shape.chunks});
    fx.agree([&] {
      if (survivor) return;
      // New segments, as a replacement node or a fresh start creates them.
      mem.checkpoint.assign(store.areas.data_bytes(0), std::byte{0});
      mem.control.assign(kHeaderBytes, std::byte{0});
      mem.workspace_removed = false;
      Finding& f = mem.recorded;
      f = Finding{};
      f.groups = setup.groups.groups();
      f.group = group;
      f.member = member;
      f.group_size = size;
      for (int i = 0; i < size; ++i) {
        f.members[i] = shape.ranks[static_cast<std::size_t>(i)];
        f.recorded_layouts[i] = shape.layouts[static_cast<std::size_t>(i)];
      }
      mem.present = true;
    });
    store.stage = mem.stage.data();
    store.workspace = store.layout.chunks_at(mem.stage.data(), mem.regions.data());
    store.checkpoint = mem.checkpoint.data();
    for (int i = 0; i < copies; ++i) {
      store.copies.push_back(
          store.layout.copy_chunks(mem.checkpoint.data() + store.areas.copy_offset(i)));
    }
    fx.set_control_page(mem.control.data());
    if (!survivor) fx.clear_control();
    const PrivateObjects privates{
        [&](std::byte* at, const Progress& progress) {
          if (doubles) {
            for (std::size_t i = 0; i < 8; ++i) {
              const double v =
                  static_cast<unsigned char>(reinterpret_cast<const std::byte*>(&version)[i]);
              std::memcpy(at + 8 * i, &v, 8);
            }
          } else {
            std::memcpy(at, &version, 8);
          }
          if (progress) progress(1, 2);
        },
        [&](const std::byte* at) {
          if (doubles) {
            for (std::size_t i = 0; i < 8; ++i) {
              double v;
              std::memcpy(&v, at + 8 * i, 8);
              reinterpret_cast<std::byte*>(&version)[i] =
                  static_cast<std::byte>(static_cast<unsigned char>(std::lround(v)));
            }
          } else {
            std::memcpy(&version, at, 8);
          }
        }};
    Protocol protocol(shape_.mode, fx, store, privates, survivor ? mine.state : ControlState{});
    RestoreInputs inputs{setup.candidates, survivor, setup.shapes, group, nodes_, config_.job, {}};
    out.restored = static_cast<std::int64_t>(protocol.restore(inputs));
    out.passed_over = protocol.stats().passed_over;
    if (out.restored == 0) {
      version = 0;
      fill(mem.regions, rank, 0, doubles, 0, region);
    }
    private_version_[static_cast<std::size_t>(rank)] = version;
    // A rebuilt member's data under sum is exact only within the scheme's rounding. The epoch's
    // digests must describe its copy and checksum as restored: the next recovery checks them.
    out.exact =
        holds(rank, out.restored, doubles) &&
        (out.restored == 0 || digests_describe(store, static_cast<std::uint64_t>(out.restored)));
    for (std::int64_t v = out.restored + 1; v <= launch.until; ++v) {
      // The program computes version v: it rewrites one chunk of its region, and the first bytes
      // of every chunk.
      const std::uint64_t chunks = (region + kChunk - 1) / kChunk;
      const std::size_t c = static_cast<std::size_t>(static_cast<std::uint64_t>(v) % chunks);
      std::vector<DirtyRange> dirty{{"data", c * kChunk, kChunk}};
      fill(mem.regions, rank, v, doubles, c * kChunk, std::min(region, (c + 1) * kChunk));
      for (std::size_t at = 0; at < region; at += kChunk) {
        fill(mem.regions, rank, v, doubles, at, std::min(region, at + kTouched));
        dirty.push_back({"data", at, kTouched});
      }
      version = v;
      private_version_[static_cast<std::size_t>(rank)] = v;
      fx.set_activity(static_cast<int>(v));
      std::vector<std::uint64_t> changed;
      if (shape_.incremental) {
        changed = store.layout.changed_blocks(store.geometry, dirty);
      }
      protocol.checkpoint(static_cast<std::uint64_t>(v), shape_.incremental ? &changed : nullptr);
      out.last_committed = v;
    }
    if (launch.finish) {
      fx.set_activity(kFinishing);
      finish_job(fx, &protocol, static_cast<std::uint64_t>(launch.until));
      mem = RankMemory{};  // its segments removed
      out.finished = true;
    }
  });
}

}  // namespace skt::sim
