! p2p_check.f90 — the shim's Fortran path: a plain `use mpi` program whose
! point-to-point calls go through each MPI's Fortran bindings (MPICH's libmpichfort calls the
! C MPI_Send...; Open MPI's libmpi_mpifh calls PMPI_Send..., so native/mpi/fortran.c takes
! its symbols over). Run with >= 2 ranks; world rank 0 prints one transcript, the same with
! and without the shim; every check that fails prints "FAIL ..." and the program exits 1.
! Covered: ordering per (source, tag) under MPI_ANY_SOURCE / MPI_ANY_TAG over eager and
! rendezvous sizes, statuses (source, tag, MPI_Get_count), isend/irecv with waitall, waitany
! and a test loop, probe/iprobe, ssend, sendrecv, persistent requests, request_free, and the
! same traffic on a dup and a reversed split of the world.
program p2p_check_f
    use mpi
    implicit none
    integer, parameter :: big = 20000          ! 80 000 bytes: past any eager limit
    integer :: ierr, rank, nranks, fails, dup, rev, bsize
    integer :: bsend_space(4096)   ! for mpi_ibsend (MPI needs it; the shim copies on its own)
    fails = 0
    call mpi_init(ierr)
    call mpi_buffer_attach(bsend_space, 4 * size(bsend_space), ierr)
    call mpi_comm_rank(MPI_COMM_WORLD, rank, ierr)
    call mpi_comm_size(MPI_COMM_WORLD, nranks, ierr)
    call mpi_comm_dup(MPI_COMM_WORLD, dup, ierr)
    call mpi_comm_split(MPI_COMM_WORLD, 0, nranks - rank, rev, ierr)
    call suite(MPI_COMM_WORLD, 'world')
    call suite(dup, 'dup')
    call suite(rev, 'reversed split')
    call mpi_comm_free(dup, ierr)
    call mpi_comm_free(rev, ierr)
    call mpi_buffer_detach(bsend_space, bsize, ierr)
    call mpi_allreduce(MPI_IN_PLACE, fails, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
    if (rank == 0) then
        if (fails == 0) then
            print '(a)', 'p2p_check.f90: all passed'
        else
            print '(a,i0,a)', 'p2p_check.f90: ', fails, ' checks failed'
        end if
    end if
    call mpi_finalize(ierr)
    if (fails /= 0) stop 1

contains

    subroutine check(ok, what)
        logical, intent(in) :: ok
        character(*), intent(in) :: what
        if (.not. ok) then
            fails = fails + 1
            print '(a,i0,2a)', 'FAIL rank ', rank, ': ', what
        end if
    end subroutine

    ! Only world rank 0 prints (one process: the transcript's order is fixed); each phase's
    ! checks end in a barrier, so its line is printed only after every rank's checks.
    subroutine say(comm, line)
        integer, intent(in) :: comm
        character(*), intent(in) :: line
        integer :: e
        call mpi_barrier(comm, e)
        if (rank == 0) print '(a)', line
    end subroutine

    subroutine suite(comm, name)
        integer, intent(in) :: comm
        character(*), intent(in) :: name
        integer :: e
        integer :: n
        character(120) :: line
        call ordering(comm, name)
        ! the wildcard receives of ordering must not take the next phase's messages
        call mpi_comm_size(comm, n, e)
        write (line, '(2a,i0,a)') name, ': ordering checked over ', n - 1, &
            ' senders, 3 rounds x 2 sizes'
        call say(comm, trim(line))
        call nonblocking(comm, name)
        call probes_and_modes(comm, name)
        call persistent(comm, name)
        call matched_and_some(comm, name)
    end subroutine

    ! Every other rank sends 3 rounds of (small tag 1, big tag 2) to rank 0, which receives
    ! them with wildcards: per (source, tag) the sequence numbers must come in order.
    subroutine ordering(comm, name)
        integer, intent(in) :: comm
        character(*), intent(in) :: name
        integer :: me, n, e, k, src, tag, cnt, st(MPI_STATUS_SIZE)
        integer :: small(4)
        integer, allocatable :: buf(:)
        integer, allocatable :: seen(:, :)
        call mpi_comm_rank(comm, me, e)
        call mpi_comm_size(comm, n, e)
        allocate(buf(big))
        if (me /= 0) then
            do k = 1, 3
                small = [me, 1, k, -k]
                call mpi_send(small, 4, MPI_INTEGER, 0, 1, comm, e)
                buf = me * 100000 + k
                buf(1) = k
                call mpi_send(buf, big, MPI_INTEGER, 0, 2, comm, e)
            end do
            return
        end if
        ! rank 0 only from here on
        allocate(seen(n - 1, 2))
        seen = 0
        do k = 1, 6 * (n - 1)
            call mpi_recv(buf, big, MPI_INTEGER, MPI_ANY_SOURCE, MPI_ANY_TAG, comm, st, e)
            src = st(MPI_SOURCE)
            tag = st(MPI_TAG)
            call mpi_get_count(st, MPI_INTEGER, cnt, e)
            call check(src >= 1 .and. src < n .and. (tag == 1 .or. tag == 2), name//' status')
            if (src < 1 .or. src >= n .or. tag < 1 .or. tag > 2) cycle
            seen(src, tag) = seen(src, tag) + 1
            if (tag == 1) then
                call check(cnt == 4 .and. buf(1) == src .and. buf(3) == seen(src, 1), &
                           name//' small message order/content')
            else
                call check(cnt == big .and. buf(1) == seen(src, 2) .and. &
                           buf(big) == src * 100000 + seen(src, 2), name//' big message order/content')
            end if
        end do
        call check(all(seen == 3), name//' every message received once')
    end subroutine

    ! A ring: isend to the right, irecv from the left (small and big), waitall with
    ! statuses; then waitany and a test loop over a second round.
    subroutine nonblocking(comm, name)
        integer, intent(in) :: comm
        character(*), intent(in) :: name
        integer :: me, n, e, right, left, k, idx, cnt
        integer :: reqs(4), sts(MPI_STATUS_SIZE, 4), st(MPI_STATUS_SIZE)
        integer :: s1(8), r1(8)
        integer, allocatable :: s2(:), r2(:)
        logical :: flag, done(2)
        call mpi_comm_rank(comm, me, e)
        call mpi_comm_size(comm, n, e)
        right = mod(me + 1, n)
        left = mod(me + n - 1, n)
        allocate(s2(big), r2(big))
        s1 = me
        s2 = me + 7
        r1 = -1
        r2 = -1
        call mpi_irecv(r1, 8, MPI_INTEGER, left, 5, comm, reqs(1), e)
        call mpi_irecv(r2, big, MPI_INTEGER, MPI_ANY_SOURCE, 6, comm, reqs(2), e)
        call mpi_isend(s1, 8, MPI_INTEGER, right, 5, comm, reqs(3), e)
        call mpi_isend(s2, big, MPI_INTEGER, right, 6, comm, reqs(4), e)
        call mpi_waitall(4, reqs, sts, e)
        call mpi_get_count(sts(:, 2), MPI_INTEGER, cnt, e)
        call check(all(r1 == left) .and. all(r2 == left + 7), name//' waitall data')
        call check(sts(MPI_SOURCE, 1) == left .and. sts(MPI_TAG, 1) == 5 .and. &
                   sts(MPI_SOURCE, 2) == left .and. cnt == big, name//' waitall statuses')
        call check(all(reqs == MPI_REQUEST_NULL), name//' waitall nulls the requests')
        ! second round: waitany for the receives, a test loop for the sends
        call mpi_irecv(r1, 8, MPI_INTEGER, left, 7, comm, reqs(1), e)
        call mpi_irecv(r2, big, MPI_INTEGER, left, 8, comm, reqs(2), e)
        call mpi_isend(s2, big, MPI_INTEGER, right, 8, comm, reqs(4), e)
        call mpi_isend(s1, 8, MPI_INTEGER, right, 7, comm, reqs(3), e)
        done = .false.
        do k = 1, 2
            call mpi_waitany(2, reqs(1:2), idx, st, e)
            call check(idx == 1 .or. idx == 2, name//' waitany index')
            if (idx == 1 .or. idx == 2) done(idx) = .true.
            call check(st(MPI_TAG) == 6 + idx, name//' waitany status tag')
        end do
        call check(all(done), name//' waitany completed both')
        flag = .false.
        do while (.not. flag)
            call mpi_testall(2, reqs(3:4), flag, MPI_STATUSES_IGNORE, e)
        end do
        do k = 3, 4
            call mpi_test(reqs(k), flag, MPI_STATUS_IGNORE, e)
            call check(flag .and. reqs(k) == MPI_REQUEST_NULL, name//' test after testall')
        end do
        call say(comm, name//': isend/irecv, waitall, waitany, testall checked')
    end subroutine

    ! Rank 1 -> 0: ssend, probe + get_count, iprobe loop; sendrecv around the ring.
    subroutine probes_and_modes(comm, name)
        integer, intent(in) :: comm
        character(*), intent(in) :: name
        integer :: me, n, e, cnt, st(MPI_STATUS_SIZE), a(100), b(100)
        logical :: flag
        call mpi_comm_rank(comm, me, e)
        call mpi_comm_size(comm, n, e)
        if (me == 1) then
            a = 11
            call mpi_ssend(a, 37, MPI_INTEGER, 0, 9, comm, e)
            call mpi_send(a, 100, MPI_INTEGER, 0, 10, comm, e)
        else if (me == 0) then
            call mpi_probe(MPI_ANY_SOURCE, 9, comm, st, e)
            call mpi_get_count(st, MPI_INTEGER, cnt, e)
            call check(cnt == 37 .and. st(MPI_SOURCE) == 1, name//' probe status')
            call mpi_recv(b, 100, MPI_INTEGER, 1, 9, comm, MPI_STATUS_IGNORE, e)
            flag = .false.
            do while (.not. flag)
                call mpi_iprobe(1, MPI_ANY_TAG, comm, flag, st, e)
            end do
            call check(st(MPI_TAG) == 10, name//' iprobe tag')
            call mpi_recv(b, 100, MPI_INTEGER, 1, 10, comm, st, e)
            call check(all(b == 11), name//' data after probes')
        end if
        a = me
        call mpi_sendrecv(a, 100, MPI_INTEGER, mod(me + 1, n), 11, b, 100, MPI_INTEGER, &
                          mod(me + n - 1, n), 11, comm, st, e)
        call check(all(b == mod(me + n - 1, n)) .and. st(MPI_SOURCE) == mod(me + n - 1, n), &
                   name//' sendrecv')
        call say(comm, name//': ssend, probe, iprobe, sendrecv checked')
    end subroutine

    ! Persistent send/recv started three times around the ring; a freed isend still delivers.
    subroutine persistent(comm, name)
        integer, intent(in) :: comm
        character(*), intent(in) :: name
        integer :: me, n, e, k, reqs(2), freed, s(16), r(16)
        call mpi_comm_rank(comm, me, e)
        call mpi_comm_size(comm, n, e)
        call mpi_send_init(s, 16, MPI_INTEGER, mod(me + 1, n), 12, comm, reqs(1), e)
        call mpi_recv_init(r, 16, MPI_INTEGER, mod(me + n - 1, n), 12, comm, reqs(2), e)
        do k = 1, 3
            s = me * 10 + k
            call mpi_startall(2, reqs, e)
            call mpi_waitall(2, reqs, MPI_STATUSES_IGNORE, e)
            call check(all(r == mod(me + n - 1, n) * 10 + k), name//' persistent round')
            call check(reqs(1) /= MPI_REQUEST_NULL, name//' persistent request stays')
        end do
        call mpi_request_free(reqs(1), e)
        call mpi_request_free(reqs(2), e)
        call check(reqs(1) == MPI_REQUEST_NULL, name//' request_free nulls it')
        s = 99
        call mpi_isend(s, 16, MPI_INTEGER, mod(me + 1, n), 13, comm, freed, e)
        call mpi_request_free(freed, e)
        call mpi_recv(r, 16, MPI_INTEGER, mod(me + n - 1, n), 13, comm, MPI_STATUS_IGNORE, e)
        call check(all(r == 99), name//' freed isend delivered')
        call mpi_barrier(comm, e)   ! s is reused by the next suite: the freed send is done
        call say(comm, name//': persistent and request_free checked')
    end subroutine

    ! Around the ring: issend/irsend/ibsend received by waitsome, a testsome/testany loop,
    ! improbe + imrecv and mprobe + mrecv, request_get_status, a cancelled irecv.
    subroutine matched_and_some(comm, name)
        integer, intent(in) :: comm
        character(*), intent(in) :: name
        integer :: me, n, e, right, left, k, outc, idx(3), cnt, msg, rq, got
        integer :: reqs(3), sreqs(3), sts(MPI_STATUS_SIZE, 3), st(MPI_STATUS_SIZE)
        integer :: a(3, 8), b(3, 8)
        logical :: flag
        call mpi_comm_rank(comm, me, e)
        call mpi_comm_size(comm, n, e)
        right = mod(me + 1, n)
        left = mod(me + n - 1, n)
        do k = 1, 3
            a(k, :) = me * 10 + k
            call mpi_irecv(b(k, 1), 1, MPI_INTEGER, left, 20 + k, comm, reqs(k), e)
        end do
        call mpi_barrier(comm, e)   ! irsend needs the receive posted
        call mpi_issend(a(1, 1), 1, MPI_INTEGER, right, 21, comm, sreqs(1), e)
        call mpi_irsend(a(2, 1), 1, MPI_INTEGER, right, 22, comm, sreqs(2), e)
        call mpi_ibsend(a(3, 1), 1, MPI_INTEGER, right, 23, comm, sreqs(3), e)
        got = 0
        do while (got < 3)
            call mpi_waitsome(3, reqs, outc, idx, sts, e)
            do k = 1, outc
                call check(sts(MPI_TAG, k) == 20 + idx(k) .and. &
                           b(idx(k), 1) == left * 10 + idx(k), name//' waitsome status/data')
            end do
            got = got + outc
        end do
        call mpi_waitsome(3, reqs, outc, idx, sts, e)
        call check(outc == MPI_UNDEFINED, name//' waitsome over null requests')
        got = 0
        do while (got < 3)
            call mpi_testsome(3, sreqs, outc, idx, MPI_STATUSES_IGNORE, e)
            if (outc /= MPI_UNDEFINED) got = got + outc
        end do
        call mpi_testany(3, sreqs, k, flag, st, e)
        ! MPICH 4.0's Fortran mpi_testany_ adds 1 to MPI_UNDEFINED as to any index (natively
        ! too); Open MPI returns MPI_UNDEFINED, as does the shim's Open MPI binding
        call check(flag .and. (k == MPI_UNDEFINED .or. k == MPI_UNDEFINED + 1), &
                   name//' testany over null requests')
        ! matched probes: improbe loop + imrecv, then mprobe + mrecv
        call mpi_send(a(1, :), 8, MPI_INTEGER, right, 30, comm, e)
        call mpi_send(a(2, :), 5, MPI_INTEGER, right, 31, comm, e)
        flag = .false.
        do while (.not. flag)
            call mpi_improbe(left, 30, comm, flag, msg, st, e)
        end do
        call mpi_get_count(st, MPI_INTEGER, cnt, e)
        call mpi_imrecv(b(1, :), cnt, MPI_INTEGER, msg, rq, e)
        call check(msg == MPI_MESSAGE_NULL, name//' imrecv nulls the message')
        call mpi_wait(rq, st, e)
        call check(cnt == 8 .and. all(b(1, :) == left * 10 + 1), name//' improbe + imrecv')
        call mpi_mprobe(MPI_ANY_SOURCE, 31, comm, msg, st, e)
        call mpi_get_count(st, MPI_INTEGER, cnt, e)
        call mpi_mrecv(b(2, :), cnt, MPI_INTEGER, msg, st, e)
        call check(cnt == 5 .and. st(MPI_SOURCE) == left .and. all(b(2, 1:5) == left * 10 + 2), &
                   name//' mprobe + mrecv')
        ! a receive nobody sends to: request_get_status says not done, cancel withdraws it
        call mpi_irecv(b(3, 1), 1, MPI_INTEGER, left, 99, comm, rq, e)
        call mpi_request_get_status(rq, flag, st, e)
        call check(.not. flag, name//' request_get_status of a pending receive')
        call mpi_cancel(rq, e)
        call mpi_wait(rq, st, e)
        call mpi_test_cancelled(st, flag, e)
        call check(flag .and. rq == MPI_REQUEST_NULL, name//' cancelled receive')
        call say(comm, name//': waitsome, testsome, testany, matched probes, cancel checked')
    end subroutine
end program
