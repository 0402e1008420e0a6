/* aio.c — the async I/O engine: round trips through both backends (O_DIRECT where the
 * filesystem takes it), chunking, bad options, unknown tickets, injected ENOSPC / EIO on
 * one chunk, a read past the end, and OFD locks between two open file descriptions. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "cxlkit.h"

static char g_dir[] = "/var/tmp/cxk_aio_XXXXXX";

static void path_of(char *out, size_t cap, const char *name) {
    snprintf(out, cap, "%s/%s", g_dir, name);
}

static void round_trip(int backend, const char *name) {
    struct cxk_aio_opts o = {backend, 4, 64 * 1024, 2};
    cxk_aio *a = NULL;
    int rc = cxk_aio_create(&o, &a);
    if (backend == CXK_AIO_URING && rc < 0) {
        fprintf(stderr, "io_uring backend not available here (%d): thread pool only\n", rc);
        return;
    }
    CHECK_EQ(rc, 0);
    CHECK_EQ(cxk_aio_backend(a), backend == CXK_AIO_AUTO ? cxk_aio_backend(a) : backend);
    char path[256];
    path_of(path, sizeof path, name);
    int direct = -1;
    int fd = cxk_aio_open(path, CXK_AIO_O_WRITE | CXK_AIO_O_CREATE | CXK_AIO_O_DIRECT, &direct);
    CHECK(fd >= 0);
    CHECK(direct == 0 || direct == 1);
    const size_t n = 1 << 20;  /* 16 chunks of 64 KiB over a queue depth of 4 */
    unsigned char *w = NULL, *r = NULL;
    CHECK_EQ(posix_memalign((void **)&w, CXK_AIO_ALIGN, n), 0);
    CHECK_EQ(posix_memalign((void **)&r, CXK_AIO_ALIGN, n), 0);
    for (size_t i = 0; i < n; ++i) w[i] = (unsigned char)(i * 7 + 3);
    memset(r, 0, n);
    uint64_t t1, t2;
    CHECK_EQ(cxk_aio_submit(a, fd, 1, w, n, 0, &t1), 0);
    CHECK_EQ(cxk_aio_wait(a, t1), 0);
    CHECK_EQ(cxk_aio_sync(fd), 0);
    CHECK_EQ(cxk_aio_submit(a, fd, 0, r, n, 0, &t2), 0);
    int d;  /* polled until done: 0 while in flight, then 1, and the wait returns at once */
    while ((d = cxk_aio_done(a, t2)) == 0) {
    }
    CHECK_EQ(d, 1);
    CHECK_EQ(cxk_aio_done(a, t2), 1);
    uint64_t ns = 0;
    CHECK_EQ(cxk_aio_wait_ex(a, t2, &ns), 0);
    CHECK(ns > 0);
    CHECK(memcmp(w, r, n) == 0);
    CHECK_EQ(cxk_aio_wait(a, t2), -ENOENT);  /* a ticket is waited for once */
    CHECK_EQ(cxk_aio_done(a, t2), -ENOENT);
    CHECK_EQ(cxk_aio_done(NULL, t2), -EINVAL);
    struct cxk_aio_stats st;
    CHECK_EQ(cxk_aio_stats(a, &st), 0);
    CHECK_EQ(st.bytes_written, n);
    CHECK_EQ(st.bytes_read, n);
    CHECK_EQ(st.requests, 2);
    CHECK_EQ(st.chunks, 32);

    /* ENOSPC on the 3rd chunk write: the request fails with it, the others still land */
    CHECK_EQ(cxk_fault_inject("pwrite", 3, ENOSPC), 0);
    CHECK_EQ(cxk_aio_submit(a, fd, 1, w, n, 0, &t1), 0);
    CHECK_EQ(cxk_aio_wait(a, t1), -ENOSPC);
    CHECK_EQ(cxk_fault_inject("pread", 1, EIO), 0);
    CHECK_EQ(cxk_aio_submit(a, fd, 0, r, n, 0, &t1), 0);
    CHECK_EQ(cxk_aio_wait(a, t1), -EIO);
    /* past the end of the file: -EIO, not a short success */
    CHECK_EQ(cxk_aio_submit(a, fd, 0, r, 65536, n, &t1), 0);
    CHECK_EQ(cxk_aio_wait(a, t1), -EIO);
    /* and the engine still works */
    CHECK_EQ(cxk_aio_submit(a, fd, 0, r, n, 0, &t1), 0);
    CHECK_EQ(cxk_aio_wait(a, t1), 0);
    CHECK(memcmp(w, r, n) == 0);
    CHECK_EQ(cxk_aio_close(fd), 0);
    unlink(path);
    free(w);
    free(r);
    cxk_aio_destroy(a);
}

static void bad_input(void) {
    cxk_aio *a = NULL;
    struct cxk_aio_opts o = {CXK_AIO_THREADS, 4, 1000, 1}; /* block not a multiple of 4096 */
    CHECK_EQ(cxk_aio_create(&o, &a), -EINVAL);
    o.block_size = 4096;
    o.queue_depth = 5000;
    CHECK_EQ(cxk_aio_create(&o, &a), -EINVAL);
    o.queue_depth = 4;
    o.backend = 9;
    CHECK_EQ(cxk_aio_create(&o, &a), -EINVAL);
    CHECK_EQ(cxk_aio_create(NULL, &a), 0);
    uint64_t t;
    char b[16];
    CHECK_EQ(cxk_aio_submit(a, -1, 0, b, 16, 0, &t), -EINVAL);
    CHECK_EQ(cxk_aio_submit(a, 0, 0, b, 0, 0, &t), -EINVAL);
    CHECK_EQ(cxk_aio_wait(a, 12345), -ENOENT);
    cxk_aio_destroy(a);
    CHECK_EQ(cxk_aio_open("", 0, NULL), -EINVAL);
    CHECK_EQ(cxk_aio_open("/nonexistent/cxk/aio", 0, NULL), -ENOENT);
}

static void locks(void) {
    char path[256];
    path_of(path, sizeof path, "lock");
    int f1 = cxk_aio_open(path, CXK_AIO_O_WRITE | CXK_AIO_O_CREATE, NULL);
    int f2 = cxk_aio_open(path, CXK_AIO_O_WRITE, NULL);
    CHECK(f1 >= 0 && f2 >= 0);
    CHECK_EQ(cxk_aio_lock(f1, 2, 0, 0), 0);
    CHECK_EQ(cxk_aio_lock(f2, 2, 0, 0), -EAGAIN);  /* another open file description */
    CHECK_EQ(cxk_aio_lock(f2, 1, 0, 0), -EAGAIN);
    CHECK_EQ(cxk_aio_lock(f2, 2, 0, 1), 0);       /* another byte: another path's lock */
    CHECK_EQ(cxk_aio_close(f1), 0);               /* closing releases */
    CHECK_EQ(cxk_aio_lock(f2, 2, 0, 0), 0);
    int f3 = cxk_aio_open(path, CXK_AIO_O_WRITE, NULL);
    CHECK_EQ(cxk_aio_lock(f2, 1, 0, 0), 0);       /* downgrade to shared */
    CHECK_EQ(cxk_aio_lock(f3, 1, 0, 0), 0);       /* shared with shared */
    CHECK_EQ(cxk_aio_lock(f3, 7, 0, 0), -EINVAL);
    cxk_aio_close(f2);
    cxk_aio_close(f3);
    unlink(path);
}

/* A shared mapping of n bytes of a new file <dir>/name (path written to path), its fd in *fd:
 * the guarded-copy tests truncate the file under it. */
static void *map_file(char *path, size_t cap, const char *name, size_t n, int *fd) {
    path_of(path, cap, name);
    *fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(*fd >= 0);
    CHECK_EQ(ftruncate(*fd, (off_t)n), 0);
    void *m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
    CHECK(m != MAP_FAILED);
    return m;
}

/* cxk_aio_copy: a plain copy, then both directions over a mapping whose file was truncated
 * after mmap (the SIGBUS case) give -EFAULT and the process goes on. */
static void guarded_copy(void) {
    char a[64], b[64];
    memset(a, 'x', sizeof a);
    CHECK_EQ(cxk_aio_copy(b, a, sizeof a), 0);
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK_EQ(cxk_aio_copy(b, a, 0), 0);
    CHECK_EQ(cxk_aio_copy(NULL, a, 1), -EINVAL);
    CHECK_EQ(cxk_aio_copy(b, NULL, 1), -EINVAL);
    char path[256];
    size_t n = 1 << 20;
    int fd;
    char *m = map_file(path, sizeof path, "truncated", n, &fd);
    char *buf = malloc(n);
    CHECK(buf != NULL);
    CHECK_EQ(cxk_aio_copy(buf, m, n), 0);
    CHECK_EQ(ftruncate(fd, 0), 0);
    CHECK_EQ(cxk_aio_copy(buf, m, n), -EFAULT);
    CHECK_EQ(cxk_aio_copy(m, buf, n), -EFAULT);
    CHECK_EQ(cxk_aio_copy(b, a, sizeof a), 0); /* the guard works again after a fault */
    munmap(m, n);
    close(fd);
    unlink(path);
    free(buf);
}

/* cxk_kv_copy_sum / cxk_aio_copy_sum: the copy is exact and its sum equals cxk_kv_checksum
 * of the bytes, for every length around the 32-byte blocks and at odd offsets; a flipped
 * byte changes it; bad arguments give -EINVAL; the guarded one gives -EFAULT over a
 * truncated mapping and leaves *sum alone. */
static void copy_sum(void) {
    size_t cap = 4096 + 64;
    unsigned char *src = malloc(cap), *dst = malloc(cap);
    CHECK(src != NULL && dst != NULL);
    for (size_t i = 0; i < cap; ++i) src[i] = (unsigned char)(i * 131u + 7u);
    static const size_t lens[] = {0, 1, 7, 8, 9, 31, 32, 33, 63, 64, 65, 100, 1000, 4096};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; ++li) {
        for (size_t off = 0; off < 3; ++off) {
            size_t n = lens[li];
            uint64_t s1 = 0, s2 = 0;
            memset(dst, 0, cap);
            CHECK_EQ(cxk_kv_copy_sum(dst + off, src + off, n, &s1), 0);
            CHECK(memcmp(dst + off, src + off, n) == 0);
            CHECK(s1 == cxk_kv_checksum(src + off, n));
            memset(dst, 0, cap);
            CHECK_EQ(cxk_aio_copy_sum(dst + off, src + off, n, &s2), 0);
            CHECK(memcmp(dst + off, src + off, n) == 0);
            CHECK(s2 == s1);
            if (n) {
                src[off + n / 2] ^= 0x10;
                CHECK_EQ(cxk_aio_copy_sum(dst + off, src + off, n, &s2), 0);
                CHECK(s2 != s1);
                src[off + n / 2] ^= 0x10;
            }
        }
    }
    uint64_t s = 0;
    CHECK_EQ(cxk_kv_copy_sum(dst, src, 1, NULL), -EINVAL);
    CHECK_EQ(cxk_kv_copy_sum(NULL, src, 1, &s), -EINVAL);
    CHECK_EQ(cxk_aio_copy_sum(dst, src, 1, NULL), -EINVAL);
    CHECK_EQ(cxk_aio_copy_sum(dst, NULL, 1, &s), -EINVAL);
    char path[256];
    size_t n = 1 << 20;
    int fd;
    unsigned char *m = map_file(path, sizeof path, "truncated_sum", n, &fd);
    unsigned char *buf = malloc(n);
    CHECK(buf != NULL);
    CHECK_EQ(cxk_aio_copy_sum(buf, m, n, &s), 0);
    CHECK(s == cxk_kv_checksum(buf, n));
    CHECK_EQ(ftruncate(fd, 0), 0);
    s = 42;
    CHECK_EQ(cxk_aio_copy_sum(buf, m, n, &s), -EFAULT);
    CHECK_EQ(cxk_aio_copy_sum(m, buf, n, &s), -EFAULT);
    CHECK(s == 42);
    CHECK_EQ(cxk_aio_copy_sum(dst, src, 64, &s), 0); /* the guard works again */
    CHECK(s == cxk_kv_checksum(src, 64));
    munmap(m, n);
    close(fd);
    unlink(path);
    free(buf);
    free(src);
    free(dst);
}

/* cxk_aio_guard_range: stores from another thread into a guarded mapping whose
 * file was truncated land on zero pages and are counted; the range's pages inside the file
 * stay the file's; after unguarding, the slot is free again; bad ids and ranges refused. */
struct fill_arg {
    unsigned char *p;
    size_t n;
};
static void *fill(void *v) {
    struct fill_arg *a = v;
    memset(a->p, 9, a->n);
    return NULL;
}

static void guarded_range(void) {
    int id = -1;
    uint64_t faults = 7;
    char x[8];
    CHECK_EQ(cxk_aio_guard_range(NULL, 8, &id), -EINVAL);
    CHECK_EQ(cxk_aio_guard_range(x, 0, &id), -EINVAL);
    CHECK_EQ(cxk_aio_guard_range(x, 8, NULL), -EINVAL);
    CHECK_EQ(cxk_aio_unguard_range(-1, &faults), -EINVAL);
    CHECK_EQ(cxk_aio_unguard_range(63, &faults), -EINVAL); /* not guarding */
    char path[256];
    const size_t page = (size_t)sysconf(_SC_PAGESIZE), n = 8 * page;
    int fd;
    unsigned char *m = map_file(path, sizeof path, "range", n, &fd);
    memset(m, 1, n);
    CHECK_EQ(cxk_aio_guard_range(m, n, &id), 0);
    CHECK_EQ(ftruncate(fd, (off_t)(2 * page)), 0); /* pages 2..7 beyond the file */
    struct fill_arg arg = {m, n};
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, fill, &arg), 0);
    CHECK_EQ(pthread_join(t, NULL), 0);
    CHECK_EQ(cxk_aio_unguard_range(id, &faults), 0);
    CHECK(faults == 6);
    CHECK(m[0] == 9 && m[n - 1] == 9);
    CHECK_EQ(cxk_aio_unguard_range(id, &faults), -EINVAL); /* already given back */
    unsigned char back[2];
    CHECK_EQ(pread(fd, back, 1, 0), 1); /* the page inside the file took the store */
    CHECK(back[0] == 9);
    munmap(m, n);
    close(fd);
    unlink(path);
}

int main(void) {
    if (!mkdtemp(g_dir)) SKIP("cannot make a directory under /var/tmp");
    bad_input();
    round_trip(CXK_AIO_THREADS, "threads");
    round_trip(CXK_AIO_URING, "uring");
    round_trip(CXK_AIO_AUTO, "auto");
    locks();
    guarded_copy();
    copy_sum();
    guarded_range();
    rmdir(g_dir);
    fprintf(stderr, "io_uring built in: %d\n", cxk_aio_uring_built());
    return 0;
}
