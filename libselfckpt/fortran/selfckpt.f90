! selfckpt for Fortran: `use selfckpt`, over the C API (iso_c_binding).
!
!   use mpi
!   use selfckpt
!   type(skt_context) :: ctx
!   real(8), pointer :: u(:,:)
!   integer :: step, ierr
!   integer(8) :: epoch
!   call skt_init(MPI_COMM_WORLD, ctx, ierr)
!   call skt_alloc(ctx, "u", [nx, ny], u, ierr)      ! a region of shared memory, any rank 1 to 3
!   call skt_protect(ctx, "step", step, ierr)        ! a small private variable
!   call skt_recover(ctx, epoch, ierr)               ! 0: fresh start; else restored
!   if (epoch == 0) then; u = 0; step = 0; end if    ! write into regions only after this
!   do while (step < steps)
!     ...; step = step + 1
!     if (mod(step, k) == 0) call skt_checkpoint(ctx, ierr)
!   end do
!   call skt_finalize(ctx, .true., ierr)             ! done: remove the job's segments
!
! Every call sets ierr to SKT_OK (0) or a negative SKT_ERR_* code; skt_last_error() gives the
! message and skt_exit_code(ierr) the exit code a restart daemon expects (stop with it). The
! communicator is an integer handle (the mpi module's; with mpi_f08, pass comm%MPI_VAL).
! Regions of other types or ranks: skt_alloc_cptr gives the address, c_f_pointer the array.
module selfckpt
  use, intrinsic :: iso_c_binding
  implicit none
  private

  integer, parameter, public :: SKT_OK = 0, SKT_ERR_ARG = -1, SKT_ERR_CONFIG = -2, &
      SKT_ERR_SHM = -3, SKT_ERR_MPI = -4, SKT_ERR_UNRECOVERABLE = -5, SKT_ERR_MISMATCH = -6, &
      SKT_ERR_STATE = -7, SKT_ERR_NOMEM = -8, SKT_ERR_STALE = -9, SKT_ERR_INTERNAL = -10, &
      SKT_ERR_BUSY = -11

  type, public :: skt_context
    type(c_ptr) :: handle = c_null_ptr
  end type skt_context

  ! Another job's last committed epoch, whatever number of ranks wrote it (skt_epoch_open).
  type, public :: skt_epoch
    type(c_ptr) :: handle = c_null_ptr
  end type skt_epoch

  public :: skt_init, skt_alloc, skt_alloc_cptr, skt_protect, skt_recover, skt_checkpoint, &
      skt_checkpoint_dirty, skt_mark_static, skt_need_checkpoint, skt_finalize, skt_last_error, skt_exit_code, &
      skt_epoch_open, skt_epoch_number, skt_epoch_ranks, skt_epoch_in_memory, skt_epoch_region_bytes, &
      skt_epoch_read, skt_epoch_close

  ! Regions: real and integer arrays of rank 1, 2 or 3; the shape gives the extents.
  interface skt_alloc
    module procedure alloc_r8_1, alloc_r8_2, alloc_r8_3, alloc_r4_1, alloc_r4_2, alloc_r4_3, &
        alloc_i4_1, alloc_i4_2, alloc_i4_3, alloc_i8_1, alloc_i8_2, alloc_i8_3
  end interface skt_alloc

  ! Private variables: scalars and rank-1 arrays of integer and real kinds.
  interface skt_protect
    module procedure protect_i4, protect_i8, protect_r8, protect_i4_1, protect_i8_1, protect_r8_1
  end interface skt_protect

  interface
    integer(c_int) function c_init(comm, config, ctx) bind(c, name="skt_init_fortran")
      import :: c_int, c_ptr
      integer(c_int), value :: comm
      type(c_ptr), value :: config
      type(c_ptr), intent(out) :: ctx
    end function c_init
    integer(c_int) function c_alloc(ctx, name, bytes, ptr) bind(c, name="skt_alloc")
      import :: c_int, c_ptr, c_char, c_size_t
      type(c_ptr), value :: ctx
      character(kind=c_char), dimension(*), intent(in) :: name
      integer(c_size_t), value :: bytes
      type(c_ptr), intent(out) :: ptr
    end function c_alloc
    integer(c_int) function c_protect(ctx, name, ptr, bytes) bind(c, name="skt_protect")
      import :: c_int, c_ptr, c_char, c_size_t
      type(c_ptr), value :: ctx
      character(kind=c_char), dimension(*), intent(in) :: name
      type(c_ptr), value :: ptr
      integer(c_size_t), value :: bytes
    end function c_protect
    integer(c_int) function c_recover(ctx, epoch) bind(c, name="skt_recover")
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: ctx
      integer(c_int64_t), intent(out) :: epoch
    end function c_recover
    integer(c_int) function c_checkpoint(ctx) bind(c, name="skt_checkpoint")
      import :: c_int, c_ptr
      type(c_ptr), value :: ctx
    end function c_checkpoint
    integer(c_int) function c_mark_static(ctx, ptr) bind(c, name="skt_mark_static")
      import :: c_int, c_ptr
      type(c_ptr), value :: ctx, ptr
    end function c_mark_static
    integer(c_int) function c_checkpoint_dirty(ctx, ranges, count) bind(c, name="skt_checkpoint_dirty")
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      type(c_ptr), value :: ranges
      integer(c_size_t), value :: count
    end function c_checkpoint_dirty
    integer(c_int) function c_need_checkpoint(ctx, need) bind(c, name="skt_need_checkpoint")
      import :: c_int, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), intent(out) :: need
    end function c_need_checkpoint
    integer(c_int) function c_finalize(ctx, discard) bind(c, name="skt_finalize")
      import :: c_int, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: discard
    end function c_finalize
    type(c_ptr) function c_last_error() bind(c, name="skt_last_error")
      import :: c_ptr
    end function c_last_error
    integer(c_int) function c_exit_code(code) bind(c, name="skt_exit_code")
      import :: c_int
      integer(c_int), value :: code
    end function c_exit_code
    integer(c_int) function c_epoch_open(comm, job, epoch) bind(c, name="skt_epoch_open_fortran")
      import :: c_int, c_ptr, c_char
      integer(c_int), value :: comm
      character(kind=c_char), dimension(*), intent(in) :: job
      type(c_ptr), intent(out) :: epoch
    end function c_epoch_open
    integer(c_int) function c_epoch_number(epoch, number) bind(c, name="skt_epoch_number")
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: epoch
      integer(c_int64_t), intent(out) :: number
    end function c_epoch_number
    integer(c_int) function c_epoch_ranks(epoch, nranks) bind(c, name="skt_epoch_ranks")
      import :: c_int, c_ptr
      type(c_ptr), value :: epoch
      integer(c_int), intent(out) :: nranks
    end function c_epoch_ranks
    integer(c_int) function c_epoch_in_memory(epoch, nranks) bind(c, name="skt_epoch_in_memory")
      import :: c_int, c_ptr
      type(c_ptr), value :: epoch
      integer(c_int), intent(out) :: nranks
    end function c_epoch_in_memory
    integer(c_int) function c_epoch_region_bytes(epoch, old_rank, name, bytes) &
        bind(c, name="skt_epoch_region_bytes")
      import :: c_int, c_ptr, c_char, c_size_t
      type(c_ptr), value :: epoch
      integer(c_int), value :: old_rank
      character(kind=c_char), dimension(*), intent(in) :: name
      integer(c_size_t), intent(out) :: bytes
    end function c_epoch_region_bytes
    integer(c_int) function c_epoch_read(epoch, pieces, count) bind(c, name="skt_epoch_read")
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: epoch
      type(c_ptr), value :: pieces
      integer(c_size_t), value :: count
    end function c_epoch_read
    integer(c_int) function c_epoch_read_refusing(epoch, why) bind(c, name="skt_epoch_read_refusing")
      import :: c_int, c_ptr, c_char
      type(c_ptr), value :: epoch
      character(kind=c_char), dimension(*), intent(in) :: why
    end function c_epoch_read_refusing
    integer(c_int) function c_epoch_close(epoch) bind(c, name="skt_epoch_close")
      import :: c_int, c_ptr
      type(c_ptr), value :: epoch
    end function c_epoch_close
    integer(c_size_t) function c_strlen(s) bind(c, name="strlen")
      import :: c_size_t, c_ptr
      type(c_ptr), value :: s
    end function c_strlen
  end interface

  ! skt_range of the C API: the region's name (a C string), the first byte and the length.
  type, bind(c) :: c_range
    type(c_ptr) :: region
    integer(c_size_t) :: offset
    integer(c_size_t) :: length
  end type c_range

  ! skt_epoch_piece of the C API: bytes of an old rank's region (its name a C string) to an address.
  type, bind(c) :: c_piece
    integer(c_int) :: old_rank
    type(c_ptr) :: name
    integer(c_size_t) :: offset
    integer(c_size_t) :: bytes
    type(c_ptr) :: buf
  end type c_piece

  ! Holds a Fortran string as a C one for the duration of a call.
  type :: c_string
    character(kind=c_char), allocatable :: text(:)
  end type c_string

contains

  function to_c(text) result(s)
    character(len=*), intent(in) :: text
    type(c_string) :: s
    integer :: i
    allocate (s%text(len_trim(text) + 1))
    do i = 1, len_trim(text)
      s%text(i) = text(i:i)
    end do
    s%text(len_trim(text) + 1) = c_null_char
  end function to_c

  ! Collective over comm. config: a configuration file (optional; else SKT_CONFIG and SKT_*).
  subroutine skt_init(comm, ctx, ierr, config)
    integer, intent(in) :: comm
    type(skt_context), intent(out) :: ctx
    integer, intent(out) :: ierr
    character(len=*), intent(in), optional :: config
    type(c_string), target :: path
    if (present(config)) then
      path = to_c(config)
      ierr = c_init(int(comm, c_int), c_loc(path%text), ctx%handle)
    else
      ierr = c_init(int(comm, c_int), c_null_ptr, ctx%handle)
    end if
  end subroutine skt_init

  ! A region of `bytes` bytes, as an address: for types and ranks skt_alloc does not cover.
  subroutine skt_alloc_cptr(ctx, name, bytes, ptr, ierr)
    type(skt_context), intent(in) :: ctx
    character(len=*), intent(in) :: name
    integer(c_size_t), intent(in) :: bytes
    type(c_ptr), intent(out) :: ptr
    integer, intent(out) :: ierr
    type(c_string) :: c_name
    c_name = to_c(name)
    ierr = c_alloc(ctx%handle, c_name%text, bytes, ptr)
  end subroutine skt_alloc_cptr

  ! The region's address for `count` elements of `element_bytes`, or c_null_ptr with ierr set.
  function region(ctx, name, count, element_bytes, ierr) result(ptr)
    type(skt_context), intent(in) :: ctx
    character(len=*), intent(in) :: name
    integer(c_size_t), intent(in) :: count, element_bytes
    integer, intent(out) :: ierr
    type(c_ptr) :: ptr
    call skt_alloc_cptr(ctx, name, count * element_bytes, ptr, ierr)
  end function region

  subroutine alloc_r8_1(ctx, name, shape, array, ierr)
    type(skt_context), intent(in) :: ctx
    character(len=*), intent(in) :: name
    integer, intent(in) :: shape(1)
    real(c_double), pointer, intent(out) :: array(:)
    integer, intent(out) :: ierr
    type(c_ptr) :: p
    p = region(ctx, name, product(int(shape, c_size_t)), c_sizeof(0.0_c_double), ierr)
    nullify (array)
    if (ierr == SKT_OK) call c_f_pointer(p, array, shape)
  end subroutine alloc_r8_1

  subroutine alloc_r8_2(ctx, name, shape, array, ierr)
    type(skt_context), intent(in) :: ctx
    character(len=*), intent(in) :: name
    integer, intent(in) :: shape(2)
    real(c_double), pointer, intent(out) :: array(:, :)
    integer, intent(out) :: ierr
    type(c_ptr) :: p
    p = region(ctx, name, product(int(shape, c_size_t)), c_sizeof(0.0_c_double), ierr)
    nullify (array)
    if (ierr == SKT_OK) call c_f_pointer(p, array, shape)
  end subroutine alloc_r8_2

  subroutine alloc_r8_3(ctx, name, shape, array, ierr)
    type(skt_context), intent(in) :: ctx
    character(len=*), intent(in) :: name
    integer, intent(in) :: shape(3)
    real(c_double), pointer, intent(out) :: array(:, :, :)
    integer, intent(out) :: ierr
    type(c_ptr) :: p
    p = region(ctx, name, product(int(shape, c_size_t)), c_sizeof(0.0_c_double), ierr)
    nullify (array)
    if (ierr == SKT_OK) call c_f_pointer(p, array, shape)
  end subroutine alloc_r8_3

  subroutine alloc_r4_1(ctx, name, shape, array, ierr)
    type(skt_context), intent(in) :: ctx
    character(len=*), intent(in) :: name
    integer, intent(in) :: shape(1)
    real(c_float), pointer, intent(out) :: array(:)
    integer, intent(out) :: ierr
    type(c_ptr) :: p
    p = region(ctx, name, product(int(shape, c_size_t)), c_sizeof(0.0_c_float), ierr)
    nullify (array)
    if (ierr == SKT_OK) call c_f_pointer(p, array, shape)
  end subroutine alloc_r4_1

  subroutine alloc_r4_2(ctx, name, shape, array, ierr)
    type(skt_context), intent(in) :: ctx
    character(len=*), intent(in) :: name
    integer, intent(in) :: shape(2)
    real(c_float), pointer, intent(out) :: array(:, :)
    integer, intent(out) :: ierr
    type(c_ptr) :: p
    p = region(ctx, name, product(int(shape, c_size_t)), c_sizeof(0.0_c_float), ierr)
    nullify (array)
    if (ierr == SKT_OK) call c_f_pointer(p, array, shape)
  end subroutine alloc_r4_2

  subroutine alloc_r4_3(ctx, name, shape, array, ierr)
    type(skt_context), intent(in) :: ctx
    character(len=*), intent(in) :: name
    integer, intent(in) :: shape(3)
    real(c_float), pointer, intent(out) :: array(:, :, :)
    integer, intent(out) :: ierr
    type(c_ptr) :: p
    p = region(ctx, name, product(int(shape, c_size_t)), c_sizeof(0.0_c_float), ierr)
    nullify (array)
    if (ierr == SKT_OK) call c_f_pointer(p, array, shape)
  end subroutine alloc_r4_3

  subroutine alloc_i4_1(ctx, name, shape, array, ierr)
    type(skt_context), intent(in) :: ctx
    character(len=*), intent(in) :: name
    integer, intent(in) :: shape(1)
    integer(c_int32_t), pointer, intent(out) :: array(:)
    integer, intent(out) :: ierr
    type(c_ptr) :: p
    p = region(ctx, name, product(int(shape, c_size_t)), c_sizeof(0_c_int32_t), ierr)
    nullify (array)
    if (ierr == SKT_OK) call c_f_pointer(p, array, shape)
  end subroutine alloc_i4_1

  subroutine alloc_i4_2(ctx, name, shape, array, ierr)
    type(skt_context), intent(in) :: ctx
    character(len=*), intent(in) :: name
    integer, intent(in) :: shape(2)
    integer(c_int32_t), pointer, intent(out) :: array(:, :)
    integer, intent(out) :: ierr
    type(c_ptr) :: p
    p = region(ctx, name, product(int(shape, c_size_t)), c_sizeof(0_c_int32_t), ierr)
    nullify (array)
    if (ierr == SKT_OK) call c_f_pointer(p, array, shape)
  end subroutine alloc_i4_2

  subroutine alloc_i4_3(ctx, name, shape, array, ierr)
    type(skt_context), intent(in) :: ctx
    character(len=*), intent(in) :: name
    integer, intent(in) :: shape(3)
    integer(c_int32_t), pointer, intent(out) :: array(:, :, :)
    integer, intent(out) :: ierr
    type(c_ptr) :: p
    p = region(ctx, name, product(int(shape, c_size_t)), c_sizeof(0_c_int32_t), ierr)
    nullify (array)
    if (ierr == SKT_OK) call c_f_pointer(p, array, shape)
  end subroutine alloc_i4_3

  subroutine alloc_i8_1(ctx, name, shape, array, ierr)
    type(skt_context), intent(in) :: ctx
    character(len=*), intent(in) :: name
    integer, intent(in) :: shape(1)
    integer(c_int64_t), pointer, intent(out) :: array(:)
    integer, intent(out) :: ierr
    type(c_ptr) :: p
    p = region(ctx, name, product(int(shape, c_size_t)), c_sizeof(0_c_int64_t), ierr)
    nullify (array)
    if (ierr == SKT_OK) call c_f_pointer(p, array, shape)
  end subroutine alloc_i8_1

  subroutine alloc_i8_2(ctx, name, shape, array, ierr)
    type(skt_context), intent(in) :: ctx
    character(len=*), intent(in) :: name
    integer, intent(in) :: shape(2)
    integer(c_int64_t), pointer, intent(out) :: array(:, :)
    integer, intent(out) :: ierr
    type(c_ptr) :: p
    p = region(ctx, name, product(int(shape, c_size_t)), c_sizeof(0_c_int64_t), ierr)
    nullify (array)
    if (ierr == SKT_OK) call c_f_pointer(p, array, shape)
  end subroutine alloc_i8_2

  subroutine alloc_i8_3(ctx, name, shape, array, ierr)
    type(skt_context), intent(in) :: ctx
    character(len=*), intent(in) :: name
    integer, intent(in) :: shape(3)
    integer(c_int64_t), pointer, intent(out) :: array(:, :, :)
    integer, intent(out) :: ierr
    type(c_ptr) :: p
    p = region(ctx, name, product(int(shape, c_size_t)), c_sizeof(0_c_int64_t), ierr)
    nullify (array)
    if (ierr == SKT_OK) call c_f_pointer(p, array, shape)
  end subroutine alloc_i8_3

  subroutine protect_bytes(ctx, name, ptr, bytes, ierr)
    type(skt_context), intent(in) :: ctx
    character(len=*), intent(in) :: name
    type(c_ptr), intent(in) :: ptr
    integer(c_size_t), intent(in) :: bytes
    integer, intent(out) :: ierr
    type(c_string) :: c_name
    c_name = to_c(name)
    ierr = c_protect(ctx%handle, c_name%text, ptr, bytes)
  end subroutine protect_bytes

  subroutine protect_i4(ctx, name, variable, ierr)
    type(skt_context), intent(in) :: ctx
    character(len=*), intent(in) :: name
    integer(c_int32_t), target, intent(inout) :: variable
    integer, intent(out) :: ierr
    call protect_bytes(ctx, name, c_loc(variable), c_sizeof(variable), ierr)
  end subroutine protect_i4

  subroutine protect_i8(ctx, name, variable, ierr)
    type(skt_context), intent(in) :: ctx
    character(len=*), intent(in) :: name
    integer(c_int64_t), target, intent(inout) :: variable
    integer, intent(out) :: ierr
    call protect_bytes(ctx, name, c_loc(variable), c_sizeof(variable), ierr)
  end subroutine protect_i8

  subroutine protect_r8(ctx, name, variable, ierr)
    type(skt_context), intent(in) :: ctx
    character(len=*), intent(in) :: name
    real(c_double), target, intent(inout) :: variable
    integer, intent(out) :: ierr
    call protect_bytes(ctx, name, c_loc(variable), c_sizeof(variable), ierr)
  end subroutine protect_r8

  subroutine protect_i4_1(ctx, name, variable, ierr)
    type(skt_context), intent(in) :: ctx
    character(len=*), intent(in) :: name
    integer(c_int32_t), target, contiguous, intent(inout) :: variable(:)
    integer, intent(out) :: ierr
    call protect_bytes(ctx, name, c_loc(variable), &
        int(size(variable), c_size_t) * int(storage_size(variable) / 8, c_size_t), ierr)
  end subroutine protect_i4_1

  subroutine protect_i8_1(ctx, name, variable, ierr)
    type(skt_context), intent(in) :: ctx
    character(len=*), intent(in) :: name
    integer(c_int64_t), target, contiguous, intent(inout) :: variable(:)
    integer, intent(out) :: ierr
    call protect_bytes(ctx, name, c_loc(variable), &
        int(size(variable), c_size_t) * int(storage_size(variable) / 8, c_size_t), ierr)
  end subroutine protect_i8_1

  subroutine protect_r8_1(ctx, name, variable, ierr)
    type(skt_context), intent(in) :: ctx
    character(len=*), intent(in) :: name
    real(c_double), target, contiguous, intent(inout) :: variable(:)
    integer, intent(out) :: ierr
    call protect_bytes(ctx, name, c_loc(variable), &
        int(size(variable), c_size_t) * int(storage_size(variable) / 8, c_size_t), ierr)
  end subroutine protect_r8_1

  ! Collective: epoch is the restored epoch, 0 on a fresh start.
  subroutine skt_recover(ctx, epoch, ierr)
    type(skt_context), intent(in) :: ctx
    integer(c_int64_t), intent(out) :: epoch
    integer, intent(out) :: ierr
    ierr = c_recover(ctx%handle, epoch)
  end subroutine skt_recover

  ! Collective.
  subroutine skt_checkpoint(ctx, ierr)
    type(skt_context), intent(in) :: ctx
    integer, intent(out) :: ierr
    ierr = c_checkpoint(ctx%handle)
  end subroutine skt_checkpoint

  ! The region whose first element is `first` (e.g. u(1,1)) no longer changes from the next
  ! checkpoint on: later checkpoints skip it (skt_mark_static).
  subroutine skt_mark_static(ctx, first, ierr)
    type(skt_context), intent(in) :: ctx
    type(*), target, intent(in) :: first
    integer, intent(out) :: ierr
    ierr = c_mark_static(ctx%handle, c_loc(first))
  end subroutine skt_mark_static

  ! Collective: an incremental checkpoint; range i is bytes offsets(i) (from 0) to
  ! offsets(i) + lengths(i) - 1 of region regions(i).
  subroutine skt_checkpoint_dirty(ctx, regions, offsets, lengths, ierr)
    type(skt_context), intent(in) :: ctx
    character(len=*), intent(in) :: regions(:)
    integer(c_size_t), intent(in) :: offsets(:), lengths(:)
    integer, intent(out) :: ierr
    type(c_string), allocatable, target :: names(:)
    type(c_range), allocatable, target :: ranges(:)
    integer :: i
    if (size(offsets) /= size(regions) .or. size(lengths) /= size(regions)) then
      ierr = SKT_ERR_ARG
      return
    end if
    allocate (names(size(regions)), ranges(size(regions)))
    do i = 1, size(regions)
      names(i) = to_c(regions(i))
      ranges(i) = c_range(c_loc(names(i)%text), offsets(i), lengths(i))
    end do
    if (size(regions) == 0) then
      ierr = c_checkpoint_dirty(ctx%handle, c_null_ptr, 0_c_size_t)
    else
      ierr = c_checkpoint_dirty(ctx%handle, c_loc(ranges), int(size(ranges), c_size_t))
    end if
  end subroutine skt_checkpoint_dirty

  ! Collective: whether the optimum checkpoint interval has passed (needs SKT_MTBF).
  subroutine skt_need_checkpoint(ctx, need, ierr)
    type(skt_context), intent(in) :: ctx
    logical, intent(out) :: need
    integer, intent(out) :: ierr
    integer(c_int) :: flag
    ierr = c_need_checkpoint(ctx%handle, flag)
    need = flag /= 0
  end subroutine skt_need_checkpoint

  ! Collective. discard: remove the job's segments (the run is complete); else keep them.
  subroutine skt_finalize(ctx, discard, ierr)
    type(skt_context), intent(inout) :: ctx
    logical, intent(in) :: discard
    integer, intent(out) :: ierr
    ierr = c_finalize(ctx%handle, merge(1_c_int, 0_c_int, discard))
    ctx%handle = c_null_ptr
  end subroutine skt_finalize

  ! Collective over comm: the last committed epoch of job `job`, from memory or its drained files.
  subroutine skt_epoch_open(comm, job, epoch, ierr)
    integer, intent(in) :: comm
    character(len=*), intent(in) :: job
    type(skt_epoch), intent(out) :: epoch
    integer, intent(out) :: ierr
    type(c_string) :: c_job
    c_job = to_c(job)
    ierr = c_epoch_open(int(comm, c_int), c_job%text, epoch%handle)
  end subroutine skt_epoch_open

  subroutine skt_epoch_number(epoch, number, ierr)
    type(skt_epoch), intent(in) :: epoch
    integer(c_int64_t), intent(out) :: number
    integer, intent(out) :: ierr
    ierr = c_epoch_number(epoch%handle, number)
  end subroutine skt_epoch_number

  ! How many ranks wrote the epoch.
  subroutine skt_epoch_ranks(epoch, nranks, ierr)
    type(skt_epoch), intent(in) :: epoch
    integer, intent(out) :: nranks
    integer, intent(out) :: ierr
    integer(c_int) :: n
    ierr = c_epoch_ranks(epoch%handle, n)
    nranks = int(n)
  end subroutine skt_epoch_ranks

  ! How many of them are read from memory (the others from their drained files).
  subroutine skt_epoch_in_memory(epoch, nranks, ierr)
    type(skt_epoch), intent(in) :: epoch
    integer, intent(out) :: nranks
    integer, intent(out) :: ierr
    integer(c_int) :: n
    ierr = c_epoch_in_memory(epoch%handle, n)
    nranks = int(n)
  end subroutine skt_epoch_in_memory

  ! The size in bytes of an old rank's region or private object.
  subroutine skt_epoch_region_bytes(epoch, old_rank, name, bytes, ierr)
    type(skt_epoch), intent(in) :: epoch
    integer, intent(in) :: old_rank
    character(len=*), intent(in) :: name
    integer(c_size_t), intent(out) :: bytes
    integer, intent(out) :: ierr
    type(c_string) :: c_name
    c_name = to_c(name)
    ierr = c_epoch_region_bytes(epoch%handle, int(old_rank, c_int), c_name%text, bytes)
  end subroutine skt_epoch_region_bytes

  ! Collective: piece i is bytes(i) bytes from offsets(i) of old rank old_ranks(i)'s region
  ! names(i), to buffers(i) (c_loc of a contiguous target); every rank its own pieces, none
  ! included.
  subroutine skt_epoch_read(epoch, old_ranks, names, offsets, bytes, buffers, ierr)
    type(skt_epoch), intent(in) :: epoch
    integer, intent(in) :: old_ranks(:)
    character(len=*), intent(in) :: names(:)
    integer(c_size_t), intent(in) :: offsets(:), bytes(:)
    type(c_ptr), intent(in) :: buffers(:)
    integer, intent(out) :: ierr
    type(c_string), allocatable, target :: c_names(:)
    type(c_piece), allocatable, target :: pieces(:)
    character(len=200) :: why
    type(c_string) :: c_why
    integer :: i, n
    n = size(old_ranks)
    ! Arrays of other lengths are refused in the collective, so that no rank is left in it.
    if (size(names) /= n .or. size(offsets) /= n .or. size(bytes) /= n .or. size(buffers) /= n) then
      write (why, '(a, 5(i0, a))') 'skt_epoch_read: old_ranks has ', n, ' entries, names ', &
          size(names), ', offsets ', size(offsets), ', bytes ', size(bytes), ', buffers ', &
          size(buffers), ': one entry per piece in each'
      c_why = to_c(why)
      ierr = c_epoch_read_refusing(epoch%handle, c_why%text)
      return
    end if
    allocate (c_names(n), pieces(n))
    do i = 1, n
      c_names(i) = to_c(names(i))
      pieces(i) = c_piece(int(old_ranks(i), c_int), c_loc(c_names(i)%text), offsets(i), bytes(i), &
          buffers(i))
    end do
    if (n == 0) then
      ierr = c_epoch_read(epoch%handle, c_null_ptr, 0_c_size_t)
    else
      ierr = c_epoch_read(epoch%handle, c_loc(pieces), int(n, c_size_t))
    end if
  end subroutine skt_epoch_read

  subroutine skt_epoch_close(epoch, ierr)
    type(skt_epoch), intent(inout) :: epoch
    integer, intent(out) :: ierr
    ierr = c_epoch_close(epoch%handle)
    epoch%handle = c_null_ptr
  end subroutine skt_epoch_close

  ! The message of this thread's last failed call.
  function skt_last_error() result(message)
    character(len=:), allocatable :: message
    type(c_ptr) :: p
    character(kind=c_char), pointer :: chars(:)
    integer :: i, n
    p = c_last_error()
    n = int(c_strlen(p))
    allocate (character(len=n) :: message)
    call c_f_pointer(p, chars, [n])
    do i = 1, n
      message(i:i) = chars(i)
    end do
  end function skt_last_error

  ! The exit code a restart daemon expects for an error code: stop with it.
  integer function skt_exit_code(code)
    integer, intent(in) :: code
    skt_exit_code = int(c_exit_code(int(code, c_int)))
  end function skt_exit_code

end module selfckpt
