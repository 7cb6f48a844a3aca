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

#endif
