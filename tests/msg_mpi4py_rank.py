"""One rank of tests/engines/test_msg_mpi4py.py, started by mpiexec (MPICH's or Open MPI's):
cxlkit.msg.Comm.from_mpi4py on MPI.COMM_WORLD, then messages and a reduction checked against
MPI's own, and the disagreement cases. Usage: mpiexec -n N python msg_mpi4py_rank.py POOL
HOSTS (HOSTS: "rank" = each rank its own pool host, "machine" = the machine's default)."""
from __future__ import annotations

import sys

import numpy as np
from mpi4py import MPI

import cxlkit
from cxlkit import msg


def main() -> int:
    path, hosts = sys.argv[1], sys.argv[2]
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    if rank == 0:  # one creator, then everyone opens it
        with cxlkit.Pool(path, size="64M", host_id=0, max_hosts=max(2, size)):
            pass
    world.Barrier()
    host = rank if hosts == "rank" else None
    with cxlkit.Pool(path, host_id=host) as pool:
        comm = msg.Comm.from_mpi4py(world, pool)
        assert (comm.rank, comm.size) == (rank, size), (comm.rank, comm.size)
        assert len(set(world.allgather(comm.job))) == 1 and comm.job.startswith("mpi-")
        # a ring of messages, eager and rendezvous sizes
        for n in (0, 8, 5000, 300_000):
            data = bytes((rank * 31 + i) % 251 for i in range(n))
            req = comm.isend(data, dest=(rank + 1) % size, tag=n % 1000)
            got, st = comm.recv(source=(rank - 1) % size, tag=n % 1000)
            req.wait()
            src = (rank - 1) % size
            assert got == bytes((src * 31 + i) % 251 for i in range(n)) and st.source == src
        a = np.arange(1000, dtype=np.float64) * (rank + 1)
        ours = comm.allreduce(a, "sum")
        theirs = np.empty_like(a)
        world.Allreduce(a, theirs, op=MPI.SUM)
        assert np.array_equal(ours, theirs)
        comm.barrier()
        comm.close()
        # ranks that disagree on the job name all fail, none hangs
        try:
            msg.Comm.from_mpi4py(world, pool, job=f"j{rank}")
        except ValueError as e:
            assert "disagree" in str(e), e
        else:
            raise AssertionError("different job names were accepted")
        # the same job name given everywhere is kept
        with msg.Comm.from_mpi4py(world, pool, job="given") as c2:
            assert c2.job == "given" and c2.rank == rank
    world.Barrier()
    print(f"OK rank {rank} of {size}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
