/* Windowed pooling (MaxPool, AveragePool) over any number of spatial dims,
 * and global pooling.  float; MaxPool also uint8 and int8. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "geom.h"
#include "isa.h"
#include "op.h"
#include "par.h"
#include "window.h"

/* What pool_flat_planes shares with its tasks (ops/par.h). */
typedef struct pool_job {
    const void *taps; /* its nn_flat_taps */
    const float *x;
    float *y;
} pool_job;

#if NN_HAVE_X86
#include <immintrin.h>

#include "avx2.h"
#endif

/* shared with the CUDA backend (geom.h) */
typedef nn_pool_params pool_params;
typedef nn_pool_geom pool_geom;

static nn_status parse_pool(nn_parse_ctx *ctx) {
    pool_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    nn_status st;
    if ((st = nn_window_parse(ctx, &p->w)) || (st = nn_attr_int(ctx, "ceil_mode", 0, &p->ceil_mode)) ||
        (st = nn_attr_int(ctx, "count_include_pad", 0, &p->count_include_pad)) ||
        (st = nn_attr_int(ctx, "storage_order", 0, &p->storage_order)))
        return st;
    ctx->params = p;
    return NN_OK;
}

static nn_status pool_check(const void *params, char *err, size_t err_size) {
    const pool_params *p = params;
    nn_status st = nn_window_check(&p->w, err, err_size);
    if (st != NN_OK) return st;
    if (p->w.n_kernel < 1) return nn_check_error(err, err_size, "kernel_shape is required");
    if ((p->ceil_mode != 0 && p->ceil_mode != 1) || (p->count_include_pad != 0 && p->count_include_pad != 1) ||
        (p->storage_order != 0 && p->storage_order != 1))
        return nn_check_error(err, err_size,
                              "ceil_mode (%lld), count_include_pad (%lld) and storage_order (%lld) must be 0 or 1",
                              (long long)p->ceil_mode, (long long)p->count_include_pad, (long long)p->storage_order);
    return NN_OK;
}

/* Shape checks and output dims; shared by infer and run.  Output size per the
 * ONNX spec; in ceil mode a last window that would start in the end padding
 * is dropped (as PyTorch and ONNX Runtime do). */
static nn_status pool_resolve(const nn_call *c, pool_geom *g) {
    const pool_params *p = c->params;
    const nn_tensor *x = &c->in[0];
    int nsp = g->nsp = x->ndim - 2;
    if (nsp < 1) return nn_call_error(c, NN_ERR_SHAPE, "input must have rank >= 3, got %d", x->ndim);
    if (p->w.n_kernel != nsp || (p->w.n_strides >= 0 && p->w.n_strides != nsp) ||
        (p->w.n_dilations >= 0 && p->w.n_dilations != nsp) || (p->w.n_pads >= 0 && p->w.n_pads != 2 * nsp))
        return nn_call_error(c, NN_ERR_INVALID,
                             "kernel_shape/strides/dilations/pads lengths do not fit %d spatial dims", nsp);
    g->planes = x->dims[0] * x->dims[1];
    g->in_size = g->out_size = 1;
    for (int d = 0; d < nsp; d++) {
        int64_t in = g->in[d] = x->dims[2 + d];
        int64_t k = g->kernel[d] = p->w.kernel[d];
        int64_t s = g->stride[d] = p->w.n_strides >= 0 ? p->w.strides[d] : 1;
        int64_t dil = g->dilation[d] = p->w.n_dilations >= 0 ? p->w.dilations[d] : 1;
        int64_t pb = p->w.n_pads >= 0 ? p->w.pads[d] : 0, pe = p->w.n_pads >= 0 ? p->w.pads[nsp + d] : 0;
        if (k < 1 || s < 1 || dil < 1 || pb < 0 || pe < 0)
            return nn_call_error(c, NN_ERR_INVALID, "kernel, strides and dilations must be >= 1, pads >= 0");
        /* padding alone would make windows with nothing to pool */
        if (in < 1) return nn_call_error(c, NN_ERR_SHAPE, "spatial dim %d of the input is empty", d);
        int64_t ext = (k - 1) * dil + 1, out, span = in + pb + pe - ext;
        if (p->ceil_mode && p->w.auto_pad == NN_AUTO_PAD_NOTSET) {
            /* the last window may start in the trailing pad, never past it */
            out = span < 0 ? 0 : (span + s - 1) / s + 1;
            if (out > 0 && (out - 1) * s >= in + pb) out--;
        } else {
            out = nn_window_out(p->w.auto_pad, in, ext, s, &pb, &pe);
        }
        if (out < 1)
            return nn_call_error(c, NN_ERR_SHAPE, "spatial dim %d: window %lld does not fit input %lld", d,
                                 (long long)ext, (long long)in);
        g->out[d] = out;
        g->pad[d] = pb;
        g->pad_end[d] = pe;
        g->in_size *= in;
        g->out_size *= out;
    }
    return NN_OK;
}

nn_status nn_pool_resolve(const nn_call *c, nn_pool_geom *g) { return pool_resolve(c, g); }

/* ---- MaxPool and AveragePool are separable: a box max (mean) is a max
 * (mean) along each axis in turn, and ONNX's divisor is a product of per-axis
 * counts.  So both run as one 1-D pass per spatial axis, last axis first; the
 * inner passes move whole contiguous rows and vectorize. */

/* Pooling along one axis of [outer][in_len][inner] into [outer][out_len][inner]. */
typedef struct axis_pass {
    int64_t outer, inner, in_len, out_len;
    int64_t kernel, stride, dilation, pad, pad_end;
    int64_t full_lo, full_hi; /* outputs whose whole window is inside the input */
    bool include_pad;         /* AveragePool count_include_pad */
} axis_pass;

/* One pass's shared state, read by the range function of each AXIS_POOL. */
typedef struct axis_job {
    const axis_pass *a;
    const void *src;
    void *dst;
    bool runs; /* the pass along the contiguous axis, with some windows wholly inside */
} axis_job;

/* One pass.  op(acc, v) folds a tap into the accumulator; `finish` runs once
 * per output row with its valid taps [lo, hi); `finish_full` scales the run
 * d[0..n) of single-element rows whose windows lie wholly inside.  Those
 * (the pass along the contiguous axis) loop over taps outermost, so that the
 * loop over outputs vectorizes. */
#define AXIS_POOL(name, T, empty, op, finish, finish_full)                                                             \
    static void name##_range(void *ctx, int64_t q_lo, int64_t q_hi, int seat) {                                        \
        (void)seat;                                                                                                    \
        const axis_job *aj = ctx;                                                                                      \
        const axis_pass *a = aj->a;                                                                                    \
        const T *src = aj->src;                                                                                        \
        T *dst = aj->dst;                                                                                              \
        bool runs = aj->runs;                                                                                          \
        for (int64_t q = q_lo; q < q_hi; q++) {                                                                        \
            const T *s = src + q * a->in_len * a->inner;                                                               \
            T *d = dst + q * a->out_len * a->inner;                                                                    \
            if (runs) {                                                                                                \
                T *dr = d + a->full_lo;                                                                                \
                const T *sr = s + a->full_lo * a->stride - a->pad;                                                     \
                int64_t n = a->full_hi - a->full_lo;                                                                   \
                for (int64_t o = 0; o < n; o++)                                                                        \
                    dr[o] = sr[o * a->stride];                                                                         \
                for (int64_t k = 1; k < a->kernel; k++)                                                                \
                    for (int64_t o = 0; o < n; o++)                                                                    \
                        dr[o] = op(dr[o], sr[o * a->stride + k * a->dilation]);                                        \
                finish_full;                                                                                           \
            }                                                                                                          \
            for (int64_t o = 0; o < a->out_len; o++) {                                                                 \
                if (runs && o == a->full_lo) { /* done above */                                                        \
                    o = a->full_hi - 1;                                                                                \
                    continue;                                                                                          \
                }                                                                                                      \
                T *dd = d + o * a->inner;                                                                              \
                int64_t start = o * a->stride - a->pad, lo = 0, hi = a->kernel;                                        \
                if (o < a->full_lo || o >= a->full_hi)                                                                 \
                    nn_valid_range(start, a->dilation, a->in_len, a->kernel, &lo, &hi);                                \
                if (lo == hi) {                                                                                        \
                    for (int64_t i = 0; i < a->inner; i++)                                                             \
                        dd[i] = (empty);                                                                               \
                    continue;                                                                                          \
                }                                                                                                      \
                const T *r = s + (start + lo * a->dilation) * a->inner;                                                \
                for (int64_t i = 0; i < a->inner; i++)                                                                 \
                    dd[i] = r[i];                                                                                      \
                for (int64_t k = lo + 1; k < hi; k++) {                                                                \
                    r = s + (start + k * a->dilation) * a->inner;                                                      \
                    for (int64_t i = 0; i < a->inner; i++)                                                             \
                        dd[i] = op(dd[i], r[i]);                                                                       \
                }                                                                                                      \
                finish;                                                                                                \
            }                                                                                                          \
        }                                                                                                              \
    }                                                                                                                  \
    static void name(const axis_pass *a, const void *src_v, void *dst_v, int threads) {                                \
        axis_job j = {.a = a, .src = src_v, .dst = dst_v, .runs = a->inner == 1 && a->full_lo < a->full_hi};           \
        nn_par_for_range(a->outer * a->out_len * a->inner > 16384 ? threads : 1, a->outer, 1, name##_range, &j);       \
    }

#define MAX_OP(acc, v) ((v) > (acc) ? (v) : (acc))
#define SUM_OP(acc, v) ((acc) + (v))

AXIS_POOL(max_axis_f32, float, -INFINITY, MAX_OP, (void)0, (void)0)
AXIS_POOL(max_axis_u8, uint8_t, 0, MAX_OP, (void)0, (void)0)
AXIS_POOL(max_axis_i8, int8_t, INT8_MIN, MAX_OP, (void)0, (void)0)

/* Mean from sum: divide by the valid taps, or with count_include_pad by the
 * taps inside input and pads (but not past the end pad, as in ceil mode). */
static void avg_finish(const axis_pass *a, float *d, int64_t start, int64_t valid) {
    int64_t n = valid, lo, hi;
    if (a->include_pad) {
        nn_valid_range(start + a->pad, a->dilation, a->in_len + a->pad + a->pad_end, a->kernel, &lo, &hi);
        n = hi - lo;
    }
    float scale = 1.0f / (float)n;
    for (int64_t i = 0; i < a->inner; i++)
        d[i] *= scale;
}

static void scale_run(float *d, int64_t n, float scale) {
    for (int64_t i = 0; i < n; i++)
        d[i] *= scale;
}

AXIS_POOL(avg_axis, float, 0.0f, SUM_OP, avg_finish(a, dd, start, hi - lo), scale_run(dr, n, 1.0f / (float)a->kernel))

typedef void (*axis_fn)(const axis_pass *a, const void *src, void *dst, int threads);

/* Elements of the largest intermediate (after the pass on axis j, axes >= j
 * are pooled), and how many intermediate buffers the passes alternate between. */
static int64_t pass_buffer(const pool_geom *g, int *buffers) {
    int64_t most = 0;
    for (int j = g->nsp - 1; j >= 1; j--) {
        int64_t n = g->planes;
        for (int d = 0; d < g->nsp; d++)
            n *= d < j ? g->in[d] : g->out[d];
        if (n > most) most = n;
    }
    *buffers = g->nsp > 2 ? 2 : g->nsp - 1;
    return most;
}

/* Planes pooled together, so that the intermediates stay cache-sized instead
 * of growing with the batch (a whole VGG activation at batch 64 is 400 MB). */
static int64_t planes_per_group(const pool_geom *g) {
    enum { GROUP_BYTES = 1 << 22 };
    pool_geom one = *g;
    one.planes = 1;
    int buffers;
    int64_t per_plane = pass_buffer(&one, &buffers) * buffers * (int64_t)sizeof(float);
    int64_t n = per_plane > 0 ? GROUP_BYTES / per_plane : g->planes;
    return n < 1 ? 1 : (n > g->planes ? g->planes : n);
}

static void pool_planes(const pool_geom *g, axis_fn fn, bool include_pad, const void *x, void *y, void *ws,
                        size_t esize, int threads) {
    int buffers;
    int64_t most = pass_buffer(g, &buffers);
    const void *src = x;
    for (int j = g->nsp - 1; j >= 0; j--) {
        axis_pass a = {.outer = g->planes,
                       .inner = 1,
                       .in_len = g->in[j],
                       .out_len = g->out[j],
                       .kernel = g->kernel[j],
                       .stride = g->stride[j],
                       .dilation = g->dilation[j],
                       .pad = g->pad[j],
                       .pad_end = g->pad_end[j],
                       .include_pad = include_pad};
        for (int d = 0; d < j; d++)
            a.outer *= g->in[d];
        for (int d = j + 1; d < g->nsp; d++)
            a.inner *= g->out[d];
        nn_valid_range(-a.pad, a.stride, a.in_len - (a.kernel - 1) * a.dilation, a.out_len, &a.full_lo, &a.full_hi);
        void *dst = j == 0 ? y : (char *)ws + (size_t)((g->nsp - 1 - j) % buffers) * (size_t)most * esize;
        fn(&a, src, dst, threads);
        src = dst;
    }
}

static void pool_separable(const pool_geom *g, axis_fn fn, bool include_pad, const void *x, void *y, void *ws,
                           size_t esize, int threads) {
    int64_t group = planes_per_group(g);
    size_t in_plane = (size_t)g->in_size * esize, out_plane = (size_t)g->out_size * esize;
    for (int64_t p = 0; p < g->planes; p += group) {
        pool_geom part = *g;
        part.planes = g->planes - p < group ? g->planes - p : group;
        pool_planes(&part, fn, include_pad, (const char *)x + (size_t)p * in_plane, (char *)y + (size_t)p * out_plane,
                    ws, esize, threads);
    }
}

static size_t pool_workspace(const nn_call *c, size_t esize) {
    pool_geom g;
    int buffers;
    if (pool_resolve(c, &g) != NN_OK) return 0;
    g.planes = planes_per_group(&g);
    return (size_t)pass_buffer(&g, &buffers) * (size_t)buffers * esize;
}

/* ---- MaxPool's Indices output: each window scanned whole (argmax does not
 *      separate as cheaply; only asked for by models that unpool later). */

/* The taps of one pooling window that fall inside the input, visited one row
 * (a run along the last spatial dim) at a time. */
typedef struct window {
    const pool_geom *g;
    int64_t start[NSP_MAX], lo[NSP_MAX], hi[NSP_MAX], k[NSP_MAX];
    int64_t row_len; /* taps per row; their stride is the last dilation */
    bool done;
} window;

static void window_init(window *w, const pool_geom *g, const int64_t *pos) {
    w->g = g;
    w->done = false;
    w->row_len = 0; /* pool_resolve gives nsp >= 1, which gcc cannot see */
    for (int d = 0; d < g->nsp; d++) {
        w->start[d] = pos[d] * g->stride[d] - g->pad[d];
        nn_valid_range(w->start[d], g->dilation[d], g->in[d], g->kernel[d], &w->lo[d], &w->hi[d]);
        w->k[d] = w->lo[d];
        if (w->lo[d] == w->hi[d]) w->done = true;
        w->row_len = w->hi[d] - w->lo[d]; /* the last dim's, when the loop ends */
    }
}

/* Offset (within the plane) of the next row's first tap; false once all rows are visited. */
static bool window_row(window *w, int64_t *first) {
    if (w->done) return false;
    const pool_geom *g = w->g;
    int last = g->nsp - 1;
    int64_t off = 0;
    for (int d = 0; d < last; d++)
        off = off * g->in[d] + w->start[d] + w->k[d] * g->dilation[d];
    *first = off * g->in[last] + w->start[last] + w->lo[last] * g->dilation[last];
    int d = last - 1;
    for (; d >= 0; d--) {
        if (++w->k[d] < w->hi[d]) break;
        w->k[d] = w->lo[d];
    }
    if (d < 0) w->done = true;
    return true;
}

/* Row-major offset within a plane -> column-major (MaxPool storage_order 1). */
static int64_t column_major(const pool_geom *g, int64_t i) {
    int64_t coord[NSP_MAX], r = 0, scale = 1;
    for (int d = g->nsp - 1; d >= 0; d--) {
        coord[d] = i % g->in[d];
        i /= g->in[d];
    }
    for (int d = 0; d < g->nsp; d++) {
        r += coord[d] * scale;
        scale *= g->in[d];
    }
    return r;
}

typedef struct max_indices_job {
    const pool_geom *g;
    const float *x;
    float *y;
    int64_t *idx;
    bool col_major;
} max_indices_job;

/* Max and the flat input index of its first occurrence, for planes [lo, hi). */
static void max_indices_range(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    const max_indices_job *mj = ctx;
    const pool_geom *g = mj->g;
    const float *x = mj->x;
    float *y = mj->y;
    int64_t *idx = mj->idx;
    bool col_major = mj->col_major;
    for (int64_t p = lo; p < hi; p++) {
        const float *xp = x + p * g->in_size;
        int64_t pos[NSP_MAX] = {0}, step = g->dilation[g->nsp - 1];
        for (int64_t o = 0; o < g->out_size; o++) {
            window w;
            window_init(&w, g, pos);
            nn_odometer_next(pos, g->out, g->nsp);
            float best = -INFINITY;
            int64_t arg = -1, first;
            while (window_row(&w, &first))
                for (int64_t j = first; j < first + w.row_len * step; j += step)
                    if (arg < 0 || xp[j] > best) {
                        best = xp[j];
                        arg = j;
                    }
            y[p * g->out_size + o] = best;
            idx[p * g->out_size + o] = arg < 0 ? -1 : p * g->in_size + (col_major ? column_major(g, arg) : arg);
        }
    }
}

/* Max and the flat input index of its first occurrence. */
static void max_pool_indices(const pool_geom *g, const float *x, float *y, int64_t *idx, bool col_major, int threads) {
    max_indices_job j = {.g = g, .x = x, .y = y, .idx = idx, .col_major = col_major};
    nn_par_for_range(g->planes * g->out_size > 16384 ? threads : 1, g->planes, 1, max_indices_range, &j);
}

static nn_status infer_max_pool(nn_call *c) {
    nn_dtype dt = c->in[0].dtype;
    if (dt != NN_DTYPE_FLOAT && dt != NN_DTYPE_UINT8 && dt != NN_DTYPE_INT8)
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "dtype %s not supported", nn_dtype_name(dt));
    if (c->n_out > 1 && dt != NN_DTYPE_FLOAT)
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "Indices output supported for float input only");
    pool_geom g;
    nn_status st = pool_resolve(c, &g);
    if (st != NN_OK) return st;
    int64_t dims[NN_MAX_DIMS] = {c->in[0].dims[0], c->in[0].dims[1]};
    for (int d = 0; d < g.nsp; d++)
        dims[2 + d] = g.out[d];
    nn_tensor_set_shape(&c->out[0], dt, g.nsp + 2, dims);
    if (c->n_out > 1) nn_tensor_set_shape(&c->out[1], NN_DTYPE_INT64, g.nsp + 2, dims);
    return NN_OK;
}

static size_t workspace_max_pool(const nn_call *c) { return pool_workspace(c, nn_dtype_size(c->in[0].dtype)); }

/* 2-D float pools a block of output rows at a time, a plane per task (the
 * CNNs' pools).  Per output row, the window's rows that lie inside the
 * input are folded column by column into a row buffer whose columns outside
 * the input hold the empty value (-inf; 0 for a mean); then each output
 * folds kw neighbouring columns of its row buffer (at stride 2, the even
 * ones: see ROW_POOL_VEC).  No padded copy of the plane, and each input
 * row is read once per window that holds it, not once per tap: all pads,
 * ceil mode and any stride.  A mean is divided by its window's count of
 * rows times its count of columns, each counted as axis_pass's avg_finish
 * counts them (the taps inside the input, or with count_include_pad inside
 * input and pads).
 *
 * Each step runs over a block of rows before the next reads them: the
 * rows are short (14 to 112 floats in the CNNs), and a row taken through
 * the steps alone stalled on loads of what it had just stored (a
 * load that straddles two recent stores waits for them to reach the cache).
 * The vector bodies keep a vector in a register across its taps and store
 * it once; the buffers are filled with the empty value once per task and
 * have slack for whole-vector loads and stores past a row's end.  See
 * docs/perf-notes.md, "Pools a block of rows at a time". */
#define ROW_POOL_BLOCK 4096 /* floats of each row buffer (on the stack): wider rows take the separable passes */
/* Floats of a block's row buffers, each: the rows of ResNet's 3x3/2 pool
 * ran 0.83x the time with 2048 than with 8192 (the two buffers in L1). */
#define ROW_POOL_BLOCK_USE 2048

typedef struct row_pool {
    const pool_geom *g;
    const float *x;
    float *y;
    bool include_pad; /* a mean's count_include_pad */
    int64_t row_n;    /* a row buffer's columns: left pad, input, then up to where the last window ends */
    int64_t stride;   /* floats from one row buffer to the next: the halves of a split one, each with slack */
} row_pool;

/* Taps of a window starting at `start` (dilation 1) that the mean counts,
 * as avg_finish counts them. */
static int64_t pool_count(int64_t start, int64_t kernel, int64_t in, int64_t pad, int64_t pad_end, bool include_pad) {
    int64_t lo, hi;
    if (include_pad)
        nn_valid_range(start + pad, 1, in + pad + pad_end, kernel, &lo, &hi);
    else
        nn_valid_range(start, 1, in, kernel, &lo, &hi);
    return hi - lo;
}

static bool row_pool_ok(const pool_geom *g, nn_dtype dtype, row_pool *rp) {
    if (g->nsp != 2 || dtype != NN_DTYPE_FLOAT || g->dilation[0] != 1 || g->dilation[1] != 1) return false;
    int64_t reach = (g->out[1] - 1) * g->stride[1] + g->kernel[1], inner = g->pad[1] + g->in[1];
    rp->row_n = reach > inner ? reach : inner;
    rp->stride = 2 * (nn_round_up((rp->row_n + 1) / 2, 16) + 16);
    return rp->stride <= ROW_POOL_BLOCK;
}

typedef struct row_bufs {
    float rows[ROW_POOL_BLOCK] __attribute__((aligned(64)));   /* the folded window rows */
    float halves[ROW_POOL_BLOCK] __attribute__((aligned(64))); /* stride 2: evens, then odds at stride / 2 */
    float col_scale[ROW_POOL_BLOCK + 16];                      /* a mean's 1 / columns counted, per output */
    float row_scale[ROW_POOL_BLOCK / 16];                      /* and 1 / rows counted, per row of the block */
} row_bufs;

/* The buffers set up for a task (as far as its rows reach), and the rows of a block. */
static int64_t row_bufs_init(row_bufs *b, const row_pool *rp, const bool mean) {
    const pool_geom *g = rp->g;
    int64_t block = ROW_POOL_BLOCK_USE / rp->stride;
    if (block < 1) block = 1;
    if (block > g->out[0]) block = g->out[0];
    for (int64_t c = 0; c < block * rp->stride; c++) {
        b->rows[c] = mean ? 0.0f : -INFINITY;
        b->halves[c] = 0.0f;
    }
    for (int64_t ow = 0; mean && ow < nn_round_up(g->out[1], 16); ow++) {
        int64_t n = pool_count(ow * g->stride[1] - g->pad[1], g->kernel[1], g->in[1], g->pad[1], g->pad_end[1],
                               rp->include_pad);
        b->col_scale[ow] = ow < g->out[1] && n ? 1.0f / (float)n : 0.0f;
    }
    return block;
}

/* Output row oh's window rows inside the input, [*a, *b), and a mean's
 * 1 / rows counted. */
static inline float window_rows(const row_pool *rp, int64_t oh, int64_t *a, int64_t *b) {
    const pool_geom *g = rp->g;
    int64_t r0 = oh * g->stride[0] - g->pad[0], h = g->in[0], lo, hi;
    nn_valid_range(r0, 1, h, g->kernel[0], &lo, &hi);
    *a = r0 + lo;
    *b = r0 + hi;
    int64_t n = pool_count(r0, g->kernel[0], h, g->pad[0], g->pad_end[0], rp->include_pad);
    return n ? 1.0f / (float)n : 0.0f;
}

static inline __attribute__((always_inline)) void row_pool_portable(const row_pool *rp, int64_t lo, int64_t hi,
                                                                    const bool mean) {
    const pool_geom *g = rp->g;
    int64_t w = g->in[1], oh_n = g->out[0], ow_n = g->out[1], kw = g->kernel[1], sw = g->stride[1];
    row_bufs bufs;
    row_bufs_init(&bufs, rp, mean);
    float *buf = bufs.rows, *v = buf + g->pad[1];
    for (int64_t p = lo; p < hi; p++) {
        const float *xp = rp->x + p * g->in_size;
        for (int64_t oh = 0; oh < oh_n; oh++) {
            int64_t a, b;
            float rs = window_rows(rp, oh, &a, &b);
            for (int64_t c = 0; c < w; c++)
                v[c] = mean ? 0.0f : -INFINITY;
            for (int64_t r = a; r < b; r++)
                for (int64_t c = 0; c < w; c++)
                    v[c] = mean ? SUM_OP(v[c], xp[r * w + c]) : MAX_OP(v[c], xp[r * w + c]);
            float *yr = rp->y + p * g->out_size + oh * ow_n;
            for (int64_t ow = 0; ow < ow_n; ow++)
                yr[ow] = buf[ow * sw];
            for (int64_t k = 1; k < kw; k++)
                for (int64_t ow = 0; ow < ow_n; ow++)
                    yr[ow] = mean ? SUM_OP(yr[ow], buf[ow * sw + k]) : MAX_OP(yr[ow], buf[ow * sw + k]);
            for (int64_t ow = 0; mean && ow < ow_n; ow++)
                yr[ow] *= rs * bufs.col_scale[ow];
        }
    }
}

#if NN_HAVE_X86
/* The vector bodies.  V is the vector width; the macros are its loads,
 * stores and folds (MAX_OP(a, b): b > a ? b : a, which max_ps(b, a) is).
 * At stride 2, SPLIT(bufs, rows, stride, half_n) splits each row buffer
 * into its even and odd floats (the halves, odds from stride / 2 on), and
 * TAP2(buf, halves, stride, o, k) is tap k of outputs [o, o + V): with
 * AVX-512 one permute of two loads from the row buffer and no split
 * (0.8-0.9x the time of splitting on Zen 4); with AVX2 a load from the
 * halves (a permute there takes two instructions). */
#define ROW_POOL_VEC(SFX, ATTR, V, VEC, LOADU, STOREU, SET1, MAX, ADD, MUL, LOAD_TAIL, STORE_TAIL, SPLIT, TAP2)        \
    static inline __attribute__((always_inline))                                                                       \
    ATTR void row_pool_##SFX(const row_pool *rp, int64_t lo, int64_t hi, const bool mean) {                            \
        const pool_geom *g = rp->g;                                                                                    \
        int64_t w = g->in[1], oh_n = g->out[0], ow_n = g->out[1], kw = g->kernel[1], sw = g->stride[1];                \
        int64_t pl = g->pad[1], st = rp->stride, half_n = (rp->row_n + 1) / 2;                                         \
        row_bufs bufs;                                                                                                 \
        int64_t block = row_bufs_init(&bufs, rp, mean);                                                                \
        const VEC empty = SET1(mean ? 0.0f : -INFINITY);                                                               \
        for (int64_t p = lo; p < hi; p++) {                                                                            \
            const float *xp = rp->x + p * g->in_size;                                                                  \
            float *yp = rp->y + p * g->out_size;                                                                       \
            for (int64_t o0 = 0; o0 < oh_n; o0 += block) {                                                             \
                int64_t rows = oh_n - o0 < block ? oh_n - o0 : block;                                                  \
                for (int64_t i = 0; i < rows; i++) { /* fold each output row's window rows */                          \
                    int64_t a, b;                                                                                      \
                    bufs.row_scale[i] = window_rows(rp, o0 + i, &a, &b);                                               \
                    float *v = bufs.rows + i * st + pl;                                                                \
                    for (int64_t c = 0; c < w; c += V) {                                                               \
                        VEC acc = empty;                                                                               \
                        for (int64_t r = a; r < b; r++) {                                                              \
                            VEC x = c + V <= w ? LOADU(xp + r * w + c) : LOAD_TAIL(xp + r * w + c, w - c);             \
                            acc = mean ? ADD(acc, x) : MAX(x, acc);                                                    \
                        }                                                                                              \
                        /* the next plane's newest window row, a line at a time (every row of the window:              \
                         * 1.2x the time, the prefetches themselves) */                                                \
                        if (p + 1 < hi) __builtin_prefetch(xp + g->in_size + (b - 1) * w + c, 0, 3);                  \
                        STOREU(v + c, acc);                                                                            \
                    }                                                                                                  \
                    STOREU(v + w, empty); /* the last vector ran past the input's columns */                           \
                }                                                                                                      \
                if (sw == 2) SPLIT(&bufs, rows, st, half_n);                                                           \
                for (int64_t i = 0; i < rows; i++) {                                                                   \
                    const float *buf = bufs.rows + i * st, *halves = bufs.halves + i * st;                             \
                    const VEC rs = SET1(bufs.row_scale[i]);                                                            \
                    float *yr = yp + (o0 + i) * ow_n;                                                                  \
                    for (int64_t o = 0; o < ow_n; o += V) {                                                            \
                        VEC acc;                                                                                       \
                        if (sw <= 2) {                                                                                 \
                            acc = sw == 1 ? LOADU(buf + o) : TAP2(buf, halves, st, o, 0);                              \
                            for (int64_t k = 1; k < kw; k++) {                                                         \
                                VEC x = sw == 1 ? LOADU(buf + o + k) : TAP2(buf, halves, st, o, k);                    \
                                acc = mean ? ADD(acc, x) : MAX(x, acc);                                                \
                            }                                                                                          \
                        } else {                                                                                       \
                            float lane[V];                                                                             \
                            for (int64_t l = 0; l < V; l++) {                                                          \
                                const float *t = buf + (o + l < ow_n ? (o + l) * sw : 0);                              \
                                float s = t[0];                                                                        \
                                for (int64_t k = 1; k < kw; k++)                                                       \
                                    s = mean ? SUM_OP(s, t[k]) : MAX_OP(s, t[k]);                                      \
                                lane[l] = s;                                                                           \
                            }                                                                                          \
                            acc = LOADU(lane);                                                                         \
                        }                                                                                              \
                        if (mean) acc = MUL(acc, MUL(rs, LOADU(bufs.col_scale + o)));                                  \
                        if (o + V <= ow_n)                                                                             \
                            STOREU(yr + o, acc);                                                                       \
                        else                                                                                           \
                            STORE_TAIL(yr + o, acc, ow_n - o);                                                         \
                    }                                                                                                  \
                }                                                                                                      \
            }                                                                                                          \
        }                                                                                                              \
    }

static inline __attribute__((always_inline, target("avx512f"))) __m512 load_tail512(const float *p, int64_t n) {
    return _mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1), p);
}
static inline __attribute__((always_inline, target("avx512f"))) void store_tail512(float *p, __m512 v, int64_t n) {
    _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1), v);
}
/* Tap k of 16 outputs from o on at stride 2: the even floats of the 32 from buf + 2 o + k. */
static inline __attribute__((always_inline, target("avx512f"))) __m512
tap2_avx512(const float *buf, const float *halves, int64_t stride, int64_t o, int64_t k) {
    (void)halves, (void)stride;
    const __m512i evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const float *s = buf + 2 * o + k;
    return _mm512_permutex2var_ps(_mm512_loadu_ps(s), evens, _mm512_loadu_ps(s + 16));
}
static inline void split_none(row_bufs *b, int64_t rows, int64_t stride, int64_t half_n) {
    (void)b, (void)rows, (void)stride, (void)half_n;
}

/* The first n (< 8) floats at p, the rest zero (a masked load: fast on
 * AMD too, where masked stores are not); and the first n lanes of v to p,
 * through a buffer and a short loop (nn_store_first8's memcpy, once per
 * row here, cost more than the row). */
static inline __attribute__((always_inline, target("avx2"))) __m256 load_tail256(const float *p, int64_t n) {
    return _mm256_maskload_ps(p, nn_lanes8(n));
}
static inline __attribute__((always_inline, target("avx2"))) void store_tail256(float *p, __m256 v, int64_t n) {
    float part[8];
    _mm256_storeu_ps(part, v);
    for (int64_t i = 0; i < n; i++)
        p[i] = part[i];
}
/* Each row buffer's floats, 16 at a time, into 8 even and 8 odd ones: per
 * 128-bit half, then the halves in order. */
static inline __attribute__((always_inline, target("avx2"))) void split256(row_bufs *b, int64_t rows, int64_t stride,
                                                                           int64_t half_n) {
    for (int64_t i = 0; i < rows; i++)
        for (int64_t c = 0; c < half_n; c += 8) {
            const float *s = b->rows + i * stride + 2 * c;
            float *e = b->halves + i * stride + c, *o = e + stride / 2;
            __m256 x = _mm256_loadu_ps(s), y = _mm256_loadu_ps(s + 8);
            _mm256_storeu_ps(e, nn_evens8(x, y));
            _mm256_storeu_ps(o, nn_odds8(x, y));
        }
}
/* Tap k of 8 outputs from o on at stride 2, from the halves. */
static inline __attribute__((always_inline, target("avx2"))) __m256 tap2_avx2(const float *buf, const float *halves,
                                                                              int64_t stride, int64_t o, int64_t k) {
    (void)buf;
    return _mm256_loadu_ps(halves + (k & 1) * (stride / 2) + k / 2 + o);
}

ROW_POOL_VEC(avx512, __attribute__((target("avx512f"))), 16, __m512, _mm512_loadu_ps, _mm512_storeu_ps, _mm512_set1_ps,
             _mm512_max_ps, _mm512_add_ps, _mm512_mul_ps, load_tail512, store_tail512, split_none, tap2_avx512)
ROW_POOL_VEC(avx2, __attribute__((target("avx2"))), 8, __m256, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_set1_ps,
             _mm256_max_ps, _mm256_add_ps, _mm256_mul_ps, load_tail256, store_tail256, split256, tap2_avx2)
#endif

#define ROW_POOL_RANGE(NAME, SFX, ATTR, MEAN)                                                                          \
    ATTR static void NAME(void *ctx, int64_t lo, int64_t hi, int seat) {                                               \
        (void)seat;                                                                                                    \
        row_pool_##SFX(ctx, lo, hi, MEAN);                                                                             \
    }
ROW_POOL_RANGE(max_rows_portable, portable, , false)
ROW_POOL_RANGE(mean_rows_portable, portable, , true)
#if NN_HAVE_X86
ROW_POOL_RANGE(max_rows_avx2, avx2, __attribute__((target("avx2"))), false)
ROW_POOL_RANGE(mean_rows_avx2, avx2, __attribute__((target("avx2"))), true)
ROW_POOL_RANGE(max_rows_avx512, avx512, __attribute__((target("avx512f"))), false)
ROW_POOL_RANGE(mean_rows_avx512, avx512, __attribute__((target("avx512f"))), true)
#endif

static void run_row_pool(row_pool *rp, bool mean, int threads) {
    const pool_geom *g = rp->g;
    nn_par_range_fn fn = mean ? NN_ISA_PICK(mean_rows) : NN_ISA_PICK(max_rows);
    nn_par_for_range(g->planes * g->out_size * g->kernel[0] * g->kernel[1] > NN_PAR_MIN ? threads : 1, g->planes, 1, fn,
                     rp);
}

#if NN_HAVE_X86
/* Stride-1 pools that keep the plane's size (GoogLeNet's 3x3/1 pad 1 max
 * pools on 28x28 and smaller planes, Inception-v3's 3x3/1 pad 1 means that
 * count their pads on 17x17 and 8x8): a pass along rows, then one along
 * columns, on the flat plane (window.h). */
static bool pool_flat(const pool_geom *g, nn_dtype dtype, nn_flat_taps *t) {
    if (g->nsp != 2 || dtype != NN_DTYPE_FLOAT || nn_isa_active() != NN_ISA_AVX512) return false;
    for (int d = 0; d < 2; d++)
        if (g->stride[d] != 1 || g->dilation[d] != 1 || g->out[d] != g->in[d]) return false;
    return nn_flat_taps_init(t, g->in[0], g->in[1], g->kernel[0], g->kernel[1], g->pad[0], g->pad[1], 1, 1);
}

/* One pass over a flat plane: taps `step` apart (1: along a row, w: along
 * a column), lanes from `lanes`; the max, or the sum times `scale` (taps
 * outside the plane are zeros: the mean of a stride-1 pool that keeps the
 * plane's size and counts its pads, whose every window holds kh x kw). */
static inline __attribute__((always_inline, target("avx512f"))) void
flat_pass(const nn_flat_taps *t, const float *src, float *dst, int64_t taps, int64_t pad, int64_t step,
          const uint16_t (*lanes)[NN_FLAT_TAPS], const bool mean, float scale) {
    const __m512 empty = _mm512_set1_ps(mean ? 0.0f : -INFINITY);
    for (int64_t v = 0; v < t->vecs; v++) {
        __m512 acc = empty;
        for (int64_t k = 0; k < taps; k++) {
            __m512 x = _mm512_mask_loadu_ps(empty, lanes[v][k], src + v * 16 + (k - pad) * step);
            acc = mean ? _mm512_add_ps(acc, x) : _mm512_max_ps(x, acc); /* MAX_OP: x > acc ? x : acc */
        }
        if (mean && scale != 1.0f) acc = _mm512_mul_ps(acc, _mm512_set1_ps(scale));
        _mm512_mask_storeu_ps(dst + v * 16, nn_flat_lanes(t->n, v), acc);
    }
}

static inline __attribute__((always_inline, target("avx512f"))) void flat_planes(const pool_job *j, int64_t lo,
                                                                                 int64_t hi, const bool mean) {
    const nn_flat_taps *t = j->taps;
    for (int64_t p = lo; p < hi; p++) {
        float rows[NN_FLAT_VECS * 16];
        flat_pass(t, j->x + p * t->n, rows, t->kw, t->pl, 1, t->row_tap, mean, 1.0f);
        flat_pass(t, rows, j->y + p * t->n, t->kh, t->pt, t->w, t->col_tap, mean, 1.0f / (float)(t->kh * t->kw));
    }
}

__attribute__((target("avx512f"))) static void max_flat_range(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    flat_planes(ctx, lo, hi, false);
}

__attribute__((target("avx512f"))) static void mean_flat_range(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    flat_planes(ctx, lo, hi, true);
}

static void pool_flat_planes(const nn_flat_taps *t, bool mean, int64_t planes, const float *x, float *y, int threads) {
    pool_job j = {.taps = t, .x = x, .y = y};
    nn_par_for_range(planes * t->n * (t->kh + t->kw) > 2 * NN_PAR_MIN ? threads : 1, planes, 1,
                     mean ? mean_flat_range : max_flat_range, &j);
}

#endif

/* ---- MaxPool on bytes (uint8 and int8, 2-D, no dilation): per output row
 * the window's input rows folded into one row by an elementwise max, laid
 * in a buffer whose ends hold the type's least value where the pads are (a
 * max ignores them, and a window wholly in the pad gives that value, as the
 * per-axis passes do), then each output the max of its kw bytes there.
 * Both loops run over plain bytes and vectorize; the per-axis passes
 * walked a column at a time (docs/perf-notes.md, "Int8: MaxPool on
 * bytes"). */
enum { BYTE_POOL_ROW = 4096 };

typedef struct byte_pool {
    const pool_geom *g;
    const void *x;
    void *y;
    int64_t row_n; /* the buffer's bytes: left pad, the input row, what the last window reaches past it */
    bool is_signed;
} byte_pool;

static bool byte_pool_ok(const pool_geom *g, nn_dtype dtype, byte_pool *bp) {
    if (g->nsp != 2 || (dtype != NN_DTYPE_UINT8 && dtype != NN_DTYPE_INT8) || g->dilation[0] != 1 ||
        g->dilation[1] != 1)
        return false;
    int64_t reach = (g->out[1] - 1) * g->stride[1] + g->kernel[1], inner = g->pad[1] + g->in[1];
    bp->row_n = reach > inner ? reach : inner;
    bp->is_signed = dtype == NN_DTYPE_INT8;
    return bp->row_n <= BYTE_POOL_ROW;
}

/* out[o] = max over k < kw of row[o * s + k] */
#define BYTE_POOL_COLS(T, out_, row_, ow_, kw_, s_)                                                                    \
    do {                                                                                                               \
        T *restrict out = (out_);                                                                                      \
        const T *restrict src = (row_);                                                                                \
        for (int64_t o = 0; o < (ow_); o++)                                                                            \
            out[o] = src[o * (s_)];                                                                                    \
        for (int64_t k = 1; k < (kw_); k++)                                                                            \
            for (int64_t o = 0; o < (ow_); o++) {                                                                      \
                T v = src[o * (s_) + k];                                                                               \
                out[o] = v > out[o] ? v : out[o];                                                                      \
            }                                                                                                          \
    } while (0)

#define BYTE_POOL(name, T, least)                                                                                      \
    static void name(const byte_pool *bp, int64_t lo, int64_t hi) {                                                    \
        const pool_geom *g = bp->g;                                                                                    \
        int64_t ih = g->in[0], iw = g->in[1], oh = g->out[0], ow = g->out[1], kh = g->kernel[0], kw = g->kernel[1];    \
        int64_t sh = g->stride[0], sw = g->stride[1], pt = g->pad[0], pl = g->pad[1];                                 \
        T row[BYTE_POOL_ROW];                                                                                          \
        for (int64_t c = 0; c < bp->row_n; c++)                                                                        \
            row[c] = (least);                                                                                          \
        for (int64_t pn = lo; pn < hi; pn++) {                                                                         \
            const T *x = (const T *)bp->x + pn * g->in_size;                                                           \
            T *y = (T *)bp->y + pn * g->out_size;                                                                      \
            for (int64_t r = 0; r < oh; r++, y += ow) {                                                                \
                int64_t r0 = r * sh - pt, r1 = r0 + kh;                                                                \
                if (r0 < 0) r0 = 0;                                                                                    \
                if (r1 > ih) r1 = ih;                                                                                  \
                T *restrict m = row + pl;                                                                              \
                if (r0 >= r1) { /* the window is all pad */                                                            \
                    for (int64_t o = 0; o < ow; o++)                                                                   \
                        y[o] = (least);                                                                                \
                    continue;                                                                                          \
                }                                                                                                      \
                memcpy(m, x + r0 * iw, (size_t)iw * sizeof(T));                                                        \
                for (int64_t i = r0 + 1; i < r1; i++) {                                                                \
                    const T *restrict s = x + i * iw;                                                                  \
                    for (int64_t c = 0; c < iw; c++)                                                                   \
                        m[c] = s[c] > m[c] ? s[c] : m[c];                                                              \
                }                                                                                                      \
                /* strides 1 and 2 as constants: the loads then vectorize */                                           \
                if (sw == 1) BYTE_POOL_COLS(T, y, row, ow, kw, 1);                                                     \
                else if (sw == 2)                                                                                      \
                    BYTE_POOL_COLS(T, y, row, ow, kw, 2);                                                              \
                else                                                                                                   \
                    BYTE_POOL_COLS(T, y, row, ow, kw, sw);                                                             \
            }                                                                                                          \
        }                                                                                                              \
    }

BYTE_POOL(byte_pool_u8, uint8_t, 0)
BYTE_POOL(byte_pool_i8, int8_t, INT8_MIN)

static void byte_pool_range(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    const byte_pool *bp = ctx;
    if (bp->is_signed) byte_pool_i8(bp, lo, hi);
    else
        byte_pool_u8(bp, lo, hi);
}

static nn_status run_max_pool(nn_call *c) {
    const pool_params *p = c->params;
    pool_geom g;
    nn_status st = pool_resolve(c, &g);
    if (st != NN_OK) return st;
    if (c->n_out > 1 && c->out[1].data) {
        max_pool_indices(&g, c->in[0].data, c->out[0].data, c->out[1].data, p->storage_order == 1, c->threads);
        return NN_OK;
    }
#if NN_HAVE_X86
    nn_flat_taps flat;
    if (pool_flat(&g, c->in[0].dtype, &flat)) {
        pool_flat_planes(&flat, false, g.planes, c->in[0].data, c->out[0].data, c->threads);
        return NN_OK;
    }
#endif
    row_pool rp = {.g = &g, .x = c->in[0].data, .y = c->out[0].data};
    if (row_pool_ok(&g, c->in[0].dtype, &rp)) {
        run_row_pool(&rp, false, c->threads);
        return NN_OK;
    }
    byte_pool bp = {.g = &g, .x = c->in[0].data, .y = c->out[0].data};
    if (byte_pool_ok(&g, c->in[0].dtype, &bp)) {
        nn_par_for_range(g.planes * g.in_size > NN_PAR_MIN ? c->threads : 1, g.planes, 1, byte_pool_range, &bp);
        return NN_OK;
    }
    size_t esize = nn_dtype_size(c->in[0].dtype);
    if (c->workspace_size < pool_workspace(c, esize))
        return nn_call_error(c, NN_ERR_INTERNAL, "pool workspace too small");
    axis_fn fn = c->in[0].dtype == NN_DTYPE_UINT8  ? max_axis_u8
                 : c->in[0].dtype == NN_DTYPE_INT8 ? max_axis_i8
                                                   : max_axis_f32;
    pool_separable(&g, fn, false, c->in[0].data, c->out[0].data, c->workspace, esize, c->threads);
    return NN_OK;
}

static nn_status infer_float_pool(nn_call *c) {
    if (c->in[0].dtype != NN_DTYPE_FLOAT)
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "dtype %s not supported (float only)",
                             nn_dtype_name(c->in[0].dtype));
    return infer_max_pool(c);
}

static size_t workspace_average_pool(const nn_call *c) { return pool_workspace(c, sizeof(float)); }

static nn_status run_average_pool(nn_call *c) {
    const pool_params *p = c->params;
    pool_geom g;
    nn_status st = pool_resolve(c, &g);
    if (st != NN_OK) return st;
#if NN_HAVE_X86
    nn_flat_taps flat;
    if (p->count_include_pad && pool_flat(&g, c->in[0].dtype, &flat)) {
        pool_flat_planes(&flat, true, g.planes, c->in[0].data, c->out[0].data, c->threads);
        return NN_OK;
    }
#endif
    row_pool rp = {.g = &g, .x = c->in[0].data, .y = c->out[0].data, .include_pad = p->count_include_pad != 0};
    if (row_pool_ok(&g, c->in[0].dtype, &rp)) {
        run_row_pool(&rp, true, c->threads);
        return NN_OK;
    }
    if (c->workspace_size < pool_workspace(c, sizeof(float)))
        return nn_call_error(c, NN_ERR_INTERNAL, "pool workspace too small");
    pool_separable(&g, avg_axis, p->count_include_pad != 0, c->in[0].data, c->out[0].data, c->workspace, sizeof(float),
                   c->threads);
    return NN_OK;
}

/* ---- global pooling: one value per (image, channel) plane */

static nn_status infer_global_pool(nn_call *c) {
    const nn_tensor *x = &c->in[0];
    if (x->dtype != NN_DTYPE_FLOAT)
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "dtype %s not supported (float only)", nn_dtype_name(x->dtype));
    if (x->ndim < 2) return nn_call_error(c, NN_ERR_SHAPE, "input must have rank >= 2, got %d", x->ndim);
    int64_t dims[NN_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++)
        dims[d] = d < 2 ? x->dims[d] : 1;
    nn_tensor_set_shape(&c->out[0], NN_DTYPE_FLOAT, x->ndim, dims);
    return NN_OK;
}

/* Sum and max of a plane over 8 independent lanes, so that the loops vectorize. */
static double plane_sum(const float *x, int64_t n) {
    float lane[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++)
            lane[l] += x[i + l];
    double s = 0.0;
    for (int l = 0; l < 8; l++)
        s += lane[l];
    for (; i < n; i++)
        s += x[i];
    return s;
}

static float plane_max(const float *x, int64_t n) {
    float lane[8], m = -INFINITY;
    for (int l = 0; l < 8; l++)
        lane[l] = -INFINITY;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++)
            lane[l] = x[i + l] > lane[l] ? x[i + l] : lane[l];
    for (; i < n; i++)
        m = x[i] > m ? x[i] : m;
    for (int l = 0; l < 8; l++)
        m = lane[l] > m ? lane[l] : m;
    return m;
}

typedef struct global_job {
    const float *x;
    float *y;
    int64_t n;
} global_job;

#define GLOBAL_POOL(Name, reduce)                                                                                      \
    static void Name##_range(void *ctx, int64_t lo, int64_t hi, int seat) {                                            \
        (void)seat;                                                                                                    \
        const global_job *j = ctx;                                                                                     \
        int64_t n = j->n;                                                                                              \
        for (int64_t p = lo; p < hi; p++) {                                                                            \
            const float *xp = j->x + p * n;                                                                            \
            j->y[p] = (reduce);                                                                                        \
        }                                                                                                              \
    }                                                                                                                  \
    static nn_status run_##Name(nn_call *c) {                                                                          \
        const nn_tensor *x = &c->in[0];                                                                                \
        int64_t planes = x->dims[0] * x->dims[1], n = nn_shape_elements(x->dims + 2, x->ndim - 2);                     \
        global_job j = {.x = x->data, .y = c->out[0].data, .n = n};                                                    \
        nn_par_for_range(planes *n > NN_PAR_MIN ? c->threads : 1, planes, 1, Name##_range, &j);                        \
        return NN_OK;                                                                                                  \
    }                                                                                                                  \
    const nn_op_desc nn_op_##Name = {.name = #Name,                                                                    \
                                     .min_inputs = 1,                                                                  \
                                     .max_inputs = 1,                                                                  \
                                     .min_outputs = 1,                                                                 \
                                     .max_outputs = 1,                                                                 \
                                     .infer = infer_global_pool,                                                       \
                                     .run = run_##Name};

GLOBAL_POOL(GlobalAveragePool, n > 0 ? (float)(plane_sum(xp, n) / (double)n) : 0.0f)
GLOBAL_POOL(GlobalMaxPool, plane_max(xp, n))

/* GlobalAveragePoolNhwc (made by passes/layout_nhwc.c): GlobalAveragePool
 * of a channels-last x [N, H, W, C] into [N, C, 1, 1], which is the same
 * bytes in either layout.  Each channel is summed as plane_sum sums an
 * NCHW plane, the same float additions in the same order (position p into
 * lane p % 8, the lanes then the last n % 8 positions in double), so the
 * output is GlobalAveragePool's bit for bit; vectorized across channels. */
enum { GAP_NHWC_BLOCK = 64 }; /* channels per task */

typedef struct gap_nhwc_job {
    const float *x;
    float *y;
    int64_t n, c, blocks; /* positions per image, channels, blocks per image */
} gap_nhwc_job;

static void gap_nhwc_range(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    const gap_nhwc_job *j = ctx;
    int64_t n = j->n, n8 = n / 8 * 8, C = j->c;
    for (int64_t t = lo; t < hi; t++) {
        int64_t img = t / j->blocks, c0 = t % j->blocks * GAP_NHWC_BLOCK;
        int64_t nc = C - c0 < GAP_NHWC_BLOCK ? C - c0 : GAP_NHWC_BLOCK;
        const float *x = j->x + img * n * C + c0;
        float lane[8][GAP_NHWC_BLOCK] = {{0}};
        for (int64_t p = 0; p < n8; p += 8)
            for (int l = 0; l < 8; l++)
                for (int64_t k = 0; k < nc; k++)
                    lane[l][k] += x[(p + l) * C + k];
        for (int64_t k = 0; k < nc; k++) {
            double s = 0.0;
            for (int l = 0; l < 8; l++)
                s += lane[l][k];
            for (int64_t p = n8; p < n; p++)
                s += x[p * C + k];
            j->y[img * C + c0 + k] = n > 0 ? (float)(s / (double)n) : 0.0f;
        }
    }
}

static nn_status infer_gap_nhwc(nn_call *c) {
    const nn_tensor *x = &c->in[0];
    if (x->dtype != NN_DTYPE_FLOAT || x->ndim != 4)
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "x must be a 4-D float tensor [N, H, W, C]");
    int64_t dims[4] = {x->dims[0], x->dims[3], 1, 1};
    nn_tensor_set_shape(&c->out[0], NN_DTYPE_FLOAT, 4, dims);
    return NN_OK;
}

static nn_status run_gap_nhwc(nn_call *c) {
    const nn_tensor *x = &c->in[0];
    int64_t n = x->dims[1] * x->dims[2], C = x->dims[3], blocks = (C + GAP_NHWC_BLOCK - 1) / GAP_NHWC_BLOCK;
    gap_nhwc_job j = {.x = x->data, .y = c->out[0].data, .n = n, .c = C, .blocks = blocks};
    int64_t tasks = x->dims[0] * blocks;
    nn_par_for_range(tasks * n * GAP_NHWC_BLOCK > NN_PAR_MIN ? c->threads : 1, tasks, 1, gap_nhwc_range, &j);
    return NN_OK;
}

const nn_op_desc nn_op_GlobalAveragePoolNhwc = {.name = "GlobalAveragePoolNhwc",
                                                .flags = NN_OPF_INTERNAL,
                                                .min_inputs = 1,
                                                .max_inputs = 1,
                                                .min_outputs = 1,
                                                .max_outputs = 1,
                                                .infer = infer_gap_nhwc,
                                                .run = run_gap_nhwc};

const nn_op_desc nn_op_MaxPool = {.name = "MaxPool",
                                  .min_inputs = 1,
                                  .max_inputs = 1,
                                  .min_outputs = 1,
                                  .max_outputs = 2,
                                  .parse = parse_pool,
                                  .check = pool_check,
                                  .infer = infer_max_pool,
                                  .workspace = workspace_max_pool,
                                  .run = run_max_pool};
const nn_op_desc nn_op_AveragePool = {.name = "AveragePool",
                                      .min_inputs = 1,
                                      .max_inputs = 1,
                                      .min_outputs = 1,
                                      .max_outputs = 1,
                                      .parse = parse_pool,
                                      .check = pool_check,
                                      .infer = infer_float_pool,
                                      .workspace = workspace_average_pool,
                                      .run = run_average_pool};
