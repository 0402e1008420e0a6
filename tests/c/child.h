/* child.h — waiting for a forked child with a deadline: a child that hangs (a lost wake-up,
 * a lock inherited across fork) fails the test with its pid and the caller's line, and is
 * killed, instead of holding ctest until its own timeout. */
#ifndef CXK_TEST_CHILD_H
#define CXK_TEST_CHILD_H
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The child's raw wait status (for WIFEXITED, WIFSIGNALED...); exits 1 (the CHECK
 * convention) when it does not end within `seconds`, after killing it. */
static inline int child_wait_at(pid_t child, int seconds, const char *file, int line) {
    struct timespec step = {0, 2000000}; /* 2 ms */
    long waited_ms = 0;
    for (;;) {
        int st = 0;
        pid_t r = waitpid(child, &st, WNOHANG);
        if (r == child) return st;
        if (r < 0) {
            fprintf(stderr, "%s:%d: waitpid(%d) failed\n", file, line, (int)child);
            exit(1);
        }
        if (waited_ms >= seconds * 1000L) {
            fprintf(stderr, "%s:%d: child %d still running after %d s: killed\n", file, line,
                    (int)child, seconds);
            kill(child, SIGKILL);
            waitpid(child, &st, 0);
            exit(1);
        }
        nanosleep(&step, NULL);
        waited_ms += 2;
    }
}

/* The child's exit status; exits 1 when it does not end within `seconds` or ends by a
 * signal. */
static inline int child_join_at(pid_t child, int seconds, const char *file, int line) {
    int st = child_wait_at(child, seconds, file, line);
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    fprintf(stderr, "%s:%d: child %d ended by signal %d\n", file, line, (int)child,
            WIFSIGNALED(st) ? WTERMSIG(st) : -1);
    exit(1);
}
#define child_wait(child, seconds) child_wait_at((child), (seconds), __FILE__, __LINE__)
#define child_join(child, seconds) child_join_at((child), (seconds), __FILE__, __LINE__)
#endif
