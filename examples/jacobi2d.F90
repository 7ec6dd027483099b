! jacobi2d: the 2-D heat equation by explicit Jacobi steps on an nx x ny grid, cut into slabs of
! columns, one per rank, with halo columns exchanged between neighbours every step. In Fortran.
!
! Built twice: plain (MPI only), and with -DUSE_SELFCKPT, where the two arrays live in the
! self-checkpointed workspace (use selfckpt) and a relaunch after a failure resumes at the last
! checkpoint. The difference between the two builds is every line under USE_SELFCKPT below.
!
!   mpirun -n 4 jacobi2d [nx ny steps checkpoint_every]      (defaults 256 256 400 25)
!
! Prints "RESULT <hex digest of the final grid>": the same, bit for bit, for both builds, any
! number of ranks, and whatever failures happened on the way.
!
! With JACOBI2D_FROM=<job tag> (selfckpt build), a fresh start takes the grid and step from that
! job's last epoch, whatever number of ranks it ran on: each rank reads its columns from the old
! ranks that held them (skt_epoch_read), then checkpoints under its own tag.
program jacobi2d
  use mpi
  use, intrinsic :: iso_fortran_env, only: int64, real64, error_unit
#ifdef USE_SELFCKPT
  use selfckpt
  use, intrinsic :: iso_c_binding, only: c_int, c_loc, c_ptr, c_size_t, c_sizeof
#endif
  implicit none
  integer :: rank, size, ierr, nx, ny, steps, every, x0, columns, left, right, x, y, r
  integer :: step
  real(real64), pointer :: a(:, :), b(:, :), u(:, :), v(:, :)
  real(real64), parameter :: alpha = 0.2_real64
  integer(int64), allocatable :: mine(:), all(:)
  integer, allocatable :: counts(:), displs(:)
  character(len=32) :: arg
#ifdef USE_SELFCKPT
  type(skt_context) :: ctx
  integer(int64) :: epoch
  character(len=64) :: from
  integer :: from_length
  logical :: initialise
#endif

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, size, ierr)
  nx = argument(1, 256); ny = argument(2, 256); steps = argument(3, 400); every = argument(4, 25)
  if (nx < size .or. ny < 3 .or. steps < 1 .or. every < 1) then
    if (rank == 0) write (error_unit, '(a)') 'jacobi2d: need nx >= ranks, ny >= 3, steps, every >= 1'
    call MPI_Finalize(ierr)
    stop 2
  end if
  ! This rank's columns x0+1 .. x0+columns, with a halo column on each side (0 and columns+1).
  x0 = nx * rank / size
  columns = nx * (rank + 1) / size - x0
  step = 0
#ifdef USE_SELFCKPT
  call skt_init(MPI_COMM_WORLD, ctx, ierr)
  call check('skt_init')
  call skt_alloc(ctx, 'a', [ny, columns + 2], a, ierr)
  call check('skt_alloc a')
  call skt_alloc(ctx, 'b', [ny, columns + 2], b, ierr)
  call check('skt_alloc b')
  a(1:, 0:) => a
  b(1:, 0:) => b
  call skt_protect(ctx, 'step', step, ierr)
  call check('skt_protect')
  call skt_recover(ctx, epoch, ierr)
  call check('skt_recover')
  if (epoch > 0 .and. rank == 0) write (*, '(a,i0,a,i0)') 'restored epoch ', epoch, ' at step ', step
  initialise = epoch == 0
  call get_environment_variable('JACOBI2D_FROM', from, from_length)
  if (initialise .and. from_length > 0) then
    call resume_from(trim(from))
    ! The new shape's own checkpoint at once: from here on the old job is not needed.
    call skt_checkpoint(ctx, ierr)
    call check('skt_checkpoint')
    initialise = .false.
  end if
  if (initialise) then
#else
  allocate (a(ny, 0:columns + 1), b(ny, 0:columns + 1))
#endif
    a = 0
    b = 0
    do x = 1, columns
      do y = 1, ny
        a(y, x) = real(mod((x0 + x) * 7 + y * 13, 97), real64) / 97.0_real64
      end do
    end do
#ifdef USE_SELFCKPT
  end if
#endif

  left = merge(rank - 1, MPI_PROC_NULL, rank > 0)
  right = merge(rank + 1, MPI_PROC_NULL, rank < size - 1)
  do while (step < steps)
    ! Even steps go from a to b, odd ones from b to a: the step number says which is current.
    if (mod(step, 2) == 0) then
      u => a; v => b
    else
      u => b; v => a
    end if
    call MPI_Sendrecv(u(:, 1), ny, MPI_DOUBLE_PRECISION, left, 0, u(:, columns + 1), ny, &
        MPI_DOUBLE_PRECISION, right, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
    call MPI_Sendrecv(u(:, columns), ny, MPI_DOUBLE_PRECISION, right, 1, u(:, 0), ny, &
        MPI_DOUBLE_PRECISION, left, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
    do x = 1, columns
      do y = 1, ny
        if (y == 1 .or. y == ny .or. x0 + x == 1 .or. x0 + x == nx) then
          v(y, x) = u(y, x)  ! fixed boundary
        else
          v(y, x) = u(y, x) + alpha * (u(y - 1, x) + u(y + 1, x) + u(y, x - 1) + u(y, x + 1) &
              - 4.0_real64 * u(y, x))
        end if
      end do
    end do
    step = step + 1
#ifdef USE_SELFCKPT
    if (mod(step, every) == 0 .and. step < steps) then
      call skt_checkpoint(ctx, ierr)
      call check('skt_checkpoint')
    end if
#endif
  end do

  if (mod(steps, 2) == 0) then
    u => a
  else
    u => b
  end if
  ! A digest per column, combined in column order: the same whatever the number of ranks.
  allocate (mine(columns), all(nx), counts(size), displs(size))
  do x = 1, columns
    mine(x) = 0
    do y = 1, ny
      mine(x) = mix(mine(x), transfer(u(y, x), 0_int64))
    end do
  end do
  do r = 1, size
    displs(r) = nx * (r - 1) / size
    counts(r) = nx * r / size - displs(r)
  end do
  call MPI_Gatherv(mine, columns, MPI_INTEGER8, all, counts, displs, MPI_INTEGER8, 0, &
      MPI_COMM_WORLD, ierr)
  if (rank == 0) then
    mine(1) = 0
    do x = 1, nx
      mine(1) = mix(mine(1), all(x))
    end do
    write (*, '(a,z16.16,a,i0,a)') 'RESULT ', mine(1), ' after ', steps, ' steps'
  end if
#ifdef USE_SELFCKPT
  call skt_finalize(ctx, .true., ierr)
#endif
  call MPI_Finalize(ierr)

contains

  integer function argument(i, default)
    integer, intent(in) :: i, default
    integer :: status
    argument = default
    if (command_argument_count() >= i) then
      call get_command_argument(i, arg)
      read (arg, *, iostat=status) argument
      if (status /= 0) argument = -1
    end if
  end function argument

  ! A digest step without overflow: rotate, then exclusive or.
  integer(int64) function mix(h, bits)
    integer(int64), intent(in) :: h, bits
    mix = ieor(ishftc(h, 13), bits)
    mix = ieor(mix, ishft(mix, -7))
  end function mix

#ifdef USE_SELFCKPT
  ! A failed call: its message, and the exit code a restart daemon expects.
  subroutine check(what)
    character(len=*), intent(in) :: what
    if (ierr /= SKT_OK) then
      write (error_unit, '(a,i0,4a)') 'jacobi2d rank ', rank, ': ', what, ': ', skt_last_error()
      stop skt_exit_code(ierr), quiet=.true.
    end if
  end subroutine check

  ! The grid and step of job `job`'s last epoch, which may have run on another number of ranks:
  ! each of this rank's columns is read from the old rank that held it, into the array the step
  ! makes current. A grid of another size is refused on every rank (exit 2).
  subroutine resume_from(job)
    character(len=*), intent(in) :: job
    type(skt_epoch) :: old
    integer :: n, in_memory, q, wrong
    integer(int64) :: number
    integer(c_size_t) :: held
    integer, allocatable :: ranks(:)
    character(len=1), allocatable :: names(:)
    integer(c_size_t), allocatable :: offsets(:), sizes(:)
    type(c_ptr), allocatable :: buffers(:)
    integer(c_int), target :: old_step
    call skt_epoch_open(MPI_COMM_WORLD, job, old, ierr)
    call check('skt_epoch_open')
    call skt_epoch_ranks(old, n, ierr)
    call skt_epoch_in_memory(old, in_memory, ierr)
    call skt_epoch_number(old, number, ierr)
    call skt_epoch_read(old, [0], ['step'], [0_c_size_t], [c_sizeof(old_step)], [c_loc(old_step)], &
        ierr)
    call check('skt_epoch_read step')
    step = int(old_step)
    if (mod(step, 2) == 0) then
      u => a
    else
      u => b
    end if
    allocate (ranks(columns), names(columns), offsets(columns), sizes(columns), buffers(columns))
    wrong = 0
    do x = 1, columns
      q = 0
      do while (nx * (q + 1) / n <= x0 + x - 1)
        q = q + 1
      end do
      ranks(x) = q
      names(x) = merge('a', 'b', mod(step, 2) == 0)
      offsets(x) = int(x0 + x - nx * q / n, c_size_t) * int(ny, c_size_t) * 8
      sizes(x) = int(ny, c_size_t) * 8
      buffers(x) = c_loc(u(1, x))
      call skt_epoch_region_bytes(old, q, names(x), held, ierr)
      if (ierr /= SKT_OK .or. held /= int(ny, c_size_t) * 8 * (nx * (q + 1) / n - nx * q / n + 2)) then
        if (wrong == 0) write (error_unit, '(3a,i0,a,i0,a,i0,a)') "jacobi2d: job '", job, &
            "' ran another grid: its rank ", q, ' of ', n, ' holds ', held, ' bytes'
        wrong = 1
      end if
    end do
    ! The read is collective: every rank takes part, and a wrong grid is refused on all.
    call MPI_Allreduce(MPI_IN_PLACE, wrong, 1, MPI_INTEGER, MPI_MAX, MPI_COMM_WORLD, ierr)
    if (wrong /= 0) then
      call skt_epoch_close(old, ierr)
      call skt_finalize(ctx, .true., ierr)  ! this job committed nothing; the old one stays
      call MPI_Finalize(ierr)
      stop 2, quiet=.true.
    end if
    call skt_epoch_read(old, ranks, names, offsets, sizes, buffers, ierr)
    call check('skt_epoch_read')
    if (rank == 0) write (*, '(a,i0,3a,i0,a,i0,a,i0)') 'resumed from epoch ', number, " of job '", &
        job, "' (", n, ' ranks, ', in_memory, ' of them in memory) at step ', step
    call skt_epoch_close(old, ierr)
  end subroutine resume_from
#endif

end program jacobi2d
