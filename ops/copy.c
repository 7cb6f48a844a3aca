/* Strided copies shared by the data-movement ops (Transpose, Slice, Expand,
 * Tile, DepthToSpace ...), and reading small integer inputs. */
#include <stdbool.h>
#include <string.h>

#include "isa.h"
#include "op.h"
#include "par.h"

#if NN_HAVE_X86
#include <emmintrin.h> /* SSE2: every x86-64 has it */
#endif

/* Copies smaller than this stay on one thread: a team costs more than it saves. */
#define PARALLEL_BYTES ((int64_t)1 << 18)

void nn_copy_run(char *dst, const char *src, size_t esz, int64_t len, int64_t step) {
    if (step == 1) {
        memcpy(dst, src, (size_t)len * esz);
        return;
    }
#define COPY_RUN(T)                                                                               \
    do {                                                                                          \
        T *d = (T *)dst;                                                                          \
        const T *s = (const T *)src;                                                              \
        for (int64_t j = 0; j < len; j++) d[j] = s[j * step];                                     \
        return;                                                                                   \
    } while (0)
    switch (esz) {
    case 1: COPY_RUN(uint8_t);
    case 2: COPY_RUN(uint16_t);
    case 4: COPY_RUN(uint32_t);
    case 8: COPY_RUN(uint64_t);
    }
#undef COPY_RUN
    for (int64_t j = 0; j < len; j++) memcpy(dst + j * esz, src + j * step * (int64_t)esz, esz);
}

/* nn_copy_strided for a view whose input-contiguous axis `a` is not the
 * innermost output axis (a transpose): copy square tiles of axes (a, last),
 * so that the input lines a tile reads stay in cache while the tile's rows
 * are written. */
typedef struct transpose_job {
    void *dst;
    const void *src;
    size_t esz;
    int n, a;
    const int64_t *d, *s, *ds;
    int64_t ti, tj;
} transpose_job;

static void transpose_range(void *ctx, int64_t lo, int64_t hi, int seat);

static void copy_transposed(void *dst, const void *src, size_t esz, int n, const int64_t *d, const int64_t *s,
                            int a, int threads) {
    enum { TILE = 32 };
    int64_t ds[VIEW_MAX_DIMS]; /* dense output strides */
    ds[n - 1] = 1;
    for (int k = n - 2; k >= 0; k--) ds[k] = ds[k + 1] * d[k + 1];
    int64_t last = d[n - 1];
    int64_t ti = (d[a] + TILE - 1) / TILE, tj = (last + TILE - 1) / TILE;
    int64_t tiles = nn_shape_elements(d, n - 1) / d[a] * ti * tj;
    int64_t total = nn_shape_elements(d, n) * (int64_t)esz;
    transpose_job j = {.dst = dst, .src = src, .esz = esz, .n = n, .d = d, .s = s, .ds = ds, .a = a, .ti = ti, .tj = tj};
    nn_par_for_range(tiles > 1 && total > PARALLEL_BYTES ? threads : 1, tiles, 1, transpose_range, &j);
}

/* A 16 x 16 block of bytes transposed: dst[i * ldd + j] = src[j * lds + i].
 * Four rounds of interleaving (bytes, then pairs, quads and eights), 64
 * shuffles for 256 bytes, where the strided loop moved one byte a step:
 * the Transposes around the channels-last int8 regions (passes/layout_nhwc.c)
 * ran at 2.7 GB/s that way. */
static void transpose_bytes16(uint8_t *dst, int64_t ldd, const uint8_t *src, int64_t lds) {
#if NN_HAVE_X86
    __m128i a[16], b[16], c[16], d[16];
    for (int k = 0; k < 16; k++)
        a[k] = _mm_loadu_si128((const __m128i *)(src + k * lds));
    for (int k = 0; k < 8; k++) { /* b[k], b[k + 8]: rows 2k, 2k + 1, columns 0-7 and 8-15 */
        b[k] = _mm_unpacklo_epi8(a[2 * k], a[2 * k + 1]);
        b[k + 8] = _mm_unpackhi_epi8(a[2 * k], a[2 * k + 1]);
    }
    for (int k = 0; k < 4; k++) { /* c[4q + k]: rows 4k to 4k + 3, columns 4q to 4q + 3 */
        c[k] = _mm_unpacklo_epi16(b[2 * k], b[2 * k + 1]);
        c[k + 4] = _mm_unpackhi_epi16(b[2 * k], b[2 * k + 1]);
        c[k + 8] = _mm_unpacklo_epi16(b[2 * k + 8], b[2 * k + 9]);
        c[k + 12] = _mm_unpackhi_epi16(b[2 * k + 8], b[2 * k + 9]);
    }
    for (int q = 0; q < 4; q++)
        for (int k = 0; k < 2; k++) { /* d[4q + k], d[4q + k + 2]: rows 8k to 8k + 7, columns 4q, 4q + 1 / 4q + 2, 4q + 3 */
            d[4 * q + k] = _mm_unpacklo_epi32(c[4 * q + 2 * k], c[4 * q + 2 * k + 1]);
            d[4 * q + k + 2] = _mm_unpackhi_epi32(c[4 * q + 2 * k], c[4 * q + 2 * k + 1]);
        }
    for (int q = 0; q < 4; q++) {
        _mm_storeu_si128((__m128i *)(dst + (4 * q) * ldd), _mm_unpacklo_epi64(d[4 * q], d[4 * q + 1]));
        _mm_storeu_si128((__m128i *)(dst + (4 * q + 1) * ldd), _mm_unpackhi_epi64(d[4 * q], d[4 * q + 1]));
        _mm_storeu_si128((__m128i *)(dst + (4 * q + 2) * ldd), _mm_unpacklo_epi64(d[4 * q + 2], d[4 * q + 3]));
        _mm_storeu_si128((__m128i *)(dst + (4 * q + 3) * ldd), _mm_unpackhi_epi64(d[4 * q + 2], d[4 * q + 3]));
    }
#else
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++)
            dst[i * ldd + j] = src[j * lds + i];
#endif
}

static void transpose_range(void *ctx, int64_t lo, int64_t hi, int seat) {
    enum { TILE = 32 };
    (void)seat;
    const transpose_job *jb = ctx;
    void *dst = jb->dst;
    const void *src = jb->src;
    size_t esz = jb->esz;
    int n = jb->n, a = jb->a;
    const int64_t *d = jb->d, *s = jb->s, *ds = jb->ds;
    int64_t last = d[n - 1], step = s[n - 1], ti = jb->ti, tj = jb->tj;
    for (int64_t t = lo; t < hi; t++) {
        int64_t j0 = t % tj * TILE, i0 = t / tj % ti * TILE, q = t / (tj * ti);
        int64_t soff = 0, doff = 0;
        for (int k = n - 2; k >= 0; k--) {
            if (k == a) continue;
            soff += q % d[k] * s[k];
            doff += q % d[k] * ds[k];
            q /= d[k];
        }
        int64_t i1 = i0 + TILE < d[a] ? i0 + TILE : d[a], j1 = j0 + TILE < last ? j0 + TILE : last;
        if (esz == 1 && i1 - i0 == TILE && j1 - j0 == TILE) { /* whole tiles of bytes: four 16 x 16 blocks */
            for (int64_t bi = i0; bi < i1; bi += 16)
                for (int64_t bj = j0; bj < j1; bj += 16)
                    transpose_bytes16((uint8_t *)dst + doff + bi * ds[a] + bj, ds[a],
                                      (const uint8_t *)src + soff + bi + bj * step, step);
            continue;
        }
        for (int64_t i = i0; i < i1; i++)
            nn_copy_run((char *)dst + (doff + i * ds[a] + j0) * (int64_t)esz,
                     (const char *)src + (soff + i + j0 * step) * (int64_t)esz, esz, j1 - j0, step);
    }
}

typedef struct rows_job {
    void *dst;
    const void *src;
    size_t esz;
    int n;
    const int64_t *d, *s;
    int64_t len, step;
} rows_job;

static void rows_range(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    const rows_job *j = ctx;
    for (int64_t r = lo; r < hi; r++) {
        int64_t off = 0, q = r;
        for (int k = j->n - 2; k >= 0; k--) {
            off += (q % j->d[k]) * j->s[k];
            q /= j->d[k];
        }
        nn_copy_run((char *)j->dst + r * j->len * (int64_t)j->esz, (const char *)j->src + off * (int64_t)j->esz,
                    j->esz, j->len, j->step);
    }
}

/* Write the view of `src` with shape `dims` and element strides `strides`
 * (0 broadcasts, negative walks backwards) densely into `dst`. */
void nn_copy_strided(void *dst, const void *src, size_t esz, int ndim, const int64_t *dims,
                     const int64_t *strides, int threads) {
    /* Drop unit axes and merge axes that are contiguous with their inner
     * neighbour, so the innermost run is as long as possible. */
    int64_t d[VIEW_MAX_DIMS], s[VIEW_MAX_DIMS];
    int n = 0;
    for (int k = 0; k < ndim; k++) {
        if (dims[k] == 0) return;
        if (dims[k] == 1) continue;
        if (n > 0 && s[n - 1] == strides[k] * dims[k]) {
            d[n - 1] *= dims[k];
            s[n - 1] = strides[k];
            continue;
        }
        d[n] = dims[k];
        s[n] = strides[k];
        n++;
    }
    if (n == 0) {
        memcpy(dst, src, esz);
        return;
    }
    int64_t len = d[n - 1], step = s[n - 1];
    for (int a = 0; a < n - 1 && step != 1 && step != 0; a++)
        if (s[a] == 1) {
            copy_transposed(dst, src, esz, n, d, s, a, threads);
            return;
        }
    int64_t rows = nn_shape_elements(d, n - 1);
    bool par = rows > 1 && rows * len * (int64_t)esz > PARALLEL_BYTES;
    rows_job j = {.dst = dst, .src = src, .esz = esz, .n = n, .d = d, .s = s, .len = len, .step = step};
    nn_par_for_range(par ? threads : 1, rows, 1, rows_range, &j);
}

/* Read integer input i (INT32 or INT64, rank 0 or 1) into out[0..*n).
 * NN_DYNAMIC when its value is not known yet. */
nn_status nn_input_ints(nn_call *c, int i, const char *what, int64_t *out, int cap, int *n) {
    const nn_tensor *t = &c->in[i];
    if (t->dtype != NN_DTYPE_INT64 && t->dtype != NN_DTYPE_INT32)
        return nn_call_error(c, NN_ERR_INVALID, "%s must be int64, got %s", what, nn_dtype_name(t->dtype));
    if (t->ndim > 1) return nn_call_error(c, NN_ERR_SHAPE, "%s must be 1-D, got rank %d", what, t->ndim);
    int64_t count = nn_shape_elements(t->dims, t->ndim);
    if (count > cap)
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "%s has %lld values, at most %d supported", what,
                             (long long)count, cap);
    *n = (int)count;
    if (count > 0 && !t->data) return NN_DYNAMIC;
    for (int64_t k = 0; k < count; k++) out[k] = nn_tensor_get_int(t, k);
    return NN_OK;
}

