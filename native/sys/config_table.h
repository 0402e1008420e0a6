/* config_table.h — the one table of CXLKIT_* environment variables the native code reads:
 * libcxlkit (cxk_config_*), the preload library and the PMPI shim. Python-only variables live
 * in src/cxlkit/_config.py, which merges this table in; docs/config.md is generated from both.
 *
 * X(ID, name, type, default, lo, hi, choices, reader, meaning)
 *   type     CXK_CONFIG_* (include/cxlkit.h): how a value is parsed and checked
 *   default  what an unset or empty variable means (text, as a user would write it)
 *   lo, hi   the range of a number (uint, micros, size), inclusive
 *   choices  the words a choice accepts, '|'-separated
 *   reader   who reads it: "libcxlkit", "preload" or "mpi" */
#ifndef CXLKIT_CONFIG_TABLE_H
#define CXLKIT_CONFIG_TABLE_H

#define CXK_U32_MAX 4294967295ull
#define CXK_U64_MAX 18446744073709551615ull

#define CXK_CONFIG_TABLE(X)                                                                   \
    X(SYSFS_ROOT, "CXLKIT_SYSFS_ROOT", CXK_CONFIG_PATH, "/sys", 0, 0, "", "libcxlkit",         \
      "root of sysfs (tests point it at a fixture tree)")                                     \
    X(FAULT, "CXLKIT_FAULT", CXK_CONFIG_FAULTS, "", 0, 0, "", "libcxlkit",                     \
      "name:nth:errno[,...]: fail the nth call of a syscall wrapper, armed when libcxlkit "    \
      "loads (tests)")                                                                         \
    X(SIMD, "CXLKIT_SIMD", CXK_CONFIG_CHOICE, "auto", 0, 0,                                    \
      "auto|scalar|avx2|avx512|avx512bf16", "libcxlkit",                                      \
      "SIMD level of the Adam kernels (auto: the best this CPU has)")                          \
    X(SIM_SEED, "CXLKIT_SIM_SEED", CXK_CONFIG_UINT, "1", 0, CXK_U64_MAX, "", "libcxlkit",      \
      "seed of the non-coherence simulator's random evictions; read at each open")             \
    X(SIM_EVICT, "CXLKIT_SIM_EVICT", CXK_CONFIG_FRACTION, "0.25", 0, 1, "", "libcxlkit",       \
      "chance per flush / invalidate / streaming store of one random eviction (simulator)")    \
    X(SIM_DIR, "CXLKIT_SIM_DIR", CXK_CONFIG_PATH, "/dev/shm", 0, 0, "", "libcxlkit",           \
      "where the simulator keeps each host's view of a pool")                                  \
    X(MSG_CELL_BYTES, "CXLKIT_MSG_CELL_BYTES", CXK_CONFIG_UINT, "4096", 1, CXK_U32_MAX, "",    \
      "libcxlkit", "ring cell size of a job's rings")                                          \
    X(MSG_CELLS, "CXLKIT_MSG_CELLS", CXK_CONFIG_UINT, "64", 1, CXK_U32_MAX, "", "libcxlkit",   \
      "cells per ring")                                                                        \
    X(MSG_EAGER, "CXLKIT_MSG_EAGER", CXK_CONFIG_UINT, "0", 0, CXK_U32_MAX, "", "libcxlkit",    \
      "largest eager message (0: what one ring cell carries, 4032; at most half a ring)")      \
    X(MSG_TIMEOUT_MS, "CXLKIT_MSG_TIMEOUT_MS", CXK_CONFIG_UINT, "0", 0, CXK_U32_MAX, "",       \
      "libcxlkit", "fail any wait after this long (0: only dead peers fail a wait)")           \
    X(MSG_DEAD_MS, "CXLKIT_MSG_DEAD_MS", CXK_CONFIG_UINT, "5000", 0, CXK_U32_MAX, "",          \
      "libcxlkit", "a rank of another machine silent this long is dead")                       \
    X(MSG_RDV_NT, "CXLKIT_MSG_RDV_NT", CXK_CONFIG_BOOL, "0", 0, 1, "", "libcxlkit",            \
      "1: non-temporal rendezvous copies on coherence host (none always streams)")             \
    X(MSG_RDV_CHUNK, "CXLKIT_MSG_RDV_CHUNK", CXK_CONFIG_UINT, "262144", 4096, CXK_U32_MAX, "",    \
      "libcxlkit", "bytes a rendezvous copies between progress checks")                        \
    X(MSG_SPIN_US, "CXLKIT_MSG_SPIN_US", CXK_CONFIG_MICROS, "200", 0, CXK_U32_MAX - 1, "",     \
      "libcxlkit", "a wait (rings, messaging, RPC) spins this long before giving the CPU "     \
      "away (forever: never does)")                                                            \
    X(MSG_YIELD_US, "CXLKIT_MSG_YIELD_US", CXK_CONFIG_MICROS, "0", 0, CXK_U32_MAX - 1, "",     \
      "libcxlkit", "then yields between polls this long before sleeping (forever: never "      \
      "sleeps)")                                                                               \
    X(MSG_SLEEP_US, "CXLKIT_MSG_SLEEP_US", CXK_CONFIG_UINT, "50", 0, 1000000, "", "libcxlkit", \
      "then sleeps between polls, each sleep 1/16 of the time waited, at most this long "      \
      "(0: keeps yielding)")                                                                   \
    X(MSG_WAKE_US, "CXLKIT_MSG_WAKE_US", CXK_CONFIG_UINT, "1000", 0, 1000000, "", "libcxlkit", \
      "safety-net timeout of a same-host futex sleep (0: the wake-up is off)")                 \
    X(STRIPE, "CXLKIT_STRIPE", CXK_CONFIG_STRIPE, "", 0, 0, "", "preload",                     \
      "node:weight[,...]: stripes of a program's large mappings")                              \
    X(STRIPE_CHUNK, "CXLKIT_STRIPE_CHUNK", CXK_CONFIG_SIZE, "2M", 4096, 1ull << 40, "",        \
      "preload", "stripe chunk: a multiple of the page size")                                  \
    X(MIN_SIZE, "CXLKIT_MIN_SIZE", CXK_CONFIG_SIZE, "2M", 0, 1ull << 50, "", "preload",        \
      "mappings and malloc blocks this large or larger are placed")                            \
    X(PRELOAD_LOG, "CXLKIT_PRELOAD_LOG", CXK_CONFIG_PATH, "", 0, 0, "", "preload",             \
      "path (appended) or stderr: one line per placement decision")                            \
    X(PRELOAD_FAULT, "CXLKIT_PRELOAD_FAULT", CXK_CONFIG_STRING, "", 0, 0, "", "preload",       \
      "mbind:N:errno: the library's Nth mbind fails with errno (tests)")                       \
    X(PRELOAD_CACHE, "CXLKIT_PRELOAD_CACHE", CXK_CONFIG_SIZE, "64M", 0, 1ull << 50, "",        \
      "preload", "bytes of freed placed malloc blocks kept for reuse (0: no cache)")           \
    X(PRELOAD_CACHE_COUNT, "CXLKIT_PRELOAD_CACHE_COUNT", CXK_CONFIG_UINT, "16", 0, 256, "",    \
      "preload", "freed placed malloc blocks kept (0: no cache)")                              \
    X(MPI, "CXLKIT_MPI", CXK_CONFIG_BOOL, "1", 0, 1, "", "mpi",                                \
      "0: the PMPI shim steps aside (every call goes to the MPI)")                             \
    X(MPI_POOL, "CXLKIT_MPI_POOL", CXK_CONFIG_PATH, "", 0, 0, "", "mpi",                       \
      "the pool this host maps (per rank: a pod's ranks share one; default: rank 0's memfd)")  \
    X(MPI_POOL_MB, "CXLKIT_MPI_POOL_MB", CXK_CONFIG_UINT, "1024", 1, 1ull << 30, "", "mpi",    \
      "MiB of a created pool per rank")                                                        \
    X(MPI_COHERENCE, "CXLKIT_MPI_COHERENCE", CXK_CONFIG_CHOICE, "auto", 0, 0,                  \
      "auto|host|none", "mpi", "the shim pool's coherence (auto: host on one machine)")        \
    X(MPI_EAGER, "CXLKIT_MPI_EAGER", CXK_CONFIG_UINT, "0", 0, CXK_U32_MAX, "", "mpi",          \
      "largest eager message of the shim (0: the engine's default)")                           \
    X(MPI_COMMS, "CXLKIT_MPI_COMMS", CXK_CONFIG_CHOICE, "all", 0, 0, "all|world|derived|none", \
      "mpi", "which communicators go through the pool")                                        \
    X(MPI_VERBOSE, "CXLKIT_MPI_VERBOSE", CXK_CONFIG_BOOL, "0", 0, 1, "", "mpi",                \
      "1: a banner on rank 0")                                                                 \
    X(MPI_STATS, "CXLKIT_MPI_STATS", CXK_CONFIG_BOOL, "0", 0, 1, "", "mpi",                    \
      "1: counters of every rank at MPI_Finalize")                                             \
    X(MPI_RMA, "CXLKIT_MPI_RMA", CXK_CONFIG_BOOL, "1", 0, 1, "", "mpi",                        \
      "0: windows stay on the MPI")                                                            \
    X(MPI_SAME_HOST, "CXLKIT_MPI_SAME_HOST", CXK_CONFIG_CHOICE, "auto", 0, 0,                  \
      "auto|pool|mpi", "mpi", "a peer on this host, where the job's pool spans hosts: the pool " \
      "or the MPI's own (auto: the pool when it is opened coherent)")

#endif
