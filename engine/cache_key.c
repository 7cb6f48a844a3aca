/* The plan cache's key, file name and checksum.
 *
 * The key is a hash of the model file's bytes, the options that change the
 * plan and the CPU's kernels; the file's name comes from where the model is
 * and the options (not its bytes), so that a changed model finds its stale
 * plan and replaces it. */
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* the state on the stack (XXH3_state_t's layout), so that hashing cannot fail */
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "../ops/par.h"
#include "../ops/registry.h"
#include "cache_int.h"

/* ---- hashing: XXH3-128 of each 1 MiB block, blocks in parallel, then
 *      XXH3-128 of the blocks' digests in order (the same for any thread
 *      count).  XXH3 picks its SIMD body at run time and runs at memory
 *      speed; blocks spread a large model's hash over the threads. */

enum { HASH_BLOCK = 1 << 20, HASH_BATCH = 64 };

typedef struct hash_job {
    const unsigned char *p;
    size_t size, first;
    XXH128_canonical_t *digest;
} hash_job;

static void hash_blocks(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    const hash_job *j = ctx;
    for (int64_t i = lo; i < hi; i++) {
        size_t at = (j->first + (size_t)i) * HASH_BLOCK;
        size_t n = j->size - at < HASH_BLOCK ? j->size - at : HASH_BLOCK;
        XXH128_canonicalFromHash(&j->digest[i], XXH3_128bits(j->p + at, n));
    }
}

void nn_hash128(const void *data, size_t size, int threads, uint64_t out[2]) {
    XXH128_hash_t h;
    if (size <= HASH_BLOCK) {
        h = XXH3_128bits(data, size);
    } else {
        const unsigned char *p = data;
        size_t blocks = (size + HASH_BLOCK - 1) / HASH_BLOCK;
        XXH3_state_t st;
        XXH3_INITSTATE(&st);
        XXH3_128bits_reset_withSeed(&st, (XXH64_hash_t)size);
        for (size_t first = 0; first < blocks; first += HASH_BATCH) {
            size_t count = blocks - first < HASH_BATCH ? blocks - first : HASH_BATCH;
            XXH128_canonical_t digest[HASH_BATCH];
            hash_job j = {.p = p, .size = size, .first = first, .digest = digest};
            nn_par_for_range(threads, (int64_t)count, 1, hash_blocks, &j);
            XXH3_128bits_update(&st, digest, sizeof *digest * count);
        }
        h = XXH3_128bits_digest(&st);
    }
    out[0] = h.low64;
    out[1] = h.high64;
}

void cache_checksum(const cache_header *h, const unsigned char *file, int threads, uint64_t out[2]) {
    cache_header blank = *h;
    memset(blank.checksum, 0, sizeof blank.checksum);
    unsigned char head_bytes[HEADER_BYTES];
    cache_encode(&cache_header_desc, &blank, head_bytes);
    uint64_t head[2], body[2], both[4];
    nn_hash128(head_bytes, sizeof head_bytes, 1, head);
    nn_hash128(file + HEADER_BYTES, (size_t)h->file_bytes - HEADER_BYTES, threads, body);
    memcpy(both, head, sizeof head);
    memcpy(both + 2, body, sizeof body);
    nn_hash128(both, sizeof both, 1, out);
}

void cache_warn(nn_model *m, const char *fmt, ...) {
    size_t used = strlen(m->cache_warning);
    if (used && used + 2 < sizeof m->cache_warning) {
        memcpy(m->cache_warning + used, "; ", 3);
        used += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->cache_warning + used, sizeof m->cache_warning - used, fmt, ap);
    va_end(ap);
}

/* ---- key and file name */

/* Into the caller's buffer: models load in parallel threads. */
static void cpu_features(char *buf, size_t size) {
    char blocking[128];
    nn_ops_cpu_blocking(blocking, sizeof blocking, true);
#if defined(__x86_64__)
    /* amx: bf16 weights are packed for the AMX kernel's panels, not AVX512-BF16's */
    snprintf(buf, size, "gemm=%s,avx512f=%d,avx2=%d,fma=%d,amx=%d,blocking=%s", nn_ops_cpu_kernels(),
             __builtin_cpu_supports("avx512f") != 0, __builtin_cpu_supports("avx2") != 0,
             __builtin_cpu_supports("fma") != 0, nn_ops_cpu_amx(), blocking);
#else
    snprintf(buf, size, "gemm=%s,blocking=%s", nn_ops_cpu_kernels(), blocking);
#endif
}

/* Threads do not change the plan: packing is the same for any count, and
 * scratch is sized at load. */
void cache_plan_options(const nn_model *m, char *buf, size_t size) {
    const nn_options *o = &m->opt;
    char cpu[256];
    cpu_features(cpu, sizeof cpu);
    snprintf(buf, size,
             "format=%d;engine=%s;batch=%d;micro_batch=%d;device=%s;optimize=%d;passes=%s;disable=%s;winograd=%d;tf32=%"
             "d;fp16=%d;precision=%s;"
             "cpu=%s",
             CACHE_FORMAT, NN_VERSION_STRING, m->batch, o->micro_batch, m->device, o->optimize != 0,
             o->passes ? o->passes : "-", o->disable_passes ? o->disable_passes : "-", o->winograd != 0, o->tf32 != 0,
             o->fp16 != 0, o->precision == NN_PRECISION_BF16 ? "bf16" : "fp32", cpu);
}

/* Which file a model is, as the file system tells without reading it:
 * device, inode, size, and modification and status-change times in ns.
 * Any write through the file system changes the status-change time. */
static void model_identity(const struct stat *st, uint64_t id[5]) {
    id[0] = (uint64_t)st->st_dev;
    id[1] = (uint64_t)st->st_ino;
    id[2] = (uint64_t)st->st_size;
    id[3] = (uint64_t)st->st_mtim.tv_sec * 1000000000u + (uint64_t)st->st_mtim.tv_nsec;
    id[4] = (uint64_t)st->st_ctim.tv_sec * 1000000000u + (uint64_t)st->st_ctim.tv_nsec;
}

bool cache_locate(nn_model *m, const char *model_path, const char *opts) {
    char dir[PATH_MAX], real[PATH_MAX];
    struct stat st;
    if (!nn_cache_folder(m->opt.cache_dir, dir, sizeof dir)) {
        cache_warn(m, "no cache folder: set NN_CACHE_DIR, XDG_CACHE_HOME or HOME");
        return false;
    }
    if (stat(model_path, &st) != 0 || !S_ISREG(st.st_mode) || !realpath(model_path, real))
        return false; /* the import reports the problem with the model file */
    model_identity(&st, m->cache_model_id);
    size_t ol = strlen(opts), rl = strlen(real);
    char *buf = malloc(ol + rl + 1);
    if (!buf) return false;
    memcpy(buf, opts, ol);
    memcpy(buf + ol, real, rl);
    uint64_t name[2];
    nn_hash128(buf, ol + rl, 1, name);
    free(buf);
    const char *base = strrchr(real, '/') ? strrchr(real, '/') + 1 : real;
    int stem = (int)strcspn(base, ".");
    if (stem > 64) stem = 64;
    size_t need = strlen(dir) + (size_t)stem + 40;
    if (!(m->cache_path = malloc(need))) return false;
    snprintf(m->cache_path, need, "%s/%.*s-%016llx.nnplan", dir, stem, base, (unsigned long long)name[0]);
    return true;
}

bool cache_derive_key(nn_model *m, const char *model_path, const char *opts, const uint64_t *known_content) {
    if (known_content) {
        memcpy(m->cache_content, known_content, sizeof m->cache_content);
    } else {
        int fd = open(model_path, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) != 0) {
            if (fd >= 0) close(fd);
            return false;
        }
        model_identity(&st, m->cache_model_id);
        size_t size = (size_t)st.st_size;
        void *map = size ? mmap(NULL, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0) : NULL;
        close(fd);
        if (map == MAP_FAILED) return false;
        memset(m->cache_content, 0, sizeof m->cache_content);
        if (size) nn_hash128(map, size, m->threads, m->cache_content);
        if (size) munmap(map, size);
    }
    size_t ol = strlen(opts);
    unsigned char buf[sizeof m->cache_content + PLAN_OPTIONS_MAX];
    memcpy(buf, m->cache_content, sizeof m->cache_content);
    memcpy(buf + sizeof m->cache_content, opts, ol);
    nn_hash128(buf, sizeof m->cache_content + ol, 1, m->cache_key);
    m->cache_key_known = true;
    return true;
}
