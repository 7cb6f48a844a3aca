/* Control flow: If, Loop, Scan (docs/control-flow.md).  Each body is a
 * nested model the engine has optimized and planned; these kernels feed it
 * (its formal inputs, then the outer-scope values the importer appended to
 * the node's inputs), run it with nn_body_run and assemble the outputs,
 * whose shapes are known only once the bodies ran (NN_OPF_SUBGRAPH). */
#include <stdio.h>
#include <stdlib.h>

#include "../engine/arena.h"
#include "op.h"

enum { SCAN_MAX = 32 }; /* state + scan inputs or outputs a Scan may have */

typedef struct if_params {
    nn_subgraph_set sub; /* g[0] then_branch, g[1] else_branch */
} if_params;

typedef struct loop_params {
    nn_subgraph_set sub;
    int n_carried;
} loop_params;

typedef struct scan_params {
    nn_subgraph_set sub;
    int batched; /* opset 8: inputs carry a batch axis 0, input 0 is sequence_lens */
    int n_state, n_scan, n_scan_out;
    int32_t in_axis[SCAN_MAX], in_reverse[SCAN_MAX], out_axis[SCAN_MAX], out_reverse[SCAN_MAX];
} scan_params;

/* ---- parsing */

static nn_status get_body(nn_parse_ctx *ctx, const char *name, nn_subgraph *out) {
    const nn_attr *a = nn_attr_find(ctx, name);
    if (!a || a->type != NN_ATTR_GRAPH || !a->graph)
        return nn_parse_error(ctx, NN_ERR_INVALID, "graph attribute '%s' is required", name);
    out->body = a->graph;
    out->n_captured = a->n_captured;
    out->capture_first = a->n_captured ? a->capture_first : ctx->n_inputs;
    out->n_formal = nn_body_inputs(a->graph) - a->n_captured;
    return NN_OK;
}

/* The bodies' wiring (their addresses are the engine's: the plan cache
 * reader points them at the bodies it read). */
static nn_status check_set(const nn_subgraph_set *s, int n, char *err, size_t err_size) {
    if (s->n != n) return nn_check_error(err, err_size, "%d bodies, expected %d", s->n, n);
    for (int k = 0; k < s->n; k++)
        if (s->g[k].n_formal < 0 || s->g[k].n_captured < 0 || s->g[k].capture_first < 0)
            return nn_check_error(err, err_size, "body %d is not wired", k);
    return NN_OK;
}

static nn_status parse_if(nn_parse_ctx *ctx) {
    if_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    p->sub.n = 2;
    nn_status st = get_body(ctx, "then_branch", &p->sub.g[0]);
    if (st == NN_OK) st = get_body(ctx, "else_branch", &p->sub.g[1]);
    if (st != NN_OK) return st;
    int then_out = nn_body_outputs(p->sub.g[0].body), else_out = nn_body_outputs(p->sub.g[1].body);
    if (p->sub.g[0].n_formal || p->sub.g[1].n_formal)
        return nn_parse_error(ctx, NN_ERR_INVALID, "its branches must take no inputs");
    if (then_out != else_out || ctx->n_outputs > then_out)
        return nn_parse_error(ctx, NN_ERR_INVALID, "it has %d outputs, its branches %d and %d", ctx->n_outputs,
                              then_out, else_out);
    /* a node's output is one kind of value whichever branch ran (open types aside) */
    static const char *const kinds[] = {"a tensor", "a sequence", "an optional"};
    for (int k = 0; k < then_out; k++) {
        int a = nn_body_output_kind(p->sub.g[0].body, k), b = nn_body_output_kind(p->sub.g[1].body, k);
        if (a >= 0 && b >= 0 && a <= 2 && b <= 2 && a != b)
            return nn_parse_error(ctx, NN_ERR_INVALID, "output %d is %s in then_branch and %s in else_branch", k,
                                  kinds[a], kinds[b]);
    }
    return NN_OK;
}

static nn_status check_if(const void *params, char *err, size_t err_size) {
    return check_set(&((const if_params *)params)->sub, 2, err, err_size);
}

static nn_status parse_loop(nn_parse_ctx *ctx) {
    loop_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    p->sub.n = 1;
    nn_status st = get_body(ctx, "body", &p->sub.g[0]);
    if (st != NN_OK) return st;
    if (ctx->n_inputs < 2)
        return nn_parse_error(ctx, NN_ERR_INVALID, "inputs M and cond must be listed (with empty names if absent)");
    p->n_carried = ctx->n_inputs - 2;
    int outs = nn_body_outputs(p->sub.g[0].body);
    if (p->sub.g[0].n_formal != 2 + p->n_carried)
        return nn_parse_error(ctx, NN_ERR_INVALID, "its body takes %d inputs, expected 2 + %d loop-carried",
                              p->sub.g[0].n_formal, p->n_carried);
    if (outs < 1 + p->n_carried || ctx->n_outputs > outs - 1)
        return nn_parse_error(ctx, NN_ERR_INVALID, "its body returns %d values for %d loop-carried and %d outputs",
                              outs, p->n_carried, ctx->n_outputs);
    return NN_OK;
}

static nn_status check_loop(const void *params, char *err, size_t err_size) {
    const loop_params *p = params;
    if (p->n_carried < 0) return nn_check_error(err, err_size, "negative loop-carried count");
    return check_set(&p->sub, 1, err, err_size);
}

/* An optional per-input list (axes or directions), default 0. */
static nn_status scan_list(nn_parse_ctx *ctx, const char *name, int count, int32_t *out) {
    int64_t v[SCAN_MAX];
    int n;
    nn_status st = nn_attr_ints(ctx, name, v, SCAN_MAX, &n);
    if (st != NN_OK) return st;
    if (n >= 0 && n != count)
        return nn_parse_error(ctx, NN_ERR_INVALID, "attribute '%s' has %d values, expected %d", name, n, count);
    for (int k = 0; k < count; k++) {
        int64_t x = n >= 0 ? v[k] : 0;
        if (x < -NN_MAX_DIMS - 1 || x > NN_MAX_DIMS)
            return nn_parse_error(ctx, NN_ERR_INVALID, "attribute '%s' has value %lld out of range", name,
                                  (long long)x);
        out[k] = (int32_t)x;
    }
    return NN_OK;
}

static nn_status parse_scan(nn_parse_ctx *ctx) {
    scan_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    p->sub.n = 1;
    nn_status st = get_body(ctx, "body", &p->sub.g[0]);
    int64_t m;
    if (st == NN_OK) st = nn_attr_int(ctx, "num_scan_inputs", -1, &m);
    if (st != NN_OK) return st;
    p->batched = ctx->opset < 9;
    int formal = ctx->n_inputs - p->batched;
    if (m < 1 || m > formal || m > SCAN_MAX || formal - m > SCAN_MAX)
        return nn_parse_error(ctx, NN_ERR_INVALID, "num_scan_inputs %lld does not fit its %d inputs", (long long)m,
                              formal);
    p->n_scan = (int)m;
    p->n_state = formal - p->n_scan;
    int outs = nn_body_outputs(p->sub.g[0].body);
    p->n_scan_out = outs - p->n_state;
    if (p->sub.g[0].n_formal != formal || p->n_scan_out < 0 || p->n_scan_out > SCAN_MAX ||
        ctx->n_outputs > outs)
        return nn_parse_error(ctx, NN_ERR_INVALID, "its body takes %d inputs and returns %d, for %d states and %d scans",
                              p->sub.g[0].n_formal, outs, p->n_state, p->n_scan);
    if (p->batched) {
        st = scan_list(ctx, "directions", p->n_scan, p->in_reverse);
        return st;
    }
    if ((st = scan_list(ctx, "scan_input_axes", p->n_scan, p->in_axis)) != NN_OK ||
        (st = scan_list(ctx, "scan_input_directions", p->n_scan, p->in_reverse)) != NN_OK ||
        (st = scan_list(ctx, "scan_output_axes", p->n_scan_out, p->out_axis)) != NN_OK ||
        (st = scan_list(ctx, "scan_output_directions", p->n_scan_out, p->out_reverse)) != NN_OK)
        return st;
    return NN_OK;
}

static nn_status check_scan(const void *params, char *err, size_t err_size) {
    const scan_params *p = params;
    if (!nn_check_bool((const bool *)&p->batched) && (p->batched & ~1))
        return nn_check_error(err, err_size, "bad batched flag");
    if (p->n_state < 0 || p->n_state > SCAN_MAX || p->n_scan < 1 || p->n_scan > SCAN_MAX || p->n_scan_out < 0 ||
        p->n_scan_out > SCAN_MAX)
        return nn_check_error(err, err_size, "input or output counts out of range");
    for (int k = 0; k < SCAN_MAX; k++)
        if (!nn_check_axis(p->in_axis[k]) || !nn_check_axis(p->out_axis[k]) || (p->in_reverse[k] & ~1) ||
            (p->out_reverse[k] & ~1))
            return nn_check_error(err, err_size, "axis or direction %d out of range", k);
    return check_set(&p->sub, 1, err, err_size);
}

static nn_status infer_dynamic(nn_call *c) {
    (void)c;
    return NN_DYNAMIC; /* the outputs are known once the bodies ran */
}

/* ---- helpers */

static size_t bytes_of(const nn_tensor *t) { return (size_t)nn_tensor_elements(t) * nn_dtype_size(t->dtype); }

/* Outputs that are sequences or optionals go to the run's pool, where the
 * executor keeps a node's sequences; on failure all are released. */
static nn_status keep_outputs(nn_call *c) {
    int k = 0;
    nn_status st = NN_OK;
    for (; k < c->n_out && st == NN_OK; k++)
        st = nn_body_keep(c, &c->out[k]);
    if (st == NN_OK) return NN_OK;
    for (int j = 0; j < c->n_out; j++) /* those before k-1 that are sequences are in the pool already */
        if (j >= k - 1 || !nn_dtype_is_container(c->out[j].dtype)) nn_tensor_release(&c->out[j]);
    return st;
}

static void release_all(nn_tensor *t, int n) {
    for (int k = 0; k < n; k++)
        nn_tensor_release(&t[k]);
}

/* Body inputs: `formal` tensors, then the node inputs holding its outer values. */
static nn_tensor *body_inputs(const nn_call *c, const nn_subgraph *s) {
    nn_tensor *in = calloc((size_t)(s->n_formal + s->n_captured) + 1, sizeof *in);
    if (!in) return NULL;
    for (int j = 0; j < s->n_captured && s->capture_first + j < c->n_in; j++)
        in[s->n_formal + j] = c->in[s->capture_first + j];
    return in;
}

/* Values a body returns once per iteration (Loop's and Scan's scan
 * outputs): each must keep the first one's dtype and shape; they are kept
 * back to back, to be stacked along a new axis at the end. */
typedef struct accum {
    nn_tensor elem; /* dtype and shape of one; data unused */
    char *buf;
    size_t elem_bytes, cap;
    int64_t count;
} accum;

static nn_status accum_add(const nn_call *c, accum *a, const nn_tensor *t, int k) {
    if (nn_dtype_is_container(t->dtype))
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "scan output %d is a sequence or optional: scan outputs stack "
                             "tensors", k);
    if (!a->count) {
        a->elem = *t;
        a->elem_bytes = bytes_of(t);
    } else if (t->dtype != a->elem.dtype || t->ndim != a->elem.ndim ||
               memcmp(t->dims, a->elem.dims, sizeof(int64_t) * (size_t)t->ndim)) {
        return nn_call_error(c, NN_ERR_SHAPE, "scan output %d changes dtype or shape at iteration %lld", k,
                             (long long)a->count);
    }
    if (t->ndim + 1 > NN_MAX_DIMS)
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "scan output %d would have more than %d dimensions", k,
                             NN_MAX_DIMS);
    size_t need = a->elem_bytes * (size_t)(a->count + 1);
    if (a->elem_bytes && need / a->elem_bytes != (size_t)(a->count + 1))
        return nn_call_error(c, NN_ERR_NOMEM, "scan output %d overflows", k);
    if (need > a->cap) {
        size_t cap = a->cap ? a->cap * 2 : a->elem_bytes * 4 + 64;
        if (cap < need) cap = need;
        char *b = realloc(a->buf, cap);
        if (!b) return nn_call_error(c, NN_ERR_NOMEM, "out of memory for scan output %d (%zu bytes)", k, cap);
        a->buf = b;
        a->cap = cap;
    }
    if (a->elem_bytes) memcpy(a->buf + a->elem_bytes * (size_t)a->count, t->data, a->elem_bytes);
    a->count++;
    return NN_OK;
}

/* out = the accumulated values stacked along a new `axis` (in [0, rank]),
 * the last iteration first when `reverse`.  With no iterations, the shape
 * comes from `declared` (unknown dims 0). */
static nn_status accum_stack(const nn_call *c, accum *a, int axis, bool reverse, const nn_tensor *declared,
                             nn_tensor *out) {
    nn_tensor e = a->elem;
    if (!a->count) {
        e = *declared;
        if (e.ndim < 0 || e.ndim + 1 > NN_MAX_DIMS) e.ndim = 0;
        for (int d = 0; d < e.ndim; d++)
            if (e.dims[d] < 0) e.dims[d] = 0;
        if (e.dtype == NN_DTYPE_UNDEFINED) e.dtype = NN_DTYPE_FLOAT;
    }
    if (axis < 0 || axis > e.ndim) return nn_call_error(c, NN_ERR_INVALID, "scan output axis %d out of range", axis);
    memset(out, 0, sizeof *out);
    out->dtype = e.dtype;
    out->ndim = e.ndim + 1;
    for (int d = 0, s = 0; d < out->ndim; d++)
        out->dims[d] = d == axis ? a->count : e.dims[s++];
    size_t total = bytes_of(out);
    out->data = malloc(total ? total : 1);
    if (!out->data) return nn_call_error(c, NN_ERR_NOMEM, "out of memory for %zu bytes", total);
    int64_t outer = 1;
    for (int d = 0; d < axis; d++)
        outer *= e.dims[d];
    size_t inner = outer ? a->elem_bytes / (size_t)outer : 0;
    for (int64_t t = 0; t < a->count && inner; t++) {
        int64_t pos = reverse ? a->count - 1 - t : t;
        for (int64_t o = 0; o < outer; o++)
            memcpy((char *)out->data + ((size_t)o * (size_t)a->count + (size_t)pos) * inner,
                   a->buf + a->elem_bytes * (size_t)t + (size_t)o * inner, inner);
    }
    return NN_OK;
}

static void accum_free(accum *a, int n) {
    for (int k = 0; k < n; k++)
        free(a[k].buf);
    free(a);
}

/* ---- If */

static nn_status run_if(nn_call *c) {
    const if_params *p = c->params;
    const nn_tensor *cond = &c->in[0];
    if (nn_tensor_elements(cond) != 1 || !cond->data)
        return nn_call_error(c, NN_ERR_INVALID, "cond must hold one element, has %lld",
                             (long long)nn_tensor_elements(cond));
    bool take = cond->dtype == NN_DTYPE_BOOL ? *(const uint8_t *)cond->data != 0 : nn_tensor_get_double(cond, 0) != 0;
    const nn_subgraph *s = &p->sub.g[take ? 0 : 1];
    int n_out = nn_body_outputs(s->body);
    if (s->n_formal || c->n_out > n_out) return nn_call_error(c, NN_ERR_INVALID, "its branch does not fit the node");
    nn_tensor *in = body_inputs(c, s), *out = calloc((size_t)n_out, sizeof *out);
    nn_status st = in && out ? nn_body_run(c, s->body, in, s->n_formal + s->n_captured, out, n_out)
                             : nn_call_error(c, NN_ERR_NOMEM, "out of memory");
    if (st == NN_OK) {
        for (int k = 0; k < c->n_out; k++) {
            c->out[k] = out[k];
            out[k].data = NULL;
        }
        release_all(out + c->n_out, n_out - c->n_out);
        st = keep_outputs(c);
    }
    free(in);
    free(out);
    return st;
}

/* ---- Loop */

static bool truth(const nn_tensor *t) {
    return t->dtype == NN_DTYPE_BOOL ? *(const uint8_t *)t->data != 0 : nn_tensor_get_double(t, 0) != 0;
}

static nn_status run_loop(nn_call *c) {
    const loop_params *p = c->params;
    const nn_subgraph *s = &p->sub.g[0];
    int N = p->n_carried, n_body_out = nn_body_outputs(s->body), K = n_body_out - 1 - N;
    if (s->n_formal != 2 + N || c->n_in < 2 + N || K < 0 || c->n_out > N + K)
        return nn_call_error(c, NN_ERR_INVALID, "its body does not fit the node");
    bool has_m = nn_present(c, 0), has_cond = nn_present(c, 1);
    int64_t trip = INT64_MAX, limit = nn_loop_max();
    for (int k = 0; k < 2; k++)
        if (nn_present(c, k) && (nn_tensor_elements(&c->in[k]) != 1 || !c->in[k].data))
            return nn_call_error(c, NN_ERR_INVALID, "input %s must hold one element", k ? "cond" : "M");
    if (has_m) {
        if (c->in[0].dtype != NN_DTYPE_INT64 && c->in[0].dtype != NN_DTYPE_INT32)
            return nn_call_error(c, NN_ERR_INVALID, "input M must be int64, is %s", nn_dtype_name(c->in[0].dtype));
        trip = nn_tensor_get_int(&c->in[0], 0);
    }
    bool go = has_cond ? truth(&c->in[1]) : true;
    if (!has_m && !has_cond)
        return nn_call_error(c, NN_ERR_INVALID, "neither M nor cond is given: the loop would never end");
    int64_t iter = 0;
    uint8_t cond_byte = go;
    nn_tensor *in = body_inputs(c, s), *out = calloc((size_t)n_body_out, sizeof *out),
              *cur = calloc((size_t)N + 1, sizeof *cur);
    accum *acc = calloc((size_t)K + 1, sizeof *acc);
    /* loop-carried sequences: their items' data, each copied once (not per iteration) */
    nn_arena keep = {.chunk_size = 1 << 16};
    nn_tensor *prev = calloc((size_t)n_body_out + 1, sizeof *prev);
    nn_status st = NN_OK;
    if (!in || !out || !cur || !acc || !prev) {
        st = nn_call_error(c, NN_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int j = 0; j < N && st == NN_OK; j++) {
        if (!nn_present(c, 2 + j)) {
            st = nn_call_error(c, NN_ERR_INVALID, "loop-carried input %d is absent", j);
            goto done;
        }
        st = nn_body_copy_carried(c, s->body, &c->in[2 + j], &keep, &cur[j]);
    }
    in[0] = (nn_tensor){.dtype = NN_DTYPE_INT64, .ndim = 0, .data = &iter};
    in[1] = (nn_tensor){.dtype = NN_DTYPE_BOOL, .ndim = 0, .data = &cond_byte};
    for (; st == NN_OK && iter < trip && go; iter++) {
        if (iter >= limit) {
            st = nn_call_error(c, NN_ERR_UNSUPPORTED,
                               "ran %lld iterations, the most allowed (raise it with NN_LOOP_MAX)", (long long)limit);
            break;
        }
        cond_byte = go;
        for (int j = 0; j < N; j++)
            in[2 + j] = prev[1 + j] = cur[j];
        if ((st = nn_body_run_carried(c, s->body, in, s->n_formal + s->n_captured, out, n_body_out, prev, &keep)) !=
            NN_OK)
            break;
        if (nn_tensor_elements(&out[0]) != 1) {
            st = nn_call_error(c, NN_ERR_INVALID, "the body's cond output must hold one element");
        } else if (has_cond) {
            go = truth(&out[0]);
        }
        for (int j = 0; j < N && st == NN_OK; j++)
            /* an optional may be empty in one iteration and hold its element in the next */
            if (out[1 + j].dtype != cur[j].dtype && out[1 + j].dtype != NN_DTYPE_NONE && cur[j].dtype != NN_DTYPE_NONE)
                st = nn_call_error(c, NN_ERR_INVALID, "loop-carried value %d changes dtype from %s to %s", j,
                                   nn_dtype_name(cur[j].dtype), nn_dtype_name(out[1 + j].dtype));
        for (int j = 0; j < N && st == NN_OK; j++) {
            nn_tensor_release(&cur[j]);
            cur[j] = out[1 + j];
            out[1 + j].data = NULL;
        }
        for (int k = 0; k < K && st == NN_OK; k++)
            st = accum_add(c, &acc[k], &out[1 + N + k], k);
        release_all(out, n_body_out);
    }
    for (int k = 0; k < c->n_out && st == NN_OK; k++) {
        if (k < N) {
            c->out[k] = cur[k];
            cur[k].data = NULL;
        } else {
            nn_tensor declared = nn_body_declared_output(s->body, 1 + k);
            st = accum_stack(c, &acc[k - N], 0, false, &declared, &c->out[k]);
        }
    }
    if (st != NN_OK)
        release_all(c->out, c->n_out);
    else
        st = keep_outputs(c);
done:
    if (out) release_all(out, n_body_out);
    if (cur) release_all(cur, N);
    free(in);
    free(out);
    free(cur);
    free(prev);
    nn_arena_free(&keep);
    if (acc) accum_free(acc, K);
    return st;
}

/* ---- Scan */

/* A malloc'ed copy of t's slice `index` along `axis`, that axis removed. */
static nn_status take_slice(const nn_call *c, const nn_tensor *t, int axis, int64_t index, nn_tensor *out) {
    memset(out, 0, sizeof *out);
    out->dtype = t->dtype;
    out->ndim = t->ndim - 1;
    int64_t outer = 1, len = t->dims[axis];
    for (int d = 0, s = 0; d < t->ndim; d++) {
        if (d < axis) outer *= t->dims[d];
        if (d != axis) out->dims[s++] = t->dims[d];
    }
    size_t total = bytes_of(out), inner = outer ? total / (size_t)outer : 0;
    out->data = malloc(total ? total : 1);
    if (!out->data) return nn_call_error(c, NN_ERR_NOMEM, "out of memory for %zu bytes", total);
    for (int64_t o = 0; o < outer && inner; o++)
        memcpy((char *)out->data + (size_t)o * inner, (const char *)t->data + ((size_t)(o * len + index)) * inner,
               inner);
    return NN_OK;
}

/* One scan: states[n_state] and scans[n_scan] in, out[n_state + n_scan_out]
 * malloc'ed (only the first `n_keep` kept). */
static nn_status scan_once(nn_call *c, const nn_tensor *states, const nn_tensor *scans, nn_tensor *res) {
    const scan_params *p = c->params;
    const nn_subgraph *s = &p->sub.g[0];
    int NS = p->n_state, M = p->n_scan, K = p->n_scan_out, n_body_out = NS + K;
    int axis[SCAN_MAX];
    int64_t len = -1;
    for (int j = 0; j < M; j++) {
        int64_t a;
        if (!nn_axis_normalize(p->in_axis[j], scans[j].ndim, &a))
            return nn_call_error(c, NN_ERR_INVALID, "scan input %d: axis %d out of range for rank %d", j,
                                 (int)p->in_axis[j], scans[j].ndim);
        axis[j] = (int)a;
        if (len >= 0 && scans[j].dims[a] != len)
            return nn_call_error(c, NN_ERR_SHAPE, "scan inputs differ in length (%lld and %lld)", (long long)len,
                                 (long long)scans[j].dims[a]);
        len = scans[j].dims[a];
    }
    nn_tensor *in = body_inputs(c, s), *out = calloc((size_t)n_body_out + 1, sizeof *out);
    nn_tensor *cur = calloc((size_t)NS + 1, sizeof *cur), *slices = calloc((size_t)M + 1, sizeof *slices);
    accum *acc = calloc((size_t)K + 1, sizeof *acc);
    nn_status st = NN_OK;
    if (!in || !out || !cur || !slices || !acc) {
        st = nn_call_error(c, NN_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int j = 0; j < NS && st == NN_OK; j++)
        st = nn_body_copy(c, s->body, &states[j], &cur[j]);
    for (int64_t t = 0; t < len && st == NN_OK; t++) {
        for (int j = 0; j < M && st == NN_OK; j++) {
            nn_tensor_release(&slices[j]);
            st = take_slice(c, &scans[j], axis[j], p->in_reverse[j] ? len - 1 - t : t, &slices[j]);
        }
        if (st != NN_OK) break;
        for (int j = 0; j < NS; j++)
            in[j] = cur[j];
        for (int j = 0; j < M; j++)
            in[NS + j] = slices[j];
        if ((st = nn_body_run(c, s->body, in, s->n_formal + s->n_captured, out, n_body_out)) != NN_OK) break;
        for (int j = 0; j < NS; j++) {
            nn_tensor_release(&cur[j]);
            cur[j] = out[j];
            out[j].data = NULL;
        }
        for (int k = 0; k < K && st == NN_OK; k++)
            st = accum_add(c, &acc[k], &out[NS + k], k);
        release_all(out, n_body_out);
    }
    for (int k = 0; k < NS + K && st == NN_OK; k++) {
        if (k < NS) {
            res[k] = cur[k];
            cur[k].data = NULL;
            continue;
        }
        nn_tensor declared = nn_body_declared_output(s->body, k);
        int rank = (acc[k - NS].count ? acc[k - NS].elem.ndim : declared.ndim < 0 ? 0 : declared.ndim) + 1;
        int64_t a;
        if (!nn_axis_normalize(p->out_axis[k - NS], rank, &a)) {
            st = nn_call_error(c, NN_ERR_INVALID, "scan output %d: axis %d out of range", k - NS,
                               (int)p->out_axis[k - NS]);
            break;
        }
        st = accum_stack(c, &acc[k - NS], (int)a, p->out_reverse[k - NS] != 0, &declared, &res[k]);
    }
    if (st != NN_OK) release_all(res, NS + K);
done:
    if (out) release_all(out, n_body_out);
    if (cur) release_all(cur, NS);
    if (slices) release_all(slices, M);
    free(in);
    free(out);
    free(cur);
    free(slices);
    if (acc) accum_free(acc, K);
    return st;
}

/* Opset 8: every input has a batch axis 0, each sample scanned on its own
 * (along axis 1 of the scan inputs) and the results stacked again. */
static nn_status run_scan_batched(nn_call *c) {
    const scan_params *p = c->params;
    int NS = p->n_state, M = p->n_scan, K = p->n_scan_out, n_res = NS + K;
    const nn_tensor *x = &c->in[1];
    for (int j = 0; j < NS + M; j++)
        if (c->in[1 + j].ndim < (j < NS ? 1 : 2) || c->in[1 + j].dims[0] != c->in[1].dims[0])
            return nn_call_error(c, NN_ERR_SHAPE, "input %d lacks the batch axis the others have", 1 + j);
    int64_t batch = x->dims[0];
    if (nn_present(c, 0)) { /* sequence_lens: only full lengths are supported */
        int64_t full = c->in[1 + NS].dims[1];
        for (int64_t b = 0; b < nn_tensor_elements(&c->in[0]); b++)
            if (nn_tensor_get_int(&c->in[0], b) != full)
                return nn_call_error(c, NN_ERR_UNSUPPORTED, "sequence_lens shorter than the sequence (%lld of %lld)",
                                     (long long)nn_tensor_get_int(&c->in[0], b), (long long)full);
    }
    nn_tensor *st_in = calloc((size_t)(NS + M) + 1, sizeof *st_in), *res = calloc((size_t)n_res + 1, sizeof *res);
    accum *acc = calloc((size_t)n_res + 1, sizeof *acc);
    nn_status st = st_in && res && acc ? NN_OK : nn_call_error(c, NN_ERR_NOMEM, "out of memory");
    for (int64_t b = 0; b < batch && st == NN_OK; b++) {
        for (int j = 0; j < NS + M && st == NN_OK; j++) {
            nn_tensor_release(&st_in[j]);
            st = take_slice(c, &c->in[1 + j], 0, b, &st_in[j]);
        }
        if (st == NN_OK) st = scan_once(c, st_in, st_in + NS, res);
        for (int k = 0; k < n_res && st == NN_OK; k++)
            st = accum_add(c, &acc[k], &res[k], k);
        if (st == NN_OK) release_all(res, n_res);
    }
    for (int k = 0; k < c->n_out && st == NN_OK; k++) {
        nn_tensor none = {.dtype = NN_DTYPE_FLOAT, .ndim = 0};
        st = accum_stack(c, &acc[k], 0, false, &none, &c->out[k]);
    }
    if (st != NN_OK && c->n_out) release_all(c->out, c->n_out);
    if (st_in) release_all(st_in, NS + M);
    free(st_in);
    free(res);
    if (acc) accum_free(acc, n_res);
    return st;
}

static nn_status run_scan(nn_call *c) {
    const scan_params *p = c->params;
    const nn_subgraph *s = &p->sub.g[0];
    if (s->n_formal != p->n_state + p->n_scan || c->n_in < p->batched + s->n_formal ||
        nn_body_outputs(s->body) != p->n_state + p->n_scan_out || c->n_out > p->n_state + p->n_scan_out)
        return nn_call_error(c, NN_ERR_INVALID, "its body does not fit the node");
    if (p->batched) return run_scan_batched(c);
    for (int j = 0; j < p->n_state + p->n_scan; j++)
        if (!nn_present(c, j)) return nn_call_error(c, NN_ERR_INVALID, "input %d is absent", j);
    int n_res = p->n_state + p->n_scan_out;
    nn_tensor *res = calloc((size_t)n_res + 1, sizeof *res);
    if (!res) return nn_call_error(c, NN_ERR_NOMEM, "out of memory");
    nn_status st = scan_once(c, c->in, c->in + p->n_state, res);
    if (st == NN_OK) {
        for (int k = 0; k < c->n_out; k++) {
            c->out[k] = res[k];
            res[k].data = NULL;
        }
        release_all(res, n_res);
        st = keep_outputs(c);
    }
    free(res);
    return st;
}

/* ---- SequenceMap (opset 17): the body runs once per item of input 0;
 * other sequence inputs give their item at the same position, tensor
 * inputs go in whole; each body output is gathered into a sequence. */

typedef struct seqmap_params {
    nn_subgraph_set sub;
} seqmap_params;

static nn_status parse_seqmap(nn_parse_ctx *ctx) {
    seqmap_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    p->sub.n = 1;
    nn_status st = get_body(ctx, "body", &p->sub.g[0]);
    if (st != NN_OK) return st;
    int outs = nn_body_outputs(p->sub.g[0].body);
    if (p->sub.g[0].n_formal != ctx->n_inputs || outs != ctx->n_outputs)
        return nn_parse_error(ctx, NN_ERR_INVALID, "its body takes %d inputs and returns %d, the node has %d and %d",
                              p->sub.g[0].n_formal, outs, ctx->n_inputs, ctx->n_outputs);
    return NN_OK;
}

static nn_status check_seqmap(const void *params, char *err, size_t err_size) {
    return check_set(&((const seqmap_params *)params)->sub, 1, err, err_size);
}

static nn_status run_seqmap(nn_call *c) {
    const seqmap_params *p = c->params;
    const nn_subgraph *s = &p->sub.g[0];
    int F = s->n_formal, n_out = nn_body_outputs(s->body);
    if (F < 1 || c->n_in < F + s->n_captured || n_out != c->n_out)
        return nn_call_error(c, NN_ERR_INVALID, "its body does not fit the node");
    const nn_seq *first = c->in[0].data;
    if (c->in[0].dtype != NN_DTYPE_SEQUENCE || !first)
        return nn_call_error(c, NN_ERR_INVALID, "input 0 must be a sequence, is %s", nn_dtype_name(c->in[0].dtype));
    int64_t n = first->n;
    for (int j = 0; j < F; j++) {
        if (!nn_present(c, j)) return nn_call_error(c, NN_ERR_INVALID, "input %d is absent", j);
        if (c->in[j].dtype == NN_DTYPE_NONE) return nn_call_error(c, NN_ERR_INVALID, "input %d is an empty optional", j);
        const nn_seq *q = c->in[j].data;
        if (c->in[j].dtype == NN_DTYPE_SEQUENCE && (!q || q->n != n))
            return nn_call_error(c, NN_ERR_SHAPE, "input %d holds %lld tensors, input 0 %lld", j,
                                 q ? (long long)q->n : -1LL, (long long)n);
    }
    nn_seq **res = calloc((size_t)n_out + 1, sizeof *res);
    nn_tensor *in = body_inputs(c, s), *out = calloc((size_t)n_out + 1, sizeof *out);
    nn_status st = res && in && out ? NN_OK : nn_call_error(c, NN_ERR_NOMEM, "out of memory");
    for (int k = 0; k < n_out && st == NN_OK; k++) {
        nn_tensor declared = nn_body_declared_output(s->body, k);
        nn_dtype elem = nn_dtype_size(declared.dtype) ? declared.dtype : NN_DTYPE_FLOAT;
        if (!(res[k] = nn_seq_new(c->pool, elem, n))) st = nn_call_error(c, NN_ERR_NOMEM, "out of memory");
    }
    for (int64_t i = 0; i < n && st == NN_OK; i++) {
        for (int j = 0; j < F; j++)
            in[j] = c->in[j].dtype == NN_DTYPE_SEQUENCE ? ((const nn_seq *)c->in[j].data)->items[i] : c->in[j];
        if ((st = nn_body_run(c, s->body, in, F + s->n_captured, out, n_out)) != NN_OK) break;
        for (int k = 0; k < n_out && st == NN_OK; k++) {
            if (nn_dtype_is_container(out[k].dtype)) {
                st = nn_call_error(c, NN_ERR_UNSUPPORTED, "body output %d is a sequence or optional: sequences of "
                                   "sequences are not supported", k);
                break;
            }
            if (i == 0) res[k]->elem = out[k].dtype;
            if (out[k].dtype != res[k]->elem) {
                st = nn_call_error(c, NN_ERR_INVALID, "body output %d is %s at item %lld, %s before", k,
                                   nn_dtype_name(out[k].dtype), (long long)i, nn_dtype_name(res[k]->elem));
                break;
            }
            nn_tensor *items = (nn_tensor *)res[k]->items;
            if ((st = nn_body_to_pool(c, &out[k])) == NN_OK) {
                items[i] = out[k];
                res[k]->n = *res[k]->used = i + 1;
            }
            memset(&out[k], 0, sizeof out[k]); /* in the pool now, or released */
        }
        release_all(out, n_out);
    }
    if (st == NN_OK)
        for (int k = 0; k < n_out; k++)
            nn_output_seq(c, k, res[k]);
    free(res);
    free(in);
    free(out);
    return st;
}

const nn_op_desc nn_op_If = {.name = "If", .min_inputs = 1, .max_inputs = -1, .min_outputs = 1, .max_outputs = -1,
                             .flags = NN_OPF_SUBGRAPH | NN_OPF_ANY_DTYPE, .parse = parse_if, .check = check_if,
                             .infer = infer_dynamic, .run = run_if};
const nn_op_desc nn_op_Loop = {.name = "Loop", .min_inputs = 0, .max_inputs = -1, .min_outputs = 1,
                               .max_outputs = -1, .flags = NN_OPF_SUBGRAPH | NN_OPF_ANY_DTYPE, .parse = parse_loop,
                               .check = check_loop, .infer = infer_dynamic, .run = run_loop};
const nn_op_desc nn_op_Scan = {.name = "Scan", .min_inputs = 0, .max_inputs = -1, .min_outputs = 1,
                               .max_outputs = -1, .flags = NN_OPF_SUBGRAPH | NN_OPF_ANY_DTYPE, .parse = parse_scan,
                               .check = check_scan, .infer = infer_dynamic, .run = run_scan};
const nn_op_desc nn_op_SequenceMap = {.name = "SequenceMap", .min_inputs = 1, .max_inputs = -1, .min_outputs = 1,
                                      .max_outputs = -1, .flags = NN_OPF_SUBGRAPH | NN_OPF_ANY_DTYPE | NN_OPF_CONTAINER,
                                      .parse = parse_seqmap, .check = check_seqmap, .infer = infer_dynamic,
                                      .run = run_seqmap};
