/* simdir.h — a private directory for the simulator's view files (CXLKIT_SIM_DIR) of a C test
 * that runs under CXK_COHERENCE_SIM: a process killed on purpose leaves its host's
 * view behind (its host's cache outlives it), and the test's exit removes what is left. */
#ifndef CXK_TEST_SIMDIR_H
#define CXK_TEST_SIMDIR_H
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"

static char simdir_path[64];
static pid_t simdir_owner;

/* Every file in the directory, then the directory; only in the process that made it (a
 * child of fork that fails a CHECK runs the atexit handlers too). */
static void simdir_remove(void) {
    if (!simdir_path[0] || getpid() != simdir_owner) return;
    DIR *d = opendir(simdir_path);
    if (d) {
        struct dirent *e;
        char f[sizeof simdir_path + 256];
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2])))
                continue;
            snprintf(f, sizeof f, "%s/%s", simdir_path, e->d_name);
            unlink(f);
        }
        closedir(d);
    }
    rmdir(simdir_path);
    simdir_path[0] = 0;
}

/* Make the directory under /dev/shm (tmpfs, as the views of a real run) and point
 * CXLKIT_SIM_DIR at it for this process and its children. */
static void simdir_make(const char *test) {
    snprintf(simdir_path, sizeof simdir_path, "/dev/shm/cxk-test-%s-sim-XXXXXX", test);
    CHECK(mkdtemp(simdir_path) != NULL);
    simdir_owner = getpid();
    CHECK_EQ(setenv("CXLKIT_SIM_DIR", simdir_path, 1), 0);
    atexit(simdir_remove);
}
#endif
