/* pool_hosts.c — another host's slot is untrusted input: bakery registers that no host writes
 * are skipped, registers that stay put while their host lives end a create with -ETIMEDOUT
 * naming that host (never a hang, nothing left held), a live host clears its own stray
 * registers and impossible counters, and counters that disagree with the block chain are
 * found by fsck and rebuilt (at a create the name table refuses, and by fsck --repair).
 * Stray words are written straight into the mapped slots; "fake" hosts are slots that a
 * thread of this test keeps alive (heartbeat) without any cxlkit code behind them. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "child.h"
#include "pool_open.h"

/* format.h: host slots of 4096 bytes from the superblock's host_table_off (offset 112) */
enum { kSlotBytes = 4096, kBoot = 32, kBeat = 40, kChoosing = 64, kNumber = 72,
       kUsed = 192, kFreeBytes = 200, kLive = 208, kMinBlock = 384 };
enum { kMaxObjects = 256, kDeadline = 60 };

static uint8_t *slot_of(cxk_pool *p, int h) {
    uint8_t *base = cxk_pool_base(p);
    uint64_t table;
    memcpy(&table, base + 112, sizeof table);
    return base + table + (uint64_t)h * kSlotBytes;
}
static void put(uint8_t *s, int off, uint64_t v) {
    __atomic_store_n((uint64_t *)(s + off), v, __ATOMIC_SEQ_CST);
}
static uint64_t get(uint8_t *s, int off) {
    return __atomic_load_n((uint64_t *)(s + off), __ATOMIC_SEQ_CST);
}
static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static cxk_pool *open_pool(const char *path, int host, uint32_t lease_ms, uint32_t hosts) {
    struct cxk_pool_opts o;
    cxk_pool_opts_init(&o);
    o.flags = CXK_POOL_CREATE;
    o.size = 8u << 20;
    o.host_id = host;
    o.max_hosts = hosts;
    o.max_objects = kMaxObjects;
    o.lease_timeout_ms = lease_ms;
    return test_pool_open_opts(path, &o);
}

/* ---- live hosts without cxlkit code: their heartbeats are kept fresh by a thread ------- */
static atomic_int beating;
static uint8_t *fakes[2];
static void *beat_main(void *arg) {
    (void)arg;
    struct timespec step = {0, 20 * 1000000};
    while (atomic_load(&beating)) {
        for (int i = 0; i < 2; ++i)
            if (fakes[i]) put(fakes[i], kBeat, (uint64_t)now_ns());
        nanosleep(&step, NULL);
    }
    return NULL;
}
static void fake_host(uint8_t *s, int i) {
    memcpy(s, "fake", 5);
    put(s, kBeat, (uint64_t)now_ns());
    put(s, kBoot, 0x8000000000000abcull); /* a boot: used, not fresh */
    fakes[i] = s;
}
static pthread_t fake_host_start(uint8_t *s) {
    fake_host(s, 0);
    fakes[1] = NULL;
    atomic_store(&beating, 1);
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, beat_main, NULL), 0);
    return t;
}
static void fake_host_stop(pthread_t t) {
    atomic_store(&beating, 0);
    pthread_join(t, NULL);
}

static int create(cxk_pool *p, const char *name) {
    uint64_t off;
    int r = cxk_obj_create(p, name, 1000, &off);
    if (r == 0) CHECK_EQ(cxk_obj_publish(p, off, 0), 0);
    if (r == 0) CHECK_EQ(cxk_obj_close(p, off), 0);
    return r;
}

/* Registers no host writes (choosing 7, number 2^64-1: a ticket drawn past it wraps to 0) are
 * skipped at once, and fsck names them; so are counters the fake host's (empty) chain
 * contradicts. In a child: a create that spins on them fails the deadline. */
static void stray_registers_are_skipped(const char *path) {
    cxk_pool *p = open_pool(path, 0, 1000, 2);
    CHECK(p);
    uint8_t *s1 = slot_of(p, 1);
    pthread_t beat = fake_host_start(s1);
    put(s1, kChoosing, 7);
    put(s1, kNumber, UINT64_MAX);
    put(s1, kLive, 5);
    pid_t c = fork();
    if (c == 0) {
        CHECK_EQ(create(p, "skip-a"), 0);
        CHECK_EQ(get(slot_of(p, 0), kNumber), 0); /* released after the create */
        struct cxk_fsck_report f;
        CHECK_EQ(cxk_pool_fsck(p, 0, &f), 0);
        CHECK_EQ(f.registers_bad, 1);
        CHECK_EQ(f.counters_wrong, 1);
        CHECK_EQ(f.errors, 0);
        _exit(0);
    }
    CHECK_EQ(child_join(c, kDeadline), 0);
    fake_host_stop(beat);
    CHECK_EQ(cxk_pool_close(p), 0);
    unlink(path);
}

/* Registers a host could have written (choosing 1; number 1, below any ticket we draw) that
 * stay unchanged while their host lives: -ETIMEDOUT naming host 1 within the bound (the
 * pool's lease timeout, 1 s here), our registers and host lock released, and once the fake
 * host's registers move on the next create goes through. */
static void stuck_registers_time_out(const char *path) {
    cxk_pool *p = open_pool(path, 0, 1000, 2);
    CHECK(p);
    uint8_t *s0 = slot_of(p, 0), *s1 = slot_of(p, 1);
    pthread_t beat = fake_host_start(s1);
    pid_t c = fork();
    if (c == 0) {
        put(s1, kNumber, 1);
        CHECK_EQ(create(p, "stuck-a"), -ETIMEDOUT);
        CHECK_EQ(cxk_pool_wait_host(p), 1);
        CHECK_EQ(get(s0, kChoosing), 0);
        CHECK_EQ(get(s0, kNumber), 0);
        put(s1, kNumber, 0);
        put(s1, kChoosing, 1);
        CHECK_EQ(create(p, "stuck-b"), -ETIMEDOUT);
        CHECK_EQ(cxk_pool_wait_host(p), 1);
        put(s1, kChoosing, 0);
        CHECK_EQ(create(p, "stuck-c"), 0); /* nothing of ours stayed held */
        struct cxk_obj_stat st;
        CHECK_EQ(cxk_obj_stat(p, "stuck-a", &st), -ENOENT);
        _exit(0);
    }
    CHECK_EQ(child_join(c, kDeadline), 0);
    fake_host_stop(beat);
    CHECK_EQ(cxk_pool_close(p), 0);
    unlink(path);
}

/* Host 1's ticket (2) is queued behind host 2's (1), both stuck: host 1 may be waiting for
 * host 2, so the create names host 2, the front of the queue. */
static void stuck_queue_names_its_front(const char *path) {
    cxk_pool *p = open_pool(path, 0, 1000, 3);
    CHECK(p);
    uint8_t *s1 = slot_of(p, 1), *s2 = slot_of(p, 2);
    pthread_t beat = fake_host_start(s1);
    fake_host(s2, 1);
    put(s1, kNumber, 2);
    put(s2, kNumber, 1);
    pid_t c = fork();
    if (c == 0) {
        CHECK_EQ(create(p, "queue-a"), -ETIMEDOUT);
        CHECK_EQ(cxk_pool_wait_host(p), 2);
        _exit(0);
    }
    CHECK_EQ(child_join(c, kDeadline), 0);
    fake_host_stop(beat);
    CHECK_EQ(cxk_pool_close(p), 0);
    unlink(path);
}

/* A live host running cxlkit that only reads (never creates) clears stray registers and
 * impossible counters in its own slot at its next lock, which its heartbeat takes every
 * lease_timeout / 4: host 1 is a child that opened the pool and waits on a pipe. */
static int wait_cleared(uint8_t *s, int off) {
    struct timespec step = {0, 5 * 1000000};
    for (int i = 0; i < kDeadline * 200; ++i) {
        if (get(s, off) == 0) return 1;
        nanosleep(&step, NULL);
    }
    return 0;
}
static void live_owner_clears_its_slot(const char *path) {
    cxk_pool *p = open_pool(path, 0, 1000, 2);
    CHECK(p);
    int ready[2], done[2];
    CHECK_EQ(pipe(ready), 0);
    CHECK_EQ(pipe(done), 0);
    pid_t reader = fork();
    if (reader == 0) {
        cxk_pool *q = open_pool(path, 1, 1000, 2);
        char b = q ? 'y' : 'n';
        CHECK_EQ(write(ready[1], &b, 1), 1);
        CHECK_EQ(read(done[0], &b, 1), 1);
        _exit(q && cxk_pool_close(q) == 0 ? 0 : 1);
    }
    char b = 0;
    CHECK_EQ(read(ready[0], &b, 1), 1);
    CHECK_EQ(b, 'y');
    uint8_t *s1 = slot_of(p, 1);
    put(s1, kNumber, 1);
    put(s1, kChoosing, 1);
    put(s1, kLive, 1ull << 40);
    CHECK(wait_cleared(s1, kNumber));
    CHECK(wait_cleared(s1, kChoosing));
    CHECK(wait_cleared(s1, kLive));
    CHECK_EQ(create(p, "owner-a"), 0);
    CHECK_EQ(write(done[1], "x", 1), 1);
    CHECK_EQ(child_join(reader, kDeadline), 0);
    CHECK_EQ(cxk_pool_close(p), 0);
    unlink(path);
}

/* Counters that say the name table is full while the chain holds three objects: plausible
 * (no O(1) check refutes them), so only the chain does. fsck reports them, a create rebuilds
 * them and goes on (it was refused with -ENOSPC), and fsck --repair rebuilds them too. */
static void wrong_counters_found_and_rebuilt(const char *path) {
    cxk_pool *p = open_pool(path, 0, 1000, 2);
    CHECK(p);
    uint8_t *s0 = slot_of(p, 0);
    const char *names[] = {"count-a", "count-b", "count-c"};
    for (int i = 0; i < 3; ++i) CHECK_EQ(create(p, names[i]), 0);
    struct cxk_fsck_report f;
    for (int round = 0; round < 2; ++round) {
        put(s0, kLive, kMaxObjects);
        put(s0, kUsed, 2ull * kMaxObjects * kMinBlock);
        put(s0, kFreeBytes, 0);
        CHECK_EQ(cxk_pool_fsck(p, 0, &f), 0);
        CHECK_EQ(f.counters_wrong, 1);
        CHECK_EQ(f.errors, 0);
        if (round == 0) {
            CHECK_EQ(create(p, "count-d"), 0);
        } else {
            CHECK_EQ(cxk_pool_fsck(p, CXK_FSCK_REPAIR, &f), 0);
            CHECK_EQ(f.counters_rebuilt, 1);
            CHECK_EQ(f.counters_wrong, 0);
        }
        CHECK_EQ(cxk_pool_fsck(p, 0, &f), 0);
        CHECK_EQ(f.counters_wrong, 0);
        CHECK_EQ(get(s0, kLive), 4);
    }
    put(s0, kLive, 1ull << 40); /* impossible: rebuilt at the next lock */
    CHECK_EQ(create(p, "count-e"), 0);
    CHECK_EQ(get(s0, kLive), 5);
    CHECK_EQ(cxk_pool_close(p), 0);
    unlink(path);
}

int main(void) {
    char path[128];
    snprintf(path, sizeof path, "/dev/shm/cxlkit-ctest-hosts-%d", (int)getpid());
    test_pool_remove_at_exit(path);
    stray_registers_are_skipped(path);
    stuck_registers_time_out(path);
    stuck_queue_names_its_front(path);
    live_owner_clears_its_slot(path);
    wrong_counters_found_and_rebuilt(path);
    return 0;
}
