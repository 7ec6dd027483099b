// Pipelined point-to-point transfers of whole chunks, shared by the group operations.
//
// Two kinds of incoming traffic: a *stream* that the caller consumes in order (take), and *direct*
// chunks that land where the caller said. They use different tags, so their windows move
// independently. Every blocking wait progresses every outstanding request and tops up both
// receive windows, so a member never waits on a peer that waits on it.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

namespace skt::enc {

struct Landing {
  std::byte* data = nullptr;       // where the chunk goes
  std::uint32_t bytes = 0;         // how many of its bytes are kept
  const std::byte* add = nullptr;  // if set, data = add + chunk (the codec's addition)
};

class Codec;
class GroupLink;
class ScratchPool;

class Exchange {
 public:
  // `codec` adds incoming chunks to Landing::add when a landing asks for it. Buffers come from
  // `pool` when given (so that they stay mapped if the exchange is abandoned), else are its own.
  Exchange(GroupLink& link, std::size_t chunk_bytes, int depth, ScratchPool* pool,
           const Codec* codec = nullptr);
  // Outstanding requests exist only when an error or a member's abort unwinds the operation:
  // they are abandoned (see GroupLink).
  ~Exchange();
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  void expect_stream(int source, std::uint64_t count);
  // `landed`, when given, is called with a direct chunk's index once it is in place.
  void expect_direct(int source, std::uint64_t count, std::function<Landing(std::uint64_t)> where,
                     std::function<void(std::uint64_t)> landed = {});

  // Work to do while waiting for transfers, a little at a time: called instead of blocking as
  // long as it returns true (there was something to do), so that transfers are checked between
  // two calls.
  void set_idle_work(std::function<bool()> work) { idle_ = std::move(work); }

  // The next stream chunk, as a buffer id the caller then owns.
  int take();
  int acquire();
  void release(int id);
  std::byte* buffer(int id) const;
  const std::byte* zeros() const noexcept { return zeros_; }

  // Sends caller memory that stays untouched until finish().
  void send(int dest, bool direct, const std::byte* data);
  // Sends a buffer, released once delivered.
  void send_buffer(int dest, bool direct, int id);
  // Waits for every expected direct chunk and every send.
  void finish();

 private:
  enum class Kind { idle, send, stream, direct };
  struct Slot {
    Kind kind = Kind::idle;
    int buffer = -1;
    std::uint64_t sequence = 0;
    Landing landing;
  };
  struct StreamItem {
    int buffer;
    bool done;
  };

  int free_slot();
  void post(int slot, Kind kind, void* data, int peer, int tag, bool receive);
  void top_up();
  void progress();
  void complete(int slot);
  void issue_send(int dest, bool direct, const std::byte* data, int owned);

  GroupLink& link_;
  MPI_Comm comm_;
  const Codec* codec_;
  std::size_t chunk_;
  int depth_;
  std::unique_ptr<ScratchPool> own_pool_;
  std::vector<std::byte*> buffers_;
  std::vector<int> free_buffers_;
  std::byte* zeros_ = nullptr;
  std::vector<MPI_Request> requests_;
  std::vector<Slot> slots_;
  std::vector<int> completed_;
  int sends_in_flight_ = 0;

  int stream_source_ = MPI_PROC_NULL;
  std::uint64_t stream_total_ = 0;
  std::uint64_t stream_posted_ = 0;
  std::uint64_t stream_taken_ = 0;
  std::deque<StreamItem> stream_items_;  // posted and not yet taken, oldest first

  int direct_source_ = MPI_PROC_NULL;
  std::uint64_t direct_total_ = 0;
  std::uint64_t direct_posted_ = 0;
  std::uint64_t direct_done_ = 0;
  std::function<Landing(std::uint64_t)> direct_where_;
  std::function<void(std::uint64_t)> direct_landed_;
  std::function<bool()> idle_;
};

}  // namespace skt::enc
