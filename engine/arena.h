/* Region allocator: many small allocations, one free.  The IR's metadata and
 * the model's weights each live in an arena so that freeing the model frees
 * everything at once. */
#ifndef NN_ARENA_H
#define NN_ARENA_H

#include <stdbool.h>
#include <stddef.h>

typedef struct nn_arena_chunk nn_arena_chunk;
typedef struct nn_arena {
    nn_arena_chunk *head;
    size_t chunk_size; /* default size of new chunks */
    size_t total;      /* bytes handed out, for reports */
} nn_arena;

/* Zeroed, 64-byte aligned memory; NULL when out of memory. */
void *nn_arena_alloc(nn_arena *a, size_t size);
char *nn_arena_strdup(nn_arena *a, const char *s);
void *nn_arena_memdup(nn_arena *a, const void *p, size_t size);
/* Give back a block early, when it had a chunk of its own (allocations larger
 * than chunk_size do); returns false, keeping it, otherwise. */
bool nn_arena_release(nn_arena *a, void *p);
void nn_arena_free(nn_arena *a);

#endif
