/* The processor's data caches, read once, and the GEMM blocking derived
 * from them (ops/cpu_caches.c).
 *
 * Sizes come from, in order: the environment variable NN_CPU_CACHES
 * (e.g. "l1d:48k,l2:2m,l3:105m"; "fixed" keeps the blocking constants the
 * kernels were first tuned with, for A/B runs), Linux sysfs
 * (/sys/devices/system/cpu/cpu0/cache/index*), CPUID (leaf 4 on Intel,
 * 0x8000001D on AMD), and last safe defaults (32 KiB, 1 MiB, 8 MiB). */
#ifndef NN_CPU_CACHES_H
#define NN_CPU_CACHES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct nn_cpu_caches {
    int64_t l1d, l2, l3; /* bytes of one instance (L2: per core on every processor we run on); 0: unknown */
    bool fixed;          /* NN_CPU_CACHES=fixed: the old constant blocking */
    const char *source;  /* "NN_CPU_CACHES", "sysfs", "cpuid", "default" */
} nn_cpu_caches;

/* Bounds that a size read from outside must fall in to be believed. */
#define NN_CACHE_L1_MIN (4 << 10)
#define NN_CACHE_L1_MAX (4 << 20)
#define NN_CACHE_L2_MIN (32 << 10)
#define NN_CACHE_L2_MAX (256 << 20)
#define NN_CACHE_L3_MAX ((int64_t)4 << 30)

/* The sizes in use: the first call reads them, later ones return the same. */
const nn_cpu_caches *nn_cpu_caches_get(void);

/* For tests: the sizes every later call sees (not safe while kernels run,
 * and packed operands made before no longer fit where KC changes). */
void nn_cpu_caches_set(const nn_cpu_caches *c);

/* The pieces, for tests: each fills only the levels it finds (levels
 * already set in *c are overwritten) and returns how many it set.
 * `dir` holds index0, index1, ... each with files level, type, size. */
int nn_cpu_caches_from_sysfs(const char *dir, nn_cpu_caches *c);
int nn_cpu_caches_from_cpuid(nn_cpu_caches *c);
/* One sysfs size ("32K\n", "1024K", "8M", "512"): bytes, or -1. */
int64_t nn_cpu_caches_parse_size(const char *s, size_t len);
/* An NN_CPU_CACHES value; false (and *c untouched) on anything malformed. */
bool nn_cpu_caches_parse_override(const char *s, nn_cpu_caches *c);

/* The fp32 GEMM's blocking for a kernel of MR x NR tiles (gemm.c). */
typedef struct nn_gemm_blocking {
    int64_t kc, mc, nc;
} nn_gemm_blocking;

#define NN_GEMM_KC_FIXED 384
#define NN_GEMM_KC_MIN 64
#define NN_GEMM_KC_MAX 512
#define NN_GEMM_NC_MAX 8192 /* columns of a B block: packers may size buffers by it */
#define NN_GEMM_MC_MAX 4096
nn_gemm_blocking nn_gemm_blocking_derive(const nn_cpu_caches *c, int mr, int nr);

/* A share of L2 (num / den of it) for a size limit that a kernel fitted
 * to a cache; `fixed`, the limit it was measured with, under
 * NN_CPU_CACHES=fixed. */
int64_t nn_cpu_l2_share(int64_t fixed, int64_t num, int64_t den);

/* "L1d 32 KiB, L2 1024 KiB, L3 32768 KiB (sysfs)" */
void nn_cpu_caches_describe(const nn_cpu_caches *c, char *buf, size_t size);

#endif
