#include "encoders/exchange.hpp"

#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "encoders/codec.hpp"
#include "encoders/mpi_util.hpp"

namespace skt::enc {

namespace {
constexpr int kStreamTag = 0x5e1;
constexpr int kDirectTag = 0x5e2;
constexpr std::size_t kAlignment = 64;
}  // namespace

void Exchange::FreeDeleter::operator()(std::byte* p) const noexcept {
  std::free(p);
}

Exchange::Block Exchange::allocate(std::size_t bytes) {
  const std::size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (p == nullptr) throw std::bad_alloc();
  return Block(static_cast<std::byte*>(p));
}

Exchange::Exchange(MPI_Comm comm, std::size_t chunk_bytes, int depth, const Codec* codec)
    : comm_(comm), codec_(codec), chunk_(chunk_bytes), depth_(depth < 1 ? 1 : depth) {
  // At most depth_ buffers wait in each of: sends, stream receives, bounced direct receives; the
  // caller holds at most two more (one taken, one acquired).
  const int count = 3 * depth_ + 2;
  for (int i = 0; i < count; ++i) {
    buffers_.push_back(allocate(chunk_));
    free_buffers_.push_back(count - 1 - i);
  }
  zeros_ = allocate(chunk_);
  std::memset(zeros_.get(), 0, chunk_);
  requests_.assign(static_cast<std::size_t>(3 * depth_), MPI_REQUEST_NULL);
  slots_.resize(requests_.size());
  completed_.resize(requests_.size());
}

Exchange::~Exchange() {
  // Only reached with requests outstanding when an error unwinds an operation: the job is failing,
  // so cancel what can be cancelled rather than leave MPI writing into freed buffers.
  for (auto& request : requests_) {
    if (request != MPI_REQUEST_NULL) {
      MPI_Cancel(&request);
      MPI_Wait(&request, MPI_STATUS_IGNORE);
    }
  }
}

std::byte* Exchange::buffer(int id) const {
  return buffers_[static_cast<std::size_t>(id)].get();
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
      break;
    case Kind::idle:
      break;
  }
  s = Slot{};
}

void Exchange::progress() {
  const int n = static_cast<int>(requests_.size());
  int count = 0;
  SKT_MPI(MPI_Waitsome(n, requests_.data(), &count, completed_.data(), MPI_STATUSES_IGNORE));
  if (count == MPI_UNDEFINED) throw std::logic_error("exchange: waiting with nothing in flight");
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
                             std::function<Landing(std::uint64_t)> where) {
  direct_source_ = source;
  direct_total_ = count;
  direct_posted_ = 0;
  direct_done_ = 0;
  direct_where_ = std::move(where);
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
