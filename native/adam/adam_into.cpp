// adam_into.cpp — the out-of-place step's pieces behind cxk_adam_step_into (adam.cpp): the
// spans the kernels run (outputs beside inputs), the aliasing and offset checks, the tiled run
// that folds the payload checksum into the kernel's pass, and the checksum parts' C ABI.
#include <cerrno>
#include <cstdint>

#include "adam/adam.h"
#include "cxlkit.h"
#include "kv/kv.h"

namespace cxk::adam {

namespace {

size_t dsize(int dt) { return dt == CXK_DTYPE_F32 ? 4 : dt == CXK_DTYPE_NONE ? 0 : 2; }

}  // namespace

// Elements [begin, begin+n) of t; the updated p, m, v go to o's arrays (o NULL: in place).
Span span_of(const cxk_adam_tensor &t, const cxk_adam_out *o, uint64_t begin, uint64_t n) {
    Span s;
    s.p = t.param + begin;
    s.m = t.exp_avg + begin;
    s.v = t.exp_avg_sq + begin;
    s.po = (o ? o->param : t.param) + begin;
    s.mo = (o ? o->exp_avg : t.exp_avg) + begin;
    s.vo = (o ? o->exp_avg_sq : t.exp_avg_sq) + begin;
    s.g = static_cast<const unsigned char *>(t.grad) + begin * dsize(t.grad_dtype);
    s.copy = t.param_copy
                 ? static_cast<unsigned char *>(t.param_copy) + begin * dsize(t.copy_dtype)
                 : nullptr;
    s.n = size_t(n);
    s.gdt = t.grad_dtype;
    s.cdt = t.copy_dtype;
    return s;
}

// Elements a folded step hands the kernel at a time: each tile's inputs are summed just
// before the kernel reads them (the sum's loads bring them into L1 for the kernel) and its
// outputs just after it wrote them (from L1): the sums add no pass over memory. 1024 fp32
// elements = 4 KiB per array, the six arrays and the grad well inside L1.
static constexpr uint64_t kFoldTile = 1024;

// One span of tensor t (elements [begin, begin+n)), its bytes folded into in / out (either
// may be NULL) at the image offsets off[0..2] of its param, exp_avg and exp_avg_sq.
uint64_t run_span(Kernel k, const Coeffs &c, const cxk_adam_tensor &t, const cxk_adam_out *o,
                  uint64_t begin, uint64_t n, const uint64_t *off, kv::SumParts *in,
                  kv::SumParts *out) {
    if (!in && !out) return k(c, span_of(t, o, begin, n));
    Coeffs cf = c;
    cf.nt_state = false;  // streamed stores would send the outputs past L1: same bits
    uint64_t changed = 0;
    for (uint64_t i = begin; i < begin + n; i += kFoldTile) {
        const uint64_t m = begin + n - i < kFoldTile ? begin + n - i : kFoldTile;
        const Span s = span_of(t, o, i, m);
        const float *src[3] = {s.p, s.m, s.v}, *dst[3] = {s.po, s.mo, s.vo};
        if (in)
            for (int a = 0; a < 3; ++a) in->add(src[a], off[a] + i * 4, m * 4);
        changed += k(cf, s);
        if (out)
            for (int a = 0; a < 3; ++a) out->add(dst[a], off[a] + i * 4, m * 4);
    }
    return changed;
}

// [a, a+an) and [b, b+bn) share a byte.
static bool overlap(const void *a, size_t an, const void *b, size_t bn) {
    const uintptr_t x = uintptr_t(a), y = uintptr_t(b);
    return an && bn && x < y + bn && y < x + an;
}

// cxk_adam_step_into's output arrays: each one 4-byte aligned and either exactly its input
// array (that array updated in place) or sharing no byte with any array of its tensor (the
// inputs, the grad, the copy) nor with the other outputs. A partial overlap would let a
// store clobber an element another lane has yet to read.
int check_outs(const cxk_adam_tensor *t, const cxk_adam_out *o, size_t nt) {
    if (nt && !o) return -EINVAL;
    for (size_t i = 0; i < nt; ++i) {
        const cxk_adam_tensor &x = t[i];
        if (x.n == 0) continue;
        const size_t nb = size_t(x.n) * 4;
        const float *in[3] = {x.param, x.exp_avg, x.exp_avg_sq};
        const float *out[3] = {o[i].param, o[i].exp_avg, o[i].exp_avg_sq};
        const size_t gb = size_t(x.n) * dsize(x.grad_dtype), cb = size_t(x.n) * dsize(x.copy_dtype);
        for (int a = 0; a < 3; ++a) {
            if (!out[a] || (uintptr_t(out[a]) & 3)) return -EINVAL;
            if (overlap(out[a], nb, x.grad, gb) || overlap(out[a], nb, x.param_copy, cb))
                return -EINVAL;
            for (int b = 0; b < 3; ++b) {
                if (b != a && overlap(out[a], nb, out[b], nb)) return -EINVAL;
                if (out[a] == in[b] && a == b) continue;
                if (overlap(out[a], nb, in[b], nb)) return -EINVAL;
            }
        }
    }
    return 0;
}

// Image offsets of a folded step: 3 per tensor, multiples of 4.
int check_offs(const uint64_t *off, size_t nt) {
    if (nt && !off) return -EINVAL;
    for (size_t i = 0; i < 3 * nt; ++i)
        if (off[i] & 3) return -EINVAL;
    return 0;
}

kv::SumParts parts_of(const cxk_sum_parts &p) {
    kv::SumParts s;
    for (int l = 0; l < 4; ++l) s.a[l] = p.a[l], s.c[l] = p.c[l];
    return s;
}

void store_parts(cxk_sum_parts &p, const kv::SumParts &s) {
    for (int l = 0; l < 4; ++l) p.a[l] = s.a[l], p.c[l] = s.c[l];
}

}  // namespace cxk::adam

extern "C" {

int cxk_adam_sum_add(cxk_sum_parts *s, const void *p, uint64_t img_off, uint64_t nbytes) {
    if (!s || (nbytes && !p) || (img_off & 3) || (nbytes & 3)) return -EINVAL;
    cxk::kv::SumParts x = cxk::adam::parts_of(*s);
    x.add(p, img_off, size_t(nbytes));
    cxk::adam::store_parts(*s, x);
    return 0;
}

uint64_t cxk_adam_sum_finish(const cxk_sum_parts *s, uint64_t image_nbytes) {
    return s ? cxk::adam::parts_of(*s).finish(image_nbytes) : 0;
}

}  // extern "C"
