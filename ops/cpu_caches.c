/* The processor's cache sizes and the GEMM blocking derived from them
 * (cpu_caches.h). */
#include "cpu_caches.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "isa.h"
#if NN_HAVE_X86
#include <cpuid.h>
#endif

#define SYSFS_CACHE_DIR "/sys/devices/system/cpu/cpu0/cache"
#define DEFAULT_L1D (32 << 10)
#define DEFAULT_L2 (1 << 20)
#define DEFAULT_L3 (8 << 20)
#define SYSFS_INDEX_MAX 32 /* cache leaves looked at: real processors have 4 or 5 */

int64_t nn_cpu_caches_parse_size(const char *s, size_t len) {
    size_t i = 0;
    int64_t v = 0;
    if (!s) return -1;
    for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
        if (v > (INT64_C(1) << 40)) return -1; /* far beyond any cache; no overflow below */
        v = v * 10 + (s[i] - '0');
    }
    if (i == 0) return -1;
    int64_t unit = 1;
    if (i < len && (s[i] == 'K' || s[i] == 'k')) unit = 1 << 10, i++;
    else if (i < len && (s[i] == 'M' || s[i] == 'm')) unit = 1 << 20, i++;
    else if (i < len && (s[i] == 'G' || s[i] == 'g')) unit = 1 << 30, i++;
    if (i < len && (s[i] == 'B' || s[i] == 'b')) i++; /* "KB", "MiB" is not accepted */
    while (i < len && (s[i] == '\n' || s[i] == ' ' || s[i] == '\t'))
        i++;
    if (i != len) return -1;
    return v * unit;
}

/* A small sysfs file into buf (NUL-terminated); its length, or -1. */
static int read_small(const char *path, char *buf, int size) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    int n = 0;
    for (;;) {
        ssize_t r = read(fd, buf + n, (size_t)(size - 1 - n));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        n += (int)r;
        if (n >= size - 1) { /* longer than any valid value: refused */
            close(fd);
            return -1;
        }
    }
    close(fd);
    buf[n] = '\0';
    return n;
}

static bool parse_level(const char *s, int len, int *level) {
    if (len < 1 || s[0] < '1' || s[0] > '4') return false;
    for (int i = 1; i < len; i++)
        if (s[i] != '\n' && s[i] != ' ') return false;
    *level = s[0] - '0';
    return true;
}

static bool has_word(const char *s, int len, const char *word) {
    size_t w = strlen(word);
    if ((size_t)len < w || memcmp(s, word, w)) return false;
    for (int i = (int)w; i < len; i++)
        if (s[i] != '\n' && s[i] != ' ') return false;
    return true;
}

/* Keep a level's size only when it falls within what a cache can be. */
static bool set_level(nn_cpu_caches *c, int level, int64_t bytes) {
    switch (level) {
    case 1:
        if (bytes < NN_CACHE_L1_MIN || bytes > NN_CACHE_L1_MAX) return false;
        c->l1d = bytes;
        return true;
    case 2:
        if (bytes < NN_CACHE_L2_MIN || bytes > NN_CACHE_L2_MAX) return false;
        c->l2 = bytes;
        return true;
    case 3:
        if (bytes < NN_CACHE_L2_MIN || bytes > NN_CACHE_L3_MAX) return false;
        c->l3 = bytes;
        return true;
    default: return false;
    }
}

int nn_cpu_caches_from_sysfs(const char *dir, nn_cpu_caches *c) {
    int found = 0;
    bool seen[4] = {false};
    for (int i = 0; i < SYSFS_INDEX_MAX; i++) {
        char path[512], buf[64];
        int level, n;
        if (snprintf(path, sizeof path, "%s/index%d/level", dir, i) >= (int)sizeof path) return found;
        if ((n = read_small(path, buf, sizeof buf)) < 0 || !parse_level(buf, n, &level) || level > 3) continue;
        snprintf(path, sizeof path, "%s/index%d/type", dir, i);
        if ((n = read_small(path, buf, sizeof buf)) < 0) continue;
        /* the data caches: an L1 instruction cache says nothing about data */
        if (!has_word(buf, n, "Data") && !has_word(buf, n, "Unified")) continue;
        snprintf(path, sizeof path, "%s/index%d/size", dir, i);
        if ((n = read_small(path, buf, sizeof buf)) < 0) continue;
        if (!seen[level] && set_level(c, level, nn_cpu_caches_parse_size(buf, (size_t)n))) {
            seen[level] = true;
            found++;
        }
    }
    return found;
}

int nn_cpu_caches_from_cpuid(nn_cpu_caches *c) {
    int found = 0;
#if NN_HAVE_X86
    unsigned a, b, cx, d;
    if (!__get_cpuid(0, &a, &b, &cx, &d)) return 0;
    unsigned max_basic = a;
    bool amd = (b == 0x68747541 && d == 0x69746e65 && cx == 0x444d4163) || /* AuthenticAMD */
               (b == 0x6f677948 && d == 0x6e65476e && cx == 0x656e6975);   /* HygonGenuine */
    unsigned leaf = 4;
    if (amd) {
        /* 0x8000001D needs the topology extensions (0x80000001 ECX bit 22) */
        if ((unsigned)__get_cpuid_max(0x80000000, NULL) < 0x8000001Du || !__get_cpuid(0x80000001, &a, &b, &cx, &d) ||
            !(cx & (1u << 22)))
            return 0;
        leaf = 0x8000001D;
    } else if (max_basic < 4)
        return 0;
    bool seen[4] = {false};
    for (unsigned sub = 0; sub < (unsigned)SYSFS_INDEX_MAX; sub++) {
        __cpuid_count(leaf, sub, a, b, cx, d);
        unsigned type = a & 31, level = (a >> 5) & 7;
        if (type == 0) break;             /* no more caches */
        if (type == 2 || level < 1 || level > 3u) continue; /* instruction cache */
        int64_t ways = ((b >> 22) & 1023) + 1, parts = ((b >> 12) & 1023) + 1, line = (b & 4095) + 1,
                sets = (int64_t)cx + 1;
        if (!seen[level] && set_level(c, (int)level, ways * parts * line * sets)) {
            seen[level] = true;
            found++;
        }
    }
#else
    (void)c;
#endif
    return found;
}

bool nn_cpu_caches_parse_override(const char *s, nn_cpu_caches *c) {
    if (!s) return false;
    if (!strcmp(s, "fixed")) {
        c->fixed = true;
        return true;
    }
    nn_cpu_caches t = *c;
    size_t len = strlen(s);
    if (len == 0 || len > 256) return false;
    for (const char *p = s; *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        const char *colon = memchr(p, ':', n);
        if (!colon) return false;
        size_t key = (size_t)(colon - p);
        int level = key == 3 && !memcmp(p, "l1d", 3) ? 1
                    : key == 2 && !memcmp(p, "l1", 2) ? 1
                    : key == 2 && !memcmp(p, "l2", 2) ? 2
                    : key == 2 && !memcmp(p, "l3", 2) ? 3
                                                      : 0;
        if (!level || !set_level(&t, level, nn_cpu_caches_parse_size(colon + 1, n - key - 1))) return false;
        p += n;
        if (*p == ',' && !*++p) return false; /* a trailing comma */
    }
    t.fixed = false;
    *c = t;
    return true;
}

static nn_cpu_caches the_caches;
static int ready; /* 0, then 1 once the_caches is set: racing first callers compute the same */

const nn_cpu_caches *nn_cpu_caches_get(void) {
    if (__atomic_load_n(&ready, __ATOMIC_ACQUIRE)) return &the_caches;
    nn_cpu_caches c = {0};
    nn_cpu_caches_from_sysfs(SYSFS_CACHE_DIR, &c);
    c.source = c.l1d && c.l2 ? "sysfs" : NULL;
    if (!c.source && nn_cpu_caches_from_cpuid(&c) && c.l1d && c.l2) c.source = "cpuid";
    if (!c.source) c.source = "default";
    if (!c.l1d) c.l1d = DEFAULT_L1D;
    if (!c.l2) c.l2 = DEFAULT_L2;
    if (!c.l3) c.l3 = DEFAULT_L3;
    const char *env = getenv("NN_CPU_CACHES");
    if (env && *env) {
        if (nn_cpu_caches_parse_override(env, &c))
            c.source = "NN_CPU_CACHES";
        else
            c.source = "NN_CPU_CACHES unreadable, ignored";
    }
    /* Only the first to finish stores: every caller sees one set of sizes. */
    static int claimed;
    if (!__atomic_exchange_n(&claimed, 1, __ATOMIC_ACQ_REL)) {
        the_caches = c;
        __atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
    }
    while (!__atomic_load_n(&ready, __ATOMIC_ACQUIRE))
        ;
    return &the_caches;
}

void nn_cpu_caches_set(const nn_cpu_caches *c) {
    (void)nn_cpu_caches_get(); /* the first reader's store is done before this one */
    the_caches = *c;
}

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* The blocking rule.  Loops run: a KC x NC slab of B packed once, then per
 * MR-row panel of A (MR x KC) every NR-column panel of the slab (KC x NR).
 *   KC: the A panel, reused across the slab, fills half of L1d (the B
 *       panels stream past it from L2): 4 MR KC <= L1d / 2, rounded down
 *       to 16, at most 512.  Each K block reloads and stores every C tile,
 *       so a longer block pays that less often; past 512 it costs under
 *       0.4% and the longer block only shrinks NC and MC.  (A and B panels
 *       together in L1d gave KC 176 for AVX-512 on 32 KiB: 1-3% slower
 *       whole models; docs/perf-notes.md, "KC from the A panel".)
 *   NC: the B slab, reused by every A panel, fills half of L2 (the other
 *       half holds the A block and C's tiles): 4 KC NC <= L2 / 2.
 *   MC: the A block packed beside it, a quarter of L2: 4 KC MC <= L2 / 4.
 * Each is clamped to sane bounds, so that a wrong size read from the
 * system gives slower code, never absurd scratch sizes. */
nn_gemm_blocking nn_gemm_blocking_derive(const nn_cpu_caches *c, int mr, int nr) {
    nn_gemm_blocking b;
    int64_t l1 = clamp64(c->l1d, NN_CACHE_L1_MIN, NN_CACHE_L1_MAX);
    int64_t l2 = clamp64(c->l2, NN_CACHE_L2_MIN, NN_CACHE_L2_MAX);
    b.kc = clamp64(l1 / 2 / (4 * (int64_t)mr) / 16 * 16, NN_GEMM_KC_MIN, NN_GEMM_KC_MAX);
    b.nc = clamp64(l2 / 2 / (4 * b.kc) / nr * nr, nr, NN_GEMM_NC_MAX / nr * nr);
    b.mc = clamp64(l2 / 4 / (4 * b.kc) / mr * mr, mr, NN_GEMM_MC_MAX / mr * mr);
    return b;
}

int64_t nn_cpu_l2_share(int64_t fixed, int64_t num, int64_t den) {
    const nn_cpu_caches *c = nn_cpu_caches_get();
    return c->fixed ? fixed : clamp64(c->l2, NN_CACHE_L2_MIN, NN_CACHE_L2_MAX) * num / den;
}

void nn_cpu_caches_describe(const nn_cpu_caches *c, char *buf, size_t size) {
    snprintf(buf, size, "L1d %lld KiB, L2 %lld KiB, L3 %lld KiB (%s)%s", (long long)(c->l1d >> 10),
             (long long)(c->l2 >> 10), (long long)(c->l3 >> 10), c->source ? c->source : "?",
             c->fixed ? ", fixed blocking" : "");
}
