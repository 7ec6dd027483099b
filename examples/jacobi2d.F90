! jacobi2d: the 2-D heat equation by explicit Jacobi steps on an nx x ny grid, cut into slabs of
! columns, one per rank, with halo columns exchanged between neighbours every step. In Fortran.
!
! Built twice: plain (MPI only), and with -DUSE_SELFCKPT, where the two arrays live in the
! self-checkpointed workspace (use selfckpt) and a relaunch after a failure resumes at the last
! checkpoint. The difference between the two builds is every line under USE_SELFCKPT below.
!
!   mpirun -n 4 jacobi2d [nx ny steps checkpoint_every]      (defaults 256 256 400 25)
!
! Prints "RESULT <hex digest of the final grid>": the same, bit for bit, for both builds and
! whatever failures happened on the way.
program jacobi2d
  use mpi
  use, intrinsic :: iso_fortran_env, only: int64, real64, error_unit
#ifdef USE_SELFCKPT
  use selfckpt
#endif
  implicit none
  integer :: rank, size, ierr, nx, ny, steps, every, x0, columns, left, right, x, y, r
  integer :: step
  real(real64), pointer :: a(:, :), b(:, :), u(:, :), v(:, :)
  real(real64), parameter :: alpha = 0.2_real64
  integer(int64) :: mine
  integer(int64), allocatable :: all(:)
  character(len=32) :: arg
#ifdef USE_SELFCKPT
  type(skt_context) :: ctx
  integer(int64) :: epoch
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
  if (epoch == 0) then
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
  mine = 0
  do x = 1, columns
    do y = 1, ny
      mine = mix(mine, transfer(u(y, x), 0_int64))
    end do
  end do
  allocate (all(size))
  call MPI_Gather(mine, 1, MPI_INTEGER8, all, 1, MPI_INTEGER8, 0, MPI_COMM_WORLD, ierr)
  if (rank == 0) then
    mine = 0
    do r = 1, size
      mine = mix(mine, all(r))
    end do
    write (*, '(a,z16.16,a,i0,a)') 'RESULT ', mine, ' after ', steps, ' steps'
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
#endif

end program jacobi2d
