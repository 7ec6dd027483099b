#!/usr/bin/env python3
"""A 2-D heat equation with mpi4py and numpy, on selfckpt: the grid lives in the workspace, a
relaunch after a failure resumes at the last checkpoint. Without selfckpt (--plain) it is the
same program on plain numpy arrays; the lines that differ are those under `if plain`.

  mpirun -n 4 python3 heat2d.py [nx ny steps checkpoint_every] [--plain]   (64 64 200 20)

Rows are split over the ranks, each holding one halo row above and below. Prints "RESULT <hex
digest of the final grid>": the same, bit for bit, for both versions, any number of ranks, and
after any failure the library recovers. With HEAT2D_FROM=<job tag>, a fresh start takes the grid
and step from that job's last epoch, whatever number of ranks it ran on (selfckpt.Epoch)."""

import hashlib
import os
import sys

import numpy as np
from mpi4py import MPI


def rows_of(rank, size, ny):
    """The first global row a rank holds, and how many."""
    return rank * (ny // size) + min(rank, ny % size), ny // size + (1 if rank < ny % size else 0)


def resume_from(selfckpt, job, comm, grids, step, first_row, nx, ny):
    """The grid and step of job `job`'s last epoch, which may have run on another number of ranks:
    each of this rank's rows is read from the old rank that held it. 0, or the exit code after
    saying why, on every rank alike."""
    with selfckpt.Epoch(job, comm) as old:
        old_step = np.zeros(1, np.int64)
        old.read([(0, "step", 0, old_step)])
        step[0] = old_step[0]
        current, name = grids[step[0] % 2], "ab"[step[0] % 2]
        owners = [rows_of(q, old.ranks, ny) for q in range(old.ranks)]
        pieces, wrong = [], None
        for row in range(first_row, first_row + current.shape[0] - 2):
            q = next(q for q, (first, rows) in enumerate(owners) if first <= row < first + rows)
            held = old.region_bytes(q, name)
            if held != (owners[q][1] + 2) * nx * 8:
                wrong = f"heat2d: job '{job}' ran another grid: its rank {q} holds {held} bytes of '{name}'"
            pieces.append((q, name, (row - owners[q][0] + 1) * nx * 8, current[1 + row - first_row]))
        # The read is collective: every rank takes part, and a wrong grid is refused on all.
        if comm.allreduce(wrong is not None, op=MPI.LOR):
            if wrong:
                print(wrong, file=sys.stderr)
            return 2
        old.read(pieces)
        if comm.rank == 0:
            print(f"resumed from epoch {old.number} of job '{job}' ({old.ranks} ranks, "
                  f"{old.in_memory} of them in memory) at step {step[0]}")
    return 0


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
    first_row, rows = rows_of(rank, size, ny)

    step = np.zeros(1, np.int64)
    if plain:
        grids = [np.zeros((rows + 2, nx)), np.zeros((rows + 2, nx))]
        initialise = True
    else:
        import selfckpt
        try:
            selfckpt.init(comm)
            grids = [selfckpt.array("a", (rows + 2, nx)), selfckpt.array("b", (rows + 2, nx))]
            selfckpt.protect("step", step)
            epoch = selfckpt.recover()
            if epoch and rank == 0:
                print(f"restored epoch {epoch} at step {step[0]}")
            initialise = epoch == 0
            if initialise and os.environ.get("HEAT2D_FROM"):
                code = resume_from(selfckpt, os.environ["HEAT2D_FROM"], comm, grids, step, first_row,
                                   nx, ny)
                if code:  # this job committed nothing: its segments go, the old job stays
                    selfckpt.finalize(discard=True)
                    return code
                selfckpt.checkpoint()  # the new shape's own, at once: the old job is not needed
                initialise = False
        except selfckpt.Error as error:
            print(f"heat2d rank {rank}: {error}", file=sys.stderr)
            return error.exit_code
    if initialise:
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
