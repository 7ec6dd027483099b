// skt-shm verify: scrubs the committed checkpoints of a job, one group at a time, across every
// node that runs a process of this command (mpirun with one process per node, or one process
// alone when a single host holds the whole job).
#pragma once

#include <functional>
#include <string>

#include "libselfckpt/src/format.hpp"

namespace skt::tools {

// Reads the checkpoint segments `wanted` selects. Exit status: 0 every group verified clean, 1
// corruption found, 2 some group could not be verified (and none found corrupt). Collective over
// MPI_COMM_WORLD; only its rank 0 prints.
int verify_job(const std::function<bool(const SegmentHeader&)>& wanted, int max_rows_shown);

}  // namespace skt::tools
