/* kv_store.c — a malloc-heavy program of the kind users run under `cxlkit run`: a small
 * in-memory key-value store (string keys, byte values, a chained hash table), driven by OPS
 * random operations over KEYS keys: 55 % SET (a new entry is a node, a key copy and a value:
 * three mallocs; an existing key gets a new value, the old one freed, one in four grown in
 * place through realloc as an APPEND would), 30 % GET (reads the value), 15 % DEL (three
 * frees). Values 8 B .. 1 KiB, skewed small, as a cache of small records is. Every value
 * byte is written, every read value summed, so allocations are used.
 * Prints "ops N allocs A seconds S allocs_per_s R cpu_seconds C allocs_per_cpu_s Q
 * instructions I check K" (C: the loop's CPU time, clock.h).
 * Usage: kv_store OPS KEYS SEED */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "insn.h"

#define BUCKETS (1u << 16)

struct node {
    struct node *next;
    char *key;
    char *val;
    size_t len;
};

static struct node *table[BUCKETS];
static uint64_t rng;
static unsigned long allocs; /* malloc, realloc and strdup calls the store made */
static uint64_t check;

static uint64_t next(void) { /* xorshift64 */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static uint32_t hash(const char *s) { /* FNV-1a */
    uint32_t h = 2166136261u;
    while (*s) h = (h ^ (uint8_t)*s++) * 16777619u;
    return h;
}

static struct node **find(const char *key) {
    struct node **at = &table[hash(key) % BUCKETS];
    while (*at && strcmp((*at)->key, key) != 0) at = &(*at)->next;
    return at;
}

static int set(const char *key, size_t len, int append) {
    struct node **at = find(key);
    struct node *n = *at;
    if (n && append) {
        char *v = realloc(n->val, n->len + len);
        allocs++;
        if (!v) return -1;
        memset(v + n->len, (int)len, len);
        n->val = v;
        n->len += len;
        return 0;
    }
    char *v = malloc(len);
    allocs++;
    if (!v) return -1;
    memset(v, (int)len, len);
    if (n) {
        free(n->val);
    } else {
        n = malloc(sizeof *n);
        char *k = strdup(key);
        allocs += 2;
        if (!n || !k) return -1;
        *n = (struct node){NULL, k, NULL, 0};
        *at = n;
    }
    n->val = v;
    n->len = len;
    return 0;
}

static void get(const char *key) {
    struct node *n = *find(key);
    if (n) check += (uint8_t)n->val[n->len - 1] + n->len;
}

static void del(const char *key) {
    struct node **at = find(key);
    struct node *n = *at;
    if (!n) return;
    *at = n->next;
    free(n->key);
    free(n->val);
    free(n);
}

/* noinline: the loop alone, for callgrind's --toggle-collect */
__attribute__((noinline)) static int run_ops(long ops, unsigned long keys) {
    char key[32];
    for (long i = 0; i < ops; i++) {
        snprintf(key, sizeof key, "user:%lu", (unsigned long)(next() % keys));
        unsigned op = (unsigned)(next() % 100);
        if (op < 55) {
            size_t len = (size_t)8 << (next() % 8); /* 8 B .. 1 KiB */
            len += next() % len;
            if (len > 1024) len = 1024;
            if (set(key, len, next() % 4 == 0) < 0) return -1;
        } else if (op < 85) {
            get(key);
        } else {
            del(key);
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: kv_store OPS KEYS SEED\n");
        return 2;
    }
    long ops = atol(argv[1]);
    unsigned long keys = strtoul(argv[2], NULL, 10);
    rng = (uint64_t)atoll(argv[3]) | 1;
    if (ops < 1 || keys < 1) {
        fprintf(stderr, "kv_store: OPS and KEYS must be positive\n");
        return 2;
    }
    double t0 = now(), c0 = cpu_now();
    insn_start();
    if (run_ops(ops, keys) < 0) {
        perror("kv_store");
        return 1;
    }
    long long insns = insn_stop();
    double dt = now() - t0, ct = cpu_now() - c0;
    for (unsigned b = 0; b < BUCKETS; b++)
        while (table[b]) del(table[b]->key);
    printf("ops %ld allocs %lu seconds %.6f allocs_per_s %.1f cpu_seconds %.6f "
           "allocs_per_cpu_s %.1f instructions %lld check %llu\n", ops, allocs, dt, allocs / dt,
           ct, allocs / ct, insns, (unsigned long long)check);
    return 0;
}
