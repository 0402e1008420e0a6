/* check.h — the tiny harness of the C tests: CHECK fails the program (exit 1) with the
 * line, SKIP exits 77 (ctest's skip code) with a reason. */
#ifndef CXK_TEST_CHECK_H
#define CXK_TEST_CHECK_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                                 \
    do {                                                                            \
        if (!(cond)) {                                                              \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            exit(1);                                                                \
        }                                                                           \
    } while (0)

#define CHECK_EQ(a, b)                                                                  \
    do {                                                                                \
        long long a_ = (long long)(a), b_ = (long long)(b);                             \
        if (a_ != b_) {                                                                 \
            fprintf(stderr, "%s:%d: %s == %lld, expected %s == %lld\n", __FILE__,      \
                    __LINE__, #a, a_, #b, b_);                                          \
            exit(1);                                                                    \
        }                                                                               \
    } while (0)

#define SKIP(reason)                                      \
    do {                                                  \
        fprintf(stderr, "skipped: %s\n", reason);         \
        exit(77);                                         \
    } while (0)
#endif
