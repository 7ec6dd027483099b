#include "encoders/exchange.hpp"

#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>

#include "encoders/codec.hpp"
#include "encoders/group.hpp"
#include "encoders/link.hpp"
#include "common/mpi.hpp"

namespace skt::enc {

namespace {
constexpr int kStreamTag = 0x5e1;
constexpr int kDirectTag = 0x5e2;
// The pool slot an exchange takes its buffers from (the encoders' other operations use others).
constexpr int kPoolSlot = 3;
}  // namespace

Exchange::Exchange(GroupLink& link, std::size_t chunk_bytes, int depth, ScratchPool* pool,
                   const Codec* codec)
    : link_(link),
      comm_(link.comm()),
      codec_(codec),
      chunk_(chunk_bytes),
      depth_(depth < 1 ? 1 : depth) {
  if (pool == nullptr) {
    own_pool_ = std::make_unique<ScratchPool>();
    pool = own_pool_.get();
  }
  // At most depth_ buffers wait in each of: sends, stream receives, bounced direct receives; the
  // caller holds at most two more (one taken, one acquired). One more holds zeros.
  const int count = 3 * depth_ + 2;
  std::byte* block = pool->get(kPoolSlot, static_cast<std::size_t>(count + 1) * chunk_);
  for (int i = 0; i < count; ++i) {
    buffers_.push_back(block + static_cast<std::size_t>(i) * chunk_);
    free_buffers_.push_back(count - 1 - i);
  }
  zeros_ = block + static_cast<std::size_t>(count) * chunk_;
  std::memset(zeros_, 0, chunk_);
  requests_.assign(static_cast<std::size_t>(3 * depth_), MPI_REQUEST_NULL);
  slots_.resize(requests_.size());
  completed_.resize(requests_.size());
}

Exchange::~Exchange() {
  for (std::size_t i = 0; i < requests_.size(); ++i) {
    if (slots_[i].kind == Kind::send) {
      GroupLink::abandon_sends(&requests_[i], 1);
    } else {
      GroupLink::abandon_receives(&requests_[i], 1);
    }
  }
}

std::byte* Exchange::buffer(int id) const {
  return buffers_[static_cast<std::size_t>(id)];
}

int Exchange::free_slot() {
  for (std::size_t i = 0; i < requests_.size(); ++i) {
    if (slots_[i].kind == Kind::idle) return static_cast<int>(i);
  }
  throw std::logic_error("exchange: no free request slot");
}

void Exchange::post(int slot, Kind kind, void* data, int peer, int tag, bool receive) {
  const auto i = static_cast<std::size_t>(slot);
  slots_[i].kind = kind;
  const int count = static_cast<int>(chunk_);
  if (receive) {
    SKT_MPI(MPI_Irecv(data, count, MPI_BYTE, peer, tag, comm_, &requests_[i]));
  } else {
    SKT_MPI(MPI_Isend(data, count, MPI_BYTE, peer, tag, comm_, &requests_[i]));
  }
}

void Exchange::top_up() {
  while (stream_posted_ < stream_total_ &&
         stream_items_.size() < static_cast<std::size_t>(depth_) && !free_buffers_.empty()) {
    const int slot = free_slot();
    const int id = acquire();
    slots_[static_cast<std::size_t>(slot)].buffer = id;
    slots_[static_cast<std::size_t>(slot)].sequence = stream_posted_;
    stream_items_.push_back({id, false});
    post(slot, Kind::stream, buffer(id), stream_source_, kStreamTag, true);
    ++stream_posted_;
  }
  while (direct_posted_ < direct_total_ &&
         direct_posted_ - direct_done_ < static_cast<std::uint64_t>(depth_)) {
    const Landing landing = direct_where_(direct_posted_);
    const int slot = free_slot();
    auto& s = slots_[static_cast<std::size_t>(slot)];
    s.landing = landing;
    s.buffer = -1;
    s.sequence = direct_posted_;
    void* target = landing.data;
    if (landing.bytes < chunk_ || landing.add != nullptr) {
      if (free_buffers_.empty()) break;
      s.buffer = acquire();
      target = buffer(s.buffer);
    }
    post(slot, Kind::direct, target, direct_source_, kDirectTag, true);
    ++direct_posted_;
  }
}

void Exchange::complete(int slot) {
  auto& s = slots_[static_cast<std::size_t>(slot)];
  std::optional<std::uint64_t> landed;
  switch (s.kind) {
    case Kind::send:
      if (s.buffer >= 0) release(s.buffer);
      --sends_in_flight_;
      break;
    case Kind::stream:
      stream_items_[s.sequence - stream_taken_].done = true;
      break;
    case Kind::direct:
      if (s.buffer >= 0) {
        if (s.landing.add != nullptr) {
          codec_->combine(s.landing.data, s.landing.add, buffer(s.buffer), s.landing.bytes,
                          Codec::identity);
        } else if (s.landing.bytes > 0) {
          std::memcpy(s.landing.data, buffer(s.buffer), s.landing.bytes);
        }
        release(s.buffer);
      }
      ++direct_done_;
      if (direct_landed_) landed = s.sequence;
      break;
    case Kind::idle:
      break;
  }
  s = Slot{};
  // After the slot is free: the hook may throw (a fault point), which unwinds the exchange.
  if (landed) direct_landed_(*landed);
}

void Exchange::progress() {
  const int n = static_cast<int>(requests_.size());
  bool any = false;
  for (const auto& r : requests_)
    any = any || r != MPI_REQUEST_NULL;
  if (!any) throw std::logic_error("exchange: waiting with nothing in flight");
  int count = 0;
  if (idle_) {
    count = link_.test_some(n, requests_.data(), completed_.data());
    if (count == 0) {
      if (idle_()) return;  // the caller looks again
      idle_ = {};           // nothing left to do while waiting
    }
  }
  if (!idle_ && count == 0) count = link_.wait_some(n, requests_.data(), completed_.data());
  for (int k = 0; k < count; ++k)
    complete(completed_[static_cast<std::size_t>(k)]);
  top_up();
}

void Exchange::expect_stream(int source, std::uint64_t count) {
  stream_source_ = source;
  stream_total_ = count;
  stream_posted_ = 0;
  stream_taken_ = 0;
  stream_items_.clear();
  top_up();
}

void Exchange::expect_direct(int source, std::uint64_t count,
                             std::function<Landing(std::uint64_t)> where,
                             std::function<void(std::uint64_t)> landed) {
  direct_source_ = source;
  direct_total_ = count;
  direct_posted_ = 0;
  direct_done_ = 0;
  direct_where_ = std::move(where);
  direct_landed_ = std::move(landed);
  top_up();
}

int Exchange::take() {
  if (stream_taken_ >= stream_total_) throw std::logic_error("exchange: stream exhausted");
  while (stream_items_.empty() || !stream_items_.front().done)
    progress();
  const int id = stream_items_.front().buffer;
  stream_items_.pop_front();
  ++stream_taken_;
  top_up();
  return id;
}

int Exchange::acquire() {
  while (free_buffers_.empty())
    progress();
  const int id = free_buffers_.back();
  free_buffers_.pop_back();
  return id;
}

void Exchange::release(int id) {
  free_buffers_.push_back(id);
}

void Exchange::issue_send(int dest, bool direct, const std::byte* data, int owned) {
  while (sends_in_flight_ >= depth_)
    progress();
  const int slot = free_slot();
  slots_[static_cast<std::size_t>(slot)].buffer = owned;
  ++sends_in_flight_;
  post(slot, Kind::send, const_cast<std::byte*>(data), dest, direct ? kDirectTag : kStreamTag,
       false);
}

void Exchange::send(int dest, bool direct, const std::byte* data) {
  issue_send(dest, direct, data, -1);
}

void Exchange::send_buffer(int dest, bool direct, int id) {
  issue_send(dest, direct, buffer(id), id);
}

void Exchange::finish() {
  while (direct_done_ < direct_total_ || sends_in_flight_ > 0 || stream_taken_ < stream_total_) {
    if (direct_done_ >= direct_total_ && sends_in_flight_ == 0) {
      throw std::logic_error("exchange: stream chunks left untaken");
    }
    progress();
  }
}

}  // namespace skt::enc
