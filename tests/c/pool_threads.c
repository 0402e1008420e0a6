/* pool_threads.c — threads of one process (one host) create, publish, open, read and destroy
 * concurrently over one pool: no read returns torn bytes, fsck finds nothing wrong. Run it
 * under -fsanitize=thread / address in debug jobs too. */
#include <pthread.h>
#include <unistd.h>

#include "check.h"
#include "cxlkit.h"

enum { kThreads = 4, kRounds = 300, kNames = 7, kBytes = 1000 };
static cxk_pool *pool;
static int torn;

static void *run(void *arg) {
    const long t = (long)arg;
    char name[64], buf[kBytes];
    for (int i = 0; i < kRounds; ++i) {
        uint64_t off;
        snprintf(name, sizeof name, "t%ld-%d", t, i % kNames);
        if (cxk_obj_create(pool, name, kBytes, &off) == 0) {
            memset((char *)cxk_pool_base(pool) + off, (int)t, kBytes);
            cxk_obj_publish(pool, off, CXK_PUBLISH_CHECKSUM);
            cxk_obj_close(pool, off);
        }
        /* a neighbour thread's objects: every validated read holds its fill byte */
        const long other = (t + 1) % kThreads;
        snprintf(name, sizeof name, "t%ld-%d", other, i % kNames);
        struct cxk_obj_stat st;
        if (cxk_obj_open(pool, name, &st) == 0) {
            if (cxk_obj_read(pool, st.off, st.generation, 0, buf, kBytes) == 0 &&
                (buf[0] != (char)other || buf[kBytes - 1] != (char)other))
                __atomic_add_fetch(&torn, 1, __ATOMIC_RELAXED);
            if (cxk_obj_verify(pool, st.off) != 0) __atomic_add_fetch(&torn, 1, __ATOMIC_RELAXED);
            cxk_obj_close(pool, st.off);
        }
        if (i % 3 == 2) {
            snprintf(name, sizeof name, "t%ld-%d", t, (i * 5) % kNames);
            cxk_obj_destroy(pool, name);
        }
    }
    return NULL;
}

int main(void) {
    struct cxk_pool_opts o;
    cxk_pool_opts_init(&o);
    o.flags = CXK_POOL_CREATE | CXK_POOL_EXCL;
    o.size = 8u << 20;
    o.host_id = 0;
    o.max_hosts = 1;
    char path[128];
    snprintf(path, sizeof path, "/dev/shm/cxlkit-ctest-threads-%d", (int)getpid());
    CHECK_EQ(cxk_pool_open(path, &o, &pool), 0);
    pthread_t th[kThreads];
    for (long t = 0; t < kThreads; ++t) pthread_create(&th[t], NULL, run, (void *)t);
    for (int t = 0; t < kThreads; ++t) pthread_join(th[t], NULL);
    struct cxk_fsck_report rep;
    int r = cxk_pool_fsck(pool, CXK_FSCK_REPAIR, &rep);
    cxk_pool_close(pool);
    unlink(path);
    CHECK_EQ(r, 0);
    CHECK_EQ(rep.errors, 0);
    CHECK_EQ(rep.objects_dead, 0);
    CHECK_EQ(rep.objects_creating, 0);
    CHECK_EQ(torn, 0);
    return 0;
}
