#include "arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { ARENA_ALIGN = 64, ARENA_DEFAULT_CHUNK = 1 << 16 };

struct nn_arena_chunk {
    nn_arena_chunk *next;
    void *base; /* what calloc returned, for free */
    size_t size, used;
    _Alignas(ARENA_ALIGN) unsigned char data[];
};

/* A chunk of zeroed memory.  calloc, not aligned_alloc and memset: a large
 * chunk comes from mmap as pages the kernel zeroes when they are first
 * touched, so the weights and packed panels written into it are written
 * once, not cleared and then written (docs/perf-notes.md, "Load: weights
 * written once, transformed in vectors").  Chunks are never reused, so
 * every byte handed out is still zero. */
static nn_arena_chunk *new_chunk(size_t cs) {
    size_t bytes = sizeof(nn_arena_chunk) + cs + ARENA_ALIGN;
    if (bytes < cs) return NULL;
    void *base = calloc(1, bytes);
    if (!base) return NULL;
    nn_arena_chunk *c = (nn_arena_chunk *)(((uintptr_t)base + ARENA_ALIGN - 1) & ~(uintptr_t)(ARENA_ALIGN - 1));
    c->base = base;
    c->size = cs;
    c->used = 0;
    return c;
}

void *nn_arena_alloc(nn_arena *a, size_t size) {
    size_t need = (size + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
    if (need < size) return NULL;
    nn_arena_chunk *c = a->head;
    if (!c || c->size - c->used < need) {
        size_t cs = a->chunk_size ? a->chunk_size : ARENA_DEFAULT_CHUNK;
        if (cs < need) cs = need;
        if (!(c = new_chunk(cs))) return NULL;
        /* A big one-off block goes behind the current chunk so the current
         * chunk's free space stays usable for small allocations. */
        if (a->head && cs == need && a->head->size - a->head->used > ARENA_DEFAULT_CHUNK / 4) {
            c->next = a->head->next;
            a->head->next = c;
        } else {
            c->next = a->head;
            a->head = c;
        }
    }
    void *p = c->data + c->used;
    c->used += need;
    a->total += need;
    return p; /* zero, alignment padding included: no byte handed out is left uninitialised */
}

void *nn_arena_memdup(nn_arena *a, const void *p, size_t size) {
    void *q = nn_arena_alloc(a, size ? size : 1);
    if (q && size) memcpy(q, p, size);
    return q;
}

char *nn_arena_strdup(nn_arena *a, const char *s) { return nn_arena_memdup(a, s ? s : "", strlen(s ? s : "") + 1); }

bool nn_arena_release(nn_arena *a, void *p) {
    for (nn_arena_chunk **link = &a->head; *link; link = &(*link)->next) {
        nn_arena_chunk *c = *link;
        if ((void *)c->data != p) continue;
        if (c->used != c->size || c->size <= (a->chunk_size ? a->chunk_size : ARENA_DEFAULT_CHUNK)) return false;
        *link = c->next;
        a->total -= c->used;
        free(c->base);
        return true;
    }
    return false;
}

void nn_arena_free(nn_arena *a) {
    nn_arena_chunk *c = a->head;
    while (c) {
        nn_arena_chunk *next = c->next;
        free(c->base);
        c = next;
    }
    a->head = NULL;
    a->total = 0;
}
