/* Einsum: a general contraction over labelled dims (FLOAT or DOUBLE).
 *
 * The equation is kept as text in the params and parsed again wherever it
 * is needed (it is short), so params read back from the plan cache are
 * checked by the same parser.  Every label gets one size; an input's stride
 * for a label is the sum of the strides of the dims it names, which makes a
 * repeated label (ii) walk the diagonal.  "..." stands for the same trailing
 * run of dims in every term, numpy-broadcast across inputs.  Without "->"
 * the output is the ellipsis dims, then the letters named once in all, in
 * ASCII order.  Each output element sums, in double, the product of the
 * inputs over every label the output leaves out; two inputs run as a
 * batched GEMM instead (einsum_gemm), in the inputs' own dtype. */
#include <stdio.h>
#include <string.h>

#include "op.h"
#include "par.h"

#define EINSUM_EQ_MAX   256
#define EINSUM_MAX_IN   8
#define EINSUM_LETTERS  52                             /* A-Z, a-z */
#define EINSUM_LABELS   (EINSUM_LETTERS + NN_MAX_DIMS) /* then the ellipsis dims */
#define EINSUM_ELLIPSIS (-1)

typedef struct einsum_params {
    char equation[EINSUM_EQ_MAX]; /* NUL-terminated */
} einsum_params;

/* One term: its letters (label codes) in order, EINSUM_ELLIPSIS where "..." stands. */
typedef struct einsum_term {
    int n;
    int8_t label[NN_MAX_DIMS + 1];
} einsum_term;

typedef struct einsum_spec {
    int n_in;
    bool explicit_out;
    einsum_term in[EINSUM_MAX_IN], out;
} einsum_spec;

static int letter_code(char ch) {
    if (ch >= 'A' && ch <= 'Z') return ch - 'A';
    if (ch >= 'a' && ch <= 'z') return 26 + ch - 'a';
    return -1;
}

/* Parses eq into s; false with a message in err when it is malformed. */
static bool einsum_parse(const char *eq, einsum_spec *s, char *err, size_t err_size) {
    memset(s, 0, sizeof *s);
    einsum_term *t = &s->in[0];
    s->n_in = 1;
    bool has_ell = false;
    for (const char *q = eq; *q; q++) {
        if (*q == ' ') continue;
        if (*q == ',' || (q[0] == '-' && q[1] == '>')) {
            if (s->explicit_out) {
                snprintf(err, err_size, "equation '%s': '%c' after '->'", eq, *q);
                return false;
            }
            if (*q == ',') {
                if (s->n_in == EINSUM_MAX_IN) {
                    snprintf(err, err_size, "equation '%s': more than %d inputs", eq, EINSUM_MAX_IN);
                    return false;
                }
                t = &s->in[s->n_in++];
            } else {
                s->explicit_out = true;
                t = &s->out;
                q++;
            }
            has_ell = false;
            continue;
        }
        int code = EINSUM_ELLIPSIS;
        if (q[0] == '.') {
            if (q[1] != '.' || q[2] != '.' || has_ell) {
                snprintf(err, err_size, "equation '%s': '.' not in a single '...' per term", eq);
                return false;
            }
            has_ell = true;
            q += 2;
        } else if ((code = letter_code(*q)) < 0) {
            snprintf(err, err_size, "equation '%s': unexpected character '%c'", eq, *q);
            return false;
        }
        if (t->n == NN_MAX_DIMS + 1) {
            snprintf(err, err_size, "equation '%s': a term names more than %d dims", eq, NN_MAX_DIMS);
            return false;
        }
        t->label[t->n++] = (int8_t)code;
    }
    for (int i = 0; i < s->out.n; i++)
        for (int j = 0; j < i; j++)
            if (s->out.label[i] == s->out.label[j]) {
                snprintf(err, err_size, "equation '%s': output names a label twice", eq);
                return false;
            }
    return true;
}

static nn_status parse_Einsum(nn_parse_ctx *ctx) {
    einsum_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    const char *eq;
    nn_status st = nn_attr_string(ctx, "equation", NULL, &eq);
    if (st != NN_OK) return st;
    if (!eq) return nn_parse_error(ctx, NN_ERR_INVALID, "attribute 'equation' is required");
    if (strlen(eq) >= EINSUM_EQ_MAX)
        return nn_parse_error(ctx, NN_ERR_UNSUPPORTED, "equation longer than %d characters", EINSUM_EQ_MAX - 1);
    strcpy(p->equation, eq);
    einsum_spec s;
    if (!einsum_parse(eq, &s, ctx->err, ctx->err_size)) return NN_ERR_INVALID;
    return NN_OK;
}

static nn_status check_Einsum(const void *params, char *err, size_t err_size) {
    const einsum_params *p = params;
    if (!memchr(p->equation, 0, EINSUM_EQ_MAX)) {
        snprintf(err, err_size, "equation is not terminated");
        return NN_ERR_INVALID;
    }
    einsum_spec s;
    return einsum_parse(p->equation, &s, err, err_size) ? NN_OK : NN_ERR_INVALID;
}

/* The equation resolved against the input shapes. */
typedef struct einsum_plan {
    int n_out, n_sum;              /* output labels, then summed ones */
    int64_t out_size[NN_MAX_DIMS]; /* output dims */
    int64_t sum_size[EINSUM_LABELS];
    int64_t out_stride[EINSUM_MAX_IN][NN_MAX_DIMS]; /* per input, along each output label */
    int64_t sum_stride[EINSUM_MAX_IN][EINSUM_LABELS];
    int64_t sum_total;
} einsum_plan;

static nn_status einsum_resolve(const nn_call *c, einsum_plan *pl) {
    const einsum_params *p = c->params;
    einsum_spec s;
    if (!einsum_parse(p->equation, &s, c->err, c->err_size)) return NN_ERR_INVALID;
    if (s.n_in != c->n_in)
        return nn_call_error(c, NN_ERR_INVALID, "equation has %d inputs, the node %d", s.n_in, c->n_in);
    /* each input's dims as label codes; the ellipsis dims right-aligned */
    int8_t lab[EINSUM_MAX_IN][NN_MAX_DIMS];
    int ell_rank = 0;
    for (int k = 0; k < s.n_in; k++) {
        const nn_tensor *x = &c->in[k];
        if (x->dtype != NN_DTYPE_FLOAT && x->dtype != NN_DTYPE_DOUBLE)
            return nn_call_error(c, NN_ERR_UNSUPPORTED, "input %d: dtype %s not supported (FLOAT, DOUBLE)", k,
                                 nn_dtype_name(x->dtype));
        if (x->dtype != c->in[0].dtype)
            return nn_call_error(c, NN_ERR_INVALID, "input %d is %s, input 0 %s", k, nn_dtype_name(x->dtype),
                                 nn_dtype_name(c->in[0].dtype));
        bool ell = memchr(s.in[k].label, EINSUM_ELLIPSIS, (size_t)s.in[k].n) != NULL;
        int letters = s.in[k].n - ell, ell_dims = x->ndim - letters;
        if (ell ? ell_dims < 0 : ell_dims != 0)
            return nn_call_error(c, NN_ERR_SHAPE, "input %d has rank %d, its term names %d dims", k, x->ndim, letters);
        if (ell_dims > ell_rank) ell_rank = ell_dims;
    }
    for (int k = 0; k < s.n_in; k++) {
        int d = 0, ell_dims = c->in[k].ndim - (s.in[k].n - 1);
        for (int i = 0; i < s.in[k].n; i++) {
            if (s.in[k].label[i] != EINSUM_ELLIPSIS) {
                lab[k][d++] = s.in[k].label[i];
                continue;
            }
            for (int e = 0; e < ell_dims; e++)
                lab[k][d++] = (int8_t)(EINSUM_LETTERS + ell_rank - ell_dims + e);
        }
    }
    /* one size per label: letters must agree, ellipsis dims broadcast from 1 */
    int64_t size[EINSUM_LABELS];
    int count[EINSUM_LABELS] = {0};
    for (int l = 0; l < EINSUM_LABELS; l++)
        size[l] = -1;
    for (int k = 0; k < s.n_in; k++)
        for (int d = 0; d < c->in[k].ndim; d++) {
            int l = lab[k][d];
            int64_t n = c->in[k].dims[d];
            count[l]++;
            if (size[l] < 0 || (l >= EINSUM_LETTERS && size[l] == 1))
                size[l] = n;
            else if (n != size[l] && !(l >= EINSUM_LETTERS && n == 1))
                return nn_call_error(c, NN_ERR_SHAPE, "input %d dim %d is %lld, its label is %lld elsewhere", k, d,
                                     (long long)n, (long long)size[l]);
        }
    /* the output labels */
    int8_t out[NN_MAX_DIMS + EINSUM_LETTERS];
    int n_out = 0;
    bool in_out[EINSUM_LABELS] = {false};
    if (s.explicit_out) {
        for (int i = 0; i < s.out.n; i++) {
            int l = s.out.label[i];
            if (l == EINSUM_ELLIPSIS) {
                for (int e = 0; e < ell_rank; e++)
                    out[n_out++] = (int8_t)(EINSUM_LETTERS + e);
            } else if (count[l] == 0) {
                return nn_call_error(c, NN_ERR_INVALID, "output label '%c' is in no input",
                                     l < 26 ? 'A' + l : 'a' + l - 26);
            } else {
                out[n_out++] = (int8_t)l;
            }
        }
    } else {
        for (int e = 0; e < ell_rank; e++)
            out[n_out++] = (int8_t)(EINSUM_LETTERS + e);
        for (int l = 0; l < EINSUM_LETTERS; l++)
            if (count[l] == 1) out[n_out++] = (int8_t)l;
    }
    if (n_out > NN_MAX_DIMS) return nn_call_error(c, NN_ERR_UNSUPPORTED, "output rank %d above %d", n_out, NN_MAX_DIMS);
    memset(pl, 0, sizeof *pl);
    pl->n_out = n_out;
    for (int i = 0; i < n_out; i++) {
        pl->out_size[i] = size[out[i]];
        in_out[out[i]] = true;
    }
    /* per input, each label's stride: the sum over the dims it names; 0 where broadcast */
    int64_t stride[EINSUM_MAX_IN][EINSUM_LABELS] = {{0}};
    for (int k = 0; k < s.n_in; k++) {
        int64_t st = 1;
        for (int d = c->in[k].ndim - 1; d >= 0; d--) {
            if (c->in[k].dims[d] == size[lab[k][d]]) stride[k][lab[k][d]] += st;
            st *= c->in[k].dims[d];
        }
        for (int i = 0; i < n_out; i++)
            pl->out_stride[k][i] = stride[k][out[i]];
    }
    pl->sum_total = 1;
    for (int l = 0; l < EINSUM_LABELS; l++) {
        if (count[l] == 0 || in_out[l]) continue;
        pl->sum_size[pl->n_sum] = size[l];
        for (int k = 0; k < s.n_in; k++)
            pl->sum_stride[k][pl->n_sum] = stride[k][l];
        pl->sum_total *= size[l];
        pl->n_sum++;
    }
    return NN_OK;
}

static nn_status infer_Einsum(nn_call *c) {
    einsum_plan pl;
    nn_status st = einsum_resolve(c, &pl);
    if (st == NN_OK) nn_tensor_set_shape(&c->out[0], c->in[0].dtype, pl.n_out, pl.out_size);
    return st;
}

/* Two inputs: the contraction as a batched GEMM on dense copies, when
 * those copies stay small.  Output labels both inputs vary along are batch
 * dims, those only B varies along are N, the rest M; every summed label is
 * K (one that only A has is summed against B's broadcast copy, which is the
 * same sum).  A is copied as [batch, M, K], B as [batch, K, N]; C [batch,
 * M, N] is then copied out in the output's label order. */
typedef struct einsum_gemm {
    int na, nb; /* view ranks of A and B */
    int64_t a_dims[VIEW_MAX_DIMS], a_str[VIEW_MAX_DIMS];
    int64_t b_dims[VIEW_MAX_DIMS], b_str[VIEW_MAX_DIMS];
    int64_t c_str[NN_MAX_DIMS]; /* C's stride along each output label */
    int64_t batch, m, n, k;
} einsum_gemm;

/* elements of the three dense copies */
static int64_t einsum_gemm_floats(const einsum_gemm *g) { return g->batch * (g->m * g->k + g->k * g->n + g->m * g->n); }

static bool einsum_gemm_plan(const nn_call *c, const einsum_plan *pl, einsum_gemm *g) {
    if (c->n_in != 2) return false;
    enum { BATCH, M, N };
    int kind[NN_MAX_DIMS], counts[3] = {0};
    for (int i = 0; i < pl->n_out; i++) {
        bool a = pl->out_stride[0][i] != 0, b = pl->out_stride[1][i] != 0;
        kind[i] = a && b ? BATCH : b ? N : M;
        counts[kind[i]]++;
    }
    if (counts[BATCH] + counts[M] + pl->n_sum > VIEW_MAX_DIMS || counts[BATCH] + counts[N] + pl->n_sum > VIEW_MAX_DIMS)
        return false;
    memset(g, 0, sizeof *g);
    g->batch = g->m = g->n = g->k = 1;
    int64_t *size_of[3] = {&g->batch, &g->m, &g->n};
    for (int i = 0; i < pl->n_out; i++)
        *size_of[kind[i]] *= pl->out_size[i];
    for (int j = 0; j < pl->n_sum; j++)
        g->k *= pl->sum_size[j];
    /* C's strides: within each group, later labels are inner */
    int64_t inner[3] = {g->m * g->n, g->n, 1};
    for (int i = pl->n_out - 1; i >= 0; i--) {
        g->c_str[i] = inner[kind[i]];
        inner[kind[i]] *= pl->out_size[i];
    }
    for (int grp = BATCH; grp <= N; grp++) /* A: batch, M; B: batch, then N after K */
        for (int i = 0; i < pl->n_out; i++) {
            if (kind[i] != grp) continue;
            if (grp != N) {
                g->a_dims[g->na] = pl->out_size[i];
                g->a_str[g->na++] = pl->out_stride[0][i];
            }
            if (grp == BATCH) {
                g->b_dims[g->nb] = pl->out_size[i];
                g->b_str[g->nb++] = pl->out_stride[1][i];
            }
        }
    for (int j = 0; j < pl->n_sum; j++) {
        g->a_dims[g->na] = g->b_dims[g->nb] = pl->sum_size[j];
        g->a_str[g->na++] = pl->sum_stride[0][j];
        g->b_str[g->nb++] = pl->sum_stride[1][j];
    }
    for (int i = 0; i < pl->n_out; i++)
        if (kind[i] == N) {
            g->b_dims[g->nb] = pl->out_size[i];
            g->b_str[g->nb++] = pl->out_stride[1][i];
        }
    /* worth it only while the copies stay near the size of the data itself */
    int64_t data =
        nn_tensor_elements(&c->in[0]) + nn_tensor_elements(&c->in[1]) + nn_shape_elements(pl->out_size, pl->n_out);
    return einsum_gemm_floats(g) <= 4 * data + 65536;
}

static size_t workspace_Einsum(const nn_call *c) {
    einsum_plan pl;
    einsum_gemm g;
    if (einsum_resolve(c, &pl) != NN_OK || !einsum_gemm_plan(c, &pl, &g)) return 0;
    return nn_dtype_size(c->in[0].dtype) * (size_t)einsum_gemm_floats(&g);
}

/* One GEMM's dense copies and sizes, read by the range functions of EINSUM_GEMM. */
typedef struct gemm_job {
    const void *ap, *bp;
    void *cp;
    int64_t m, n, k;
} gemm_job;

/* The GEMM path for element type T (c's workspace holds the three copies);
 * name##_range computes rows [r_lo, r_hi) of C. */
#define EINSUM_GEMM(name, T)                                                                                           \
    static void name##_range(void *ctx, int64_t r_lo, int64_t r_hi, int seat) {                                        \
        (void)seat;                                                                                                    \
        const gemm_job *gj = ctx;                                                                                      \
        const T *ap = gj->ap, *bp = gj->bp;                                                                            \
        T *cp = gj->cp;                                                                                                \
        int64_t m = gj->m, n = gj->n, k = gj->k;                                                                       \
        for (int64_t r = r_lo; r < r_hi; r++) {                                                                        \
            const T *a = ap + r * k, *b = bp + r / m * k * n;                                                          \
            T *y = cp + r * n;                                                                                         \
            for (int64_t j = 0; j < n; j++)                                                                            \
                y[j] = 0;                                                                                              \
            for (int64_t t = 0; t < k; t++) {                                                                          \
                T av = a[t];                                                                                           \
                const T *br = b + t * n;                                                                               \
                for (int64_t j = 0; j < n; j++)                                                                        \
                    y[j] += av * br[j];                                                                                \
            }                                                                                                          \
        }                                                                                                              \
    }                                                                                                                  \
    static void name(nn_call *c, const einsum_plan *pl, const einsum_gemm *g) {                                        \
        T *ap = c->workspace, *bp = ap + g->batch * g->m * g->k, *cp = bp + g->batch * g->k * g->n;                    \
        nn_copy_strided(ap, c->in[0].data, sizeof(T), g->na, g->a_dims, g->a_str, c->threads);                         \
        nn_copy_strided(bp, c->in[1].data, sizeof(T), g->nb, g->b_dims, g->b_str, c->threads);                         \
        int64_t rows = g->batch * g->m, m = g->m, n = g->n, k = g->k;                                                  \
        gemm_job j = {.ap = ap, .bp = bp, .cp = cp, .m = m, .n = n, .k = k};                                           \
        nn_par_for_range(rows * n * k > 32768 ? c->threads : 1, rows, 4096 / (n * k > 0 ? n * k : 1), name##_range,    \
                         &j);                                                                                          \
        nn_copy_strided(c->out[0].data, cp, sizeof(T), pl->n_out, pl->out_size, g->c_str, c->threads);                 \
    }

EINSUM_GEMM(einsum_gemm_f64, double)
EINSUM_GEMM(einsum_gemm_f32, float)

static void einsum_run_gemm(nn_call *c, const einsum_plan *pl, const einsum_gemm *g) {
    if (c->in[0].dtype == NN_DTYPE_DOUBLE)
        einsum_gemm_f64(c, pl, g);
    else
        einsum_gemm_f32(c, pl, g);
}

/* What the range functions of EINSUM_DIRECT read. */
typedef struct direct_job {
    const nn_call *c;
    const einsum_plan *pl;
} direct_job;

/* The direct path for element type T: every output element sums its products in double.
 * name##_range computes output elements [o_lo, o_hi). */
#define EINSUM_DIRECT(name, T)                                                                                         \
    static void name##_range(void *ctx, int64_t o_lo, int64_t o_hi, int seat) {                                        \
        (void)seat;                                                                                                    \
        const direct_job *dj = ctx;                                                                                    \
        const nn_call *c = dj->c;                                                                                      \
        const einsum_plan pl = *dj->pl;                                                                                \
        int n_in = c->n_in;                                                                                            \
        const T *x[EINSUM_MAX_IN];                                                                                     \
        for (int k = 0; k < n_in; k++)                                                                                 \
            x[k] = c->in[k].data;                                                                                      \
        T *y = c->out[0].data;                                                                                         \
        for (int64_t o = o_lo; o < o_hi; o++) {                                                                        \
            int64_t off[EINSUM_MAX_IN] = {0}, rem = o;                                                                 \
            for (int i = pl.n_out - 1; i >= 0; i--) {                                                                  \
                int64_t idx = rem % pl.out_size[i];                                                                    \
                rem /= pl.out_size[i];                                                                                 \
                for (int k = 0; k < n_in; k++)                                                                         \
                    off[k] += idx * pl.out_stride[k][i];                                                               \
            }                                                                                                          \
            double acc = 0.0;                                                                                          \
            int64_t idx[EINSUM_LABELS] = {0};                                                                          \
            for (int64_t r = 0; r < pl.sum_total; r++) {                                                               \
                double prod = 1.0;                                                                                     \
                for (int k = 0; k < n_in; k++)                                                                         \
                    prod *= x[k][off[k]];                                                                              \
                acc += prod;                                                                                           \
                for (int i = pl.n_sum - 1; i >= 0; i--) { /* odometer over the summed labels */                        \
                    for (int k = 0; k < n_in; k++)                                                                     \
                        off[k] += pl.sum_stride[k][i];                                                                 \
                    if (++idx[i] < pl.sum_size[i]) break;                                                              \
                    for (int k = 0; k < n_in; k++)                                                                     \
                        off[k] -= pl.sum_stride[k][i] * pl.sum_size[i];                                                \
                    idx[i] = 0;                                                                                        \
                }                                                                                                      \
            }                                                                                                          \
            y[o] = (T)acc;                                                                                             \
        }                                                                                                              \
    }                                                                                                                  \
    static void name(nn_call *c, const einsum_plan *pl, int64_t total) {                                               \
        direct_job j = {.c = c, .pl = pl};                                                                             \
        nn_par_for_range(total * pl->sum_total > 16384 ? c->threads : 1, total,                                        \
                         4096 / (pl->sum_total > 0 ? pl->sum_total : 1), name##_range, &j);                            \
    }

EINSUM_DIRECT(einsum_direct_f64, double)
EINSUM_DIRECT(einsum_direct_f32, float)

static nn_status run_Einsum(nn_call *c) {
    einsum_plan pl;
    nn_status st = einsum_resolve(c, &pl);
    if (st != NN_OK) return st;
    if (nn_shape_elements(pl.out_size, pl.n_out) == 0) return NN_OK;
    einsum_gemm g;
    if (c->workspace && einsum_gemm_plan(c, &pl, &g) &&
        c->workspace_size >= nn_dtype_size(c->in[0].dtype) * (size_t)einsum_gemm_floats(&g)) {
        einsum_run_gemm(c, &pl, &g);
        return NN_OK;
    }
    int64_t total = nn_shape_elements(pl.out_size, pl.n_out);
    if (c->in[0].dtype == NN_DTYPE_DOUBLE)
        einsum_direct_f64(c, &pl, total);
    else
        einsum_direct_f32(c, &pl, total);
    return NN_OK;
}

const nn_op_desc nn_op_Einsum = {.name = "Einsum",
                                 .min_inputs = 1,
                                 .max_inputs = EINSUM_MAX_IN,
                                 .min_outputs = 1,
                                 .max_outputs = 1,
                                 .flags = NN_OPF_ANY_DTYPE, /* einsum_resolve checks every input's dtype */
                                 .parse = parse_Einsum,
                                 .check = check_Einsum,
                                 .infer = infer_Einsum,
                                 .workspace = workspace_Einsum,
                                 .run = run_Einsum};
