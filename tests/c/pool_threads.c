/* pool_threads.c — threads of one process (one host) create, publish, open, read and destroy
 * concurrently over one pool: every call returns 0 or the error its race allows (EEXIST,
 * ENOENT, EAGAIN), every return is counted, no read returns torn bytes, every successful
 * create is published and destroyed or still live at the end, and fsck finds nothing wrong.
 * Run it under -fsanitize=thread / address in debug jobs too. */
#include <errno.h>
#include <pthread.h>
#include <unistd.h>

#include "check.h"
#include "cxlkit.h"

enum { kThreads = 4, kRounds = 300, kNames = 7, kBytes = 1000 };
static cxk_pool *pool;

struct counts {
    long created, published, opened, read_ok, stale, verified, closed, destroyed;
    long torn, unexpected;   /* any return not allowed by the race it is in */
    int last_bad;            /* the last unexpected return code, for the message */
};
static struct counts per[kThreads];

static void bad(struct counts *c, int r) {
    c->unexpected++;
    c->last_bad = r;
}

static void *run(void *arg) {
    const long t = (long)arg;
    struct counts *c = &per[t];
    char name[64], buf[kBytes];
    for (int i = 0; i < kRounds; ++i) {
        uint64_t off;
        snprintf(name, sizeof name, "t%ld-%d", t, i % kNames);
        int r = cxk_obj_create(pool, name, kBytes, &off);
        if (r == 0) {
            c->created++;
            memset((char *)cxk_pool_base(pool) + off, (int)t, kBytes);
            if ((r = cxk_obj_publish(pool, off, CXK_PUBLISH_CHECKSUM)) == 0) c->published++;
            else bad(c, r);
            if ((r = cxk_obj_close(pool, off)) == 0) c->closed++;
            else bad(c, r);
        } else if (r != -EEXIST) {  /* our own name still live from an earlier round */
            bad(c, r);
        }
        /* a neighbour thread's objects: every validated read holds its fill byte */
        const long other = (t + 1) % kThreads;
        snprintf(name, sizeof name, "t%ld-%d", other, i % kNames);
        struct cxk_obj_stat st;
        r = cxk_obj_open(pool, name, &st);
        if (r == 0) {
            c->opened++;
            r = cxk_obj_read(pool, st.off, st.generation, 0, buf, kBytes);
            if (r == 0) {
                c->read_ok++;
                if (buf[0] != (char)other || buf[kBytes - 1] != (char)other) c->torn++;
            } else if (r == -ESTALE) {
                /* destroyed by its owner after our open: the lease keeps the bytes from reuse,
                 * but a destroyed object reads as stale (the Python face: StaleObjectError) */
                c->stale++;
            } else {
                bad(c, r);
            }
            if ((r = cxk_obj_verify(pool, st.off)) == 0) c->verified++;
            else bad(c, r);
            if ((r = cxk_obj_close(pool, st.off)) == 0) c->closed++;
            else bad(c, r);
        } else if (r != -ENOENT && r != -EAGAIN) {  /* not yet made / not yet published */
            bad(c, r);
        }
        if (i % 3 == 2) {
            snprintf(name, sizeof name, "t%ld-%d", t, (i * 5) % kNames);
            r = cxk_obj_destroy(pool, name);
            if (r == 0) c->destroyed++;
            else if (r != -ENOENT) bad(c, r);
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
    for (long t = 0; t < kThreads; ++t) CHECK_EQ(pthread_create(&th[t], NULL, run, (void *)t), 0);
    for (int t = 0; t < kThreads; ++t) CHECK_EQ(pthread_join(th[t], NULL), 0);
    struct counts sum = {0};
    for (int t = 0; t < kThreads; ++t) {
        if (per[t].unexpected)
            fprintf(stderr, "thread %d: %ld unexpected returns, last %d\n", t, per[t].unexpected,
                    per[t].last_bad);
        sum.created += per[t].created;
        sum.published += per[t].published;
        sum.opened += per[t].opened;
        sum.read_ok += per[t].read_ok;
        sum.stale += per[t].stale;
        sum.verified += per[t].verified;
        sum.closed += per[t].closed;
        sum.destroyed += per[t].destroyed;
        sum.torn += per[t].torn;
        sum.unexpected += per[t].unexpected;
    }
    struct cxk_fsck_report rep;
    int r = cxk_pool_fsck(pool, CXK_FSCK_REPAIR, &rep);
    CHECK_EQ(cxk_pool_close(pool), 0);
    CHECK_EQ(unlink(path), 0);
    CHECK_EQ(r, 0);
    CHECK_EQ(rep.errors, 0);
    CHECK_EQ(rep.objects_dead, 0);
    CHECK_EQ(rep.objects_creating, 0);
    CHECK_EQ(sum.unexpected, 0);
    CHECK_EQ(sum.torn, 0);
    CHECK(sum.created > 0 && sum.opened > 0 && sum.destroyed > 0);
    CHECK_EQ(sum.published, sum.created);
    CHECK_EQ(sum.read_ok + sum.stale, sum.opened);
    CHECK_EQ(sum.verified, sum.opened);
    CHECK_EQ(sum.closed, sum.created + sum.opened);
    /* every object created and not destroyed is still live */
    CHECK_EQ((long)rep.objects_live, sum.created - sum.destroyed);
    return 0;
}
