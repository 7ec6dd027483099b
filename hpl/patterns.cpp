#include "hpl/patterns.hpp"

#include <algorithm>
#include <cstring>

#include "common/mpi.hpp"

namespace skt::hpl {

namespace {

constexpr std::size_t kMaxMessage = std::size_t{1} << 30;  // doubles per MPI call, below INT_MAX

int count_of(std::size_t n) {
  return static_cast<int>(n);
}

std::vector<int> relative_members(int root, int size, int first) {
  std::vector<int> out;
  for (int k = first; k < size; ++k)
    out.push_back((root + k) % size);
  return out;
}

// Offsets in doubles of the pieces a buffer of `count` doubles is cut into for `parts` ranks.
std::vector<std::size_t> piece_offsets(std::size_t count, std::size_t parts) {
  std::vector<std::size_t> off(parts + 1);
  for (std::size_t i = 0; i <= parts; ++i)
    off[i] = count * i / parts;
  return off;
}

}  // namespace

PanelBroadcast::~PanelBroadcast() {
  if (receive_ != MPI_REQUEST_NULL) {  // left by an error: nothing will arrive any more
    MPI_Cancel(&receive_);
    MPI_Wait(&receive_, MPI_STATUS_IGNORE);
  }
  for (auto& r : sends_) {
    if (r != MPI_REQUEST_NULL) MPI_Wait(&r, MPI_STATUS_IGNORE);
  }
}

void PanelBroadcast::post_send(int dest, const double* data, std::size_t count, int tag) {
  if (count > kMaxMessage) throw std::length_error("panel too large for one message");
  sends_.emplace_back();
  SKT_MPI(MPI_Isend(const_cast<double*>(data), count_of(count), MPI_DOUBLE, dest, tag, comm_,
                    &sends_.back()));
}

void PanelBroadcast::receive(int source, double* data, std::size_t count, int tag) {
  SKT_MPI(MPI_Recv(data, count_of(count), MPI_DOUBLE, source, tag, comm_, MPI_STATUS_IGNORE));
}

void PanelBroadcast::start(MPI_Comm comm, Bcast topology, int root, double* buffer,
                           std::size_t count, int tag) {
  wait();
  comm_ = comm;
  topology_ = topology;
  root_ = root;
  buffer_ = buffer;
  count_ = count;
  tag_ = tag;
  SKT_MPI(MPI_Comm_rank(comm, &me_));
  SKT_MPI(MPI_Comm_size(comm, &size_));
  received_ = size_ == 1 || me_ == root_;
  if (size_ == 1 || me_ != root_) return;
  auto halves = [&](int first) {
    const auto members = relative_members(root_, size_, first);
    const std::size_t half = (members.size() + 1) / 2;
    post_send(members[0], buffer_, count_, tag_);
    if (members.size() > half) post_send(members[half], buffer_, count_, tag_);
  };
  auto scatter = [&](int first) {
    const auto members = relative_members(root_, size_, first);
    const auto off = piece_offsets(count_, members.size());
    for (std::size_t i = 0; i < members.size(); ++i) {
      post_send(members[i], buffer_ + off[i], off[i + 1] - off[i], tag_);
    }
  };
  switch (topology_) {
    case Bcast::ring:
      post_send((root_ + 1) % size_, buffer_, count_, tag_);
      break;
    case Bcast::ring_modified:
      post_send((root_ + 1) % size_, buffer_, count_, tag_);
      if (size_ > 2) post_send((root_ + 2) % size_, buffer_, count_, tag_);
      break;
    case Bcast::two_rings:
      halves(1);
      break;
    case Bcast::two_rings_modified:
      post_send((root_ + 1) % size_, buffer_, count_, tag_);
      if (size_ > 2) halves(2);
      break;
    case Bcast::spread:
      scatter(1);
      break;
    case Bcast::spread_modified:
      post_send((root_ + 1) % size_, buffer_, count_, tag_);
      if (size_ > 2) scatter(2);
      break;
  }
}

std::optional<PanelBroadcast::Link> PanelBroadcast::ring_link() const {
  const int position = (me_ - root_ + size_) % size_;
  // root → members[0] → members[1] → ...
  auto in_chain = [&](const std::vector<int>& members) -> std::optional<Link> {
    const auto it = std::find(members.begin(), members.end(), me_);
    if (it == members.end()) return std::nullopt;
    const auto i = static_cast<std::size_t>(it - members.begin());
    return Link{i == 0 ? root_ : members[i - 1], i + 1 < members.size() ? members[i + 1] : -1};
  };
  // The members from `first` on, in two chains of (nearly) equal length.
  auto in_two_chains = [&](int first) {
    const auto members = relative_members(root_, size_, first);
    const auto half = static_cast<std::ptrdiff_t>((members.size() + 1) / 2);
    const auto link = in_chain(std::vector<int>(members.begin(), members.begin() + half));
    return link ? link : in_chain(std::vector<int>(members.begin() + half, members.end()));
  };
  const bool modified = topology_ == Bcast::ring_modified ||
                        topology_ == Bcast::two_rings_modified ||
                        topology_ == Bcast::spread_modified;
  if (modified && position == 1) return Link{root_, -1};  // the next panel's owner, served first
  switch (topology_) {
    case Bcast::ring:
      return in_chain(relative_members(root_, size_, 1));
    case Bcast::ring_modified:
      return in_chain(relative_members(root_, size_, 2));
    case Bcast::two_rings:
      return in_two_chains(1);
    case Bcast::two_rings_modified:
      return in_two_chains(2);
    case Bcast::spread:
    case Bcast::spread_modified:
      break;
  }
  return std::nullopt;
}

void PanelBroadcast::spread(const std::vector<int>& members) {
  const auto it = std::find(members.begin(), members.end(), me_);
  if (it == members.end()) return;
  const std::size_t n = members.size();
  const auto i = static_cast<std::size_t>(it - members.begin());
  const auto off = piece_offsets(count_, n);
  receive(root_, buffer_ + off[i], off[i + 1] - off[i], tag_);
  // Roll the pieces around the members until each has all of them.
  const int next = members[(i + 1) % n];
  const int prev = members[(i + n - 1) % n];
  for (std::size_t s = 0; s + 1 < n; ++s) {
    const std::size_t out = (i + n - s) % n;
    const std::size_t in = (i + n - s - 1) % n;
    SKT_MPI(MPI_Sendrecv(buffer_ + off[out], count_of(off[out + 1] - off[out]), MPI_DOUBLE, next,
                         tag_, buffer_ + off[in], count_of(off[in + 1] - off[in]), MPI_DOUBLE, prev,
                         tag_, comm_, MPI_STATUS_IGNORE));
  }
}

bool PanelBroadcast::progress() {
  if (received_ || buffer_ == nullptr) return received_;
  const auto link = ring_link();
  if (!link) return false;  // the spread topologies roll pieces in finish
  if (receive_ == MPI_REQUEST_NULL) {
    if (count_ > kMaxMessage) throw std::length_error("panel too large for one message");
    SKT_MPI(MPI_Irecv(buffer_, count_of(count_), MPI_DOUBLE, link->source, tag_, comm_, &receive_));
  }
  int arrived = 0;
  SKT_MPI(MPI_Test(&receive_, &arrived, MPI_STATUS_IGNORE));
  if (arrived == 0) return false;
  if (link->next >= 0) post_send(link->next, buffer_, count_, tag_);
  received_ = true;
  return true;
}

void PanelBroadcast::finish() {
  if (received_ || buffer_ == nullptr) return;
  if (const auto link = ring_link()) {
    if (receive_ == MPI_REQUEST_NULL) {
      receive(link->source, buffer_, count_, tag_);
    } else {
      SKT_MPI(MPI_Wait(&receive_, MPI_STATUS_IGNORE));
    }
    if (link->next >= 0) post_send(link->next, buffer_, count_, tag_);
  } else {
    const int first = topology_ == Bcast::spread_modified ? 2 : 1;
    spread(relative_members(root_, size_, first));
  }
  received_ = true;
}

void PanelBroadcast::wait() {
  if (!sends_.empty()) {
    SKT_MPI(MPI_Waitall(static_cast<int>(sends_.size()), sends_.data(), MPI_STATUSES_IGNORE));
  }
  sends_.clear();
}

void gather_rows(MPI_Comm comm, bool binary_exchange, bool equilibrate,
                 const std::vector<int>& counts, std::size_t width, const double* mine,
                 double* all) {
  int me = 0, size = 1;
  SKT_MPI(MPI_Comm_rank(comm, &me));
  SKT_MPI(MPI_Comm_size(comm, &size));
  const auto p = static_cast<std::size_t>(size);
  std::vector<std::size_t> first(p + 1, 0);  // first row of each rank's contribution
  for (std::size_t r = 0; r < p; ++r)
    first[r + 1] = first[r] + static_cast<std::size_t>(counts[r]);
  const auto u = static_cast<std::size_t>(me);
  // `mine` may be null when this rank has no rows, or already in its place in `all`.
  if (first[u + 1] > first[u] && mine != all + first[u] * width) {
    std::memcpy(all + first[u] * width, mine, (first[u + 1] - first[u]) * width * sizeof(double));
  }
  if (size == 1) return;
  constexpr int kTag = 0x5a5;
  auto rows = [&](std::size_t begin, std::size_t end) { return count_of((end - begin) * width); };

  if (binary_exchange) {
    // Recursive doubling over the largest power of two; the ranks beyond it hand their rows to a
    // partner first and get everything back at the end.
    int pow2 = 1;
    while (pow2 * 2 <= size)
      pow2 *= 2;
    const bool extra = me >= pow2;
    if (extra) {
      const auto partner = static_cast<std::size_t>(me - pow2);
      SKT_MPI(MPI_Send(all + first[u] * width, rows(first[u], first[u + 1]), MPI_DOUBLE,
                       static_cast<int>(partner), kTag, comm));
      SKT_MPI(MPI_Recv(all, rows(0, first[p]), MPI_DOUBLE, static_cast<int>(partner), kTag, comm,
                       MPI_STATUS_IGNORE));
      return;
    }
    if (me + pow2 < size) {
      const auto partner = static_cast<std::size_t>(me + pow2);
      SKT_MPI(MPI_Recv(all + first[partner] * width, rows(first[partner], first[partner + 1]),
                       MPI_DOUBLE, static_cast<int>(partner), kTag, comm, MPI_STATUS_IGNORE));
    }
    // At step k a rank holds the ranks of its aligned group of 2^k (and their extras).
    for (int k = 1; k < pow2; k *= 2) {
      const int partner = me ^ k;
      const auto my_low = static_cast<std::size_t>(me & ~(k - 1));
      const auto their_low = static_cast<std::size_t>(partner & ~(k - 1));
      const auto span = static_cast<std::size_t>(k);
      std::vector<MPI_Request> requests;
      auto exchange = [&](std::size_t mine_lo, std::size_t theirs_lo) {
        // Ranks [lo, lo+k) are contiguous in `all`, and so are their extras [lo+pow2, ...).
        for (const std::size_t shift : {std::size_t{0}, static_cast<std::size_t>(pow2)}) {
          const std::size_t a0 = std::min(p, mine_lo + shift),
                            a1 = std::min(p, mine_lo + shift + span);
          const std::size_t b0 = std::min(p, theirs_lo + shift),
                            b1 = std::min(p, theirs_lo + shift + span);
          if (first[a1] > first[a0]) {
            requests.emplace_back();
            SKT_MPI(MPI_Isend(all + first[a0] * width, rows(first[a0], first[a1]), MPI_DOUBLE,
                              partner, kTag, comm, &requests.back()));
          }
          if (first[b1] > first[b0]) {
            requests.emplace_back();
            SKT_MPI(MPI_Irecv(all + first[b0] * width, rows(first[b0], first[b1]), MPI_DOUBLE,
                              partner, kTag, comm, &requests.back()));
          }
        }
      };
      exchange(my_low, their_low);
      SKT_MPI(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE));
    }
    if (me + pow2 < size) {
      SKT_MPI(MPI_Send(all, rows(0, first[p]), MPI_DOUBLE, me + pow2, kTag, comm));
    }
    return;
  }

  // Spread-roll. With equilibration, rank r first collects the r-th equal share of `all` (in the
  // final order), so that every step of the roll moves as much as any other. Shares are counted
  // in doubles, not rows: a rank's contribution may be laid out any way (its rows column by
  // column, say), and only the contributions' order in `all` is fixed.
  std::vector<std::size_t> block(p + 1);  // in doubles
  std::vector<std::size_t> owned(p + 1);
  for (std::size_t r = 0; r <= p; ++r)
    owned[r] = first[r] * width;
  auto doubles = [&](std::size_t begin, std::size_t end) { return count_of(end - begin); };
  if (equilibrate) {
    for (std::size_t r = 0; r <= p; ++r)
      block[r] = owned[p] * r / p;
    std::vector<MPI_Request> requests;
    for (std::size_t q = 0; q < p; ++q) {
      if (q == u) continue;
      // What I own of q's share goes to q; what q owns of my share comes to me.
      const std::size_t s0 = std::max(owned[u], block[q]),
                        s1 = std::min(owned[u + 1], block[q + 1]);
      if (s1 > s0) {
        requests.emplace_back();
        SKT_MPI(MPI_Isend(all + s0, doubles(s0, s1), MPI_DOUBLE, static_cast<int>(q), kTag, comm,
                          &requests.back()));
      }
      const std::size_t r0 = std::max(owned[q], block[u]),
                        r1 = std::min(owned[q + 1], block[u + 1]);
      if (r1 > r0) {
        requests.emplace_back();
        SKT_MPI(MPI_Irecv(all + r0, doubles(r0, r1), MPI_DOUBLE, static_cast<int>(q), kTag, comm,
                          &requests.back()));
      }
    }
    SKT_MPI(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE));
  } else {
    block = owned;
  }
  const int next = (me + 1) % size;
  const int prev = (me + size - 1) % size;
  for (std::size_t s = 0; s + 1 < p; ++s) {
    const std::size_t out = (u + p - s) % p;
    const std::size_t in = (u + p - s - 1) % p;
    SKT_MPI(MPI_Sendrecv(all + block[out], doubles(block[out], block[out + 1]), MPI_DOUBLE, next,
                         kTag, all + block[in], doubles(block[in], block[in + 1]), MPI_DOUBLE, prev,
                         kTag, comm, MPI_STATUS_IGNORE));
  }
}

}  // namespace skt::hpl
