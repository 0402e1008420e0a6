/* memops.c — nt copy, copy+flush and invalidate+copy give memcpy's bytes for every size and
 * misalignment around the cache-line edges. */
#include <stdint.h>

#include "check.h"
#include "cxlkit.h"

int main(void) {
    enum { N = 1 << 16 };
    static unsigned char src[N + 128], dst[N + 128];
    for (int i = 0; i < N + 128; ++i) src[i] = (unsigned char)(i * 131 + 7);
    const size_t sizes[] = {0, 1, 7, 63, 64, 65, 127, 128, 129, 4095, 4096, 4097, N};
    void (*const fns[3])(void *, const void *, size_t) = {cxk_nt_copy, cxk_copy_flush,
                                                          cxk_copy_invalidate};
    for (int f = 0; f < 3; ++f)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; ++s)
            for (int so = 0; so < 3; ++so)
                for (int doff = 0; doff < 70; doff += 23) {
                    memset(dst, 0xAB, sizeof dst);
                    fns[f](dst + doff, src + so, sizes[s]);
                    CHECK(memcmp(dst + doff, src + so, sizes[s]) == 0);
                    for (int i = 0; i < doff; ++i) CHECK_EQ(dst[i], 0xAB);
                    CHECK_EQ(dst[doff + sizes[s]], 0xAB);
                }
    uint64_t flag = 0;
    cxk_nt_store64(&flag, 0x1122334455667788ull);
    CHECK(flag == 0x1122334455667788ull);
    cxk_flush(src, N);
    cxk_invalidate(src, N);
    cxk_flush(src, 0);
    cxk_sfence();
    cxk_mfence();
    CHECK(src[5] == (unsigned char)(5 * 131 + 7));
    return 0;
}
