/* The region allocator (engine/arena.c): every block 64-byte aligned and
 * zero when handed out (its chunks come from calloc, never cleared again),
 * blocks never overlapping, large blocks in chunks of their own that can be
 * given back, the byte count kept, and everything freed at once (valgrind
 * reports a leak otherwise). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/arena.h"
#include "check.h"

enum { COUNT = 400 };

static bool all_zero(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i]) return false;
    return true;
}

static bool all_byte(const unsigned char *p, size_t n, unsigned char v) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != v) return false;
    return true;
}

int main(void) {
    nn_arena a = {.chunk_size = 4096};
    unsigned char *block[COUNT];
    size_t size[COUNT], total = 0;
    uint32_t seed = 7;
    for (int i = 0; i < COUNT; i++) {
        seed = seed * 1664525u + 1013904223u;
        /* mostly small, some past the chunk size (a chunk of their own), some empty */
        size[i] = i % 50 == 7 ? 20000 + (seed >> 20) : i % 31 == 3 ? 0 : (seed >> 8) % 700;
        block[i] = nn_arena_alloc(&a, size[i]);
        CHECK(block[i] != NULL, "block %d (%zu bytes): allocation failed", i, size[i]);
        if (!block[i]) return check_summary();
        CHECK(((uintptr_t)block[i] & 63) == 0, "block %d (%zu bytes) at %p: expected 64-byte alignment", i, size[i],
              (void *)block[i]);
        CHECK(all_zero(block[i], size[i]), "block %d (%zu bytes): expected zero bytes when handed out", i, size[i]);
        memset(block[i], i % 251 + 1, size[i]); /* overlapping blocks would overwrite each other */
        total += (size[i] + 63) / 64 * 64;
    }
    int clobbered = -1;
    for (int i = 0; i < COUNT && clobbered < 0; i++)
        if (!all_byte(block[i], size[i], (unsigned char)(i % 251 + 1))) clobbered = i;
    CHECK(clobbered < 0, "block %d was overwritten by another block", clobbered);
    CHECK(a.total == total, "total: expected %zu bytes handed out, got %zu", total, a.total);

    /* a large block can be given back; a small one shares a chunk and cannot */
    CHECK(nn_arena_release(&a, block[7]), "releasing block 7 (%zu bytes, its own chunk): expected true", size[7]);
    CHECK(a.total == total - (size[7] + 63) / 64 * 64, "total after the release: expected %zu, got %zu",
          total - (size[7] + 63) / 64 * 64, a.total);
    CHECK(!nn_arena_release(&a, block[1]), "releasing block 1 (%zu bytes, a shared chunk): expected false", size[1]);

    char *s = nn_arena_strdup(&a, "weights");
    CHECK(s && !strcmp(s, "weights"), "strdup: expected \"weights\", got \"%s\"", s ? s : "(null)");
    float f[3] = {1.5f, -2.0f, 3.25f};
    float *g = nn_arena_memdup(&a, f, sizeof f);
    CHECK(g && !memcmp(g, f, sizeof f), "memdup: expected the 3 floats copied");

    /* a size whose rounding up to the alignment overflows is refused */
    CHECK(nn_arena_alloc(&a, SIZE_MAX - 10) == NULL, "allocating SIZE_MAX - 10 bytes: expected NULL");
    /* and one whose chunk header would */
    CHECK(nn_arena_alloc(&a, SIZE_MAX - 127) == NULL, "allocating SIZE_MAX - 127 bytes: expected NULL");
    nn_arena_free(&a);
    CHECK(a.head == NULL && a.total == 0, "after free: expected an empty arena, total %zu", a.total);
    return check_summary();
}
