/* config.c — the CXLKIT_* table (cxk_config_*): every entry listed with a default its own
 * parser accepts, malformed and out-of-range values refused with a message naming the
 * variable, and the calls that read one (cxk_msg_init, a simulated pool's open) failing with
 * -EINVAL instead of running on the default. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "pool_open.h"
#include "simdir.h"
#include "cxlkit.h"

static void every_default_is_accepted(void) {
    const int n = cxk_config_count();
    CHECK(n > 0);
    for (int i = 0; i < n; ++i) {
        struct cxk_config_entry e;
        memset(&e, 0, sizeof e);
        e.struct_size = sizeof e;
        CHECK_EQ(cxk_config_entry(i, &e), 0);
        CHECK(strncmp(e.name, "CXLKIT_", 7) == 0);
        CHECK(e.doc[0] && e.reader[0]);
        if (!e.default_value[0]) continue;
        setenv(e.name, e.default_value, 1);
        char why[256] = "";
        if (cxk_config_check(e.name, why, sizeof why) != 0) {
            fprintf(stderr, "default of %s refused: %s\n", e.name, why);
            exit(1);
        }
        unsetenv(e.name);
    }
    struct cxk_config_entry e;
    e.struct_size = sizeof e;
    CHECK_EQ(cxk_config_entry(n, &e), -ERANGE);
    e.struct_size = 8;
    CHECK_EQ(cxk_config_entry(0, &e), -EINVAL);
    CHECK_EQ(cxk_config_check("CXLKIT_NO_SUCH_THING", NULL, 0), -ENOENT);
}

/* value of name is refused, and its message names the variable and the value */
static void refused(const char *name, const char *value) {
    setenv(name, value, 1);
    char why[256] = "";
    if (cxk_config_check(name, why, sizeof why) != -EINVAL) {
        fprintf(stderr, "%s=%s accepted\n", name, value);
        exit(1);
    }
    CHECK(strncmp(why, name, strlen(name)) == 0 && strstr(why, value));
    unsetenv(name);
}

static void accepted(const char *name, const char *value) {
    setenv(name, value, 1);
    char why[256] = "";
    if (cxk_config_check(name, why, sizeof why) != 0) {
        fprintf(stderr, "%s=%s refused: %s\n", name, value, why);
        exit(1);
    }
    unsetenv(name);
}

static void values_are_checked(void) {
    refused("CXLKIT_MSG_CELLS", "64k");
    refused("CXLKIT_MSG_CELLS", "-1");
    refused("CXLKIT_MSG_CELLS", "0");
    refused("CXLKIT_MSG_DEAD_MS", "99999999999");  /* past 32 bits */
    refused("CXLKIT_MSG_SPIN_US", "soon");
    accepted("CXLKIT_MSG_SPIN_US", "forever");
    refused("CXLKIT_MSG_SLEEP_US", "forever");     /* sleep has no forever */
    refused("CXLKIT_MSG_SLEEP_US", "2000000");     /* over 1 s */
    refused("CXLKIT_SIMD", "sse9");
    accepted("CXLKIT_SIMD", "scalar");
    refused("CXLKIT_SIM_EVICT", "lots");
    refused("CXLKIT_SIM_EVICT", "1.5");
    accepted("CXLKIT_SIM_EVICT", "0.5");
    refused("CXLKIT_SIM_SEED", "0x");
    refused("CXLKIT_PRELOAD_CACHE_COUNT", "257");
    accepted("CXLKIT_PRELOAD_CACHE", "64MiB");
    refused("CXLKIT_PRELOAD_CACHE", "64X");
    refused("CXLKIT_MPI_STATS", "yes");
    refused("CXLKIT_FAULT", "mmap:1:ENOMEM,mmap:x:ENOMEM");  /* one bad item: all refused */
    refused("CXLKIT_FAULT", "nosuchcall:1:ENOMEM");
    accepted("CXLKIT_FAULT", "mmap:3:ENOMEM,open:1:13");
    setenv("CXLKIT_MSG_CELLS", "", 1);                       /* empty: the default */
    CHECK_EQ(cxk_config_check("CXLKIT_MSG_CELLS", NULL, 0), 0);
    unsetenv("CXLKIT_MSG_CELLS");
}

static char path[256];

static void msg_init_refuses_a_malformed_variable(void) {
    snprintf(path, sizeof path, "/dev/shm/cxlkit-test-config-%d", (int)getpid());
    test_pool_remove_at_exit(path);
    cxk_pool *p = test_pool_open(path, 0, CXK_POOL_CREATE, 16u << 20, 2, CXK_COHERENCE_HOST);
    CHECK(p);
    struct cxk_msg_opts o;
    cxk_msg_opts_init(&o);
    cxk_comm *c = NULL;
    setenv("CXLKIT_MSG_CELLS", "64k", 1);
    CHECK_EQ(cxk_msg_init(p, "cfg", 0, 1, &o, &c), -EINVAL);
    CHECK(strstr(cxk_config_error(), "CXLKIT_MSG_CELLS=64k"));
    CHECK_EQ(cxk_config_error()[0], '\0');  /* handed out once */
    unsetenv("CXLKIT_MSG_CELLS");
    setenv("CXLKIT_MSG_SPIN_US", "-3", 1);  /* read by the waits, refused at the join */
    CHECK_EQ(cxk_msg_init(p, "cfg", 0, 1, &o, &c), -EINVAL);
    CHECK(strstr(cxk_config_error(), "CXLKIT_MSG_SPIN_US=-3"));
    unsetenv("CXLKIT_MSG_SPIN_US");
    CHECK_EQ(cxk_msg_init(p, "cfg", 0, 1, &o, &c), 0);
    CHECK_EQ(cxk_msg_finalize(c), 0);
    cxk_pool_close(p);
}

static void sim_open_refuses_a_malformed_eviction_chance(void) {
    simdir_make("config");
    setenv("CXLKIT_SIM_EVICT", "lots", 1);
    struct cxk_pool_opts o;
    cxk_pool_opts_init(&o);
    o.host_id = 0;
    o.coherence = CXK_COHERENCE_SIM;
    cxk_pool *p = NULL;
    CHECK_EQ(cxk_pool_open(path, &o, &p), -EINVAL);
    CHECK(strstr(cxk_config_error(), "CXLKIT_SIM_EVICT=lots"));
    unsetenv("CXLKIT_SIM_EVICT");
}

int main(void) {
    every_default_is_accepted();
    values_are_checked();
    msg_init_refuses_a_malformed_variable();
    sim_open_refuses_a_malformed_eviction_chance();
    return 0;
}
