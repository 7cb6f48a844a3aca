/* FusedElementwise (see fused_elementwise.h): a chain of elementwise ops
 * applied piece by piece.  A piece of the input (BLOCK elements) goes
 * through every step of the program between two small buffers that stay in
 * L1, each step one vectorizable loop, and the last step writes the output:
 * one read of the input and one write of the output, however long the chain.
 *
 * An operand is walked alongside the output.  Element i of the output reads
 * element (i / inner) % period of the operand: inner = 1 makes it a
 * contiguous run (same shape, trailing vector), inner > 1 a value repeated
 * for `inner` elements (per channel, scalar).  A binary step goes through
 * its piece run by run, so inside a loop the operand is either a pointer or
 * one number and no index is divided per element. */
#include <math.h>
#include <string.h>

#include "act_x86.h"
#include "epilogue.h"
#include "fused_elementwise.h"
#include "isa.h"
#include "par.h"

#define BLOCK   1024  /* elements per piece: two 4 KiB buffers, with the operands, well inside L1 */

static nn_status parse_FusedElementwise(nn_parse_ctx *ctx) {
    return nn_parse_error(ctx, NN_ERR_UNSUPPORTED,
                          "FusedElementwise is made by the optimizer and cannot be read from a model file");
}

/* The program passes/fuse_elementwise.c builds: opcodes and activations
 * known, operands among the node's possible inputs. */
static nn_status fused_elementwise_check(const void *params, char *err, size_t err_size) {
    const nn_ew_program *p = params;
    if (p->n_steps < 1 || p->n_steps > NN_EW_MAX_STEPS)
        return nn_check_error(err, err_size, "program of %d steps (1 to %d)", p->n_steps, NN_EW_MAX_STEPS);
    for (int s = 0; s < p->n_steps; s++) {
        const nn_ew_step *st = &p->steps[s];
        bool muladd = st->op == NN_EW_MulAdd, binary = nn_ew_is_binary(st->op);
        if (st->op < 0 || st->op >= NN_EW_OP_COUNT)
            return nn_check_error(err, err_size, "step %d: unknown opcode %d", s, st->op);
        if ((st->op == NN_EW_Act || muladd) &&
            (st->act < (muladd ? NN_ACT_NONE : NN_ACT_RELU) || (int)st->act >= NN_ACT_COUNT))
            return nn_check_error(err, err_size, "step %d: unknown activation %d", s, (int)st->act);
        if ((binary || muladd) && (st->operand < 0 || st->operand >= NN_EW_MAX_INPUTS))
            return nn_check_error(err, err_size, "step %d: operand %d out of range", s, st->operand);
        if (muladd && (st->operand2 < 0 || st->operand2 >= NN_EW_MAX_INPUTS))
            return nn_check_error(err, err_size, "step %d: operand %d out of range", s, st->operand2);
        if (st->swap != 0 && st->swap != 1) return nn_check_error(err, err_size, "step %d: swap is %d", s, st->swap);
    }
    return NN_OK;
}

/* How operand t lies against the output: its non-1 dims (aligned from the
 * right) must be one unbroken run of the output's dims.  false if they are not. */
static bool layout(const nn_tensor *t, const nn_tensor *out, int64_t *inner, int64_t *period) {
    if (t->ndim > out->ndim) return false;
    int lo = -1, hi = -1, shift = out->ndim - t->ndim;
    for (int a = 0; a < t->ndim; a++) {
        if (t->dims[a] == 1) continue;
        if (t->dims[a] != out->dims[a + shift]) return false;
        if (lo < 0) lo = a + shift;
        hi = a + shift;
    }
    if (lo < 0) { /* a scalar: one value for the whole output */
        *inner = nn_shape_elements(out->dims, out->ndim);
        *period = 1;
        return true;
    }
    for (int a = lo; a <= hi; a++)
        if (t->dims[a - shift] != out->dims[a]) return false; /* broadcasts inside the run */
    *inner = nn_shape_elements(out->dims + hi + 1, out->ndim - hi - 1);
    *period = nn_shape_elements(out->dims + lo, hi - lo + 1);
    return true;
}

/* Operand k of step s: a float input that lies along the output. */
static nn_status check_operand(nn_call *c, int s, int k, int64_t *inner, int64_t *period) {
    if (k < 0 || !nn_present(c, k))
        return nn_call_error(c, NN_ERR_INVALID, "step %d: operand %d is not an input", s, k);
    const nn_tensor *t = &c->in[k];
    if (t->dtype != NN_DTYPE_FLOAT)
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "step %d: operand of dtype %s", s, nn_dtype_name(t->dtype));
    if (!layout(t, &c->in[0], inner, period))
        return nn_call_error(c, NN_ERR_SHAPE, "step %d: operand %d (rank %d) does not lie along the output", s, k,
                             t->ndim);
    return NN_OK;
}

static nn_status infer_FusedElementwise(nn_call *c) {
    const nn_ew_program *p = c->params;
    const nn_tensor *x = &c->in[0];
    if (!p) return nn_call_error(c, NN_ERR_INVALID, "no program");
    if (x->dtype != NN_DTYPE_FLOAT)
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "dtype %s not supported", nn_dtype_name(x->dtype));
    if (p->n_steps < 1 || p->n_steps > NN_EW_MAX_STEPS)
        return nn_call_error(c, NN_ERR_INVALID, "program of %d steps (1 to %d)", p->n_steps, NN_EW_MAX_STEPS);
    if (c->n_in > NN_EW_MAX_INPUTS) return nn_call_error(c, NN_ERR_INVALID, "more than %d inputs", NN_EW_MAX_INPUTS);
    nn_tensor_set_shape(&c->out[0], NN_DTYPE_FLOAT, x->ndim, x->dims);
    for (int s = 0; s < p->n_steps; s++) {
        const nn_ew_step *st = &p->steps[s];
        bool muladd = st->op == NN_EW_MulAdd;
        if (st->op < 0 || st->op >= NN_EW_OP_COUNT)
            return nn_call_error(c, NN_ERR_INVALID, "step %d: unknown opcode %d", s, st->op);
        if ((st->op == NN_EW_Act || muladd) &&
            (st->act < (muladd ? NN_ACT_NONE : NN_ACT_RELU) || (int)st->act >= NN_ACT_COUNT))
            return nn_call_error(c, NN_ERR_INVALID, "step %d: unknown activation %d", s, (int)st->act);
        if (!nn_ew_is_binary(st->op) && !muladd) continue;
        int64_t inner, period, inner2, period2;
        nn_status e = check_operand(c, s, st->operand, &inner, &period);
        if (e == NN_OK && muladd) e = check_operand(c, s, st->operand2, &inner2, &period2);
        if (e != NN_OK) return e;
        if (muladd && (inner != inner2 || period != period2))
            return nn_call_error(c, NN_ERR_SHAPE, "step %d: the factor and the addend lie differently", s);
    }
    return NN_OK;
}

/* An operand's position as the output is walked: r = i % inner,
 * q = (i / inner) % period. */
typedef struct walk {
    const float *data;
    int64_t inner, period, r, q;
} walk;

static walk walk_at(const walk *start, int64_t i) {
    walk w = *start;
    w.r = i % w.inner;
    w.q = i / w.inner % w.period;
    return w;
}

/* The operand's current run, at most n long: a pointer (*vec) or one value (*k). */
static int64_t walk_run(const walk *w, int64_t n, const float **vec, float *k) {
    int64_t room;
    if (w->inner == 1) {
        *vec = w->data + w->q;
        room = w->period - w->q;
    } else {
        *vec = NULL;
        *k = w->data[w->q];
        room = w->inner - w->r;
    }
    return room < n ? room : n;
}

/* n elements on, n no longer than the current run */
static void walk_advance(walk *w, int64_t n) {
    if (w->inner == 1) {
        w->q += n;
        if (w->q == w->period) w->q = 0;
    } else if ((w->r += n) == w->inner) {
        w->r = 0;
        if (++w->q == w->period) w->q = 0;
    }
}

/* d[j] = expr for j < len, y from the operand run; x is the ONNX left input. */
#define BINARY_LOOPS(expr)                                                                                             \
    if (vec && s->swap) {                                                                                              \
        for (int64_t j = 0; j < len; j++) {                                                                            \
            float x = vec[j], y = a[j];                                                                                \
            d[j] = (expr);                                                                                             \
        }                                                                                                              \
    } else if (vec) {                                                                                                  \
        for (int64_t j = 0; j < len; j++) {                                                                            \
            float x = a[j], y = vec[j];                                                                                \
            d[j] = (expr);                                                                                             \
        }                                                                                                              \
    } else if (s->swap) {                                                                                              \
        for (int64_t j = 0; j < len; j++) {                                                                            \
            float x = k, y = a[j];                                                                                     \
            d[j] = (expr);                                                                                             \
        }                                                                                                              \
    } else {                                                                                                           \
        for (int64_t j = 0; j < len; j++) {                                                                            \
            float x = a[j], y = k;                                                                                     \
            d[j] = (expr);                                                                                             \
        }                                                                                                              \
    }

/* A binary step goes run by run of its operand: a per-channel operand of a
 * 7x7 map changes every 49 elements, and the piece spans many of them. */
#define BINARY_STEP(name, expr)                                                                                        \
    case NN_EW_##name:                                                                                                 \
        for (int64_t at = 0, len; at < n; at += len) {                                                                 \
            const float *run;                                                                                          \
            float k = 0.0f;                                                                                            \
            len = walk_run(&w, n - at, &run, &k);                                                                      \
            const float *restrict vec = run;                                                                           \
            const float *restrict a = src + at;                                                                        \
            float *restrict d = dst + at;                                                                              \
            BINARY_LOOPS(expr)                                                                                         \
            walk_advance(&w, len);                                                                                     \
        }                                                                                                              \
        break;

#define UNARY_STEP(name, expr)                                                                                         \
    case NN_EW_##name:                                                                                                 \
        for (int64_t j = 0; j < n; j++) {                                                                              \
            float x = src[j];                                                                                          \
            dst[j] = (expr);                                                                                           \
        }                                                                                                              \
        break;

/* An epilogue activation, with the arithmetic of a fused epilogue
 * (nn_act_apply); a constant `act` per loop lets each one vectorize. */
#define ACT_STEP(act)                                                                                                  \
    case act:                                                                                                          \
        for (int64_t j = 0; j < n; j++)                                                                                \
            dst[j] = nn_act_apply(act, s->alpha, s->beta, src[j]);                                                     \
        break;

/* act(x * operand + addend), the addend laid out like the operand (same
 * offsets), for one constant `act` */
#define MULADD_STEP(act)                                                                                               \
    case act:                                                                                                          \
        for (int64_t at = 0, len; at < n; at += len) {                                                                 \
            const float *run;                                                                                          \
            float k = 0.0f;                                                                                            \
            int64_t q = w.q;                                                                                           \
            len = walk_run(&w, n - at, &run, &k);                                                                      \
            const float *restrict a = src + at;                                                                        \
            float *restrict d = dst + at;                                                                              \
            if (run) {                                                                                                 \
                const float *restrict m = run, *restrict b = addend + q;                                               \
                for (int64_t j = 0; j < len; j++)                                                                      \
                    d[j] = nn_act_apply(act, s->alpha, s->beta, a[j] * m[j] + b[j]);                                   \
            } else {                                                                                                   \
                float b = addend[q];                                                                                   \
                for (int64_t j = 0; j < len; j++)                                                                      \
                    d[j] = nn_act_apply(act, s->alpha, s->beta, a[j] * k + b);                                         \
            }                                                                                                          \
            walk_advance(&w, len);                                                                                     \
        }                                                                                                              \
        break;

#define ALL_ACTS(X)                                                                                                    \
    X(NN_ACT_RELU)                                                                                                     \
    X(NN_ACT_CLIP)                                                                                                     \
    X(NN_ACT_LEAKY_RELU)                                                                                               \
    X(NN_ACT_SIGMOID)                                                                                                  \
    X(NN_ACT_HARD_SIGMOID)                                                                                             \
    X(NN_ACT_HARD_SWISH)                                                                                               \
    X(NN_ACT_SILU)                                                                                                     \
    X(NN_ACT_TANH)                                                                                                     \
    X(NN_ACT_GELU)                                                                                                     \
    X(NN_ACT_GELU_TANH)

/* One step over output elements [i, i + n), from src to dst, which never
 * overlap (so that every loop vectorizes); `operands` are the walks of the
 * node's inputs. */
static inline __attribute__((always_inline)) void run_step(const nn_ew_step *s, const float *restrict src,
                                                          float *restrict dst, int64_t i, int64_t n,
                                                          const walk *operands) {
    if (s->op == NN_EW_Act) {
        switch (s->act) {
            ALL_ACTS(ACT_STEP)
        case NN_ACT_NONE: break;
        }
        return;
    }
    walk w = nn_ew_is_binary(s->op) || s->op == NN_EW_MulAdd ? walk_at(&operands[s->operand], i) : (walk){0};
    if (s->op == NN_EW_MulAdd) {
        const float *addend = operands[s->operand2].data;
        switch (s->act) {
            MULADD_STEP(NN_ACT_NONE)
            ALL_ACTS(MULADD_STEP)
        }
        return;
    }
    switch ((nn_ew_op)s->op) {
        NN_EW_UNARY_OPS(UNARY_STEP)
        NN_EW_BINARY_OPS(BINARY_STEP)
    case NN_EW_Act:
    case NN_EW_MulAdd:
    case NN_EW_OP_COUNT: break;
    }
}

/* Output elements [i0, i1) in pieces of BLOCK, each carried through the
 * whole program: x -> buf[0] -> buf[1] -> buf[0] ... -> y.  Compiled once
 * per ISA (below): the steps' loops, GELU's and the sigmoid's polynomials
 * included, vectorize to the width of the processor in use, not to the
 * build's baseline SSE2 (4.1 ns per GELU there, 0.76 with AVX-512 on a
 * Zen 4). */
static inline __attribute__((always_inline)) void run_range_body(const nn_ew_program *p, const walk *operands,
                                                                 const float *x, float *y, int64_t i0, int64_t i1) {
    float buf[2][BLOCK];
    for (int64_t i = i0; i < i1; i += BLOCK) {
        int64_t n = i1 - i < BLOCK ? i1 - i : BLOCK;
        for (int s = 0; s < p->n_steps; s++) {
            const float *src = s ? buf[(s - 1) % 2] : x + i;
            float *dst = s == p->n_steps - 1 ? y + i : buf[s % 2];
            run_step(&p->steps[s], src, dst, i, n, operands);
        }
    }
}

typedef void (*range_fn)(const nn_ew_program *p, const walk *operands, const float *x, float *y, int64_t i0,
                         int64_t i1);
static void run_range_portable(const nn_ew_program *p, const walk *operands, const float *x, float *y, int64_t i0,
                               int64_t i1) {
    run_range_body(p, operands, x, y, i0, i1);
}
#if NN_HAVE_X86
static T256 void run_range_avx2(const nn_ew_program *p, const walk *operands, const float *x, float *y, int64_t i0,
                                int64_t i1) {
    run_range_body(p, operands, x, y, i0, i1);
}
static T512 void run_range_avx512(const nn_ew_program *p, const walk *operands, const float *x, float *y, int64_t i0,
                                  int64_t i1) {
    run_range_body(p, operands, x, y, i0, i1);
}
#endif

typedef struct ew_job {
    range_fn run;
    const nn_ew_program *p;
    const walk *operands;
    const float *x;
    float *y;
    int64_t chunk, total;
} ew_job;

static void ew_range(void *ctx, int64_t lo, int64_t hi, int seat) {
    (void)seat;
    const ew_job *j = ctx;
    int64_t i0 = lo * j->chunk, i1 = hi * j->chunk < j->total ? hi * j->chunk : j->total;
    j->run(j->p, j->operands, j->x, j->y, i0, i1);
}

static nn_status run_FusedElementwise(nn_call *c) {
    const nn_ew_program *p = c->params;
    const nn_tensor *out = &c->out[0];
    int64_t total = nn_shape_elements(out->dims, out->ndim);
    walk operands[NN_EW_MAX_INPUTS] = {{0}};
    for (int k = 0; k < c->n_in; k++) {
        if (!layout(&c->in[k], out, &operands[k].inner, &operands[k].period))
            return nn_call_error(c, NN_ERR_SHAPE, "operand %d does not lie along the output", k);
        operands[k].data = c->in[k].data;
    }
    if (total == 0) return NN_OK;
    /* a few pieces per work item, many work items per thread */
    int64_t chunk = 4 * BLOCK, n_chunks = (total + chunk - 1) / chunk;
    ew_job j = {.run = NN_ISA_PICK(run_range),
                .p = p, .operands = operands, .x = c->in[0].data, .y = c->out[0].data, .chunk = chunk, .total = total};
    nn_par_for_range(total > NN_PAR_MIN ? c->threads : 1, n_chunks, 1, ew_range, &j);
    return NN_OK;
}

const nn_op_desc nn_op_FusedElementwise = {.name = "FusedElementwise",
                                           .flags = NN_OPF_INTERNAL,
                                           .min_inputs = 1,
                                           .max_inputs = NN_EW_MAX_INPUTS,
                                           .min_outputs = 1,
                                           .max_outputs = 1,
                                           .parse = parse_FusedElementwise,
                                           .check = fused_elementwise_check,
                                           .infer = infer_FusedElementwise,
                                           .run = run_FusedElementwise};
