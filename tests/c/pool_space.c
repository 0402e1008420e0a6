/* pool_space.c — a pool file's blocks are reserved before they are touched, and a pool file is
 * probed without being opened: a new pool is allocated whole; an overcommitted one fails a
 * claim whose extents the filesystem cannot back with -EDQUOT (injected ENOSPC from
 * fallocate), the claim withdrawn; cxk_pool_probe sees this handle's slot live, then dead once
 * closed, refuses a link and a FIFO, and names a broken checksum. */
#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "pool_open.h"

static void reserved_whole(const char *path) {
    cxk_pool *p = test_pool_open(path, 0, CXK_POOL_CREATE, 8u << 20, 2, CXK_COHERENCE_HOST);
    CHECK(p);
    struct stat st;
    CHECK_EQ(stat(path, &st), 0);
    CHECK((uint64_t)st.st_blocks * 512 >= (8u << 20));
    struct cxk_pool_probe_info in;
    CHECK_EQ(cxk_pool_probe(path, &in), 0);
    CHECK_EQ(in.superblock, 0);
    CHECK_EQ(in.hosts_live, 1); /* this handle holds slot 0's user lock */
    CHECK_EQ(cxk_pool_close(p), 0);
    CHECK_EQ(cxk_pool_probe(path, &in), 0);
    CHECK_EQ(in.hosts_live, 0);
    CHECK_EQ(in.hosts_dead, 1); /* this boot, no process holds it: however fresh its beat */
    CHECK_EQ(unlink(path), 0);
}

static void sparse_claim_fails_typed(const char *path) {
    cxk_pool *p = test_pool_open(path, 0, CXK_POOL_CREATE | CXK_POOL_OVERCOMMIT, 16u << 20, 2,
                                 CXK_COHERENCE_HOST);
    CHECK(p);
    uint64_t off = 0;
    CHECK_EQ(cxk_fault_inject("fallocate", 1, ENOSPC), 0);
    CHECK_EQ(cxk_obj_create(p, "x", 4u << 20, &off), -EDQUOT);
    struct cxk_pool_stat ps;
    CHECK_EQ(cxk_pool_stat(p, &ps), 0);
    CHECK_EQ(ps.extents_held, 0); /* withdrawn */
    CHECK_EQ(cxk_obj_create(p, "x", 4u << 20, &off), 0);
    CHECK_EQ(cxk_pool_close(p), 0);
    CHECK_EQ(unlink(path), 0);
}

static void probe_refusals(const char *path) {
    char other[256];
    struct cxk_pool_probe_info in;
    snprintf(other, sizeof other, "%s.link", path);
    CHECK_EQ(symlink("/dev/zero", other), 0);
    CHECK_EQ(cxk_pool_probe(other, &in), -ELOOP);
    CHECK_EQ(unlink(other), 0);
    snprintf(other, sizeof other, "%s.fifo", path);
    CHECK_EQ(mkfifo(other, 0600), 0);
    CHECK_EQ(cxk_pool_probe(other, &in), -ENODEV);
    CHECK_EQ(in.file_type, S_IFIFO);
    CHECK_EQ(unlink(other), 0);
    cxk_pool *p = test_pool_open(path, 0, CXK_POOL_CREATE, 8u << 20, 2, CXK_COHERENCE_HOST);
    CHECK(p);
    CHECK_EQ(cxk_pool_close(p), 0);
    FILE *f = fopen(path, "r+b");
    CHECK(f);
    CHECK_EQ(fseek(f, 24, SEEK_SET), 0); /* the uuid: under the checksum */
    CHECK_EQ(fwrite("\xff\xff\xff\xff", 1, 4, f), 4);
    CHECK_EQ(fclose(f), 0);
    CHECK_EQ(cxk_pool_probe(path, &in), 0);
    CHECK_EQ(in.superblock, -EBADMSG);
    CHECK(strstr(in.why, "checksum") != NULL);
    CHECK_EQ(unlink(path), 0);
}

int main(void) {
    char path[128];
    snprintf(path, sizeof path, "/dev/shm/cxlkit-ctest-space-%d", (int)getpid());
    test_pool_remove_at_exit(path);
    reserved_whole(path);
    sparse_claim_fails_typed(path);
    probe_refusals(path);
    return 0;
}
