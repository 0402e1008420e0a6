# Run: .venv/bin/python examples/pool_share.py
"""Two processes with different host ids share one pool file: the first publishes an array,
the second opens it (a zero-copy numpy view), checks the checksum and replies."""
import multiprocessing as mp

import numpy as np

import cxlkit

POOL = "example-share"  # /dev/shm/cxlkit-example-share


def reader(ready, done):
    ready.wait()
    with cxlkit.Pool(POOL, host_id=1) as pool:
        with pool.open("vector") as obj:
            obj.verify()                         # crc32c recorded at publish
            v = obj.numpy(np.float64)            # zero-copy, read-only view
            total = float(v.sum())
            del v                                # views pin the object open
        pool.create("reply", data=np.float64([total]).tobytes()).close()
    done.set()


if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    ready, done = ctx.Event(), ctx.Event()
    with cxlkit.Pool(POOL, size="16M", host_id=0, max_hosts=2) as pool:
        child = ctx.Process(target=reader, args=(ready, done))
        child.start()
        with pool.create("vector", 1000 * 8) as obj:
            obj.numpy(np.float64)[:] = np.arange(1000)
            obj.publish(checksum=True)
        ready.set()
        done.wait(60)
        child.join()
        with pool.open("reply") as r:
            print("reader summed", np.frombuffer(r.read(), np.float64)[0], "expected",
                  float(np.arange(1000).sum()))
        pool.destroy("vector")
        print("fsck clean:", pool.fsck().clean)
    cxlkit.pool.remove(POOL)
