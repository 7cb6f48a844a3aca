/* The plan cache.
 *
 * One file per model file and plan-changing options, named
 * <model stem>-<16 hex digits>.nnplan in the cache folder.  Layout, in this
 * machine's byte order (the key covers the CPU the plan was made for):
 *
 *   header  struct cache_header at offset 0
 *   meta    the graph, its nodes' params and the memory plan, as a stream of
 *           fixed-width fields (meta_offset, meta_bytes)
 *   data    constant tensors and prepared blocks (packed weights), each
 *           64-byte aligned, from a page-aligned data_offset, so that a hit
 *           uses them in place from a read-only mapping
 *
 * Reading trusts nothing: magic, format version, file size and key are
 * compared; a checksum covers every byte but its own field; every count,
 * index, offset and size is bounds-checked as it is read; then every node's
 * shapes are inferred again and must match, and each prepared block must be
 * exactly what its op would make (nn_op_desc.prepared_fits).  Any failure
 * is a miss with a warning, and the plan is rebuilt and rewritten.
 *
 * Writing goes to a temporary file in the same folder, which is synced and
 * renamed over the real name: readers see the old file or the whole new one.
 */
#include "cache.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../ops/gemm.h"
#include "../ops/registry.h"
#include "../passes/pass.h"
#include "backend.h"
#include "error.h"

/* Bump when the layout of the file, of an op's params or of a prepared
 * block changes: older files then read as stale. */
#define CACHE_FORMAT 6
#define CACHE_MAGIC  "nnplan\n"
enum { DATA_ALIGN = 64, PAGE = 4096, MAX_IO = 64, MAX_PARAMS = 1 << 16, END_MARK = 0x21444e45 /* "END!" */ };

typedef struct cache_header {
    char magic[8];
    uint32_t format, header_bytes;
    uint64_t key[2];
    uint64_t file_bytes;
    uint64_t meta_offset, meta_bytes;
    uint64_t data_offset, data_bytes;
    uint64_t content[2];  /* nn_hash128 of the model file's bytes ... */
    uint64_t model_id[5]; /* ... when it had this identity (see model_identity) */
    uint64_t checksum[2]; /* nn_hash128 of the file with this field zeroed */
    char engine[16];      /* NN_VERSION_STRING, for people reading the file */
} cache_header;

/* ---- hashing: each 1 MiB block is read as 64-byte stripes into eight
 *      64-bit lanes (lane += word + lo32(word ^ k) * hi32(word ^ k), the
 *      lanes scrambled every 1 KiB), finalized to 128 bits; blocks are
 *      hashed in parallel and folded in order.  The AVX2 body computes
 *      exactly what the portable one does, at memory speed. */

enum { HASH_BLOCK = 1 << 20, HASH_BATCH = 64, LANES = 8, STRIPE = 64, SCRAMBLE_STRIPES = 16 };
static const uint64_t K1 = 0x9E3779B97F4A7C15ull, K2 = 0xC2B2AE3D27D4EB4Full, K3 = 0x165667B19E3779F9ull;
static const uint64_t LANE_KEY[LANES] = {0x243F6A8885A308D3ull, 0x13198A2E03707344ull, 0xA4093822299F31D0ull,
                                         0x082EFA98EC4E6C89ull, 0x452821E638D01377ull, 0xBE5466CF34E90C6Cull,
                                         0xC0AC29B7C97C50DDull, 0x3F84D5B5B5470917ull};
static const uint32_t SCRAMBLE_PRIME = 0x9E3779B1u;

static uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static uint64_t avalanche(uint64_t h) {
    h ^= h >> 33;
    h *= K2;
    h ^= h >> 29;
    h *= K3;
    return h ^ (h >> 32);
}

static void stripes_portable(uint64_t *acc, const unsigned char *p, size_t stripes) {
    for (size_t s = 0; s < stripes; s++) {
        for (int l = 0; l < LANES; l++) {
            uint64_t w, x;
            memcpy(&w, p + s * STRIPE + 8 * l, 8);
            x = w ^ LANE_KEY[l];
            acc[l] += w + (x & 0xffffffffu) * (x >> 32);
        }
        if (s % SCRAMBLE_STRIPES == SCRAMBLE_STRIPES - 1)
            for (int l = 0; l < LANES; l++)
                acc[l] = ((acc[l] ^ (acc[l] >> 47)) ^ LANE_KEY[l]) * SCRAMBLE_PRIME;
    }
}

#if defined(__x86_64__)
#include <immintrin.h>
__attribute__((target("avx2"))) static void stripes_avx2(uint64_t *acc, const unsigned char *p, size_t stripes) {
    __m256i a0 = _mm256_loadu_si256((const __m256i *)acc), a1 = _mm256_loadu_si256((const __m256i *)(acc + 4));
    const __m256i k0 = _mm256_loadu_si256((const __m256i *)LANE_KEY),
                  k1 = _mm256_loadu_si256((const __m256i *)(LANE_KEY + 4));
    const __m256i prime = _mm256_set1_epi64x(SCRAMBLE_PRIME);
    for (size_t s = 0; s < stripes; s++) {
        __m256i w0 = _mm256_loadu_si256((const __m256i *)(p + s * STRIPE)),
                w1 = _mm256_loadu_si256((const __m256i *)(p + s * STRIPE + 32));
        __m256i x0 = _mm256_xor_si256(w0, k0), x1 = _mm256_xor_si256(w1, k1);
        a0 = _mm256_add_epi64(a0, _mm256_add_epi64(w0, _mm256_mul_epu32(x0, _mm256_srli_epi64(x0, 32))));
        a1 = _mm256_add_epi64(a1, _mm256_add_epi64(w1, _mm256_mul_epu32(x1, _mm256_srli_epi64(x1, 32))));
        if (s % SCRAMBLE_STRIPES == SCRAMBLE_STRIPES - 1) {
            /* acc * prime, 64 x 32 bits, from two 32 x 32 products */
            a0 = _mm256_xor_si256(_mm256_xor_si256(a0, _mm256_srli_epi64(a0, 47)), k0);
            a1 = _mm256_xor_si256(_mm256_xor_si256(a1, _mm256_srli_epi64(a1, 47)), k1);
            a0 = _mm256_add_epi64(_mm256_mul_epu32(a0, prime),
                                  _mm256_slli_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a0, 32), prime), 32));
            a1 = _mm256_add_epi64(_mm256_mul_epu32(a1, prime),
                                  _mm256_slli_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a1, 32), prime), 32));
        }
    }
    _mm256_storeu_si256((__m256i *)acc, a0);
    _mm256_storeu_si256((__m256i *)(acc + 4), a1);
}
#endif

static void hash_stripes(uint64_t *acc, const unsigned char *p, size_t stripes) {
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2")) {
        stripes_avx2(acc, p, stripes);
        return;
    }
#endif
    stripes_portable(acc, p, stripes);
}

static void hash_block(const unsigned char *p, size_t n, uint64_t seed, uint64_t out[2]) {
    uint64_t acc[LANES];
    for (int l = 0; l < LANES; l++)
        acc[l] = seed * K1 + LANE_KEY[l];
    /* whole scramble groups, so that a split never moves a scramble */
    size_t full = n / STRIPE / SCRAMBLE_STRIPES * SCRAMBLE_STRIPES;
    hash_stripes(acc, p, full);
    unsigned char tail[STRIPE];
    for (size_t at = full * STRIPE; at < n; at += STRIPE) { /* the rest, zero-padded; the length tells tails apart */
        memset(tail, 0, sizeof tail);
        memcpy(tail, p + at, n - at < STRIPE ? n - at : STRIPE);
        stripes_portable(acc, tail, 1);
    }
    uint64_t h0 = n * K1, h1 = n ^ K2;
    for (int l = 0; l < LANES; l++) {
        h0 += rotl(avalanche(acc[l] ^ LANE_KEY[l]), 8 * l + 1);
        h1 = rotl(h1 ^ avalanche(acc[l] + K3), 27) * K1;
    }
    out[0] = avalanche(h0);
    out[1] = avalanche(h1 ^ h0);
}

void nn_hash128(const void *data, size_t size, int threads, uint64_t out[2]) {
    const unsigned char *p = data;
    size_t blocks = (size + HASH_BLOCK - 1) / HASH_BLOCK;
    uint64_t acc[2] = {K3 ^ size, K1 + size};
    for (size_t first = 0; first < blocks; first += HASH_BATCH) {
        size_t count = blocks - first < HASH_BATCH ? blocks - first : HASH_BATCH;
        uint64_t h[HASH_BATCH][2];
#pragma omp parallel for num_threads(threads) if (count > 1)
        for (size_t i = 0; i < count; i++) {
            size_t at = (first + i) * HASH_BLOCK;
            hash_block(p + at, size - at < HASH_BLOCK ? size - at : HASH_BLOCK, first + i, h[i]);
        }
        for (size_t i = 0; i < count; i++) {
            acc[0] = avalanche(acc[0] ^ h[i][0]) + K1;
            acc[1] = rotl(acc[1], 17) * K2 + h[i][1];
        }
    }
    out[0] = avalanche(acc[0] + acc[1]);
    out[1] = avalanche(acc[1] ^ rotl(acc[0], 23));
}

static void hash_file(const cache_header *h, const unsigned char *file, int threads, uint64_t out[2]) {
    cache_header blank = *h;
    memset(blank.checksum, 0, sizeof blank.checksum);
    uint64_t head[2], body[2], both[4];
    nn_hash128(&blank, sizeof blank, 1, head);
    nn_hash128(file + sizeof blank, (size_t)h->file_bytes - sizeof blank, threads, body);
    memcpy(both, head, sizeof head);
    memcpy(both + 2, body, sizeof body);
    nn_hash128(both, sizeof both, 1, out);
}

static void warn(nn_model *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Add to the model's cache warning (a load and the rewrite may both fail). */
static void warn(nn_model *m, const char *fmt, ...) {
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
#if defined(__x86_64__)
    snprintf(buf, size, "gemm=%s,avx512f=%d,avx2=%d,fma=%d", nn_gemm_kernel_name(),
             __builtin_cpu_supports("avx512f") != 0, __builtin_cpu_supports("avx2") != 0,
             __builtin_cpu_supports("fma") != 0);
#else
    snprintf(buf, size, "gemm=%s", nn_gemm_kernel_name());
#endif
}

enum { PLAN_OPTIONS_MAX = 512 };

/* Everything besides the model's bytes that changes the plan.  Threads do
 * not: packing is the same for any count, and scratch is sized at load. */
static void plan_options(const nn_model *m, char *buf, size_t size) {
    const nn_options *o = &m->opt;
    char cpu[96];
    cpu_features(cpu, sizeof cpu);
    snprintf(buf, size,
             "format=%d;engine=%s;batch=%d;micro_batch=%d;device=%s;optimize=%d;passes=%s;disable=%s;winograd=%d;tf32=%"
             "d;fp16=%d;"
             "cpu=%s",
             CACHE_FORMAT, NN_VERSION_STRING, m->batch, o->micro_batch, m->device, o->optimize != 0,
             o->passes ? o->passes : "-", o->disable_passes ? o->disable_passes : "-", o->winograd != 0, o->tf32 != 0,
             o->fp16 != 0, cpu);
}

static bool cache_folder(const nn_model *m, char *dir, size_t size) {
    const char *env;
    int n;
    if (m->opt.cache_dir && m->opt.cache_dir[0])
        n = snprintf(dir, size, "%s", m->opt.cache_dir);
    else if ((env = getenv("NN_CACHE_DIR")) && env[0])
        n = snprintf(dir, size, "%s", env);
    else if ((env = getenv("XDG_CACHE_HOME")) && env[0])
        n = snprintf(dir, size, "%s/nn", env);
    else if ((env = getenv("HOME")) && env[0])
        n = snprintf(dir, size, "%s/.cache/nn", env);
    else
        return false;
    return n > 0 && (size_t)n < size;
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

/* The cache file's path, named after where the model is and how it is
 * planned (not after its bytes, so that a changed model finds its stale
 * plan and replaces it), and the model's identity. */
static bool locate(nn_model *m, const char *model_path, const char *opts) {
    char dir[PATH_MAX], real[PATH_MAX];
    struct stat st;
    if (!cache_folder(m, dir, sizeof dir)) {
        warn(m, "no cache folder: set NN_CACHE_DIR, XDG_CACHE_HOME or HOME");
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

/* The key: the model's bytes (hashed now, unless `known_content` is given
 * because the file's identity matches the one recorded with it), the
 * options and the CPU. */
static bool derive_key(nn_model *m, const char *model_path, const char *opts, const uint64_t *known_content) {
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

/* ---- writing */

typedef struct wbuf {
    unsigned char *p;
    size_t n, cap;
    bool failed;
} wbuf;

typedef struct blob {
    const void *p;
    uint64_t size, offset;
} blob;

typedef struct writer {
    wbuf meta;
    blob *blobs;
    int n_blobs, cap_blobs;
    uint64_t data_bytes;
} writer;

static void put(wbuf *w, const void *src, size_t size) {
    if (w->failed) return;
    if (w->cap - w->n < size) {
        size_t cap = w->cap ? w->cap * 2 : 1 << 16;
        while (cap - w->n < size)
            cap *= 2;
        unsigned char *p = realloc(w->p, cap);
        if (!p) {
            w->failed = true;
            return;
        }
        w->p = p;
        w->cap = cap;
    }
    memcpy(w->p + w->n, src, size);
    w->n += size;
}

#define PUT_AS(type, w, value)                                                                                         \
    do {                                                                                                               \
        type v_ = (type)(value);                                                                                       \
        put(w, &v_, sizeof v_);                                                                                        \
    } while (0)

static void put_str(wbuf *w, const char *s) {
    PUT_AS(uint32_t, w, s ? strlen(s) : UINT32_MAX);
    if (s) put(w, s, strlen(s));
}

/* A reference to bytes that go to the data section; NULL writes "none". */
static void put_data(writer *wr, const void *p, size_t size) {
    if (!p) {
        PUT_AS(uint64_t, &wr->meta, UINT64_MAX);
        return;
    }
    if (wr->n_blobs == wr->cap_blobs) {
        int cap = wr->cap_blobs ? wr->cap_blobs * 2 : 256;
        blob *b = realloc(wr->blobs, sizeof *b * (size_t)cap);
        if (!b) {
            wr->meta.failed = true;
            return;
        }
        wr->blobs = b;
        wr->cap_blobs = cap;
    }
    uint64_t at = (wr->data_bytes + DATA_ALIGN - 1) / DATA_ALIGN * DATA_ALIGN;
    wr->blobs[wr->n_blobs++] = (blob){p, size, at};
    wr->data_bytes = at + size;
    PUT_AS(uint64_t, &wr->meta, at);
    PUT_AS(uint64_t, &wr->meta, size);
}

static size_t value_bytes(const nn_tensor *t) { return (size_t)nn_tensor_elements(t) * nn_dtype_size(t->dtype); }

enum { V_INPUT = 1, V_OUTPUT = 2, V_CONST = 4, V_SHAPE_KNOWN = 8, V_BATCHED = 16 };

static void write_meta(writer *wr, const nn_model *m, const void *choices, size_t choices_bytes) {
    const nn_graph *g = &m->g;
    wbuf *w = &wr->meta;
    bool *read = calloc((size_t)g->n_values + 1, 1);                 /* constants still needed */
    int *producer = malloc(sizeof(int) * ((size_t)g->n_values + 1)); /* values of removed nodes keep stale ones */
    if (!read || !producer) {
        free(read);
        free(producer);
        w->failed = true;
        return;
    }
    for (int v = 0; v < g->n_values; v++)
        producer[v] = -1;
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_out; k++)
            if (g->nodes[i].out[k] >= 0) producer[g->nodes[i].out[k]] = i;
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++)
            if (g->nodes[i].in[k] >= 0) read[g->nodes[i].in[k]] = true;
    for (int i = 0; i < g->n_outputs; i++)
        read[g->outputs[i]] = true;
    PUT_AS(uint32_t, w, g->n_values);
    PUT_AS(uint32_t, w, g->n_nodes);
    PUT_AS(uint32_t, w, g->n_inputs);
    PUT_AS(uint32_t, w, g->n_outputs);
    PUT_AS(int32_t, w, g->opset);
    PUT_AS(int32_t, w, g->nodes_parsed);
    PUT_AS(int64_t, w, g->parameters);
    PUT_AS(int32_t, w, m->plan_batch);
    PUT_AS(uint8_t, w, m->has_batch);
    PUT_AS(uint8_t, w, m->dynamic);
    for (int v = 0; v < g->n_values; v++) {
        const nn_value *val = &g->values[v];
        put_str(w, val->name);
        PUT_AS(int32_t, w, val->t.dtype);
        PUT_AS(int32_t, w, val->t.ndim);
        int64_t dims[NN_MAX_DIMS] = {0}; /* unused ones zero: the same plan, the same bytes */
        if (val->t.ndim > 0 && val->t.ndim <= NN_MAX_DIMS)
            memcpy(dims, val->t.dims, sizeof(int64_t) * (size_t)val->t.ndim);
        put(w, dims, sizeof dims);
        PUT_AS(int32_t, w, producer[v]);
        PUT_AS(uint8_t, w,
               (val->is_input ? V_INPUT : 0) | (val->is_output ? V_OUTPUT : 0) | (val->is_const ? V_CONST : 0) |
                   (val->shape_known ? V_SHAPE_KNOWN : 0) | (val->batched ? V_BATCHED : 0));
        PUT_AS(int32_t, w, val->alias);
        PUT_AS(int64_t, w, val->alias_offset);
        bool keep = val->is_const && val->t.data && read[v];
        put_data(wr, keep ? val->t.data : NULL, keep ? value_bytes(&val->t) : 0);
    }
    free(read);
    free(producer);
    for (int i = 0; i < g->n_nodes; i++) {
        const nn_node *n = &g->nodes[i];
        put_str(w, n->name);
        put_str(w, nn_op_get(n->op)->name);
        PUT_AS(int32_t, w, n->n_in);
        PUT_AS(int32_t, w, n->n_out);
        put(w, n->in, sizeof(int) * (size_t)n->n_in);
        put(w, n->out, sizeof(int) * (size_t)n->n_out);
        PUT_AS(uint32_t, w, n->params ? n->params_size : UINT32_MAX);
        if (n->params) put(w, n->params, n->params_size);
        put_data(wr, n->prepared, n->prepared_size);
        PUT_AS(uint8_t, w, n->has_epilogue);
        PUT_AS(int32_t, w, n->epilogue.residual);
        PUT_AS(int32_t, w, n->epilogue.act);
        PUT_AS(float, w, n->epilogue.alpha);
        PUT_AS(float, w, n->epilogue.beta);
        PUT_AS(uint8_t, w, n->has_prologue);
        PUT_AS(int32_t, w, n->prologue.scale);
        PUT_AS(int32_t, w, n->prologue.shift);
        PUT_AS(int32_t, w, n->prologue.act);
        put_str(w, n->fused);
        PUT_AS(uint8_t, w, n->elided);
    }
    put(w, g->inputs, sizeof(int) * (size_t)g->n_inputs);
    put(w, g->outputs, sizeof(int) * (size_t)g->n_outputs);
    if (!m->dynamic) {
        PUT_AS(uint64_t, w, m->plan.arena_bytes);
        PUT_AS(uint64_t, w, m->plan.naive_bytes);
        PUT_AS(uint64_t, w, m->plan.lower_bound_bytes);
        put(w, m->plan.offset, sizeof(int64_t) * (size_t)g->n_values);
        put(w, m->plan.first_use, sizeof(int) * (size_t)g->n_values);
        put(w, m->plan.last_use, sizeof(int) * (size_t)g->n_values);
    }
    put_data(wr, choices, choices_bytes);
    PUT_AS(uint32_t, w, END_MARK);
}

static bool write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n) {
        ssize_t k = write(fd, c, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        c += k;
        n -= (size_t)k;
    }
    return true;
}

static bool write_zeros(int fd, uint64_t n) {
    static const char zeros[DATA_ALIGN * 64];
    for (; n; n -= n < sizeof zeros ? n : sizeof zeros)
        if (!write_all(fd, zeros, n < sizeof zeros ? n : sizeof zeros)) return false;
    return true;
}

static bool make_folder(const char *path) {
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return false;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0700) != 0 && errno != EEXIST) return false;
        *p = '/';
    }
    return true;
}

/* Write the file body, then checksum it through a mapping of what was written. */
static bool write_file(int fd, const nn_model *m, const writer *wr, cache_header *h) {
    if (!write_zeros(fd, h->meta_offset) || !write_all(fd, wr->meta.p, wr->meta.n) ||
        !write_zeros(fd, h->data_offset - h->meta_offset - h->meta_bytes))
        return false;
    uint64_t at = 0;
    for (int i = 0; i < wr->n_blobs; i++) {
        if (!write_zeros(fd, wr->blobs[i].offset - at) || !write_all(fd, wr->blobs[i].p, wr->blobs[i].size))
            return false;
        at = wr->blobs[i].offset + wr->blobs[i].size;
    }
    void *map = mmap(NULL, h->file_bytes, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) return false;
    hash_file(h, map, m->threads, h->checksum);
    munmap(map, h->file_bytes);
    return pwrite(fd, h, sizeof *h, 0) == (ssize_t)sizeof *h && fsync(fd) == 0;
}

void nn_cache_store(nn_model *m) {
    if (!m->cache_key_known || m->cache_state == NN_CACHE_HIT) return;
    if (m->g.external_data) {
        warn(m, "not cached: the model keeps its weights in external data files, which the cache key does not cover");
        return;
    }
    /* the device's measured choices (GPU algorithms) go along with the plan */
    size_t choices_bytes = m->backend && m->backend->save_choices ? m->backend->save_choices(m, NULL, 0) : 0;
    void *choices = choices_bytes ? malloc(choices_bytes) : NULL;
    if (choices) m->backend->save_choices(m, choices, choices_bytes);
    writer wr = {0};
    write_meta(&wr, m, choices, choices ? choices_bytes : 0);
    if (wr.meta.failed) {
        warn(m, "out of memory writing the plan cache");
        goto done;
    }
    cache_header h = {.magic = CACHE_MAGIC, .format = CACHE_FORMAT, .header_bytes = sizeof h};
    memcpy(h.key, m->cache_key, sizeof h.key);
    memcpy(h.content, m->cache_content, sizeof h.content);
    memcpy(h.model_id, m->cache_model_id, sizeof h.model_id);
    snprintf(h.engine, sizeof h.engine, "%s", NN_VERSION_STRING);
    h.meta_offset = (sizeof h + DATA_ALIGN - 1) / DATA_ALIGN * DATA_ALIGN;
    h.meta_bytes = wr.meta.n;
    h.data_offset = (h.meta_offset + h.meta_bytes + PAGE - 1) / PAGE * PAGE;
    h.data_bytes = wr.data_bytes;
    h.file_bytes = h.data_offset + h.data_bytes;

    char *dir = strdup(m->cache_path), *tmp = malloc(strlen(m->cache_path) + 32);
    if (!dir || !tmp) {
        warn(m, "out of memory writing the plan cache");
        free(dir);
        free(tmp);
        goto done;
    }
    *strrchr(dir, '/') = 0;
    sprintf(tmp, "%s.%d.tmp.XXXXXX", m->cache_path, (int)getpid());
    int fd = make_folder(dir) && (mkdir(dir, 0700) == 0 || errno == EEXIST) ? mkstemp(tmp) : -1;
    if (fd < 0) {
        warn(m, "cannot write the plan cache in '%s': %s", dir, strerror(errno));
    } else {
        bool ok = write_file(fd, m, &wr, &h);
        int err = errno;
        ok = close(fd) == 0 && ok;
        if (ok && rename(tmp, m->cache_path) == 0) {
            m->cache_written = true;
        } else {
            warn(m, "cannot write the plan cache '%s': %s", m->cache_path, strerror(ok ? errno : err));
            unlink(tmp);
        }
    }
    free(dir);
    free(tmp);
done:
    free(wr.meta.p);
    free(wr.blobs);
    free(choices);
}

/* ---- reading */

typedef struct reader {
    const unsigned char *p;
    size_t n, at;
    bool ok;
    const unsigned char *data; /* the data section */
    uint64_t data_bytes;
    const char *why; /* first problem found */
} reader;

static void get(reader *r, void *dst, size_t size) {
    if (!r->ok || r->n - r->at < size) {
        r->ok = false;
        r->why = r->why ? r->why : "meta section ends early";
        memset(dst, 0, size);
        return;
    }
    memcpy(dst, r->p + r->at, size);
    r->at += size;
}

static bool fail(reader *r, const char *why) {
    if (r->ok) r->why = why;
    r->ok = false;
    return false;
}

#define DEFINE_GET(name, type)                                                                                         \
    static type name(reader *r) {                                                                                      \
        type v;                                                                                                        \
        get(r, &v, sizeof v);                                                                                          \
        return v;                                                                                                      \
    }
DEFINE_GET(get_u8, uint8_t)
DEFINE_GET(get_i32, int32_t)
DEFINE_GET(get_u32, uint32_t)
DEFINE_GET(get_i64, int64_t)
DEFINE_GET(get_u64, uint64_t)
DEFINE_GET(get_f32, float)

static const char *get_str(reader *r, nn_arena *a) {
    uint32_t len = get_u32(r);
    if (!r->ok || len == UINT32_MAX) return NULL;
    if (len > r->n - r->at) {
        fail(r, "a string runs past the meta section");
        return NULL;
    }
    char *s = nn_arena_alloc(a, (size_t)len + 1);
    if (!s) {
        fail(r, "out of memory");
        return NULL;
    }
    memcpy(s, r->p + r->at, len);
    r->at += len;
    return s;
}

static const void *get_data(reader *r, uint64_t *size) {
    uint64_t at = get_u64(r);
    *size = 0;
    if (!r->ok || at == UINT64_MAX) return NULL;
    *size = get_u64(r);
    if (at % DATA_ALIGN || at > r->data_bytes || *size > r->data_bytes - at) {
        fail(r, "a data reference lies outside the data section");
        return NULL;
    }
    return r->data + at;
}

/* Bytes of a shape, false when it overflows. */
static bool shape_bytes(const nn_tensor *t, uint64_t *bytes) {
    uint64_t b = nn_dtype_size(t->dtype);
    for (int d = 0; d < t->ndim; d++) {
        if (t->dims[d] < 0 || (t->dims[d] && b > UINT64_MAX / 2 / (uint64_t)t->dims[d])) return false;
        b *= (uint64_t)t->dims[d];
    }
    *bytes = b;
    return true;
}

static bool read_value(reader *r, nn_graph *g, int v, int n_nodes) {
    nn_value *val = &g->values[v];
    val->name = get_str(r, &g->meta);
    val->t.dtype = (nn_dtype)get_i32(r);
    val->t.ndim = get_i32(r);
    get(r, val->t.dims, sizeof val->t.dims);
    val->producer = get_i32(r);
    uint8_t flags = get_u8(r);
    val->is_input = flags & V_INPUT;
    val->is_output = flags & V_OUTPUT;
    val->is_const = flags & V_CONST;
    val->shape_known = flags & V_SHAPE_KNOWN;
    val->batched = flags & V_BATCHED;
    val->alias = get_i32(r);
    val->alias_offset = get_i64(r);
    uint64_t size, bytes = 0;
    const void *data = get_data(r, &size);
    if (!r->ok) return false;
    if (!val->name) return fail(r, "a value has no name");
    if (val->shape_known &&
        (!nn_dtype_size(val->t.dtype) || val->t.ndim < 0 || val->t.ndim > NN_MAX_DIMS || !shape_bytes(&val->t, &bytes)))
        return fail(r, "a value has an invalid dtype or shape");
    if (val->producer < -1 || val->producer >= n_nodes) return fail(r, "a value names a producer out of range");
    if (val->alias < -1 || val->alias >= g->n_values || val->alias == v || val->alias_offset < 0)
        return fail(r, "a value aliases out of range");
    if (data && (!val->is_const || !val->shape_known || size != bytes))
        return fail(r, "constant data does not match its value's shape");
    val->t.data = (void *)data;
    return true;
}

static bool read_ids(reader *r, nn_arena *a, int count, int n_values, int **out) {
    *out = nn_arena_alloc(a, sizeof(int) * (size_t)(count ? count : 1));
    if (!*out) return fail(r, "out of memory");
    get(r, *out, sizeof(int) * (size_t)count);
    for (int k = 0; k < count && r->ok; k++)
        if ((*out)[k] < -1 || (*out)[k] >= n_values) return fail(r, "a value id is out of range");
    return r->ok;
}

static bool read_node(reader *r, nn_graph *g, nn_node *n) {
    n->name = get_str(r, &g->meta);
    const char *op = get_str(r, &g->meta);
    n->n_in = get_i32(r);
    n->n_out = get_i32(r);
    if (!r->ok) return false;
    if (!n->name || !op || (n->op = nn_op_lookup(op)) < 0) return fail(r, "a node has no name or an unknown op");
    if (n->n_in < 0 || n->n_in > MAX_IO || n->n_out < 1 || n->n_out > MAX_IO)
        return fail(r, "a node has too many inputs or outputs");
    if (!read_ids(r, &g->meta, n->n_in, g->n_values, &n->in) || !read_ids(r, &g->meta, n->n_out, g->n_values, &n->out))
        return false;
    uint32_t psize = get_u32(r);
    if (r->ok && psize != UINT32_MAX) {
        if (psize > MAX_PARAMS || psize > r->n - r->at) return fail(r, "node params run past the meta section");
        if (!(n->params = nn_arena_memdup(&g->meta, r->p + r->at, psize))) return fail(r, "out of memory");
        n->params_size = psize;
        r->at += psize;
    }
    uint64_t prepared_size;
    n->prepared = get_data(r, &prepared_size);
    n->prepared_size = (size_t)prepared_size;
    n->has_epilogue = get_u8(r) != 0;
    n->epilogue.residual = get_i32(r);
    n->epilogue.act = (nn_act)get_i32(r);
    n->epilogue.alpha = get_f32(r);
    n->epilogue.beta = get_f32(r);
    n->has_prologue = get_u8(r) != 0;
    n->prologue.scale = get_i32(r);
    n->prologue.shift = get_i32(r);
    n->prologue.act = (nn_act)get_i32(r);
    n->fused = get_str(r, &g->meta);
    n->elided = get_u8(r) != 0;
    if (!r->ok) return false;
    const nn_op_desc *d = nn_op_get(n->op);
    if (n->has_epilogue &&
        (!(d->flags & NN_OPF_EPILOGUE) || n->epilogue.residual < -1 || n->epilogue.residual >= n->n_in ||
         n->epilogue.act < NN_ACT_NONE || n->epilogue.act > NN_ACT_TANH))
        return fail(r, "a node has an invalid epilogue");
    if (n->has_prologue && (!(d->flags & NN_OPF_PROLOGUE) || n->prologue.scale < 0 || n->prologue.scale >= n->n_in ||
                            n->prologue.shift < 0 || n->prologue.shift >= n->n_in ||
                            (n->prologue.act != NN_ACT_NONE && n->prologue.act != NN_ACT_RELU)))
        return fail(r, "a node has an invalid prologue");
    if (n->prepared && !d->prepared_fits) return fail(r, "a node has prepared data its op never makes");
    if (nn_node_check_wiring(n, d) != NN_OK) {
        nn_clear_error();
        return fail(r, "a node lacks an input or output its op requires");
    }
    return true;
}

static bool read_plan(reader *r, nn_model *m) {
    nn_graph *g = &m->g;
    nn_plan *p = &m->plan;
    size_t nv = (size_t)g->n_values + 1;
    p->arena_bytes = (size_t)get_u64(r);
    p->naive_bytes = (size_t)get_u64(r);
    p->lower_bound_bytes = (size_t)get_u64(r);
    p->offset = malloc(sizeof(int64_t) * nv);
    p->first_use = malloc(sizeof(int) * nv);
    p->last_use = malloc(sizeof(int) * nv);
    if (!p->offset || !p->first_use || !p->last_use) return fail(r, "out of memory");
    get(r, p->offset, sizeof(int64_t) * (size_t)g->n_values);
    get(r, p->first_use, sizeof(int) * (size_t)g->n_values);
    get(r, p->last_use, sizeof(int) * (size_t)g->n_values);
    if (!r->ok) return false;
    if (p->arena_bytes > (uint64_t)1 << 46) return fail(r, "the planned arena is implausibly large");
    for (int v = 0; v < g->n_values; v++) {
        uint64_t bytes = 0;
        if (p->offset[v] < -1 || p->first_use[v] < -1 || p->first_use[v] > g->n_nodes || p->last_use[v] < -1 ||
            p->last_use[v] > g->n_nodes)
            return fail(r, "the memory plan is out of range");
        if (p->offset[v] < 0) continue;
        if (!g->values[v].shape_known || !shape_bytes(&g->values[v].t, &bytes) ||
            (uint64_t)p->offset[v] > p->arena_bytes || bytes > p->arena_bytes - (uint64_t)p->offset[v])
            return fail(r, "a planned buffer lies outside the arena");
    }
    return true;
}

/* Structure the kernels rely on: aliases end at a root inside which the
 * value fits, every non-constant a node touches has planned memory, and
 * constants have data unless their node prepared them away. */
static bool check_memory(reader *r, const nn_model *m) {
    const nn_graph *g = &m->g;
    for (int v = 0; v < g->n_values; v++) {
        const nn_value *val = &g->values[v];
        int root = v, steps = 0;
        while (g->values[root].alias >= 0 && steps++ <= g->n_values)
            root = g->values[root].alias;
        if (steps > g->n_values) return fail(r, "value aliases form a cycle");
        if (val->alias < 0) continue;
        const nn_value *host = &g->values[val->alias];
        uint64_t bytes, host_bytes;
        if (!val->shape_known || !host->shape_known || !shape_bytes(&val->t, &bytes) ||
            !shape_bytes(&host->t, &host_bytes) || (uint64_t)val->alias_offset > host_bytes ||
            bytes > host_bytes - (uint64_t)val->alias_offset)
            return fail(r, "an aliased value does not fit inside its host");
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const nn_node *n = &g->nodes[i];
        unsigned released = n->prepared ? nn_op_get(n->op)->prepared_inputs : 0;
        for (int k = 0; k < n->n_in + n->n_out; k++) {
            int v = k < n->n_in ? n->in[k] : n->out[k - n->n_in];
            if (v < 0) continue;
            const nn_value *val = &g->values[v];
            if (val->is_const && k < n->n_in) {
                if (!val->t.data && !(k < 32 && (released & (1u << k))))
                    return fail(r, "a node reads a constant that has no data");
                continue;
            }
            if (m->dynamic) continue;
            if (m->plan.offset[nn_value_root(g, v, NULL)] < 0) return fail(r, "a node's value has no planned memory");
        }
    }
    return true;
}

/* Each prepared block must be exactly what its op makes for these shapes. */
static bool check_prepared(reader *r, nn_model *m) {
    const nn_graph *g = &m->g;
    nn_tensor in[MAX_IO], out[MAX_IO];
    char err[256];
    for (int i = 0; i < g->n_nodes; i++) {
        const nn_node *n = &g->nodes[i];
        if (!n->prepared) continue;
        for (int k = 0; k < n->n_in; k++)
            in[k] = n->in[k] >= 0 ? g->values[n->in[k]].t : (nn_tensor){0};
        for (int k = 0; k < n->n_out; k++)
            out[k] = n->out[k] >= 0 ? g->values[n->out[k]].t : (nn_tensor){0};
        nn_call call = nn_node_infer_call(n, in, out, m->threads, err, sizeof err);
        call.winograd = m->opt.winograd != 0;
        if (!nn_op_get(n->op)->prepared_fits(&call, n->prepared, n->prepared_size))
            return fail(r, "a prepared block does not fit its node");
    }
    return true;
}

static bool read_meta(reader *r, nn_model *m) {
    nn_graph *g = &m->g;
    uint32_t n_values = get_u32(r), n_nodes = get_u32(r);
    uint32_t n_inputs = get_u32(r), n_outputs = get_u32(r);
    g->opset = get_i32(r);
    g->nodes_parsed = get_i32(r);
    g->parameters = get_i64(r);
    m->plan_batch = get_i32(r);
    m->has_batch = get_u8(r) != 0;
    m->dynamic = get_u8(r) != 0;
    if (!r->ok) return false;
    if (m->plan_batch < 1 || m->plan_batch > m->batch) return fail(r, "its plan batch is out of range");
    /* every value and node takes dozens of bytes of meta: bound the counts before allocating */
    size_t left = r->n - r->at;
    if (n_values > left / 32 || n_nodes > left / 32 || n_inputs > n_values || n_outputs > n_values)
        return fail(r, "counts larger than the meta section can hold");
    g->values = calloc((size_t)n_values + 1, sizeof *g->values);
    g->nodes = calloc((size_t)n_nodes + 1, sizeof *g->nodes);
    g->inputs = nn_arena_alloc(&g->meta, sizeof(int) * ((size_t)n_inputs + 1));
    g->outputs = nn_arena_alloc(&g->meta, sizeof(int) * ((size_t)n_outputs + 1));
    if (!g->values || !g->nodes || !g->inputs || !g->outputs) return fail(r, "out of memory");
    g->n_values = g->cap_values = (int)n_values;
    g->n_nodes = g->cap_nodes = (int)n_nodes;
    g->n_inputs = (int)n_inputs;
    g->n_outputs = (int)n_outputs;
    for (int v = 0; v < g->n_values; v++)
        if (!read_value(r, g, v, g->n_nodes)) return false;
    for (int i = 0; i < g->n_nodes; i++)
        if (!read_node(r, g, &g->nodes[i])) return false;
    get(r, g->inputs, sizeof(int) * n_inputs);
    get(r, g->outputs, sizeof(int) * n_outputs);
    for (int i = 0; i < g->n_inputs + g->n_outputs && r->ok; i++) {
        int v = i < g->n_inputs ? g->inputs[i] : g->outputs[i - g->n_inputs];
        if (v < 0 || v >= g->n_values) return fail(r, "a graph input or output is out of range");
    }
    if (!m->dynamic && !read_plan(r, m)) return false;
    uint64_t choices_bytes;
    m->device_choices = get_data(r, &choices_bytes);
    m->device_choices_bytes = (size_t)choices_bytes;
    if (get_u32(r) != END_MARK || r->at != r->n) return fail(r, "the meta section has a wrong length");
    return r->ok && check_memory(r, m);
}

/* Read and check the mapped file; false (with *why) on anything amiss. */
static bool read_plan_file(nn_model *m, const unsigned char *file, size_t size, const char **why) {
    cache_header h;
    if (size < sizeof h) return (*why = "shorter than its header", false);
    memcpy(&h, file, sizeof h);
    if (memcmp(h.magic, CACHE_MAGIC, sizeof h.magic)) return (*why = "not an nn plan file", false);
    if (h.format != CACHE_FORMAT || h.header_bytes != sizeof h)
        return (*why = "written by another version of the plan format", false);
    if (h.file_bytes != size) return (*why = "truncated or extended (size differs from its header)", false);
    if (memcmp(h.key, m->cache_key, sizeof h.key))
        return (*why = "stale: the model file, the options or the CPU changed since it was written", false);
    if (h.meta_offset < sizeof h || h.meta_offset > size || h.meta_bytes > size - h.meta_offset ||
        h.data_offset < h.meta_offset + h.meta_bytes || h.data_offset % PAGE || h.data_offset > size ||
        h.data_bytes != size - h.data_offset)
        return (*why = "its sections lie outside the file", false);
    uint64_t sum[2];
    hash_file(&h, file, m->threads, sum);
    if (memcmp(sum, h.checksum, sizeof sum)) return (*why = "damaged (checksum mismatch)", false);
    reader r = {.p = file + h.meta_offset,
                .n = (size_t)h.meta_bytes,
                .ok = true,
                .data = file + h.data_offset,
                .data_bytes = h.data_bytes};
    if (!read_meta(&r, m)) return (*why = r.why, false);
    if (nn_verify_graph(m, "loading the plan cache") != NN_OK) {
        nn_clear_error();
        return (*why = "inconsistent: its shapes do not follow from its graph", false);
    }
    if (!m->dynamic && !check_prepared(&r, m)) return (*why = r.why, false);
    m->g.weights.chunk_size = 1 << 20;
    m->cache_data_bytes = (size_t)h.data_bytes;
    return true;
}

void nn_cache_load(nn_model *m, const char *model_path, bool *hit) {
    *hit = false;
    m->cache_state = NN_CACHE_MISS;
    char opts[PLAN_OPTIONS_MAX];
    plan_options(m, opts, sizeof opts);
    if (!locate(m, model_path, opts)) return;
    const char *why = NULL;
    size_t size = 0;
    void *map = MAP_FAILED;
    int fd = open(m->cache_path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0) {
        if (errno != ENOENT) warn(m, "cannot read the plan cache '%s': %s", m->cache_path, strerror(errno));
    } else if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        why = "not a regular file";
    } else if (!(size = (size_t)st.st_size)) {
        why = "empty";
    } else if ((map = mmap(NULL, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0)) == MAP_FAILED) {
        warn(m, "cannot map the plan cache '%s': %s", m->cache_path, strerror(errno));
    }
    if (fd >= 0) close(fd);
    /* the model's bytes need hashing only when the file is not, by its
     * identity, the one the plan recorded (the checksum still covers that record) */
    cache_header h;
    bool same_model = map != MAP_FAILED && size >= sizeof h && (memcpy(&h, map, sizeof h), true) &&
                      !memcmp(h.magic, CACHE_MAGIC, sizeof h.magic) && h.format == CACHE_FORMAT &&
                      !memcmp(h.model_id, m->cache_model_id, sizeof h.model_id);
    if (!derive_key(m, model_path, opts, same_model ? h.content : NULL)) {
        if (map != MAP_FAILED) munmap(map, size);
        return;
    }
    if (map != MAP_FAILED && read_plan_file(m, map, size, &why)) {
        m->cache_map = map;
        m->cache_map_bytes = size;
        m->from_cache = true;
        m->cache_state = NN_CACHE_HIT;
        *hit = true;
        return;
    }
    if (why) warn(m, "plan cache '%s' is %s; rebuilt the plan", m->cache_path, why);
    if (map != MAP_FAILED) munmap(map, size);
    nn_plan_free(&m->plan);
    memset(&m->plan, 0, sizeof m->plan);
    nn_graph_free(&m->g);
    m->has_batch = m->dynamic = false;
    m->plan_batch = m->batch;
    m->device_choices = NULL;
    m->device_choices_bytes = 0;
}

void nn_cache_release(nn_model *m) {
    if (m->cache_map) munmap(m->cache_map, m->cache_map_bytes);
    m->cache_map = NULL;
    free(m->cache_path);
    m->cache_path = NULL;
}
