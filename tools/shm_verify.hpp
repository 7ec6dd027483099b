// skt-shm verify: scrubs the committed checkpoints of a job, one group at a time, across every
// node that runs a process of this command (mpirun with one process per node, or one process
// alone when a single host holds the whole job).
#pragma once

#include <functional>
#include <string>

#include "libselfckpt/internal/format.hpp"

namespace skt::tools {

// Reads the checkpoint segments `wanted` selects: every block of each committed copy and checksum
// against the CRC its epoch's digest keeps (which locates the damage), and each row's checksum
// against the copies. With `repair`, damaged items are rebuilt from the rest of their rows (up to
// the code's tolerance per row) and verified again. Exit status: 0 every group verified clean (or
// repaired), 1 corruption found (and not repaired), 2 some group could not be verified (and none
// found corrupt). Collective over MPI_COMM_WORLD; only its rank 0 prints.
int verify_job(const std::function<bool(const SegmentHeader&)>& wanted, int max_rows_shown,
               bool repair);

}  // namespace skt::tools
