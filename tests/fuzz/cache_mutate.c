/* The crafted-cache attack, replayed: take the valid plan nn writes for a
 * real model, change bytes of its meta section, re-seal the checksum (it is
 * no secret) and load it.  Each load must be a miss with a warning or a
 * hit; a crash or undefined behaviour (built with ASan + UBSan, which stop
 * the process) is the failure this looks for.  A hit is also run and its
 * outputs compared with the uncached model's: hits that differ are counted
 * and listed (the checksum cannot tell an edited float, such as a fused
 * activation's alpha, from the real one).
 *
 * usage: cache_mutate MODEL COUNT [SEED [SLOT_MODEL]]
 *   make BUILD=build/asan SANITIZE=address,undefined build/asan/tests/cache_mutate   (ASan + UBSan)
 *   make build/fuzz/tests/cache_mutate   (the same, on the cache fuzzer's library)
 * The mutated file of a crash is left next to the scratch cache folder in /tmp.
 * SLOT_MODEL, with the fuzzer's library only (its reader does not compare
 * the key; a re-sealed file passes that comparison anyway): load MODEL's
 * mutated plan through a small model's cache slot, so that a miss rebuilds
 * the small model instead of MODEL, many times faster; hits still run
 * MODEL's plan and are compared with MODEL's outputs.
 * Exit status 0 when every mutation loaded as a hit that runs or a miss with
 * a warning. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../engine/cache_int.h"
#include "nn.h"

enum { MAX_TENSORS = 16 };

static uint64_t rng_state;
static uint64_t rng(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

typedef struct run {
    int n_out;
    nn_tensor out[MAX_TENSORS];
} run;

/* Inputs of the model's shapes filled with a fixed pattern. */
static bool predict(nn_model *m, run *r) {
    int n_in = nn_input_count(m);
    r->n_out = nn_output_count(m);
    if (n_in > MAX_TENSORS || r->n_out > MAX_TENSORS) return false;
    nn_tensor in[MAX_TENSORS] = {0};
    memset(r->out, 0, sizeof r->out);
    bool ok = true;
    for (int i = 0; i < n_in && ok; i++) {
        ok = nn_input_info(m, i, NULL, &in[i]) == NN_OK && in[i].dtype == NN_DTYPE_FLOAT;
        int64_t n = ok ? nn_tensor_elements(&in[i]) : 0;
        ok = ok && n >= 0 && n <= (1 << 26) && (in[i].data = malloc((size_t)n * sizeof(float) + 1));
        for (int64_t k = 0; ok && k < n; k++)
            ((float *)in[i].data)[k] = sinf((float)k * 0.37f);
    }
    ok = ok && nn_predict(m, in, n_in, r->out, r->n_out) == NN_OK;
    for (int i = 0; i < n_in; i++)
        free(in[i].data);
    return ok;
}

static void release(run *r) {
    for (int i = 0; i < r->n_out; i++)
        nn_tensor_release(&r->out[i]);
}

static bool same(const run *a, const run *b) {
    if (a->n_out != b->n_out) return false;
    for (int i = 0; i < a->n_out; i++) {
        const nn_tensor *x = &a->out[i], *y = &b->out[i];
        size_t bytes = (size_t)nn_tensor_elements(x) * nn_dtype_size(x->dtype);
        if (x->dtype != y->dtype || x->ndim != y->ndim || memcmp(x->dims, y->dims, sizeof(int64_t) * (size_t)x->ndim) ||
            memcmp(x->data, y->data, bytes))
            return false;
    }
    return true;
}

static unsigned char *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *size = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc(*size);
    if (p && fread(p, 1, *size, f) != *size) {
        free(p);
        p = NULL;
    }
    fclose(f);
    return p;
}

static bool write_file(const char *path, const unsigned char *p, size_t size) {
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(p, 1, size, f) == size;
    return f && fclose(f) == 0 && ok;
}

/* Change 1 to 4 places of the meta section: a random byte, a flipped bit,
 * or a 4- or 8-byte field set to a value parsers trip on. */
static void mutate(unsigned char *meta, size_t n, char *what, size_t what_size) {
    static const int64_t interesting[] = {0,
                                          1,
                                          -1,
                                          2,
                                          7,
                                          8,
                                          9,
                                          64,
                                          65,
                                          127,
                                          255,
                                          4096,
                                          INT32_MAX,
                                          INT32_MIN,
                                          (int64_t)1 << 31,
                                          (int64_t)1 << 40,
                                          INT64_MAX,
                                          INT64_MIN};
    int places = 1 + (int)(rng() % 4);
    size_t used = 0;
    what[0] = 0;
    for (int k = 0; k < places; k++) {
        size_t at = (size_t)(rng() % n);
        int kind = (int)(rng() % 4), width = rng() % 2 ? 4 : 8;
        if (kind >= 2 && at + (size_t)width <= n) {
            int64_t v = interesting[rng() % (sizeof interesting / sizeof *interesting)];
            cache_put_le(meta + at, (uint64_t)v, width);
            used += (size_t)snprintf(what + used, what_size - used, " @%zu=%lld/%d", at, (long long)v, width);
        } else if (kind == 1) {
            meta[at] ^= (unsigned char)(1u << (rng() % 8));
            used += (size_t)snprintf(what + used, what_size - used, " @%zu^bit", at);
        } else {
            meta[at] = (unsigned char)rng();
            used += (size_t)snprintf(what + used, what_size - used, " @%zu=%u", at, meta[at]);
        }
        if (used >= what_size) break;
    }
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: cache_mutate MODEL COUNT [SEED [SLOT_MODEL]]\n");
        return 2;
    }
    const char *model = argv[1];
    long count = atol(argv[2]);
    rng_state = argc > 3 ? strtoull(argv[3], NULL, 10) : 1;
    const char *slot = argc > 4 ? argv[4] : model;
    char dir[] = "/tmp/nn_cache_mutate_XXXXXX";
    if (!mkdtemp(dir)) return perror("mkdtemp"), 2;
    nn_options o = nn_options_default();
    o.threads = 2;
    o.cache_dir = dir;

    /* the reference: the model without the cache; then a plan on disk */
    nn_options fresh = o;
    fresh.cache = 0;
    nn_model *m = NULL;
    run ref, got;
    if (nn_load(model, &fresh, &m) != NN_OK || !predict(m, &ref)) {
        fprintf(stderr, "cache_mutate: %s does not load or run: %s\n", model, nn_last_error());
        nn_free(m);
        return 2;
    }
    nn_free(m);
    if (nn_load(model, &o, &m) != NN_OK) return fprintf(stderr, "cache_mutate: %s\n", nn_last_error()), 2;
    nn_model_stats s;
    nn_model_get_stats(m, &s);
    char plan[4200];
    snprintf(plan, sizeof plan, "%s", s.cache_path ? s.cache_path : "");
    nn_free(m);
    if (slot != model) { /* the plan is read back from the small model's file name */
        if (nn_load(slot, &o, &m) != NN_OK) return fprintf(stderr, "cache_mutate: %s\n", nn_last_error()), 2;
        char moved[4200];
        nn_model_get_stats(m, &s);
        snprintf(moved, sizeof moved, "%s", s.cache_path ? s.cache_path : "");
        nn_free(m);
        if (rename(plan, moved) != 0) return perror("rename"), 2;
        snprintf(plan, sizeof plan, "%s", moved);
    }
    size_t size;
    unsigned char *good = read_file(plan, &size), *bad = good ? malloc(size) : NULL;
    if (!good || !bad || size < HEADER_BYTES) return fprintf(stderr, "cache_mutate: no plan at '%s'\n", plan), 2;
    cache_header h;
    cache_decode(&cache_header_desc, good, &h);
    printf("cache_mutate: %s, plan %zu bytes, meta %llu bytes at %llu; %ld mutations, seed %llu\n", model, size,
           (unsigned long long)h.meta_bytes, (unsigned long long)h.meta_offset, count, (unsigned long long)rng_state);
    fflush(stdout);

    long hits = 0, misses = 0, differ = 0, failed_runs = 0;
    char crash_copy[64];
    snprintf(crash_copy, sizeof crash_copy, "%s.last", dir);
    for (long i = 0; i < count; i++) {
        char what[200];
        memcpy(bad, good, size);
        mutate(bad + h.meta_offset, (size_t)h.meta_bytes, what, sizeof what);
        cache_checksum(&h, bad, 1, h.checksum); /* re-seal */
        cache_encode(&cache_header_desc, &h, bad);
        /* kept outside the cache folder, so that a crash leaves the input behind */
        if (!write_file(plan, bad, size) || !write_file(crash_copy, bad, size)) return perror("write"), 2;
        if (nn_load(slot, &o, &m) != NN_OK) {
            printf("mutation %ld:%s: load failed: %s\n", i, what, nn_last_error());
            failed_runs++;
            continue;
        }
        nn_model_get_stats(m, &s);
        if (s.cache == NN_CACHE_HIT) {
            hits++;
            if (!predict(m, &got)) {
                failed_runs++;
                printf("mutation %ld:%s: a hit that does not run: %s\n", i, what, nn_last_error());
            } else if (!same(&ref, &got)) {
                differ++;
                printf("mutation %ld:%s: a hit whose outputs differ\n", i, what);
            }
            release(&got);
        } else {
            misses++;
            if (!s.cache_warning) {
                failed_runs++;
                printf("mutation %ld:%s: a miss without a warning\n", i, what);
            }
        }
        nn_free(m);
        if ((i + 1) % 500 == 0) {
            printf("  %ld done: %ld hits (%ld differ), %ld misses\n", i + 1, hits, differ, misses);
            fflush(stdout);
        }
    }
    printf("cache_mutate: %ld mutations, %ld hits (%ld with other outputs), %ld misses, %ld errors; no crash\n", count,
           hits, differ, misses, failed_runs);
    int status = failed_runs ? 1 : 0;
    release(&ref);
    unlink(crash_copy);
    unlink(plan);
    rmdir(dir);
    free(good);
    free(bad);
    return status;
}
