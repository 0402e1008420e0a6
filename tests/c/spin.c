/* spin.c — the adaptive spin (native/ring/spin.cpp), driven through its state
 * functions with explicit times (no timed assertion): each rule's state change (a hit keeps
 * the spin, a sleep longer than 4 x cap quarters it down to 0, an answer within 4 x cap
 * restores it, the woke rule skips the spin of a sporadic exchange only, the overcommit rule counts its
 * yielding waits, cap 0 and "forever" stay as they are); a two-party model of a client and
 * a server (wake-up latency 30 us, cap 200 us) that goes from sporadic calls to back-to-back
 * ones ends with no wake-up per call (no lock-in), and one with cap 5 us, below the wake-up
 * latency, locks in (the failure of a fixed short spin); a wait's adapt field shortens its
 * spin; the overcommit probe says 1 on one CPU, 0 on several, and fails with the fault
 * hook's errno. */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "cxlkit.h"

#define US 1000LL
#define MS 1000000LL

static void rules(void) {
    struct cxk_spin s;
    cxk_spin_init(&s);
    CHECK_EQ(s.budget_us, CXK_SPIN_FULL);
    int64_t t = 1000 * MS;
    /* first wait: full spin; answered during it (a hit): the spin stays */
    CHECK_EQ(cxk_spin_begin(&s, 200, t, 0, 0), 200);
    cxk_spin_end(&s, t + 1 * US);
    CHECK_EQ(s.hits, 1);
    CHECK_EQ(s.restores, 0);
    CHECK_EQ(s.shrinks, 0);
    CHECK_EQ(s.budget_us, CXK_SPIN_FULL);
    /* waits that slept and lasted longer than 4 x cap quarter it: 200, 50, 12, 3, 0 */
    const uint32_t want[] = {200, 50, 12, 3, 0, 0};
    for (int i = 0; i < 6; ++i) {
        t += 10 * MS;
        CHECK_EQ(cxk_spin_begin(&s, 200, t, 0, 0), want[i]);
        cxk_spin_slept(&s);
        cxk_spin_end(&s, t + 2 * MS);
    }
    CHECK_EQ(s.slept, 6);
    CHECK_EQ(s.shrinks, 4); /* 0 stays 0: no shrink counted */
    CHECK_EQ(s.budget_us, 0);
    /* a wait that slept but was answered within 4 x cap: not sporadic */
    t += 10 * MS;
    CHECK_EQ(cxk_spin_begin(&s, 200, t, 0, 0), 0);
    cxk_spin_slept(&s);
    cxk_spin_end(&s, t + 800 * US);
    CHECK_EQ(s.restores, 1);
    CHECK_EQ(s.budget_us, CXK_SPIN_FULL);
    /* a lowered cap bounds the budget; a hit after a shrink restores too */
    t += 10 * MS;
    CHECK_EQ(cxk_spin_begin(&s, 40, t, 0, 0), 40);
    cxk_spin_slept(&s);
    cxk_spin_end(&s, t + 1 * MS);
    CHECK_EQ(s.budget_us, 10);
    t += 10 * MS;
    CHECK_EQ(cxk_spin_begin(&s, 200, t, 0, 0), 10);
    cxk_spin_end(&s, t + 5 * US);
    CHECK_EQ(s.restores, 2);
    /* an end without a wait in progress changes nothing */
    struct cxk_spin before = s;
    cxk_spin_end(&s, t + 9 * MS);
    cxk_spin_slept(&s);
    CHECK(memcmp(&before, &s, sizeof s) == 0);
}

static void woke_rule(void) {
    struct cxk_spin s;
    cxk_spin_init(&s);
    int64_t t = 1000 * MS;
    CHECK_EQ(cxk_spin_begin(&s, 200, t, 1, 0), 0); /* first wait: the period is unbounded */
    CHECK_EQ(s.woke_skips, 1);
    cxk_spin_end(&s, t + 40 * US); /* within the cap: the budget stays full */
    /* woke the peer, but the last wait began 100 us ago (< cap): back-to-back, spin */
    t += 100 * US;
    CHECK_EQ(cxk_spin_begin(&s, 200, t, 1, 0), 200);
    CHECK_EQ(s.woke_skips, 1);
    cxk_spin_end(&s, t + 1 * US);
    /* woke the peer, the last wait began 800 us ago (4 x cap): not yet sporadic */
    t += 800 * US;
    CHECK_EQ(cxk_spin_begin(&s, 200, t, 1, 0), 200);
    cxk_spin_end(&s, t + 1 * US);
    /* woke the peer after silence (> 4 x cap since the last begin): no spin */
    t += 801 * US;
    CHECK_EQ(cxk_spin_begin(&s, 200, t, 1, 0), 0);
    CHECK_EQ(s.woke_skips, 2);
    cxk_spin_end(&s, t + 30 * US);
    /* the same silence without a wake-up spins */
    t += 5 * MS;
    CHECK_EQ(cxk_spin_begin(&s, 200, t, 0, 0), 200);
    cxk_spin_end(&s, t + 1 * US);
    CHECK_EQ(s.budget_us, CXK_SPIN_FULL); /* the skip never touched the budget */
}

static void overcommit_and_caps(void) {
    struct cxk_spin s;
    cxk_spin_init(&s);
    CHECK_EQ(cxk_spin_begin(&s, 200, 1 * MS, 0, 1), 200);
    CHECK_EQ(s.yield_waits, 1);
    CHECK_EQ(s.overcommitted, 1);
    cxk_spin_end(&s, 1 * MS + 3 * US);
    CHECK_EQ(cxk_spin_begin(&s, 200, 2 * MS, 1, 1), 0); /* skipped: no yielding spin either */
    CHECK_EQ(s.yield_waits, 1);
    cxk_spin_end(&s, 2 * MS + 3 * US);
    /* cap 0: no spin, ever; "forever": spin on, nothing adapts */
    CHECK_EQ(cxk_spin_begin(&s, 0, 10 * MS, 1, 0), 0);
    cxk_spin_slept(&s);
    cxk_spin_end(&s, 20 * MS);
    CHECK_EQ(s.shrinks, 0);
    CHECK_EQ(cxk_spin_begin(&s, CXK_WAIT_FOREVER, 30 * MS, 1, 0), CXK_WAIT_FOREVER);
    cxk_spin_end(&s, 40 * MS);
    CHECK_EQ(s.shrinks, 0);
    CHECK_EQ(s.woke_skips, 1); /* the one above only: neither cap applies the rule */
    CHECK_EQ(s.budget_us, CXK_SPIN_FULL);
}

/* Two parties on the rules, as the RPC client and server use them: the client publishes a
 * request and waits; the server, if its spin had run out, needs `wake` ns to see it, answers
 * after 1 us, publishes and begins its next wait; the client likewise. Returns the wake-ups
 * of the last `tail` calls. */
struct party {
    struct cxk_spin s;
    int64_t begun;  /* its wait began */
    uint32_t spin;  /* that wait's spin, us */
};

static int asleep(const struct party *p, int64_t t) { return t - p->begun > (int64_t)p->spin * US; }

static int model(uint32_t cap, int64_t wake, int sporadic, int b2b, int tail, struct party *cl,
                 struct party *sv) {
    cxk_spin_init(&cl->s);
    cxk_spin_init(&sv->s);
    int64_t t = 1000 * MS;
    sv->begun = t, sv->spin = cxk_spin_begin(&sv->s, cap, t, 0, 0);
    int wakes_tail = 0;
    for (int i = 0; i < sporadic + b2b; ++i) {
        t += i < sporadic ? 2 * MS : 0; /* the caller's own silence */
        const int woke_c = asleep(sv, t);
        cl->begun = t, cl->spin = cxk_spin_begin(&cl->s, cap, t, woke_c, 0);
        const int64_t got = t + (woke_c ? wake : 0);
        if (woke_c) cxk_spin_slept(&sv->s);
        cxk_spin_end(&sv->s, got);
        const int64_t reply = got + 1 * US;
        const int woke_s = asleep(cl, reply);
        sv->begun = reply, sv->spin = cxk_spin_begin(&sv->s, cap, reply, woke_s, 0);
        t = reply + (woke_s ? wake : 0);
        if (woke_s) cxk_spin_slept(&cl->s);
        cxk_spin_end(&cl->s, t);
        if (i >= sporadic + b2b - tail) wakes_tail += woke_c + woke_s;
    }
    return wakes_tail;
}

static void two_parties(void) {
    struct party cl, sv;
    /* sporadic calls: after the first few, neither side spins after waking the other */
    CHECK_EQ(model(200, 30 * US, 50, 0, 40, &cl, &sv), 80);
    CHECK(cl.s.woke_skips >= 40 && sv.s.woke_skips >= 40);
    CHECK(cl.s.hits == 0 && sv.s.hits == 0);
    /* then back-to-back: both spins come back and no call wakes anyone (no lock-in) */
    CHECK_EQ(model(200, 30 * US, 50, 50, 40, &cl, &sv), 0);
    CHECK(cl.s.hits >= 40 && sv.s.hits >= 40);
    CHECK_EQ(cl.s.budget_us, CXK_SPIN_FULL);
    /* back-to-back from the start: never a wake-up */
    CHECK_EQ(model(200, 30 * US, 0, 100, 100, &cl, &sv), 0);
    /* a cap below the wake-up latency cannot see that a spin would have caught the answer:
     * the parties wake each other on every call (why the cap must outlast a wake-up) */
    CHECK_EQ(model(5, 30 * US, 50, 50, 40, &cl, &sv), 80);
}

static void wait_adapt_field(void) {
    /* spin forever unless adapt says otherwise: no phase below depends on the clock */
    struct cxk_wait_opts o = {CXK_WAIT_FOREVER, 0, 50, 0};
    struct cxk_wait w;
    CHECK_EQ(cxk_wait_begin(&w, &o), 0);
    CHECK_EQ(w.adapt, 0);
    w.adapt = 1; /* a spin of 0 us: the first idle sleeps */
    cxk_wait_idle(&w);
    CHECK_EQ(w.phase, CXK_WAIT_SLEPT);
    CHECK_EQ(cxk_wait_begin(&w, &o), 0); /* begin clears it: the full spin again */
    CHECK_EQ(w.adapt, 0);
    cxk_wait_idle(&w);
    CHECK_EQ(w.phase, CXK_WAIT_SPUN);
    w.adapt = (1000000 + 1) | CXK_WAIT_ADAPT_YIELD; /* spinning 1 s, yielding after 2 us */
    cxk_wait_idle(&w);
    CHECK_EQ(w.phase, CXK_WAIT_SPUN);
}

/* A launcher's count of the job's ranks on this host: more ranks than CPUs (MPICH's or
 * Open MPI's variable) is overcommitted; as many is not; a malformed count is ignored. */
static void local_ranks(int cpus) {
    char more[16], same[16];
    snprintf(more, sizeof more, "%d", cpus + 1);
    snprintf(same, sizeof same, "%d", cpus);
    const char *names[] = {"MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE"};
    for (int i = 0; i < 2; ++i) {
        CHECK_EQ(setenv(names[i], more, 1), 0);
        CHECK_EQ(cxk_spin_overcommitted(), 1);
        CHECK_EQ(setenv(names[i], same, 1), 0);
        CHECK_EQ(cxk_spin_overcommitted(), 0);
        const char *bad[] = {"", "-9", "9x", "99999999999999999999", "0"};
        for (int b = 0; b < 5; ++b) {
            CHECK_EQ(setenv(names[i], bad[b], 1), 0);
            CHECK_EQ(cxk_spin_overcommitted(), 0);
        }
        CHECK_EQ(unsetenv(names[i]), 0);
    }
    /* the job's own count of ranks on this kernel (namespaces of one machine): the larger
     * of it and the launcher's decides */
    cxk_spin_set_local_ranks(cpus + 1);
    CHECK_EQ(cxk_spin_overcommitted(), 1);
    CHECK_EQ(setenv(names[0], same, 1), 0);
    CHECK_EQ(cxk_spin_overcommitted(), 1);
    cxk_spin_set_local_ranks(cpus);
    CHECK_EQ(cxk_spin_overcommitted(), 0);
    cxk_spin_set_local_ranks(-5); /* out of range: cleared */
    CHECK_EQ(cxk_spin_overcommitted(), 0);
    CHECK_EQ(unsetenv(names[0]), 0);
    cxk_spin_set_local_ranks(0);
    /* the machine's boot id: read, and the same each time */
    CHECK(cxk_boot_hash() != 0);
    CHECK_EQ(cxk_boot_hash(), cxk_boot_hash());
}

static void probe(void) {
    cpu_set_t all, one;
    CHECK_EQ(sched_getaffinity(0, sizeof all, &all), 0);
    int first = 0;
    while (!CPU_ISSET(first, &all)) ++first;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    CHECK_EQ(sched_setaffinity(0, sizeof one, &one), 0);
    CHECK_EQ(cxk_spin_overcommitted(), 1); /* one CPU: a peer may share it */
    CHECK_EQ(sched_setaffinity(0, sizeof all, &all), 0);
    if (CPU_COUNT(&all) < 2) return;
    CHECK_EQ(cxk_spin_overcommitted(), 0); /* several CPUs: no yield, however busy */
    local_ranks(CPU_COUNT(&all));
    CHECK_EQ(cxk_fault_inject("sched_getaffinity", 1, EPERM), 0);
    CHECK_EQ(cxk_spin_overcommitted(), -EPERM);
    cxk_fault_clear();
}

/* cxk_cpu_affinity: the calling thread's CPUs as a bitmask, cut at the words given. */
static void affinity_mask(void) {
    cpu_set_t all;
    CHECK_EQ(sched_getaffinity(0, sizeof all, &all), 0);
    uint64_t m[CPU_SETSIZE / 64 + 1];
    memset(m, 0xff, sizeof m);
    CHECK_EQ(cxk_cpu_affinity(m, CPU_SETSIZE / 64), CPU_COUNT(&all));
    for (int c = 0; c < CPU_SETSIZE; ++c)
        CHECK_EQ(m[c / 64] >> (c % 64) & 1, CPU_ISSET(c, &all) ? 1 : 0);
    CHECK_EQ(m[CPU_SETSIZE / 64], ~0ull); /* nothing written past the words given */
    int first64 = 0;
    for (int c = 0; c < 64; ++c) first64 += CPU_ISSET(c, &all) ? 1 : 0;
    CHECK_EQ(cxk_cpu_affinity(m, 1), first64);
    CHECK_EQ(cxk_cpu_affinity(NULL, 1), -EINVAL);
    CHECK_EQ(cxk_cpu_affinity(m, 0), -EINVAL);
    CHECK_EQ(cxk_fault_inject("sched_getaffinity", 1, EPERM), 0);
    CHECK_EQ(cxk_cpu_affinity(m, 1), -EPERM);
    cxk_fault_clear();
}

static void bad_input(void) {
    struct cxk_spin s;
    struct cxk_ring_wake_stats w;
    cxk_spin_init(NULL);
    CHECK_EQ(cxk_spin_begin(NULL, 200, 1, 1, 1), 200); /* no state: the cap */
    cxk_spin_slept(NULL);
    cxk_spin_end(NULL, 1);
    CHECK_EQ(cxk_rpc_spin_stats(NULL, &s), -EINVAL);
    CHECK_EQ(cxk_rpc_server_spin_stats(NULL, &s), -EINVAL);
    CHECK_EQ(cxk_msg_spin_stats(NULL, &s), -EINVAL);
    CHECK_EQ(cxk_msg_wake_stats(NULL, &w), -EINVAL);
}

int main(void) {
    bad_input();
    rules();
    woke_rule();
    overcommit_and_caps();
    two_parties();
    wait_adapt_field();
    probe();
    affinity_mask();
    return 0;
}
