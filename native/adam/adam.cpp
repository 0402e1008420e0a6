// adam.cpp — the Adam C ABI: validation, per-step constants, SIMD level choice (cpuid,
// CXLKIT_SIMD, per call), and thread teams that follow memory (one team per NUMA node,
// pinned to that node's CPUs, each updating the chunks whose params live on its node).
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "adam/adam.h"
#include "adam/omp.h"
#include "cxlkit.h"
#include "kv/kv.h"
#include "sys/config.h"
#include "sys/sys.h"

namespace cxk::adam {
namespace {

bool level_available(int level) {
    const uint32_t f = cxk_cpu_features();
    switch (level) {
        case CXK_SIMD_SCALAR: return true;
        case CXK_SIMD_AVX2: return (f & CXK_CPU_AVX2) && (f & CXK_CPU_F16C);
        case CXK_SIMD_AVX512: return (f & CXK_CPU_AVX512F) != 0;
        case CXK_SIMD_AVX512BF16:  // its bf16 copies use AVX512BW's 16-bit mask compares
            return (f & CXK_CPU_AVX512F) && (f & CXK_CPU_AVX512BW) && (f & CXK_CPU_AVX512BF16);
        default: return false;
    }
}

// CXLKIT_SIMD, read once: AUTO when unset or "auto", a level, or -EINVAL (read again then, so
// that every refusal leaves its message for cxk_config_error on the calling thread).
int env_level() {
    static constexpr int kLevels[] = {CXK_SIMD_AUTO, CXK_SIMD_SCALAR, CXK_SIMD_AVX2,
                                      CXK_SIMD_AVX512, CXK_SIMD_AVX512BF16};  // the choices' order
    static const int level = [] {
        int i = 0;
        return cxk::config::get_choice(cxk::config::Id::SIMD, &i) == 0 ? kLevels[i] : -EINVAL;
    }();
    int i = 0;
    if (level < 0) cxk::config::get_choice(cxk::config::Id::SIMD, &i);
    return level;
}

int best_level() {
    return level_available(CXK_SIMD_AVX512BF16) ? CXK_SIMD_AVX512BF16
           : level_available(CXK_SIMD_AVX512) ? CXK_SIMD_AVX512
           : level_available(CXK_SIMD_AVX2) ? CXK_SIMD_AVX2
                                            : CXK_SIMD_SCALAR;
}

int resolve(int requested) {
    int level = requested;
    if (level == CXK_SIMD_AUTO) {
        level = env_level();
        if (level < 0) return level;
        if (level == CXK_SIMD_AUTO) return best_level();
    }
    if (level < CXK_SIMD_SCALAR || level > CXK_SIMD_AVX512BF16) return -EINVAL;
    return level_available(level) ? level : -ENOTSUP;
}

Kernel kernel_of(int level) {
    switch (level) {
        case CXK_SIMD_AVX512BF16: return step_avx512bf16;
        case CXK_SIMD_AVX512: return step_avx512;
        case CXK_SIMD_AVX2: return step_avx2;
        default: return step_scalar;
    }
}

bool finite(double x) { return std::isfinite(x); }

int check_hparams(const cxk_adam_hparams *h) {
    if (!h) return -EINVAL;
    if (!finite(h->lr) || !finite(h->beta1) || !finite(h->beta2) || !finite(h->eps) ||
        !finite(h->weight_decay) || !finite(h->grad_scale))
        return -EINVAL;
    if (h->lr < 0 || h->eps < 0 || h->weight_decay < 0) return -EINVAL;
    if (h->beta1 < 0 || h->beta1 >= 1 || h->beta2 < 0 || h->beta2 >= 1) return -EINVAL;
    if (h->step < 1) return -EINVAL;
    const uint32_t known = CXK_ADAM_DECOUPLED | CXK_ADAM_MAXIMIZE | CXK_ADAM_BIAS_CORRECTION |
                           CXK_ADAM_NT_STATE | CXK_ADAM_NT_COPY | CXK_ADAM_RESYNC |
                           CXK_ADAM_TRAFFIC;
    if (h->flags & ~known) return -EINVAL;
    return 0;
}

int check_tensors(const cxk_adam_tensor *t, size_t nt) {
    if (nt && !t) return -EINVAL;
    for (size_t i = 0; i < nt; ++i) {
        const cxk_adam_tensor &x = t[i];
        if (x.grad_dtype < CXK_DTYPE_F32 || x.grad_dtype > CXK_DTYPE_F16) return -EINVAL;
        if (x.copy_dtype < CXK_DTYPE_NONE || x.copy_dtype > CXK_DTYPE_F16) return -EINVAL;
        if ((x.copy_dtype == CXK_DTYPE_NONE) != (x.param_copy == nullptr)) return -EINVAL;
        if (x.n == 0) continue;
        if (!x.param || !x.exp_avg || !x.exp_avg_sq || !x.grad) return -EINVAL;
        if (uintptr_t(x.param) & 3) return -EINVAL;
    }
    return 0;
}

Coeffs coeffs_of(const cxk_adam_hparams *h) {
    Coeffs c{};
    const bool bias = h->flags & CXK_ADAM_BIAS_CORRECTION;
    const double step = double(h->step);
    const double bc1 = bias ? 1.0 - std::pow(h->beta1, step) : 1.0;
    const double bc2 = bias ? 1.0 - std::pow(h->beta2, step) : 1.0;
    c.scale = float(h->grad_scale);
    c.neg_step = float(-(h->lr * std::sqrt(bc2) / bc1));
    c.eps = float(h->eps * std::sqrt(bc2));
    c.omb1 = float(1.0 - h->beta1);
    c.b2 = float(h->beta2);
    c.omb2 = float(1.0 - h->beta2);
    // decoupled decay by 0 multiplies by 1: dropped, so the loop without it runs
    c.decoupled = (h->flags & CXK_ADAM_DECOUPLED) && h->weight_decay != 0;
    c.l2 = !c.decoupled && h->weight_decay != 0;
    c.wd = c.l2 ? float(h->weight_decay) : 0.0f;
    c.decay = c.decoupled ? float(1.0 - h->lr * h->weight_decay) : 1.0f;
    c.maximize = h->flags & CXK_ADAM_MAXIMIZE;
    c.nt_state = h->flags & CXK_ADAM_NT_STATE;
    c.nt_copy = h->flags & CXK_ADAM_NT_COPY;
    c.resync = h->flags & CXK_ADAM_RESYNC;
    c.traffic = h->flags & CXK_ADAM_TRAFFIC;
    if (c.traffic) c.resync = false;  // the bound moves the step's bytes, nothing re-read
    return c;
}

// Prepare a step: validated constants and the kernel, or -errno.
int prepare(const cxk_adam_hparams *h, const cxk_adam_tensor *t, size_t nt, Coeffs *c,
            Kernel *k, const cxk_adam_out *o = nullptr, bool into = false) {
    int r = check_hparams(h);
    if (r < 0) return r;
    if ((r = check_tensors(t, nt)) < 0) return r;
    if (into && (r = check_outs(t, o, nt)) < 0) return r;
    const int level = resolve(h->simd);
    if (level < 0) return level;
    *c = coeffs_of(h);
    *k = kernel_of(level);
    return 0;
}

// ---- sysfs: memory nodes, their CPUs and distances (read at team creation) ----

// a sysfs file relative to the sysfs root (sys: honours CXLKIT_SYSFS_ROOT); "" when unreadable
std::string read_text(const std::string &rel) {
    std::string out;
    if (cxk::sys_read_sysfs(rel.c_str(), &out) < 0) out.clear();
    return out;
}

// "0-3,8" -> {0,1,2,3,8}; anything unparsable ends the list.
std::vector<int> parse_list(const std::string &s) {
    std::vector<int> out;
    const char *p = s.c_str();
    while (*p) {
        char *e;
        long lo = std::strtol(p, &e, 10);
        if (e == p) break;
        long hi = lo;
        p = e;
        if (*p == '-') {
            hi = std::strtol(p + 1, &e, 10);
            if (e == p + 1) break;
            p = e;
        }
        for (long x = lo; x <= hi && x - lo < 65536; ++x) out.push_back(int(x));
        if (*p == ',') ++p;
        else break;
    }
    return out;
}

const char *kNodeDir = "devices/system/node/node";

std::vector<int> node_cpus(int node) {
    return parse_list(read_text(kNodeDir + std::to_string(node) + "/cpulist"));
}

// Distances from node to every node id (index = node id); empty when unknown.
std::vector<int> node_distances(int node) {
    std::vector<int> d;
    std::string s = read_text(kNodeDir + std::to_string(node) + "/distance");
    const char *p = s.c_str();
    char *e;
    for (long x = std::strtol(p, &e, 10); e != p; x = std::strtol(p, &e, 10)) {
        d.push_back(int(x));
        p = e;
    }
    return d;
}

std::vector<int> memory_nodes() {
    std::vector<int> n = parse_list(read_text("devices/system/node/has_memory"));
    if (n.empty()) n.push_back(0);  // no NUMA sysfs: one node
    return n;
}

// CPUs a team for `node` runs on: its own CPUs we may use, else those of the nearest node
// that has some, else every CPU we may use.
std::vector<int> team_cpus(int node, const cpu_set_t &allowed) {
    auto usable = [&](const std::vector<int> &cpus) {
        std::vector<int> out;
        for (int c : cpus)
            if (c >= 0 && c < CPU_SETSIZE && CPU_ISSET(c, &allowed)) out.push_back(c);
        return out;
    };
    std::vector<int> own = usable(node_cpus(node));
    if (!own.empty()) return own;
    std::vector<int> dist = node_distances(node);
    std::vector<int> best;
    int best_d = 1 << 30;
    for (size_t other = 0; other < dist.size(); ++other) {
        if (int(other) == node || dist[other] >= best_d) continue;
        std::vector<int> c = usable(node_cpus(int(other)));
        if (!c.empty()) best = c, best_d = dist[other];
    }
    if (!best.empty()) return best;
    std::vector<int> all;
    for (int c = 0; c < CPU_SETSIZE; ++c)
        if (CPU_ISSET(c, &allowed)) all.push_back(c);
    return all;
}

}  // namespace
}  // namespace cxk::adam

// ---- teams ----

struct Chunk {
    uint32_t tensor;
    uint64_t begin, n;
    size_t id;  // index into the step's per-chunk sums (a folded step)
};

struct Group {
    int node = 0;
    bool own_cpus = true;  // false: borrowed from the nearest node (a CPU-less node)
    std::vector<int> cpus;
    std::vector<std::thread> threads;
    std::vector<Chunk> work;
    std::atomic<size_t> next{0};
    uint64_t last_chunks = 0;
};

struct cxk_adam_team {
    std::vector<std::unique_ptr<Group>> groups;
    uint64_t chunk_bytes = 1 << 20;
    bool pinned = false;
    // An OpenMP team (cxk_adam_team_create_omp) owns no threads: groups[0] holds the chunks
    // and each step is one parallel region of the process's runtime, of omp_threads threads.
    bool use_omp = false;
    cxk::adam::Omp omp{};
    uint32_t omp_threads = 0;
    std::atomic<uint64_t> resynced{0};  // elements re-read this step, summed per chunk
    std::mutex mu;
    std::condition_variable cv_work, cv_done;
    // gen and stop change under mu (so a thread blocked in cv_work cannot miss them);
    // they and pending are atomics because run() spins on pending without the lock before
    // it blocks: a futex wake-up costs tens of microseconds, a whole small step's worth.
    std::atomic<uint64_t> gen{0};     // bumped (release) to start a step
    std::atomic<size_t> pending{0};   // threads still working on step `gen`
    std::atomic<bool> stop{false};
    // The step in progress: written before gen's release increment, read by workers after
    // their acquire load sees the new gen.
    cxk::adam::Coeffs coeffs{};
    cxk::adam::Kernel kernel = nullptr;
    const cxk_adam_tensor *tensors = nullptr;
    const cxk_adam_out *outs = nullptr;  // NULL: in place
    // A folded step (cxk_adam_team_step_into_sum): image offsets, and per chunk the sums of
    // the bytes read and written, merged by the caller after the step (parts add in any order)
    const uint64_t *offs = nullptr;
    cxk::kv::SumParts *in_parts = nullptr, *out_parts = nullptr;

    uint64_t run_chunk(const Chunk &c) const {
        return cxk::adam::run_span(kernel, coeffs, tensors[c.tensor],
                                   outs ? outs + c.tensor : nullptr, c.begin, c.n,
                                   offs ? offs + 3 * c.tensor : nullptr,
                                   in_parts ? in_parts + c.id : nullptr,
                                   out_parts ? out_parts + c.id : nullptr);
    }

    // Spin up to `ns` nanoseconds for pred(); false when it stayed false.
    template <class Pred>
    static bool spin_until(Pred pred, long ns) {
        const auto end = std::chrono::steady_clock::now() + std::chrono::nanoseconds(ns);
        for (;;) {
            for (int i = 0; i < 64; ++i) {
                if (pred()) return true;
                __builtin_ia32_pause();
            }
            if (std::chrono::steady_clock::now() >= end) return false;
        }
    }
    // Only the caller spins: workers spinning for the next step measured slower on a
    // 2-core machine (they took the cores the caller needed to prepare that step).
    static constexpr long kCallerSpinNs = 20000;

    void worker(Group *g) {
        uint64_t seen = 0;
        for (;;) {
            auto woken = [&] {
                return stop.load(std::memory_order_acquire) ||
                       gen.load(std::memory_order_acquire) != seen;
            };
            if (!woken()) {
                std::unique_lock<std::mutex> lk(mu);
                cv_work.wait(lk, woken);
            }
            if (stop.load(std::memory_order_acquire)) return;
            seen = gen.load(std::memory_order_acquire);
            for (;;) {
                const size_t k = g->next.fetch_add(1, std::memory_order_relaxed);
                if (k >= g->work.size()) break;
                const Chunk &c = g->work[k];
                if (uint64_t r = run_chunk(c))
                    resynced.fetch_add(r, std::memory_order_relaxed);
            }
            // The last one out wakes run(); notifying under mu pairs with run() testing
            // pending under mu before it blocks, so the wake-up cannot fall between the two.
            if (pending.fetch_sub(1, std::memory_order_acq_rel) == 1) {
                std::lock_guard<std::mutex> lk(mu);
                cv_done.notify_one();
            }
        }
    }

    void shutdown() {
        {
            std::lock_guard<std::mutex> lk(mu);
            stop.store(true, std::memory_order_release);
        }
        cv_work.notify_all();
        for (auto &g : groups)
            for (auto &t : g->threads)
                if (t.joinable()) t.join();
    }

    size_t nthreads() const {
        size_t n = 0;
        for (auto &g : groups) n += g->threads.size();
        return n;
    }

    // One OpenMP thread's share: chunks off groups[0] until none is left. Called by every
    // thread of the region, the caller included; the region's end is the runtime's barrier,
    // which orders the kernel's stores before the caller returns.
    static void omp_region(void *arg) {
        auto *t = static_cast<cxk_adam_team *>(arg);
        Group *g = t->groups[0].get();
        uint64_t mine = 0;
        for (;;) {
            const size_t k = g->next.fetch_add(1, std::memory_order_relaxed);
            if (k >= g->work.size()) break;
            const Chunk &c = g->work[k];
            mine += t->run_chunk(c);
        }
        if (mine) t->resynced.fetch_add(mine, std::memory_order_relaxed);
    }

    void run() {
        if (use_omp) {
            const unsigned n = omp_threads ? omp_threads : unsigned(omp.max_threads());
            const size_t chunks = groups[0]->work.size();
            omp.parallel(omp_region, this, unsigned(n < chunks ? n : chunks), 0);
            return;
        }
        {
            std::lock_guard<std::mutex> lk(mu);
            pending.store(nthreads(), std::memory_order_relaxed);
            gen.fetch_add(1, std::memory_order_release);  // pairs with woken() in worker()
        }
        cv_work.notify_all();
        // acquire pairs with the workers' acq_rel decrement: their stores are visible after
        auto done = [&] { return pending.load(std::memory_order_acquire) == 0; };
        if (spin_until(done, kCallerSpinNs)) return;
        std::unique_lock<std::mutex> lk(mu);
        cv_done.wait(lk, done);
    }
};

extern "C" {

namespace {

// What a folded step adds to: the image offsets and the caller's sums (NULL: no fold).
struct FoldArgs {
    const uint64_t *offs = nullptr;
    cxk_sum_parts *in = nullptr, *out = nullptr;
    bool on() const { return in || out; }
};

int step_impl(const cxk_adam_hparams *h, const cxk_adam_tensor *t, const cxk_adam_out *o,
              size_t nt, bool into, uint64_t *resynced, const FoldArgs &f = {}) {
    cxk::adam::Coeffs c;
    cxk::adam::Kernel k;
    int r = cxk::adam::prepare(h, t, nt, &c, &k, o, into);
    if (r < 0) return r;
    if (f.on() && (r = cxk::adam::check_offs(f.offs, nt)) < 0) return r;
    cxk::kv::SumParts in = f.in ? cxk::adam::parts_of(*f.in) : cxk::kv::SumParts{};
    cxk::kv::SumParts out = f.out ? cxk::adam::parts_of(*f.out) : cxk::kv::SumParts{};
    uint64_t changed = 0;
    for (size_t i = 0; i < nt; ++i)
        if (t[i].n)
            changed += cxk::adam::run_span(k, c, t[i], o ? o + i : nullptr, 0, t[i].n,
                                           f.on() ? f.offs + 3 * i : nullptr,
                                           f.in ? &in : nullptr, f.out ? &out : nullptr);
    if (f.in) cxk::adam::store_parts(*f.in, in);
    if (f.out) cxk::adam::store_parts(*f.out, out);
    if (resynced) *resynced = changed;
    return 0;
}

int team_step_impl(cxk_adam_team *team, const cxk_adam_hparams *h, const cxk_adam_tensor *t,
                   const cxk_adam_out *o, size_t nt, bool into, uint64_t *resynced,
                   const FoldArgs &f = {});

}  // namespace

// The old entry points: thin wrappers over cxk_adam_run, kept for one release. Each keeps
// its own refusals (step_into without out, a team step without a team).
namespace {
int run_desc(cxk_adam_team *team, const cxk_adam_hparams *h, const cxk_adam_tensor *t,
             const cxk_adam_out *out, size_t nt, const uint64_t *img_off, cxk_sum_parts *in_sum,
             cxk_sum_parts *out_sum, uint64_t *resynced) {
    cxk_adam_step_desc d{};
    d.struct_size = sizeof d;
    d.hparams = h;
    d.tensors = t;
    d.ntensors = nt;
    d.team = team;
    d.out = out;
    d.img_off = img_off;
    d.in_sum = in_sum;
    d.out_sum = out_sum;
    const int r = cxk_adam_run(&d);
    if (resynced) *resynced = d.resynced;
    return r;
}
}  // namespace

int cxk_adam_step_ex(const cxk_adam_hparams *h, const cxk_adam_tensor *t, size_t nt,
                     uint64_t *resynced) {
    return run_desc(nullptr, h, t, nullptr, nt, nullptr, nullptr, nullptr, resynced);
}

int cxk_adam_step_into(const cxk_adam_hparams *h, const cxk_adam_tensor *t,
                       const cxk_adam_out *out, size_t nt, uint64_t *resynced) {
    if (!out && nt > 0) return -EINVAL;
    return run_desc(nullptr, h, t, out, nt, nullptr, nullptr, nullptr, resynced);
}

int cxk_adam_team_step_into(cxk_adam_team *team, const cxk_adam_hparams *h,
                            const cxk_adam_tensor *t, const cxk_adam_out *out, size_t nt,
                            uint64_t *resynced) {
    if (!team || (!out && nt > 0)) return -EINVAL;
    return run_desc(team, h, t, out, nt, nullptr, nullptr, nullptr, resynced);
}

int cxk_adam_step_into_sum(const cxk_adam_hparams *h, const cxk_adam_tensor *t,
                           const cxk_adam_out *out, size_t nt, const uint64_t *img_off,
                           cxk_sum_parts *in_sum, cxk_sum_parts *out_sum, uint64_t *resynced) {
    if (!out && nt > 0) return -EINVAL;
    return run_desc(nullptr, h, t, out, nt, img_off, in_sum, out_sum, resynced);
}

int cxk_adam_team_step_into_sum(cxk_adam_team *team, const cxk_adam_hparams *h,
                                const cxk_adam_tensor *t, const cxk_adam_out *out, size_t nt,
                                const uint64_t *img_off, cxk_sum_parts *in_sum,
                                cxk_sum_parts *out_sum, uint64_t *resynced) {
    if (!team || (!out && nt > 0)) return -EINVAL;
    return run_desc(team, h, t, out, nt, img_off, in_sum, out_sum, resynced);
}


int cxk_adam_step(const cxk_adam_hparams *h, const cxk_adam_tensor *t, size_t nt) {
    return cxk_adam_step_ex(h, t, nt, nullptr);
}

int cxk_adam_simd(void) { return cxk::adam::resolve(CXK_SIMD_AUTO); }

const char *cxk_simd_name(int simd) {
    switch (simd) {
        case CXK_SIMD_AUTO: return "auto";
        case CXK_SIMD_SCALAR: return "scalar";
        case CXK_SIMD_AVX2: return "avx2";
        case CXK_SIMD_AVX512: return "avx512";
        case CXK_SIMD_AVX512BF16: return "avx512bf16";
        default: return "?";
    }
}

int cxk_adam_team_create(const cxk_adam_team_opts *opts, cxk_adam_team **out) {
    using namespace cxk::adam;
    if (!out) return -EINVAL;
    *out = nullptr;
    cxk_adam_team_opts o{};
    if (opts) o = *opts;
    if (o.nnodes > CXK_MAX_POLICY_NODES) return -EINVAL;
    if (o.chunk_bytes == 0) o.chunk_bytes = 1 << 20;
    if (o.chunk_bytes % 64) return -EINVAL;
    if (o.nnodes == 0) {
        std::vector<int> mem = memory_nodes();
        if (mem.size() > CXK_MAX_POLICY_NODES) mem.resize(CXK_MAX_POLICY_NODES);
        o.nnodes = uint32_t(mem.size());
        for (size_t i = 0; i < mem.size(); ++i) o.nodes[i] = mem[i], o.threads[i] = 0;
    }
    for (uint32_t i = 0; i < o.nnodes; ++i) {
        if (o.nodes[i] < 0 || o.nodes[i] > CXK_MAX_NODE_ID || o.threads[i] > 1024)
            return -EINVAL;
        for (uint32_t j = 0; j < i; ++j)
            if (o.nodes[j] == o.nodes[i]) return -EINVAL;
    }
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    if (int e = cxk::sys_getaffinity_self(sizeof allowed, &allowed)) return e;

    std::unique_ptr<cxk_adam_team> team(new (std::nothrow) cxk_adam_team);
    if (!team) return -ENOMEM;
    team->chunk_bytes = o.chunk_bytes;
    team->pinned = o.pin != 0;
    try {
        for (uint32_t i = 0; i < o.nnodes; ++i) {
            auto g = std::make_unique<Group>();
            g->node = o.nodes[i];
            std::vector<int> own = node_cpus(g->node);
            g->cpus = team_cpus(g->node, allowed);
            g->own_cpus = false;
            for (int c : own)
                if (!g->cpus.empty() && c == g->cpus[0]) g->own_cpus = true;
            uint32_t n = o.threads[i];
            if (n == 0) {
                // A CPU-less node (CXL) saturates its link with fewer threads than a socket
                // has cores; half of the borrowed CPUs is the default, tune with threads[].
                n = uint32_t(g->cpus.size());
                if (!g->own_cpus) n /= 2;
                if (n == 0) n = 1;
            }
            team->groups.push_back(std::move(g));
            Group *gp = team->groups.back().get();
            for (uint32_t k = 0; k < n; ++k) {
                gp->threads.emplace_back([t = team.get(), gp] { t->worker(gp); });
                if (team->pinned && !gp->cpus.empty()) {
                    cpu_set_t set;
                    CPU_ZERO(&set);
                    for (int c : gp->cpus) CPU_SET(c, &set);
                    int r = cxk::sys_setaffinity_thread(gp->threads.back().native_handle(),
                                                        sizeof set, &set);
                    if (r != 0) {
                        team->shutdown();
                        return r;
                    }
                }
            }
        }
    } catch (const std::system_error &) {
        team->shutdown();
        return -EAGAIN;
    } catch (const std::bad_alloc &) {
        team->shutdown();
        return -ENOMEM;
    }
    *out = team.release();
    return 0;
}

void cxk_adam_team_destroy(cxk_adam_team *team) {
    if (!team) return;
    team->shutdown();
    delete team;
}

int cxk_adam_team_step(cxk_adam_team *team, const cxk_adam_hparams *h, const cxk_adam_tensor *t,
                       size_t nt) {
    return cxk_adam_team_step_ex(team, h, t, nt, nullptr);
}

int cxk_adam_team_step_ex(cxk_adam_team *team, const cxk_adam_hparams *h,
                          const cxk_adam_tensor *t, size_t nt, uint64_t *resynced) {
    if (!team) return -EINVAL;
    return run_desc(team, h, t, nullptr, nt, nullptr, nullptr, nullptr, resynced);
}

int cxk_adam_run(cxk_adam_step_desc *d) {
    if (!d || d->struct_size < CXK_ADAM_STEP_DESC_MIN) return -EINVAL;
    // copy_struct_from_user's rule: fields a shorter caller lacks read as zero; bytes a
    // newer caller added past the ones known here must be zero
    cxk_adam_step_desc x{};
    std::memcpy(&x, d, std::min<size_t>(d->struct_size, sizeof x));
    if (d->struct_size > sizeof x) {
        const auto *tail = reinterpret_cast<const unsigned char *>(d) + sizeof x;
        for (size_t i = 0; i < d->struct_size - sizeof x; ++i)
            if (tail[i]) return -E2BIG;
    }
    if (x.reserved || ((x.img_off || x.in_sum || x.out_sum) && !x.out)) return -EINVAL;
    const FoldArgs f{x.img_off, x.in_sum, x.out_sum};
    const bool into = x.out != nullptr;
    uint64_t resynced = 0;
    const int r = x.team ? team_step_impl(x.team, x.hparams, x.tensors, x.out, x.ntensors, into,
                                          &resynced, f)
                         : step_impl(x.hparams, x.tensors, x.out, x.ntensors, into, &resynced, f);
    if (d->struct_size >= offsetof(cxk_adam_step_desc, resynced) + sizeof d->resynced)
        d->resynced = resynced;
    return r;
}

}  // extern "C"

namespace {

int team_step_impl(cxk_adam_team *team, const cxk_adam_hparams *h, const cxk_adam_tensor *t,
                   const cxk_adam_out *o, size_t nt, bool into, uint64_t *resynced,
                   const FoldArgs &f) {
    if (!team) return -EINVAL;
    if (resynced) *resynced = 0;
    cxk::adam::Coeffs c;
    cxk::adam::Kernel k;
    int r = cxk::adam::prepare(h, t, nt, &c, &k, o, into);
    if (r < 0) return r;
    if (f.on() && (r = cxk::adam::check_offs(f.offs, nt)) < 0) return r;
    std::vector<cxk::kv::SumParts> in_parts, out_parts;
    try {
        // Chunks end at chunk_bytes boundaries of the param address, so a chunk never
        // straddles two stripe chunks when the stripe chunk is a multiple of ours.
        std::vector<Chunk> chunks;
        std::vector<void *> pages;
        const uintptr_t cb = team->chunk_bytes, ps = cxk_page_size();
        for (size_t i = 0; i < nt; ++i) {
            const uintptr_t base = uintptr_t(t[i].param);
            for (uint64_t b = 0; b < t[i].n;) {
                const uintptr_t a = base + b * 4;
                const uint64_t room = (((a / cb) + 1) * cb - a) / 4;
                const uint64_t n = room < t[i].n - b ? room : t[i].n - b;
                chunks.push_back({uint32_t(i), b, n, chunks.size()});
                pages.push_back(reinterpret_cast<void *>(a & ~(ps - 1)));
                b += n;
            }
        }
        if (chunks.empty()) {
            for (auto &g : team->groups) g->last_chunks = 0;
            return 0;
        }
        std::vector<int> status(chunks.size(), -1);
        if (!team->use_omp) {  // an OpenMP team has one group: no node to ask for
            long q = cxk_move_pages(0, pages.size(), pages.data(), nullptr, status.data(), 0);
            if (q < 0) return int(q);
        }
        for (auto &g : team->groups) {
            g->work.clear();
            g->next.store(0, std::memory_order_relaxed);
        }
        for (size_t j = 0; j < chunks.size(); ++j) {
            Group *dst = team->groups[0].get();  // not present or no team of its node
            for (auto &g : team->groups)
                if (status[j] >= 0 && g->node == status[j]) dst = g.get();
            dst->work.push_back(chunks[j]);
        }
        for (auto &g : team->groups) g->last_chunks = g->work.size();
        if (f.in) in_parts.resize(chunks.size());
        if (f.out) out_parts.resize(chunks.size());
    } catch (const std::bad_alloc &) {
        return -ENOMEM;
    }
    team->offs = f.on() ? f.offs : nullptr;
    team->in_parts = f.in ? in_parts.data() : nullptr;
    team->out_parts = f.out ? out_parts.data() : nullptr;
    team->coeffs = c;  // published by run()'s release increment of gen
    team->kernel = k;
    team->tensors = t;
    team->outs = o;
    team->resynced.store(0, std::memory_order_relaxed);
    team->run();
    // relaxed is enough: run() returned after the workers' release (pending / the region's
    // barrier), which orders their increments before this load
    if (resynced) *resynced = team->resynced.load(std::memory_order_relaxed);
    // the workers' part stores are ordered before here as their resynced counts are
    for (int w = 0; w < 2; ++w) {
        cxk_sum_parts *dst = w ? f.out : f.in;
        if (!dst) continue;
        cxk::kv::SumParts sum = cxk::adam::parts_of(*dst);
        for (const auto &p : w ? out_parts : in_parts) sum.merge(p);
        cxk::adam::store_parts(*dst, sum);
    }
    team->offs = nullptr;
    team->in_parts = team->out_parts = nullptr;
    return 0;
}

}  // namespace

extern "C" {

int cxk_adam_team_create_omp(const char *runtime, uint32_t nthreads, uint64_t chunk_bytes,
                             cxk_adam_team **out) {
    if (!out) return -EINVAL;
    *out = nullptr;
    if (nthreads > 1024) return -EINVAL;
    if (chunk_bytes == 0) chunk_bytes = 1 << 20;
    if (chunk_bytes % 64) return -EINVAL;
    cxk::adam::Omp omp{};
    int r = cxk::adam::find_omp(runtime, &omp);
    if (r < 0) return r;
    try {
        std::unique_ptr<cxk_adam_team> team(new cxk_adam_team);
        team->chunk_bytes = chunk_bytes;
        team->use_omp = true;
        team->omp = omp;
        team->omp_threads = nthreads;
        team->groups.push_back(std::make_unique<Group>());
        team->groups[0]->node = -1;
        *out = team.release();
    } catch (const std::bad_alloc &) {
        return -ENOMEM;
    }
    return 0;
}

int cxk_adam_team_info(const cxk_adam_team *team, uint32_t cap, int32_t *nodes, uint32_t *threads,
                       int32_t *cpus, uint64_t *chunks, uint32_t *nteams) {
    if (!team) return -EINVAL;
    const uint32_t n = uint32_t(team->groups.size());
    if (nteams) *nteams = n;
    for (uint32_t i = 0; i < n && i < cap; ++i) {
        const Group &g = *team->groups[i];
        if (nodes) nodes[i] = g.node;
        if (threads)
            threads[i] = team->use_omp ? (team->omp_threads ? team->omp_threads
                                                            : uint32_t(team->omp.max_threads()))
                                       : uint32_t(g.threads.size());
        if (cpus) cpus[i] = team->pinned && !g.cpus.empty() ? g.cpus[0] : -1;
        if (chunks) chunks[i] = g.last_chunks;
    }
    return 0;
}

}  // extern "C"
