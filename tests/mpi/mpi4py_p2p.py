"""mpi4py point-to-point under the PMPI shim, run by tests/engines/test_mpi_shim_programs.py:
numpy buffers (Send/Recv, Isend/Irecv, Sendrecv) and pickled objects (send/recv, which
mpi4py receives with a matched probe, isend/irecv), over eager and rendezvous sizes, with
MPI_ANY_SOURCE / MPI_ANY_TAG and per-(source, tag) order checked. Run with >= 2 ranks; rank
0 prints one transcript (digests of what it received, no timings), the same with and
without the shim; any failed check raises (nonzero exit). The thread level is mpi4py's
default unless MPI4PY_RC_THREAD_LEVEL says otherwise (the default, multiple, turns the shim
off)."""
import hashlib

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
SIZES = [1, 1000, 200_000]          # float64 elements: 8 B, 8 KB, 1.6 MB
lines = []


def say(line: str) -> None:
    if rank == 0:
        lines.append(line)


def digest(a) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()[:16]


def payload(src: int, k: int, n: int) -> np.ndarray:
    return np.arange(n, dtype=np.float64) * (src + 1) + k


# 1. numpy buffers, blocking, wildcards: order per (source, tag) must hold
for n in SIZES:
    if rank:
        for k in range(3):
            comm.Send(payload(rank, k, n), dest=0, tag=n % 7)
    else:
        seen, got = {}, {}
        buf = np.empty(n, dtype=np.float64)
        st = MPI.Status()
        for _ in range(3 * (size - 1)):
            comm.Recv(buf, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=st)
            k = seen.get(st.Get_source(), 0)
            seen[st.Get_source()] = k + 1
            assert st.Get_tag() == n % 7 and st.Get_count(MPI.DOUBLE) == n
            assert np.array_equal(buf, payload(st.Get_source(), k, n)), (n, st.Get_source(), k)
            got[st.Get_source(), k] = digest(buf)
        assert seen == {s: 3 for s in range(1, size)}
        say(f"Send/Recv wildcard order n={n}: " + " ".join(got[key] for key in sorted(got)))
    comm.Barrier()

# 2. numpy buffers, nonblocking ring, Waitall; then Sendrecv
right, left = (rank + 1) % size, (rank - 1) % size
for n in SIZES:
    out = payload(rank, 5, n)
    inn = np.zeros(n, dtype=np.float64)
    reqs = [comm.Irecv(inn, source=left, tag=3), comm.Isend(out, dest=right, tag=3)]
    sts = [MPI.Status(), MPI.Status()]
    MPI.Request.Waitall(reqs, sts)
    assert np.array_equal(inn, payload(left, 5, n)) and sts[0].Get_source() == left
    sr = np.zeros(n, dtype=np.float64)
    comm.Sendrecv(out, dest=right, sendtag=4, recvbuf=sr, source=left, recvtag=4)
    assert np.array_equal(sr, inn)
    d = comm.gather(digest(inn), root=0)
    if rank == 0:
        say(f"Isend/Irecv/Waitall + Sendrecv ring n={n}: {' '.join(d)}")

# 3. pickled objects: send/recv (matched probe inside mpi4py), isend/irecv, any source
obj = {"rank": rank, "list": list(range(rank * 3)), "arr": payload(rank, 1, 20_000)}
if rank:
    comm.send(obj, dest=0, tag=8)
    comm.isend(("small", rank), dest=0, tag=9).wait()
else:
    got = {}
    for _ in range(size - 1):
        st = MPI.Status()
        o = comm.recv(source=MPI.ANY_SOURCE, tag=8, status=st)
        assert o["rank"] == st.Get_source() and np.array_equal(o["arr"], payload(o["rank"], 1, 20_000))
        got[o["rank"]] = digest(o["arr"])
    for s in range(1, size):
        assert comm.irecv(source=s, tag=9).wait() == ("small", s)
    say("pickled send/recv, isend/irecv: " + " ".join(f"{s}:{got[s]}" for s in sorted(got)))
comm.Barrier()

# 4. Iprobe then Recv of a probed numpy message
if rank == 1:
    comm.Send(payload(1, 9, 4096), dest=0, tag=11)
elif rank == 0:
    st = MPI.Status()
    while not comm.Iprobe(source=MPI.ANY_SOURCE, tag=11, status=st):
        pass
    buf = np.empty(st.Get_count(MPI.DOUBLE), dtype=np.float64)
    comm.Recv(buf, source=st.Get_source(), tag=11)
    assert np.array_equal(buf, payload(1, 9, 4096))
    say(f"Iprobe + Recv n={buf.size}: {digest(buf)}")

comm.Barrier()
if rank == 0:
    print("\n".join(lines))
    print(f"mpi4py_p2p: all passed on {size} ranks")
