/* The plan cache: the optimized graph, its packed weights and its memory
 * plan in one file, so that the next load of the same model with the same
 * options skips parsing and every pass (engine/cache_int.h has the format). */
#ifndef NN_CACHE_H
#define NN_CACHE_H

#include <stdbool.h>

#include "model.h"

/* Look for m's plan (m->opt says which) in the cache.  On a hit, m holds
 * the graph, the prepared weights (used in place from a read-only mapping)
 * and the memory plan, and *hit is true.  Anything else is a miss: no file,
 * or one that is stale, foreign or damaged (then m->cache_warning says what
 * was wrong).  The key it computes is kept for nn_cache_store. */
void nn_cache_load(nn_model *m, const char *model_path, bool *hit);

/* Write m's plan (after nn_runtime_init) where nn_cache_load looked, through
 * a temporary file and a rename; a failure only sets m->cache_warning. */
void nn_cache_store(nn_model *m);

/* Unmap the cache file a hit left mapped. */
void nn_cache_release(nn_model *m);

/* A 128-bit hash of `size` bytes, computed in 1 MiB blocks on up to
 * `threads` threads (same result for any thread count). */
void nn_hash128(const void *data, size_t size, int threads, uint64_t out[2]);

/* ---- the folder as a whole (cache_dir.c): size cap, least-recently-used
 *      eviction, and what nncache lists */

/* The cap when neither nn_options.cache_max nor $NN_CACHE_MAX sets one. */
#define NN_CACHE_MAX_DEFAULT ((int64_t)1 << 30)

typedef struct nn_cache_entry {
    char *path;       /* folder/name */
    const char *name; /* inside path */
    uint64_t bytes;
    int64_t used_ns; /* last written or hit (the file's modification time) */
} nn_cache_entry;

/* The cache folder: option_dir, else $NN_CACHE_DIR, $XDG_CACHE_HOME/nn,
 * ~/.cache/nn; false when none is known or it does not fit `size`. */
bool nn_cache_folder(const char *option_dir, char *dir, size_t size);
/* "123", "512K", "1.5G", "2GiB" (binary units) or "none" (-1, no cap). */
bool nn_cache_parse_size(const char *s, int64_t *bytes);
/* The cap in bytes, -1 for none: `option` (nn_options.cache_max) when not
 * 0, else $NN_CACHE_MAX, else NN_CACHE_MAX_DEFAULT; a $NN_CACHE_MAX that is
 * not a size leaves a one-line warning. */
int64_t nn_cache_cap(int64_t option, char *warning, size_t size);
/* Mark a plan as just used (a hit). */
void nn_cache_touch(const char *path);
/* The plans (*.nnplan, or with `temps` the writers' temporary files) in
 * `dir`, least recently used first: their count, 0 when the folder does
 * not exist, -1 when it cannot be read.  Free with nn_cache_entries_free. */
int nn_cache_scan(const char *dir, bool temps, nn_cache_entry **out);
void nn_cache_entries_free(nn_cache_entry *e, int n);
/* Remove the least recently used plans, never `keep`, until the folder
 * holds at most `cap` bytes of them (-1: no cap).  Returns how many went
 * (-1 when the folder cannot be read); *left gets the bytes that remain. */
int nn_cache_trim(const char *dir, int64_t cap, const char *keep, uint64_t *left);
/* "ok", or why a plan file can never be a hit ("stale (...)",
 * "damaged (...)"), from its header alone; `engine` gets the version that
 * wrote it. */
const char *nn_cache_file_status(const char *path, char *engine, size_t engine_size);

#endif
