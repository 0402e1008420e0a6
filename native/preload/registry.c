/* registry.c — the library's own record of the ranges it placed, for `cxlkit audit`.
 *
 * Why: two placed mappings side by side whose edge chunks share a node are one VMA to the
 * kernel, so /proc/PID/maps and numa_maps cannot tell where one mapping's stripe pattern ends
 * and the next one's begins; judged as one range, a correct pair can fall outside the bounds
 * of the rule. The library knows each placed range and the address its chunk grid starts at.
 *
 * Where: a memfd named "cxlkit-stripes" (MFD_CLOEXEC: exec starts a new one), created at the
 * first placement and mapped shared here; the audit opens it through /proc/PID/fd (same user
 * or root, the access rule of /proc/PID/environ). Layout (little-endian, native words):
 *   header (64 bytes): magic "CXLKSTR1", u32 version 1, u32 record size 32, u64 capacity,
 *     u64 used (records [0, used) are live), u64 gen (odd while the library edits: the
 *     reader retries), u64 dropped (placements not recorded: the registry was full).
 *   records: u64 origin (chunk 0 of the placement starts here), u64 start, u64 end (the part
 *     of it still mapped), u64 kind (1: a placement; other values reserved).
 * Every field is written by the library only, under its lock; the reader trusts nothing.
 *
 * fork: the child would share the parent's memfd (MAP_SHARED): its atfork handler copies the
 * records into a new memfd mapped over the same address, so each process edits its own. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "preload.h"

#define MAGIC "CXLKSTR1"

struct header {
    char magic[8];
    uint32_t version, record_size;
    uint64_t capacity, used, gen, dropped;
    uint64_t spare[2];
};

struct record {
    uint64_t origin, start, end, spare;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct header *reg;   /* NULL until the first placement, or when it could not be made */
static struct record *rec;
static int reg_fd = -1;
static int failed;           /* creating it failed once: do not try on every placement */
static size_t reg_bytes;

/* A seqlock: gen goes odd, the records change, gen goes even. The fence orders the odd value
 * before the record stores (a release store alone would not keep later stores after it);
 * the even store's release orders the record stores before it. Readers: the audit (another
 * process) and cxp_registry_overlaps (lock-free, in munmap's fast path). */
static void begin(void) {
    __atomic_store_n(&reg->gen, reg->gen + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
static void end_(void) { __atomic_store_n(&reg->gen, reg->gen + 1, __ATOMIC_RELEASE); }

/* A memfd of reg_bytes, mapped shared at want (NULL: anywhere). 0 or -errno. */
static int make(void *want, int *fd_out, void **map_out) {
    int fd = (int)syscall(SYS_memfd_create, "cxlkit-stripes", 1u /* MFD_CLOEXEC */);
    if (fd < 0) return -errno;
    if (ftruncate(fd, (off_t)reg_bytes) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    void *m = (void *)syscall(SYS_mmap, want, reg_bytes, PROT_READ | PROT_WRITE,
                              MAP_SHARED | (want ? MAP_FIXED : 0), fd, 0);
    if (m == MAP_FAILED) {
        int e = errno;
        close(fd);
        return -e;
    }
    *fd_out = fd;
    *map_out = m;
    return 0;
}

static void before_fork(void) { pthread_mutex_lock(&lock); }
static void in_parent(void) { pthread_mutex_unlock(&lock); }
static void in_child(void) {
    if (reg) {
        /* copy out, then a new memfd over the same address: later edits stay the child's */
        int fd;
        void *m;
        int old = reg_fd;
        if (make(NULL, &fd, &m) == 0) {
            memcpy(m, reg, reg_bytes);
            syscall(SYS_munmap, m, reg_bytes);
            void *again = (void *)syscall(SYS_mmap, reg, reg_bytes, PROT_READ | PROT_WRITE,
                                          MAP_SHARED | MAP_FIXED, fd, 0);
            if (again == (void *)reg) {
                reg_fd = fd;
                close(old);
            } else {
                close(fd);
                reg = NULL; /* the parent's memfd must not be edited from here */
                failed = 1;
            }
        } else {
            reg = NULL;
            failed = 1;
        }
    }
    pthread_mutex_unlock(&lock);
}

void cxp_registry_init(void) {
    pthread_atfork(before_fork, in_parent, in_child);
}

/* Under lock. */
static int ensure(void) {
    if (reg) return 1;
    if (failed) return 0;
    reg_bytes = sizeof(struct header) + (size_t)CXP_REGISTRY_RECORDS * sizeof(struct record);
    int fd;
    void *m;
    int r = make(NULL, &fd, &m);
    if (r < 0) {
        failed = 1;
        cxp_log("registry: memfd: %s; cxlkit audit falls back to /proc/PID/maps",
                strerror(-r));
        return 0;
    }
    struct header *h = m;
    rec = (struct record *)(h + 1);
    reg_fd = fd;
    memcpy(h->magic, MAGIC, 8);
    h->version = 1;
    h->record_size = sizeof(struct record);
    h->capacity = CXP_REGISTRY_RECORDS;
    /* published last: cxp_registry_overlaps reads reg without the lock */
    __atomic_store_n(&reg, h, __ATOMIC_RELEASE);
    return 1;
}

/* Drop [lo, hi) from every record, under lock and inside begin/end. A record cut in the
 * middle becomes two (same origin); one that goes whole leaves (the last takes its slot). */
static void cut(uint64_t lo, uint64_t hi) {
    for (uint64_t i = 0; i < reg->used;) {
        struct record *r = &rec[i];
        if (r->end <= lo || r->start >= hi) {
            i++;
            continue;
        }
        if (r->start < lo && r->end > hi) {  /* a hole in the middle */
            if (reg->used < reg->capacity) {
                rec[reg->used] = (struct record){r->origin, hi, r->end, r->spare};
                reg->used++;
            } else {
                reg->dropped++;
            }
            r->end = lo;
            i++;
        } else if (r->start < lo) {
            r->end = lo;
            i++;
        } else if (r->end > hi) {
            r->start = hi;
            i++;
        } else {
            *r = rec[--reg->used];
        }
    }
}

void cxp_registry_add(void *addr, size_t len) {
    pthread_mutex_lock(&lock);
    if (ensure()) {
        uint64_t lo = (uintptr_t)addr, hi = lo + len;
        begin();
        cut(lo, hi); /* a range placed again (mremap growth) replaces its old record */
        if (reg->used < reg->capacity)
            rec[reg->used++] = (struct record){lo, lo, hi, 1};
        else
            reg->dropped++;
        end_();
    }
    pthread_mutex_unlock(&lock);
}

int cxp_registry_overlaps(void *addr, size_t len) {
    struct header *h = __atomic_load_n(&reg, __ATOMIC_ACQUIRE);
    if (!h) return 0;
    uint64_t g = __atomic_load_n(&h->gen, __ATOMIC_ACQUIRE);
    uint64_t n = __atomic_load_n(&h->used, __ATOMIC_RELAXED);
    if ((g & 1) || n > CXP_REGISTRY_FAST_SCAN) return 1; /* mid-edit or many: take the lock */
    uint64_t lo = (uintptr_t)addr, hi = lo + len;
    const struct record *r = (const struct record *)(h + 1);
    for (uint64_t i = 0; i < n; i++)
        if (__atomic_load_n(&r[i].start, __ATOMIC_RELAXED) < hi &&
            __atomic_load_n(&r[i].end, __ATOMIC_RELAXED) > lo)
            return 1;
    /* the loads above before the second look at gen: unchanged means they saw one state */
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    return __atomic_load_n(&h->gen, __ATOMIC_RELAXED) != g;
}

void cxp_registry_remove(void *addr, size_t len) {
    if (!cxp_registry_overlaps(addr, len)) return;
    pthread_mutex_lock(&lock);
    if (reg) {
        begin();
        cut((uintptr_t)addr, (uintptr_t)addr + len);
        end_();
    }
    pthread_mutex_unlock(&lock);
}
