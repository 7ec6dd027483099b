#!/usr/bin/env python3
"""A 2-D heat equation with mpi4py and numpy, on selfckpt: the grid lives in the workspace, a
relaunch after a failure resumes at the last checkpoint. Without selfckpt (--plain) it is the
same program on plain numpy arrays; the lines that differ are those under `if plain`.

  mpirun -n 4 python3 heat2d.py [nx ny steps checkpoint_every] [--plain]   (64 64 200 20)

Rows are split over the ranks, each holding one halo row above and below. Prints "RESULT <hex
digest of the final grid>": the same, bit for bit, for both versions and after any failure the
library recovers."""

import hashlib
import sys

import numpy as np
from mpi4py import MPI


def main(argv):
    plain = "--plain" in argv
    numbers = [int(a) for a in argv if a != "--plain"]
    nx, ny, steps, every = (numbers + [64, 64, 200, 20][len(numbers):])[:4]
    comm = MPI.COMM_WORLD
    rank, size = comm.rank, comm.size
    if ny < size or nx < 3 or steps < 0 or every < 1:
        if rank == 0:
            print("heat2d: need nx >= 3, ny >= ranks, steps >= 0, every >= 1", file=sys.stderr)
        return 2
    rows = ny // size + (1 if rank < ny % size else 0)
    first_row = rank * (ny // size) + min(rank, ny % size)

    step = np.zeros(1, np.int64)
    if plain:
        grids = [np.zeros((rows + 2, nx)), np.zeros((rows + 2, nx))]
        epoch = 0
    else:
        import selfckpt
        try:
            selfckpt.init(comm)
            grids = [selfckpt.array("a", (rows + 2, nx)), selfckpt.array("b", (rows + 2, nx))]
            selfckpt.protect("step", step)
            epoch = selfckpt.recover()
        except selfckpt.Error as error:
            print(f"heat2d rank {rank}: {error}", file=sys.stderr)
            return error.exit_code
        if epoch and rank == 0:
            print(f"restored epoch {epoch} at step {step[0]}")
    if epoch == 0:
        for grid in grids:
            grid[:] = 0.0
            # A hot square in the middle of the global grid; the edges stay cold.
            y = np.arange(first_row, first_row + rows)
            hot = (abs(y - ny // 2) < ny // 4)[:, None] & (abs(np.arange(nx) - nx // 2) < nx // 4)[None, :]
            grid[1:-1][hot] = 100.0

    up = rank - 1 if rank > 0 else MPI.PROC_NULL
    down = rank + 1 if rank < size - 1 else MPI.PROC_NULL
    while step[0] < steps:
        old, new = grids[step[0] % 2], grids[(step[0] + 1) % 2]
        comm.Sendrecv(old[1], dest=up, recvbuf=old[-1], source=down)
        comm.Sendrecv(old[-2], dest=down, recvbuf=old[0], source=up)
        if up == MPI.PROC_NULL:
            old[0] = 0.0
        if down == MPI.PROC_NULL:
            old[-1] = 0.0
        inner = old[1:-1, 1:-1]
        new[1:-1, 1:-1] = inner + 0.2 * (old[:-2, 1:-1] + old[2:, 1:-1] + old[1:-1, :-2] + old[1:-1, 2:] -
                                         4.0 * inner)
        step[0] += 1
        if not plain and step[0] % every == 0 and step[0] < steps:
            try:
                selfckpt.checkpoint()
            except selfckpt.Error as error:
                print(f"heat2d rank {rank}: {error}", file=sys.stderr)
                return error.exit_code

    interior = np.ascontiguousarray(grids[steps % 2][1:-1])
    parts = comm.gather(interior.tobytes(), root=0)
    if rank == 0:
        digest = hashlib.blake2b(b"".join(parts), digest_size=8).hexdigest()
        print(f"RESULT {digest} after {steps} steps")
    if not plain:
        selfckpt.finalize(discard=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
