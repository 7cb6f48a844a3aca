/* The processor's cache sizes (ops/cpu_caches.c): sysfs-like directories
 * with odd contents and missing files, the NN_CPU_CACHES override, the
 * blocking derived within its bounds for every kernel shape, and the GEMM's
 * results (against a double-precision product computed here) for every
 * blocking that a range of processors' caches give. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../ops/cpu_caches.h"
#include "../ops/gemm.h"
#include "../ops/isa.h"
#include "check.h"

static char root[256];

static void put(const char *index, const char *file, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", root, index);
    mkdir(path, 0700);
    snprintf(path, sizeof path, "%s/%s/%s", root, index, file);
    FILE *f = fopen(path, "w");
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static void cache_leaf(const char *index, const char *level, const char *type, const char *size) {
    if (level) put(index, "level", level);
    if (type) put(index, "type", type);
    if (size) put(index, "size", size);
}

static void clean(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
}

static void test_sizes(void) {
    static const struct {
        const char *s;
        int64_t want;
    } cases[] = {{"32K\n", 32 << 10}, {"1024K", 1 << 20}, {"8M\n", 8 << 20},  {"512", 512},
                 {"2G", 1LL << 31},   {"48KB\n", 48 << 10}, {"", -1},        {"K", -1},
                 {"32X", -1},         {"-32K", -1},          {"32 K", -1},    {"99999999999999999999", -1},
                 {"32K\nx", -1},      {"0x20", -1}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int64_t got = nn_cpu_caches_parse_size(cases[i].s, strlen(cases[i].s));
        CHECK(got == cases[i].want, "size \"%s\": %lld, want %lld", cases[i].s, (long long)got,
              (long long)cases[i].want);
    }
    CHECK(nn_cpu_caches_parse_size(NULL, 0) == -1, "a NULL size parsed");
}

static void test_sysfs(void) {
    snprintf(root, sizeof root, "/tmp/nn_test_cpu_caches.%d", (int)getpid());
    clean();
    mkdir(root, 0700);
    nn_cpu_caches c = {0};
    CHECK(nn_cpu_caches_from_sysfs(root, &c) == 0 && !c.l1d && !c.l2 && !c.l3, "an empty directory gave sizes");
    CHECK(nn_cpu_caches_from_sysfs("/nonexistent/dir", &c) == 0, "a missing directory gave sizes");

    /* a Zen-4-like layout */
    cache_leaf("index0", "1\n", "Data\n", "32K\n");
    cache_leaf("index1", "1\n", "Instruction\n", "64K\n");
    cache_leaf("index2", "2\n", "Unified\n", "1024K\n");
    cache_leaf("index3", "3\n", "Unified\n", "32768K\n");
    CHECK(nn_cpu_caches_from_sysfs(root, &c) == 3, "three data levels expected");
    CHECK(c.l1d == 32 << 10 && c.l2 == 1 << 20 && c.l3 == 32 << 20, "read L1d %lld L2 %lld L3 %lld",
          (long long)c.l1d, (long long)c.l2, (long long)c.l3);
    clean();

    /* the instruction cache first and larger, gaps in the numbering, hostile files */
    mkdir(root, 0700);
    cache_leaf("index0", "1", "Instruction", "64K");
    cache_leaf("index2", "1", "Data", "48K");
    cache_leaf("index3", "2", "Unified", "not a size");     /* ignored */
    cache_leaf("index4", "2", "Unified", "999999999999K"); /* beyond any cache: ignored */
    cache_leaf("index5", "3", NULL, "32M");                  /* no type: ignored */
    cache_leaf("index6", "9", "Unified", "32M");             /* no such level */
    cache_leaf("index7", "3x", "Unified", "32M");            /* malformed level */
    cache_leaf("index8", "2", "Unifiedish", "2M");           /* not a known type */
    cache_leaf("index9", "1", "Data", "1K");                 /* too small to be an L1 */
    char big[200];
    memset(big, '1', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    cache_leaf("index10", "3", "Unified", big); /* longer than any valid value */
    c = (nn_cpu_caches){0};
    int found = nn_cpu_caches_from_sysfs(root, &c);
    CHECK(found == 1 && c.l1d == 48 << 10 && !c.l2 && !c.l3, "hostile directory: %d levels, L1d %lld L2 %lld L3 %lld",
          found, (long long)c.l1d, (long long)c.l2, (long long)c.l3);
    cache_leaf("index11", "2\n", "Unified\n", "2048K\n");
    found = nn_cpu_caches_from_sysfs(root, &c);
    CHECK(found == 2 && c.l2 == 2 << 20, "L2 after adding a good leaf: %lld", (long long)c.l2);
    clean();
}

static void test_override(void) {
    nn_cpu_caches c = {.l1d = 32 << 10, .l2 = 1 << 20, .l3 = 8 << 20};
    CHECK(nn_cpu_caches_parse_override("l1d:48k,l2:2m", &c) && c.l1d == 48 << 10 && c.l2 == 2 << 20 &&
              c.l3 == 8 << 20 && !c.fixed,
          "l1d:48k,l2:2m gave %lld %lld %lld", (long long)c.l1d, (long long)c.l2, (long long)c.l3);
    CHECK(nn_cpu_caches_parse_override("l3:105M", &c) && c.l3 == 105 << 20, "l3:105M");
    CHECK(nn_cpu_caches_parse_override("fixed", &c) && c.fixed, "fixed");
    CHECK(nn_cpu_caches_parse_override("l1:32k", &c) && !c.fixed && c.l1d == 32 << 10, "l1:32k clears fixed");
    static const char *const bad[] = {"", "l1d", "l1d:", "l4:1m", "l1d:1k", "l2:9999g", "l1d:32k,", "l1d:32k,,l2:1m",
                                      "l2:1m;l1d:32k", "L1D:32k", "l1d=32k", "fixed,l1d:32k"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        nn_cpu_caches before = c, t = c;
        bool ok = nn_cpu_caches_parse_override(bad[i], &t);
        CHECK(!ok && !memcmp(&t, &before, sizeof t), "override \"%s\" accepted or changed the sizes", bad[i]);
    }
    CHECK(!nn_cpu_caches_parse_override(NULL, &c), "a NULL override accepted");
}

static const int64_t l1s[] = {0, 4 << 10, 16 << 10, 32 << 10, 48 << 10, 64 << 10, 1 << 20, 64 << 20};
static const int64_t l2s[] = {0, 32 << 10, 256 << 10, 512 << 10, 1 << 20, 2 << 20, 32 << 20, 1LL << 40};

static void test_derive(void) {
    static const int shapes[][2] = {{14, 32}, {6, 16}, {4, 16}, {1, 256}, {8, 8}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (size_t i = 0; i < sizeof l1s / sizeof *l1s; i++)
            for (size_t j = 0; j < sizeof l2s / sizeof *l2s; j++) {
                int mr = shapes[s][0], nr = shapes[s][1];
                nn_cpu_caches c = {.l1d = l1s[i], .l2 = l2s[j]};
                nn_gemm_blocking b = nn_gemm_blocking_derive(&c, mr, nr);
                CHECK(b.kc >= NN_GEMM_KC_MIN && b.kc <= NN_GEMM_KC_MAX && b.kc % 16 == 0,
                      "%dx%d L1d %lld: KC %lld out of bounds", mr, nr, (long long)l1s[i], (long long)b.kc);
                CHECK(b.nc >= nr && b.nc <= 8192 && b.nc % nr == 0 && b.mc >= mr && b.mc <= 4096 && b.mc % mr == 0,
                      "%dx%d L1d %lld L2 %lld: MC %lld NC %lld out of bounds", mr, nr, (long long)l1s[i],
                      (long long)l2s[j], (long long)b.mc, (long long)b.nc);
                /* the rule itself, where no bound clamps it */
                int64_t l1 = l1s[i], l2 = l2s[j];
                if (l1 >= NN_CACHE_L1_MIN && l1 <= NN_CACHE_L1_MAX && b.kc > NN_GEMM_KC_MIN && b.kc < NN_GEMM_KC_MAX)
                    CHECK(4 * b.kc * mr <= l1 / 2 && 4 * (b.kc + 16) * mr > l1 / 2,
                          "%dx%d L1d %lld: KC %lld does not fill half of L1d with the A panel", mr, nr, (long long)l1,
                          (long long)b.kc);
                if (l2 >= NN_CACHE_L2_MIN && l2 <= NN_CACHE_L2_MAX && b.nc > nr && b.nc < 8192 / nr * nr)
                    CHECK(4 * b.kc * b.nc <= l2 / 2 && 4 * b.kc * (b.nc + nr) > l2 / 2,
                          "%dx%d L2 %lld: NC %lld is not half of L2", mr, nr, (long long)l2, (long long)b.nc);
            }
    /* the processors this project runs on */
    nn_cpu_caches zen4 = {.l1d = 32 << 10, .l2 = 1 << 20}, xeon = {.l1d = 48 << 10, .l2 = 2 << 20};
    nn_gemm_blocking a = nn_gemm_blocking_derive(&zen4, 14, 32), x = nn_gemm_blocking_derive(&xeon, 14, 32);
    CHECK(x.kc > a.kc && x.nc >= a.nc, "a larger L1d and L2 gave smaller blocks: KC %lld NC %lld vs %lld %lld",
          (long long)x.kc, (long long)x.nc, (long long)a.kc, (long long)a.nc);
}

/* ---- the GEMM under each blocking */
static uint32_t seed = 777;
static float frand(void) {
    seed = seed * 1664525u + 1013904223u;
    return (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static void gemm_case(int64_t m, int64_t n, int64_t k, bool pack_a, bool pack_b, int threads, const char *blocking) {
    float *a = malloc(sizeof(float) * m * k), *b = malloc(sizeof(float) * k * n), *c = malloc(sizeof(float) * m * n);
    for (int64_t i = 0; i < m * k; i++)
        a[i] = frand();
    for (int64_t i = 0; i < k * n; i++)
        b[i] = frand();
    nn_gemm g = {.m = m, .n = n, .k = k, .a = a, .lda = k, .b = b, .ldb = n, .c = c, .ldc = n, .alpha = 1.0f};
    nn_gemm_packed pa, pb;
    float *pa_mem = NULL, *pb_mem = NULL;
    if (pack_a) {
        pa_mem = aligned_alloc(64, (nn_gemm_pack_a_floats(&g) * sizeof(float) + 63) / 64 * 64 + 64);
        nn_gemm_pack_a(&g, pa_mem, &pa);
        g.a_packed = &pa;
    }
    if (pack_b) {
        pb_mem = aligned_alloc(64, (nn_gemm_pack_b_floats(&g) * sizeof(float) + 63) / 64 * 64 + 64);
        nn_gemm_pack_b(&g, pb_mem, &pb);
        g.b_packed = &pb;
    }
    size_t ws = nn_gemm_workspace(&g, threads);
    void *w = malloc(ws);
    bool ran = nn_gemm_run(&g, w, ws, threads);
    CHECK(ran, "%s %s: %lldx%lldx%lld refused", nn_isa_name(nn_isa_active()), blocking, (long long)m, (long long)n,
          (long long)k);
    double worst = 0;
    for (int64_t i = 0; ran && i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0, mag = 1;
            for (int64_t p = 0; p < k; p++) {
                s += (double)a[i * k + p] * b[p * n + j];
                mag += fabs((double)a[i * k + p] * b[p * n + j]);
            }
            double e = fabs(c[i * n + j] - s) / mag;
            worst = e > worst ? e : worst;
        }
    CHECK(worst < 2e-6, "%s %s: %lldx%lldx%lld pa%d pb%d: relative error %g", nn_isa_name(nn_isa_active()), blocking,
          (long long)m, (long long)n, (long long)k, pack_a, pack_b, worst);
    /* a pre-packed operand whose K blocks no longer match is refused, never misread */
    if (pack_a) {
        nn_cpu_caches other = *nn_cpu_caches_get();
        int64_t kc = pa.kc;
        other.fixed = false;
        other.l1d = other.l1d <= 8 << 10 ? 1 << 20 : 4 << 10; /* a tiny L1d: a huge one, else a tiny one */
        nn_cpu_caches saved = *nn_cpu_caches_get();
        nn_cpu_caches_set(&other);
        nn_gemm h = g;
        h.a = NULL;
        size_t ws2 = nn_gemm_workspace(&h, threads);
        void *w2 = malloc(ws2);
        if (k > 64 && nn_isa_active() != NN_ISA_SCALAR)
            CHECK(!nn_gemm_run(&h, w2, ws2, threads), "%s: A packed with KC %lld ran under another KC", blocking,
                  (long long)kc);
        free(w2);
        nn_cpu_caches_set(&saved);
    }
    free(w);
    free(a);
    free(b);
    free(c);
    free(pa_mem);
    free(pb_mem);
}

static void test_gemm_blockings(void) {
    nn_isa first = nn_isa_active();
    nn_cpu_caches saved = *nn_cpu_caches_get();
    static const struct {
        int64_t l1, l2;
        bool fixed;
        const char *name;
    } sets[] = {{32 << 10, 1 << 20, true, "fixed"},      {4 << 10, 32 << 10, false, "tiny"},
                {32 << 10, 512 << 10, false, "zen3"},    {32 << 10, 1 << 20, false, "zen4"},
                {48 << 10, 2 << 20, false, "xeon"},      {1 << 20, 256 << 20, false, "huge"}};
    for (int isa = NN_ISA_AVX2; isa < NN_ISA_COUNT; isa++) {
        if (!nn_isa_select((nn_isa)isa)) continue;
        for (size_t s = 0; s < sizeof sets / sizeof *sets; s++) {
            nn_cpu_caches c = {.l1d = sets[s].l1, .l2 = sets[s].l2, .l3 = 8 << 20, .fixed = sets[s].fixed};
            nn_cpu_caches_set(&c);
            gemm_case(37, 75, 1300, false, false, 1, sets[s].name);
            gemm_case(48, 300, 700, true, false, 2, sets[s].name);
            gemm_case(200, 40, 900, false, true, 2, sets[s].name);
        }
    }
    nn_isa_select(first);
    nn_cpu_caches_set(&saved);
}

int main(void) {
    test_sizes();
    test_sysfs();
    test_override();
    test_derive();
    test_gemm_blockings();
    const nn_cpu_caches *c = nn_cpu_caches_get();
    printf("cpu_caches: this processor L1d %lld L2 %lld L3 %lld (%s)\n", (long long)c->l1d, (long long)c->l2,
           (long long)c->l3, c->source);
    return check_summary();
}
