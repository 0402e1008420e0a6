/* sys.c — every syscall wrapper of the sys section fails through the fault-injection hook
 * with the chosen errno (and only on the armed call), cpuid features are consistent, and
 * CXLKIT_FAULT in the environment arms faults at load (a malformed spec arms none). */
#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "cxlkit.h"

static void each_wrapper_fails_once(void) {
    unsigned long mask[16] = {1};
    int mode = 0, status = 0;
    void *page = NULL;
    CHECK_EQ(cxk_map_anon(4096, &page), 0);
    void *pages[1] = {page};

    CHECK_EQ(cxk_fault_inject("mbind", 1, EPERM), 0);
    CHECK_EQ(cxk_mbind(page, 4096, 2, mask, 1025, 0), -EPERM);
    CHECK_EQ(cxk_mbind(page, 4096, 2, mask, 1025, 0), 0); /* once only */

    CHECK_EQ(cxk_fault_inject("set_mempolicy", 1, EINVAL), 0);
    CHECK_EQ(cxk_set_mempolicy(0, NULL, 0), -EINVAL);

    CHECK_EQ(cxk_fault_inject("get_mempolicy", 1, ENOSYS), 0);
    CHECK_EQ(cxk_get_mempolicy(&mode, NULL, 0, NULL, 0), -ENOSYS);
    CHECK_EQ(cxk_get_mempolicy(&mode, NULL, 0, NULL, 0), 0);

    CHECK_EQ(cxk_fault_inject("move_pages", 1, EFAULT), 0);
    CHECK_EQ(cxk_move_pages(0, 1, pages, NULL, &status, 0), -EFAULT);

    CHECK_EQ(cxk_fault_inject("migrate_pages", 1, EPERM), 0);
    CHECK_EQ(cxk_migrate_pages(0, 1025, mask, mask), -EPERM);
    CHECK(cxk_migrate_pages(0, 1025, mask, mask) >= 0); /* node0 -> node0: nothing to move */

    CHECK_EQ(cxk_fault_inject("memfd_create", 1, EMFILE), 0);
    CHECK_EQ(cxk_memfd_create("x", 0), -EMFILE);
    int fd = cxk_memfd_create("x", 0);
    CHECK(fd >= 0);
    close(fd);

    CHECK_EQ(cxk_fault_inject("madvise", 1, EAGAIN), 0);
    CHECK_EQ(cxk_populate(page, 4096), -EAGAIN);
    CHECK_EQ(cxk_populate(page, 4096), 0);

    CHECK_EQ(cxk_fault_inject("munmap", 1, EINVAL), 0);
    CHECK_EQ(cxk_unmap(page, 4096), -EINVAL);
    CHECK_EQ(cxk_unmap(page, 4096), 0);

    CHECK_EQ(cxk_fault_inject("prctl", 1, EPERM), 0);
    CHECK_EQ(cxk_thp_disable(1), -EPERM);
    CHECK_EQ(cxk_thp_disable(0), 0);

    void *p = NULL;
    CHECK_EQ(cxk_fault_inject("mmap", 1, ENOMEM), 0);
    CHECK_EQ(cxk_map_anon(4096, &p), -ENOMEM);
    CHECK(p == NULL);
    CHECK_EQ(cxk_fault_inject("mmap", 2, ENOMEM), 0); /* the second call from now */
    CHECK_EQ(cxk_map_anon(4096, &p), 0);
    void *q = NULL;
    CHECK_EQ(cxk_map_anon(4096, &q), -ENOMEM);
    CHECK_EQ(cxk_unmap(p, 4096), 0);

    fd = cxk_memfd_create("fd", 0);
    CHECK(fd >= 0);
    CHECK_EQ(ftruncate(fd, 4 << 20), 0);
    CHECK_EQ(cxk_fault_inject("mmap", 1, EACCES), 0);
    CHECK_EQ(cxk_map_fd(fd, 4 << 20, 0, 2 << 20, 1, &p), -EACCES);
    CHECK_EQ(cxk_map_fd(fd, 4 << 20, 0, 2 << 20, 1, &p), 0);
    CHECK_EQ((unsigned long)p % (2 << 20), 0); /* aligned as asked */
    ((char *)p)[(4 << 20) - 1] = 1;
    CHECK_EQ(cxk_unmap(p, 4 << 20), 0);
    CHECK_EQ(cxk_map_fd(fd, 4096, 0, 3000, 1, &p), -EINVAL); /* not a power of two */
    CHECK_EQ(cxk_map_fd(fd, 4096, 100, 0, 1, &p), -EINVAL);  /* offset not page-aligned */
    close(fd);
}

static void bad_arguments(void) {
    CHECK_EQ(cxk_fault_inject("no_such_call", 1, EIO), -EINVAL);
    CHECK_EQ(cxk_fault_inject(NULL, 1, EIO), -EINVAL);
    CHECK_EQ(cxk_fault_inject("mbind", -1, EIO), -EINVAL);
    CHECK_EQ(cxk_fault_inject("mbind", 1, 0), -EINVAL);
    CHECK_EQ(cxk_fault_calls("no_such_call"), -EINVAL);
    void *p = NULL;
    CHECK_EQ(cxk_map_anon(0, &p), -EINVAL);
    CHECK_EQ(cxk_map_anon(4096, NULL), -EINVAL);
    CHECK_EQ(cxk_unmap(NULL, 4096), -EINVAL);
    CHECK_EQ(cxk_populate(NULL, 4096), -EINVAL);
}

static void disarm_and_count(void) {
    int64_t before = cxk_fault_calls("get_mempolicy");
    int mode;
    CHECK_EQ(cxk_fault_inject("get_mempolicy", 1, EIO), 0);
    CHECK_EQ(cxk_fault_inject("get_mempolicy", 0, 0), 0); /* disarm */
    CHECK_EQ(cxk_get_mempolicy(&mode, NULL, 0, NULL, 0), 0);
    CHECK_EQ(cxk_fault_inject("get_mempolicy", 1, EIO), 0);
    cxk_fault_clear();
    CHECK_EQ(cxk_get_mempolicy(&mode, NULL, 0, NULL, 0), 0);
    CHECK_EQ(cxk_fault_calls("get_mempolicy"), before + 2);
}

static void cpu_features(void) {
    uint32_t f = cxk_cpu_features();
    CHECK_EQ(f, cxk_cpu_features()); /* cached and stable */
    if (f & CXK_CPU_AVX512BW) CHECK(f & CXK_CPU_AVX512F);
    const char *k = cxk_flush_kind();
    if (f & CXK_CPU_CLWB) CHECK(strcmp(k, "clwb") == 0);
    else if (f & CXK_CPU_CLFLUSHOPT) CHECK(strcmp(k, "clflushopt") == 0);
    else CHECK(strcmp(k, "clflush") == 0);
    CHECK(strcmp(cxk_version(), "0.1.0") == 0);
    CHECK(cxk_page_size() >= 4096);
}

/* The child runs with CXLKIT_FAULT set: the first get_mempolicy fails with EACCES, the
 * second memfd_create with ENOSPC. */
static int child(void) {
    int mode;
    CHECK_EQ(cxk_get_mempolicy(&mode, NULL, 0, NULL, 0), -EACCES);
    CHECK_EQ(cxk_get_mempolicy(&mode, NULL, 0, NULL, 0), 0);
    int fd = cxk_memfd_create("a", 0);
    CHECK(fd >= 0);
    close(fd);
    CHECK_EQ(cxk_memfd_create("b", 0), -ENOSPC);
    return 0;
}

/* A spec with a malformed entry arms nothing (refused whole, never in part) and the table
 * says so, naming the variable. */
static int child_malformed(void) {
    int mode;
    char why[256] = "";
    CHECK_EQ(cxk_config_check("CXLKIT_FAULT", why, sizeof why), -EINVAL);
    CHECK(strncmp(why, "CXLKIT_FAULT=", 13) == 0);
    CHECK_EQ(cxk_get_mempolicy(&mode, NULL, 0, NULL, 0), 0);
    CHECK_EQ(cxk_config_error()[0], '\0');  /* the load asked nothing of this thread */
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "child") == 0) return child();
    if (argc > 1 && strcmp(argv[1], "malformed") == 0) return child_malformed();
    each_wrapper_fails_once();
    bad_arguments();
    disarm_and_count();
    cpu_features();
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "CXLKIT_FAULT='get_mempolicy:1:EACCES,memfd_create:2:28' '%s' child", argv[0]);
    CHECK_EQ(system(cmd), 0);
    snprintf(cmd, sizeof cmd,
             "CXLKIT_FAULT='bogus,get_mempolicy:1:EACCES,x:y:z' '%s' malformed", argv[0]);
    CHECK_EQ(system(cmd), 0);
    return 0;
}
