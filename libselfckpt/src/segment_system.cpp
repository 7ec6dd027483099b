#include "libselfckpt/src/segment_system.hpp"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "selfckpt/selfckpt.hpp"

namespace skt {

void populate_pages(void* base, std::size_t bytes) {
  // Transparent huge pages, where the administrator allows them for shared memory
  // (transparent_hugepage/shmem_enabled = advise): 512 times fewer pages to map.
  madvise(base, bytes, MADV_HUGEPAGE);
  if (madvise(base, bytes, MADV_POPULATE_WRITE) != 0 && errno != EINVAL) {
    throw Error(errno == ENOMEM ? SKT_ERR_NOMEM : SKT_ERR_SHM,
                fmt::format("cannot back a shared-memory segment of {} bytes: {}", bytes,
                            std::strerror(errno)));
  }
}

bool owned_by_caller(const shmid_ds& ds) {
  const uid_t me = geteuid();
  return ds.shm_perm.uid == me && ds.shm_perm.cuid == me && (ds.shm_perm.mode & 0777) == 0600;
}

std::string reserve_tag(const std::string& job) {
  return job.substr(0, job.find('+'));
}

SegmentIdentity reserve_identity(const std::string& job, const std::string& node, int slot) {
  return SegmentIdentity{static_cast<std::uint32_t>(geteuid()),
                         reserve_tag(job),
                         node,
                         slot,
                         SegmentKind::reserve,
                         kReserveName};
}

}  // namespace skt
