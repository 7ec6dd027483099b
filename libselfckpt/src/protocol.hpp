// The checkpoint and recovery protocol of one rank, as a state machine over a small set of effects.
//
// The protocol touches the world only through Effects (agreements and group operations over the
// job, control-block writes, fault points) and through a RankStore (pointers to the rank's W, B,
// checksum areas and digests). Production runs it over MPI and shared memory (mpi_effects.hpp);
// the unit tests run the very same code over a simulated job of several ranks in one process,
// crashing any rank at any effect, so that crash consistency is tested without MPI.
//
// Checkpoint to epoch e+1 (self mode):
//   staging   stage the private objects into W
//   encoding  D = code(W), with the CRC of every block of W and of D (the epoch's digest)
//   encoded   control: D complete for e+1                        -- agreement: every rank encoded
//   agreed    control: all encoded e+1
//   flushing  W -> B (what changed)
//   committed control: B and C hold e+1                          -- agreement: every rank committed
//   (resumed) control: back in the application at e+1
// The single and double modes write a copy and then its checksum instead (staging, encoding,
// committed). A restore verifies every rank's memory against the digests, chooses the newest
// epoch every group can rebuild (decision.hpp), then settles: each rank mends W and B from each
// other block by block, the groups rebuild what is gone, and every rank ends with W = B = C's data
// at that epoch, its digest complete, so that the next failure finds a committed state.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "encoders/codec.hpp"
#include "encoders/geometry.hpp"
#include "encoders/group.hpp"
#include "libselfckpt/internal/format.hpp"
#include "libselfckpt/internal/layout.hpp"
#include "libselfckpt/src/config.hpp"
#include "libselfckpt/src/decision.hpp"
#include "selfckpt/selfckpt.hpp"

namespace skt {

using Progress = std::function<void(std::uint64_t, std::uint64_t)>;

// An error every rank raised together, through Effects::agree.
class AgreedError : public Error {
 public:
  using Error::Error;
};

// How a group operation's time divided on one rank.
struct GroupWork {
  double seconds = 0;           // the whole operation
  double transfer_seconds = 0;  // of it, waiting for transfers to arrive or leave
};

// How a job-wide combination reduces the ranks' values (Effects::combine).
enum class Combine { min, max, sum };

// A rank's place in its group, as Effects::join takes it.
struct GroupMembership {
  int group = 0;
  int member = 0;
  enc::StripeGeometry geometry;
  const enc::Codec* codec = nullptr;  // null for a group of one (no parity)
  std::vector<std::uint64_t> member_chunks;
  int pipeline_depth = 4;
};

class Effects {
 public:
  virtual ~Effects() = default;
  // Job-wide: runs `step` on every rank; when it fails on any rank, every rank throws the same
  // AgreedError. Whatever can fail on one rank between two collectives runs inside a step, group
  // operations included (a member that fails in one makes the others leave it too).
  virtual void agree(const std::function<void()>& step) = 0;
  // Job-wide and infallible: only where every rank is sure to call it too.
  virtual void barrier() = 0;
  // Job-wide and infallible too: every rank's bytes, in rank order.
  virtual std::vector<std::vector<std::byte>> gather(std::span<const std::byte> mine) = 0;
  // The same, every rank's bytes of one size, for a collective some rank may be slow to join (a
  // program that calls it on some ranks only): once it has waited `first_report` seconds, and at
  // each doubling of that, `report` hears how long (0 or less: it just waits).
  virtual std::vector<std::vector<std::byte>> gather_reporting(
      std::span<const std::byte> mine, double first_report,
      const std::function<void(double waited)>& report) = 0;
  // Among the ranks of the job on this rank's machine (sharing its memory): their bytes, of one
  // size, in their order.
  virtual std::vector<std::vector<std::byte>> gather_on_machine(
      std::span<const std::byte> mine) = 0;
  // Job-wide and infallible: every rank's values combined element by element, on every rank.
  virtual void combine(std::span<std::int64_t> values, Combine how) = 0;
  virtual void combine(std::span<double> values, Combine how) = 0;
  // Job-wide and infallible: rank `root`'s bytes on every rank (`bytes` of one size everywhere).
  virtual void broadcast(std::span<std::byte> bytes, int root) = 0;
  // Job-wide: this rank's group, where the group operations below run from now on.
  virtual void join(const GroupMembership& membership) = 0;
  // Local: where write_control writes (the checkpoint segment's control page).
  virtual void set_control_page(std::byte* page) = 0;
  // Local: a new checkpoint segment's control block says nothing yet (a segment made ahead of a
  // failure, as a warm spare's, may hold anything).
  virtual void clear_control() = 0;

  // Typed forms of the above, for one value (integers within the range of std::int64_t).
  template <class T>
  T all_min(T value) {
    return combined(value, Combine::min);
  }
  template <class T>
  T all_max(T value) {
    return combined(value, Combine::max);
  }
  template <class T>
  T all_sum(T value) {
    return combined(value, Combine::sum);
  }
  template <class T>
  requires std::is_trivially_copyable_v<T> T broadcast_value(T value, int root = 0) {
    broadcast(std::as_writable_bytes(std::span(&value, 1)), root);
    return value;
  }
  // Every rank's list of one trivially copyable type, concatenated in rank order.
  template <class T>
  requires std::is_trivially_copyable_v<T> std::vector<T> gather_lists(std::span<const T> mine) {
    std::vector<T> all;
    for (const auto& bytes : gather(std::as_bytes(mine))) {
      if (bytes.empty()) continue;  // memcpy from an empty vector's null data is undefined
      const std::size_t from = all.size();
      all.resize(from + bytes.size() / sizeof(T));
      std::memcpy(all.data() + from, bytes.data(), bytes.size());
    }
    return all;
  }
  // `root`'s text, its length first.
  std::string broadcast_string(std::string text, int root = 0) {
    text.resize(broadcast_value<std::uint64_t>(text.size(), root));
    broadcast(std::as_writable_bytes(std::span(text.data(), text.size())), root);
    return text;
  }
  // Every rank's value of one trivially copyable type, in rank order.
  template <class T>
  requires std::is_trivially_copyable_v<T> std::vector<T> gather_values(const T& mine) {
    const auto all = gather(std::as_bytes(std::span(&mine, 1)));
    std::vector<T> out(all.size());
    for (std::size_t r = 0; r < all.size(); ++r)
      std::memcpy(&out[r], all[r].data(), sizeof(T));
    return out;
  }

  // Group-wide and infallible: the row masks of an incremental encoding.
  virtual enc::RowMasks row_masks(const enc::ChunkList& mine,
                                  const std::vector<std::uint64_t>& changed) = 0;
  // Group operations, inside steps. encode: parity = code(source) over the group, and the CRCs of
  // the blocks it reads (digests.data) and writes (digests.parity), as enc::encode_group; a group
  // of one has no parity but still gets its data CRCs. Returns the bytes this rank sent.
  virtual std::uint64_t encode(const enc::ChunkList& source, std::byte* parity,
                               const enc::Incremental* incremental, const enc::Digests& digests,
                               const Progress& progress) = 0;
  // The lost members' items of every row but `skip_rows`, and every item of `repairs`; `hooks`
  // (may be null) see the items of the lost members' rows pass.
  virtual GroupWork rebuild(std::span<const int> lost, std::span<const std::uint64_t> skip_rows,
                            std::span<const enc::RowRepair> repairs, const enc::ChunkList& mine,
                            std::byte* parity, const Progress& progress,
                            const enc::RebuildHooks* hooks) = 0;
  // Local: the rank's control block, ordered after the data it describes.
  virtual void write_control(const ControlState& state) = 0;
  // Fault points (SKT_FAULT, and the simulator's): may end the process here, or throw.
  virtual void fault(FaultStep step, std::uint64_t epoch) = 0;
  virtual Progress midway(FaultStep step, std::uint64_t epoch) = 0;

 private:
  template <class T>
  T combined(T value, Combine how) {
    if constexpr (std::is_floating_point_v<T>) {
      double v = value;
      combine(std::span(&v, 1), how);
      return static_cast<T>(v);
    } else {
      static_assert(std::is_integral_v<T> && sizeof(T) <= sizeof(std::int64_t));
      auto v = static_cast<std::int64_t>(value);
      combine(std::span(&v, 1), how);
      return static_cast<T>(v);
    }
  }
};

class Protocol;

// Collective, at the end of a completed job (skt_finalize discarding it): once every rank is done,
// each records the job as finished after `epoch` before any removes a segment, so that a run ended
// in the middle of the removals leaves segments that say the job completed, not ranks that look
// lost (decision.hpp's completed_epoch). `protocol` is null on a rank with no checkpoint segment
// to record it in; it still takes part.
void finish_job(Effects& effects, Protocol* protocol, std::uint64_t epoch);

// One rank's memory as the protocol sees it, and its group.
struct RankStore {
  Mode mode = Mode::self;
  StreamLayout layout;
  enc::StripeGeometry geometry;
  const enc::Codec* codec = nullptr;  // none for a group of one
  int member = 0;
  enc::ChunkList workspace;            // W
  std::vector<enc::ChunkList> copies;  // B: one, or two alternating (double mode)
  std::byte* stage = nullptr;          // where W stages the private objects
  std::byte* checkpoint = nullptr;     // the checkpoint segment's data
  CheckpointAreas areas;

  const enc::ChunkList& copy_of(std::uint64_t epoch) const {
    return copies[static_cast<std::size_t>(areas.copy_of_epoch(epoch))];
  }
  std::byte* checksum_of(std::uint64_t epoch) const {
    return checkpoint + areas.checksum_of_epoch(epoch);
  }
  DigestSlot digest_of(std::uint64_t epoch) const;
};

// The private objects (skt_protect): staged into W at a checkpoint, written back by a restore.
struct PrivateObjects {
  std::function<void(std::byte* stage, const Progress& progress)> stage;
  std::function<void(const std::byte* stage)> restore;
};

// What a restore starts from, the same on every rank but for `survivor`.
struct RestoreInputs {
  Candidates candidates;
  bool survivor = false;  // this rank's segments survived (its control state is the protocol's)
  std::vector<GroupShape> groups;
  int group = 0;  // this rank's
  std::vector<std::string> nodes;
  std::string job;
  // For a rank without segments (not a survivor): makes its store's segments, called once inside
  // the step where the survivors verify theirs, so that the two overlap. Null: the store is ready.
  std::function<void()> prepare;
};

// How the last checkpoint or restore went on this rank.
struct ProtocolStats {
  std::uint64_t sent_bytes = 0;
  std::uint64_t flushed_bytes = 0;
  std::uint64_t workspace_blocks_rolled_back = 0;  // restore: W blocks taken back from B
  // restore: of those, blocks W should have held (its rank was inside the checkpoint, its B not
  // yet written): the program wrote into its regions before skt_recover
  std::uint64_t workspace_blocks_overwritten = 0;
  std::uint64_t copy_blocks_mended = 0;  // restore: B blocks taken from W (a flush finished)
  std::uint64_t chunks_rebuilt = 0;      // restore: items this rank got from its group
  double encode_seconds = 0;             // checkpoint: encoding, digests included
  double flush_seconds = 0;              // checkpoint: copying W into B
  // Where a restore's time went on this rank (the rest is agreements, and waiting for the others).
  double verify_seconds = 0;   // checking W, B and the checksum against the digests
  double fetch_seconds = 0;    // waiting for the group's transfers to arrive or leave
  double decode_seconds = 0;   // its own part of the group's rebuild: combining, sending
  double restore_seconds = 0;  // writing W and B back, the digests of what came, private objects
  std::uint64_t verified_bytes = 0;  // read to verify
  std::uint64_t rebuilt_bytes = 0;   // got back from the group
  std::uint64_t restored_bytes = 0;  // written back into W and B
  // restore: why the newer epochs than the one restored could not be (empty: it was the newest);
  // the same on every rank
  std::string passed_over;
};

class Protocol {
 public:
  // The states a rank passes through; a checkpoint or restore that fails goes back to idle.
  enum class Phase {
    idle,
    staging,
    encoding,
    encoded,
    agreed,
    flushing,
    committed,
    verifying,
    settling,
    rebuilding,
    finishing,
  };

  Protocol(Mode mode, Effects& effects, RankStore& store, PrivateObjects privates,
           ControlState state);

  // Collective. `changed`: per stream chunk the blocks that changed since the last commit (the
  // stage always counts as changed); null: everything may have.
  void checkpoint(std::uint64_t next, const std::vector<std::uint64_t>* changed);
  // Collective: verifies, chooses the epoch, settles; returns it (0: a fresh start, for which the
  // caller has set up empty segments). Throws AgreedError(SKT_ERR_UNRECOVERABLE) when no candidate
  // can be rebuilt.
  std::uint64_t restore(const RestoreInputs& in);
  // Records in the control block that the job completed after `epoch` (finish_job).
  void record_finished(std::uint64_t epoch);

  // Whether the next checkpoint can encode only the blocks that changed (self mode, an exact
  // scheme, D up to date): otherwise it encodes everything, whatever it is told changed.
  bool encodes_incrementally() const noexcept;
  Phase phase() const noexcept { return phase_; }
  const ControlState& state() const noexcept { return state_; }
  const ProtocolStats& stats() const noexcept { return stats_; }

 private:
  struct Verified;
  // A lost rank's items that came back in the group's rebuild and are taken: copied into B, their
  // digests computed.
  struct Landed {
    std::vector<bool> data;
    std::vector<bool> parity;
  };

  void enter(Phase next);
  void checkpoint_self(std::uint64_t next, const std::vector<std::uint64_t>* changed);
  void checkpoint_copies(std::uint64_t next);
  // Verifying this rank's memory against an epoch's digest: what it holds (nothing without the
  // digest), each chunk and checksum chunk once (with Verified::settle, W is put right from B as
  // it goes), then the rest and the verdict in the holdings.
  Verified begin_verify(std::int64_t epoch, bool redo) const;
  void verify_chunk(Verified& v, std::int64_t epoch, std::uint64_t j);
  void verify_parity(Verified& v, std::int64_t epoch, std::uint64_t p);
  void verify_item(Verified& v, std::int64_t epoch, std::uint64_t row);
  // Verifies the next item not verified yet; false when there is none.
  bool verify_ahead(Verified& v, std::int64_t epoch);
  void end_verify(Verified& v, std::int64_t epoch);
  void mend(const Verified& v, std::int64_t epoch, const Progress& progress);
  // A rebuilt item taken into B and the digests; its CRCs computed from its bytes, unless the
  // rebuild derived them from the survivors' (RebuildHooks::digests).
  void take_rebuilt_data(std::uint64_t epoch, std::uint64_t j, bool crcs_derived);
  void take_rebuilt_parity(std::uint64_t epoch, std::uint64_t p, bool crcs_derived);
  void take_rebuilt_item(std::uint64_t epoch, std::uint64_t row, Landed& landed, bool crcs_derived);
  Landed nothing_landed() const;
  void finish(const Verified& v, std::int64_t epoch, bool redo,
              std::span<const enc::RowRepair> repairs, Landed& landed);
  void add_group_work(const GroupWork& work, double verify_before, double restore_before);
  // restore's steps: the epoch chosen (the newest candidate verified as the group rebuilds the
  // members that lost it, in verify_rebuilding), then everything settled on it.
  struct Choice;
  Choice choose_epoch(const RestoreInputs& in, const std::function<void()>& prepare);
  bool verify_rebuilding(const RestoreInputs& in, std::int64_t epoch, Verified& mine,
                         Landed& landed, const std::function<void()>& prepare);
  void settle(const RestoreInputs& in, Choice& choice, const std::function<void()>& prepare);

  Mode mode_;
  Effects& fx_;
  RankStore& store_;
  PrivateObjects privates_;
  ControlState state_;
  Phase phase_ = Phase::idle;
  ProtocolStats stats_;
  // Self mode: after a fresh start, a recovery or a failed checkpoint, D says nothing about W.
  bool full_encode_needed_ = true;
  std::chrono::steady_clock::time_point started_;  // of the checkpoint under way
  // Self mode: per parity chunk, the blocks the last checkpoint wrote into its checksum area.
  // The area the next epoch writes still holds the epoch before, so these blocks, unless
  // rewritten, are carried over from C. Meaningful only while full_encode_needed_ is false.
  std::vector<std::uint64_t> parity_written_;
};

const char* phase_name(Protocol::Phase phase) noexcept;

// Copies the blocks in `changed[j]` of every chunk j (all blocks when `changed` is null) of `from`
// into `to`, chunk lists of the same shape, as pieces.
std::vector<Piece> block_pieces(const enc::StripeGeometry& geometry, const enc::ChunkList& from,
                                const enc::ChunkList& to,
                                const std::vector<std::uint64_t>* changed);
// Returns the bytes copied; `progress` is told after each piece.
std::uint64_t copy_pieces(const std::vector<Piece>& pieces, const Progress& progress);
// Copies the blocks of `mask` of one chunk from `from` into `to` (its valid bytes only).
std::uint64_t copy_blocks(const enc::StripeGeometry& geometry, const std::byte* from, std::byte* to,
                          std::uint32_t valid, std::uint64_t mask);
double seconds_since(std::chrono::steady_clock::time_point start);

}  // namespace skt
