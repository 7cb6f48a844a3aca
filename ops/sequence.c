/* Sequence and optional operators (opsets 11-18): SequenceEmpty,
 * SequenceConstruct, SequenceInsert, SequenceAt, SequenceErase,
 * SequenceLength, SplitToSequence, ConcatFromSequence, Optional,
 * OptionalHasElement, OptionalGetElement.
 *
 * How the values travel is in ops/op.h (nn_seq) and docs/sequences.md: a
 * sequence is immutable, lives in call->pool and shares its items with the
 * sequences made from it.  The outputs that are tensors are the engine's, as
 * for every op; the sequences are made here, in the pool. */
#include <string.h>

#include "../engine/arena.h"
#include "op.h"

/* ---- helpers shared with every op (declared in op.h) */

nn_seq *nn_seq_new(nn_arena *pool, nn_dtype elem, int64_t cap) {
    if (cap < 4) cap = 4;
    nn_seq *s = nn_arena_alloc(pool, sizeof *s);
    nn_tensor *items = nn_arena_alloc(pool, sizeof(nn_tensor) * (size_t)cap);
    int64_t *used = nn_arena_alloc(pool, sizeof *used);
    if (!s || !items || !used) return NULL;
    *s = (nn_seq){.elem = elem, .n = 0, .items = items, .used = used, .cap = cap};
    return s;
}

char *nn_pool_strndup(nn_arena *pool, const char *s, size_t len) {
    char *d = nn_arena_alloc(pool, len + 1);
    if (d && len) memcpy(d, s, len);
    return d;
}

nn_status nn_seq_item(nn_call *c, const nn_tensor *t, nn_tensor *item) {
    *item = *t;
    size_t bytes = (size_t)nn_tensor_elements(t) * nn_dtype_size(t->dtype);
    item->data = nn_arena_alloc(c->pool, bytes ? bytes : 1);
    if (!item->data) return nn_call_error(c, NN_ERR_NOMEM, "out of memory for a sequence item (%zu bytes)", bytes);
    if (bytes) memcpy(item->data, t->data, bytes);
    return NN_OK;
}

nn_status nn_input_seq(nn_call *c, int i, const nn_seq **out) {
    *out = NULL;
    if (!nn_present(c, i) || c->in[i].dtype != NN_DTYPE_SEQUENCE)
        return nn_call_error(c, NN_ERR_INVALID, "input %d must be a sequence, got %s", i,
                             c->in[i].dtype == NN_DTYPE_NONE ? "an empty optional"
                             : nn_present(c, i)              ? "a tensor"
                                                             : "nothing");
    *out = c->in[i].data;
    return *out ? NN_OK : NN_DYNAMIC; /* known at run time */
}

void nn_output_seq(nn_call *c, int k, const nn_seq *s) {
    memset(&c->out[k], 0, sizeof c->out[k]);
    c->out[k].dtype = NN_DTYPE_SEQUENCE;
    c->out[k].data = (void *)s;
}

/* A tensor input that goes into a sequence (or is read as a position):
 * known at run time, NN_DYNAMIC before. */
static nn_status need_tensor(nn_call *c, int i) {
    const nn_tensor *t = &c->in[i];
    if (nn_dtype_is_container(t->dtype))
        return nn_call_error(c, NN_ERR_INVALID, "input %d must be a tensor, got a %s", i,
                             t->dtype == NN_DTYPE_NONE ? "empty optional" : "sequence");
    if (!nn_dtype_size(t->dtype))
        return nn_call_error(c, NN_ERR_UNSUPPORTED, "input %d has dtype %s, which is not supported", i,
                             nn_dtype_name(t->dtype));
    return t->data || nn_tensor_elements(t) == 0 ? NN_OK : NN_DYNAMIC;
}

/* A position input (a scalar int32/int64), normalized against `n`
 * (positions in [-n, n + extra) are valid). */
static nn_status position(nn_call *c, int i, int64_t n, int64_t extra, int64_t dflt, int64_t *pos) {
    *pos = dflt;
    if (!nn_present(c, i)) return NN_OK;
    nn_status st = need_tensor(c, i);
    if (st != NN_OK) return st;
    const nn_tensor *t = &c->in[i];
    if ((t->dtype != NN_DTYPE_INT64 && t->dtype != NN_DTYPE_INT32) || nn_tensor_elements(t) != 1 || t->ndim > 1)
        return nn_call_error(c, NN_ERR_INVALID, "position must be a scalar int32 or int64, got %s of %lld values",
                             nn_dtype_name(t->dtype), (long long)nn_tensor_elements(t));
    int64_t p = nn_tensor_get_int(t, 0);
    if (p < -n || p >= n + extra)
        return nn_call_error(c, NN_ERR_INVALID, "position %lld is out of range for a sequence of %lld tensors",
                             (long long)p, (long long)n);
    *pos = p < 0 ? p + n : p;
    return NN_OK;
}

static nn_status check_length(nn_call *c, int64_t n) {
    if (n > NN_SEQ_MAX_LENGTH)
        return nn_call_error(c, NN_ERR_UNSUPPORTED,
                             "a sequence of %lld tensors is longer than NN_SEQ_MAX_LENGTH (%d, ops/op.h)", (long long)n,
                             NN_SEQ_MAX_LENGTH);
    return NN_OK;
}

static nn_status out_of_memory(nn_call *c) { return nn_call_error(c, NN_ERR_NOMEM, "out of memory for a sequence"); }

/* A sequence out: its dtype only (run makes it) */
static nn_status infer_seq_out(nn_call *c) {
    memset(&c->out[0], 0, sizeof c->out[0]);
    c->out[0].dtype = NN_DTYPE_SEQUENCE;
    return NN_OK;
}

/* ---- SequenceEmpty: `dtype` attribute, FLOAT by default */

typedef struct seq_empty_params {
    int64_t dtype;
} seq_empty_params;

static nn_status parse_SequenceEmpty(nn_parse_ctx *ctx) {
    seq_empty_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    nn_status st = nn_attr_int(ctx, "dtype", NN_DTYPE_FLOAT, &p->dtype);
    if (st == NN_OK && (p->dtype <= 0 || p->dtype >= 32 || !nn_dtype_size((nn_dtype)p->dtype)))
        return nn_parse_error(ctx, NN_ERR_UNSUPPORTED, "dtype %lld is not supported", (long long)p->dtype);
    return st;
}

static nn_status check_SequenceEmpty(const void *params, char *err, size_t err_size) {
    const seq_empty_params *p = params;
    if (p->dtype <= 0 || p->dtype >= 32 || !nn_dtype_size((nn_dtype)p->dtype))
        return nn_check_error(err, err_size, "dtype %lld is not supported", (long long)p->dtype);
    return NN_OK;
}

static nn_status run_SequenceEmpty(nn_call *c) {
    nn_seq *s = nn_seq_new(c->pool, (nn_dtype)((const seq_empty_params *)c->params)->dtype, 0);
    if (!s) return out_of_memory(c);
    nn_output_seq(c, 0, s);
    return NN_OK;
}

const nn_op_desc nn_op_SequenceEmpty = {.name = "SequenceEmpty",
                                        .min_inputs = 0,
                                        .max_inputs = 0,
                                        .min_outputs = 1,
                                        .max_outputs = 1,
                                        .flags = NN_OPF_CONTAINER | NN_OPF_ANY_DTYPE,
                                        .parse = parse_SequenceEmpty,
                                        .check = check_SequenceEmpty,
                                        .infer = infer_seq_out,
                                        .run = run_SequenceEmpty};

/* ---- SequenceConstruct: its inputs, all of one dtype */

static nn_status infer_SequenceConstruct(nn_call *c) {
    nn_status st = check_length(c, c->n_in);
    for (int i = 0; i < c->n_in && st == NN_OK; i++) {
        if ((st = need_tensor(c, i)) != NN_OK) return st;
        if (c->in[i].dtype != c->in[0].dtype)
            return nn_call_error(c, NN_ERR_INVALID, "input %d is %s, input 0 %s: a sequence holds one dtype", i,
                                 nn_dtype_name(c->in[i].dtype), nn_dtype_name(c->in[0].dtype));
    }
    return st == NN_OK ? infer_seq_out(c) : st;
}

static nn_status run_SequenceConstruct(nn_call *c) {
    nn_seq *s = nn_seq_new(c->pool, c->in[0].dtype, c->n_in);
    if (!s) return out_of_memory(c);
    for (int i = 0; i < c->n_in; i++) {
        nn_status st = nn_seq_item(c, &c->in[i], (nn_tensor *)&s->items[i]);
        if (st != NN_OK) return st;
    }
    s->n = *s->used = c->n_in;
    nn_output_seq(c, 0, s);
    return NN_OK;
}

const nn_op_desc nn_op_SequenceConstruct = {.name = "SequenceConstruct",
                                            .min_inputs = 1,
                                            .max_inputs = -1,
                                            .min_outputs = 1,
                                            .max_outputs = 1,
                                            .flags = NN_OPF_CONTAINER | NN_OPF_ANY_DTYPE,
                                            .infer = infer_SequenceConstruct,
                                            .run = run_SequenceConstruct};

/* ---- SequenceInsert(sequence, tensor, position = n) */

static nn_status infer_SequenceInsert(nn_call *c) {
    const nn_seq *s = NULL;
    int64_t pos = 0;
    nn_status st = nn_input_seq(c, 0, &s);
    if (st == NN_OK) st = need_tensor(c, 1);
    if (st == NN_OK) st = position(c, 2, s->n, 1, s->n, &pos);
    if (st == NN_OK) st = check_length(c, s->n + 1);
    if (st != NN_OK) return st;
    if (c->in[1].dtype != s->elem)
        return nn_call_error(c, NN_ERR_INVALID, "tensor is %s, the sequence holds %s", nn_dtype_name(c->in[1].dtype),
                             nn_dtype_name(s->elem));
    return infer_seq_out(c);
}

static nn_status run_SequenceInsert(nn_call *c) {
    const nn_seq *s = c->in[0].data;
    int64_t pos = 0;
    nn_status st = position(c, 2, s->n, 1, s->n, &pos);
    if (st != NN_OK) return st;
    nn_tensor item;
    if ((st = nn_seq_item(c, &c->in[1], &item)) != NN_OK) return st;
    nn_seq *out = nn_arena_alloc(c->pool, sizeof *out);
    if (!out) return out_of_memory(c);
    if (pos == s->n && s->used && *s->used == s->n && s->n < s->cap) {
        /* appending to the newest sequence of a shared array: in place (see nn_seq) */
        *out = *s;
        ((nn_tensor *)s->items)[s->n] = item;
        out->n = ++*s->used;
    } else {
        nn_seq *grown = nn_seq_new(c->pool, s->elem, s->n < 2 ? 4 : 2 * s->n);
        if (!grown) return out_of_memory(c);
        nn_tensor *items = (nn_tensor *)grown->items;
        /* an empty sequence may hold no item array at all: nothing to copy, and memcpy takes no NULL */
        if (pos) memcpy(items, s->items, sizeof *items * (size_t)pos);
        items[pos] = item;
        if (s->n > pos) memcpy(items + pos + 1, s->items + pos, sizeof *items * (size_t)(s->n - pos));
        grown->n = *grown->used = s->n + 1;
        *out = *grown;
    }
    nn_output_seq(c, 0, out);
    return NN_OK;
}

const nn_op_desc nn_op_SequenceInsert = {.name = "SequenceInsert",
                                         .min_inputs = 2,
                                         .max_inputs = 3,
                                         .min_outputs = 1,
                                         .max_outputs = 1,
                                         .flags = NN_OPF_CONTAINER | NN_OPF_ANY_DTYPE,
                                         .infer = infer_SequenceInsert,
                                         .run = run_SequenceInsert};

/* ---- SequenceAt(sequence, position): a copy of one item */

static nn_status infer_SequenceAt(nn_call *c) {
    const nn_seq *s = NULL;
    int64_t pos = 0;
    nn_status st = nn_input_seq(c, 0, &s);
    if (st == NN_OK) st = position(c, 1, s->n, 0, 0, &pos);
    if (st != NN_OK) return st;
    nn_tensor_set_shape(&c->out[0], s->items[pos].dtype, s->items[pos].ndim, s->items[pos].dims);
    return NN_OK;
}

static nn_status run_SequenceAt(nn_call *c) {
    const nn_seq *s = c->in[0].data;
    int64_t pos = 0;
    nn_status st = position(c, 1, s->n, 0, 0, &pos);
    if (st != NN_OK) return st;
    size_t bytes = (size_t)nn_tensor_elements(&s->items[pos]) * nn_dtype_size(s->items[pos].dtype);
    if (bytes) memcpy(c->out[0].data, s->items[pos].data, bytes);
    return NN_OK;
}

const nn_op_desc nn_op_SequenceAt = {.name = "SequenceAt",
                                     .min_inputs = 2,
                                     .max_inputs = 2,
                                     .min_outputs = 1,
                                     .max_outputs = 1,
                                     .flags = NN_OPF_CONTAINER | NN_OPF_ANY_DTYPE,
                                     .infer = infer_SequenceAt,
                                     .run = run_SequenceAt};

/* ---- SequenceErase(sequence, position = -1) */

static nn_status infer_SequenceErase(nn_call *c) {
    const nn_seq *s = NULL;
    int64_t pos = 0;
    nn_status st = nn_input_seq(c, 0, &s);
    if (st == NN_OK) st = position(c, 1, s->n, 0, s->n - 1, &pos);
    if (st == NN_OK && s->n == 0) st = nn_call_error(c, NN_ERR_INVALID, "cannot erase from an empty sequence");
    return st == NN_OK ? infer_seq_out(c) : st;
}

static nn_status run_SequenceErase(nn_call *c) {
    const nn_seq *s = c->in[0].data;
    int64_t pos = 0;
    nn_status st = position(c, 1, s->n, 0, s->n - 1, &pos);
    if (st != NN_OK) return st;
    nn_seq *out;
    if (pos == s->n - 1) { /* the first n - 1 items: shared, but never appended to in place */
        if (!(out = nn_arena_alloc(c->pool, sizeof *out))) return out_of_memory(c);
        *out = (nn_seq){.elem = s->elem, .n = s->n - 1, .items = s->items, .used = NULL, .cap = s->n - 1};
    } else {
        if (!(out = nn_seq_new(c->pool, s->elem, s->n))) return out_of_memory(c);
        nn_tensor *items = (nn_tensor *)out->items;
        if (pos) memcpy(items, s->items, sizeof *items * (size_t)pos);
        if (s->n > pos + 1) memcpy(items + pos, s->items + pos + 1, sizeof *items * (size_t)(s->n - pos - 1));
        out->n = *out->used = s->n - 1;
    }
    nn_output_seq(c, 0, out);
    return NN_OK;
}

const nn_op_desc nn_op_SequenceErase = {.name = "SequenceErase",
                                        .min_inputs = 1,
                                        .max_inputs = 2,
                                        .min_outputs = 1,
                                        .max_outputs = 1,
                                        .flags = NN_OPF_CONTAINER | NN_OPF_ANY_DTYPE,
                                        .infer = infer_SequenceErase,
                                        .run = run_SequenceErase};

/* ---- SequenceLength: an int64 scalar */

static nn_status infer_SequenceLength(nn_call *c) {
    const nn_seq *s = NULL;
    nn_status st = nn_input_seq(c, 0, &s);
    if (st != NN_OK) return st;
    nn_tensor_set_shape(&c->out[0], NN_DTYPE_INT64, 0, NULL);
    return NN_OK;
}

static nn_status run_SequenceLength(nn_call *c) {
    *(int64_t *)c->out[0].data = ((const nn_seq *)c->in[0].data)->n;
    return NN_OK;
}

const nn_op_desc nn_op_SequenceLength = {.name = "SequenceLength",
                                         .min_inputs = 1,
                                         .max_inputs = 1,
                                         .min_outputs = 1,
                                         .max_outputs = 1,
                                         .flags = NN_OPF_CONTAINER | NN_OPF_ANY_DTYPE,
                                         .infer = infer_SequenceLength,
                                         .run = run_SequenceLength};

/* ---- SplitToSequence(input, split?; axis = 0, keepdims = 1) */

typedef struct split_seq_params {
    int64_t axis;
    bool keepdims;
} split_seq_params;

static nn_status parse_SplitToSequence(nn_parse_ctx *ctx) {
    split_seq_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    int64_t keep;
    nn_status st = nn_attr_int(ctx, "axis", 0, &p->axis);
    if (st == NN_OK) st = nn_attr_int(ctx, "keepdims", 1, &keep);
    if (st != NN_OK) return st;
    p->keepdims = keep != 0;
    if (!nn_check_axis(p->axis))
        return nn_parse_error(ctx, NN_ERR_INVALID, "axis %lld is out of range", (long long)p->axis);
    return NN_OK;
}

static nn_status check_SplitToSequence(const void *params, char *err, size_t err_size) {
    const split_seq_params *p = params;
    if (!nn_check_axis(p->axis) || !nn_check_bool(&p->keepdims))
        return nn_check_error(err, err_size, "axis %lld or keepdims is out of range", (long long)p->axis);
    return NN_OK;
}

/* The chunk sizes along the axis: from `split` (a scalar: chunks of that
 * size, the last one smaller; a list: those sizes), or 1 each.  *n chunks,
 * at most `cap`; *squeeze when the axis goes (no split, keepdims 0). */
static nn_status split_sizes(nn_call *c, int64_t *axis, int64_t *sizes, int64_t cap, int64_t *n, bool *squeeze) {
    const split_seq_params *p = c->params;
    const nn_tensor *x = &c->in[0];
    nn_status st = need_tensor(c, 0);
    if (st == NN_OK && nn_present(c, 1)) st = need_tensor(c, 1);
    if (st != NN_OK) return st;
    if (!nn_axis_normalize(p->axis, x->ndim, axis))
        return nn_call_error(c, NN_ERR_INVALID, "axis %lld is out of range for rank %d", (long long)p->axis, x->ndim);
    int64_t len = x->dims[*axis];
    *squeeze = false;
    if (!nn_present(c, 1)) {
        *squeeze = !p->keepdims;
        if ((st = check_length(c, len)) != NN_OK) return st;
        *n = len;
        for (int64_t k = 0; k < len && sizes; k++)
            sizes[k] = 1;
        return NN_OK;
    }
    const nn_tensor *sp = &c->in[1];
    if (sp->dtype != NN_DTYPE_INT64 && sp->dtype != NN_DTYPE_INT32)
        return nn_call_error(c, NN_ERR_INVALID, "split must be int32 or int64, got %s", nn_dtype_name(sp->dtype));
    int64_t count = nn_tensor_elements(sp);
    if (sp->ndim == 0) {
        int64_t size = nn_tensor_get_int(sp, 0);
        if (size <= 0) return nn_call_error(c, NN_ERR_INVALID, "split %lld must be positive", (long long)size);
        *n = len == 0 ? 0 : (len + size - 1) / size;
        if ((st = check_length(c, *n)) != NN_OK) return st;
        for (int64_t k = 0; k < *n && sizes; k++)
            sizes[k] = k + 1 < *n ? size : len - size * (*n - 1);
        return NN_OK;
    }
    if (sp->ndim != 1) return nn_call_error(c, NN_ERR_SHAPE, "split must be a scalar or 1-D, got rank %d", sp->ndim);
    if ((st = check_length(c, count)) != NN_OK) return st;
    int64_t total = 0;
    for (int64_t k = 0; k < count; k++) {
        int64_t v = nn_tensor_get_int(sp, k);
        if (v < 0 || v > len - total)
            return nn_call_error(c, NN_ERR_INVALID, "split sizes do not add up to the axis' %lld", (long long)len);
        total += v;
        if (sizes && k < cap) sizes[k] = v;
    }
    if (total != len)
        return nn_call_error(c, NN_ERR_INVALID, "split sizes add up to %lld, the axis has %lld", (long long)total,
                             (long long)len);
    *n = count;
    return NN_OK;
}

static nn_status infer_SplitToSequence(nn_call *c) {
    int64_t axis, n;
    bool squeeze;
    nn_status st = split_sizes(c, &axis, NULL, 0, &n, &squeeze);
    return st == NN_OK ? infer_seq_out(c) : st;
}

static nn_status run_SplitToSequence(nn_call *c) {
    int64_t axis, n;
    bool squeeze;
    nn_status st = split_sizes(c, &axis, NULL, 0, &n, &squeeze);
    if (st != NN_OK) return st;
    const nn_tensor *x = &c->in[0];
    nn_seq *s = nn_seq_new(c->pool, x->dtype, n);
    int64_t *sizes = nn_arena_alloc(c->pool, sizeof(int64_t) * (size_t)(n + 1));
    if (!s || !sizes) return out_of_memory(c);
    if ((st = split_sizes(c, &axis, sizes, n, &n, &squeeze)) != NN_OK) return st;
    /* rows: the product of the dims before the axis; inner: bytes after it */
    size_t esz = nn_dtype_size(x->dtype);
    int64_t rows = nn_shape_elements(x->dims, (int)axis);
    int64_t inner = nn_shape_elements(x->dims + axis + 1, x->ndim - (int)axis - 1) * (int64_t)esz;
    int64_t at = 0;
    for (int64_t k = 0; k < n; k++) {
        nn_tensor *item = (nn_tensor *)&s->items[k];
        *item = *x;
        item->dims[axis] = sizes[k];
        if (squeeze) {
            memmove(item->dims + axis, item->dims + axis + 1, sizeof(int64_t) * (size_t)(x->ndim - axis - 1));
            item->ndim--;
        }
        size_t chunk = (size_t)(sizes[k] * inner), bytes = (size_t)rows * chunk;
        char *dst = nn_arena_alloc(c->pool, bytes ? bytes : 1);
        if (!dst) return out_of_memory(c);
        for (int64_t r = 0; r < rows; r++)
            memcpy(dst + (size_t)r * chunk, (const char *)x->data + (size_t)(r * x->dims[axis] + at) * (size_t)inner,
                   chunk);
        item->data = dst;
        at += sizes[k];
    }
    s->n = *s->used = n;
    nn_output_seq(c, 0, s);
    return NN_OK;
}

const nn_op_desc nn_op_SplitToSequence = {.name = "SplitToSequence",
                                          .min_inputs = 1,
                                          .max_inputs = 2,
                                          .min_outputs = 1,
                                          .max_outputs = 1,
                                          .flags = NN_OPF_CONTAINER | NN_OPF_ANY_DTYPE,
                                          .parse = parse_SplitToSequence,
                                          .check = check_SplitToSequence,
                                          .infer = infer_SplitToSequence,
                                          .run = run_SplitToSequence};

/* ---- ConcatFromSequence(sequence; axis, new_axis = 0): Concat of the
 * items, or with new_axis their Stack */

typedef struct concat_seq_params {
    int64_t axis;
    bool new_axis;
} concat_seq_params;

static nn_status parse_ConcatFromSequence(nn_parse_ctx *ctx) {
    concat_seq_params *p = nn_params_alloc(ctx, sizeof *p);
    if (!p) return NN_ERR_NOMEM;
    ctx->params = p;
    if (!nn_attr_find(ctx, "axis")) return nn_parse_error(ctx, NN_ERR_INVALID, "attribute 'axis' is required");
    int64_t new_axis;
    nn_status st = nn_attr_int(ctx, "axis", 0, &p->axis);
    if (st == NN_OK) st = nn_attr_int(ctx, "new_axis", 0, &new_axis);
    if (st != NN_OK) return st;
    if (new_axis != 0 && new_axis != 1)
        return nn_parse_error(ctx, NN_ERR_INVALID, "new_axis must be 0 or 1, got %lld", (long long)new_axis);
    p->new_axis = new_axis;
    if (!nn_check_axis(p->axis) && p->axis != NN_MAX_DIMS)
        return nn_parse_error(ctx, NN_ERR_INVALID, "axis %lld is out of range", (long long)p->axis);
    return NN_OK;
}

static nn_status check_ConcatFromSequence(const void *params, char *err, size_t err_size) {
    const concat_seq_params *p = params;
    if ((!nn_check_axis(p->axis) && p->axis != NN_MAX_DIMS) || !nn_check_bool(&p->new_axis))
        return nn_check_error(err, err_size, "axis %lld or new_axis is out of range", (long long)p->axis);
    return NN_OK;
}

/* The output shape; *axis normalized against the output's rank. */
static nn_status concat_seq_shape(nn_call *c, const nn_seq *s, int64_t *axis, nn_tensor *out) {
    const concat_seq_params *p = c->params;
    if (s->n == 0) return nn_call_error(c, NN_ERR_INVALID, "cannot concatenate an empty sequence");
    const nn_tensor *first = &s->items[0];
    int rank = first->ndim + (p->new_axis ? 1 : 0);
    if (rank > NN_MAX_DIMS || !nn_axis_normalize(p->axis, rank, axis) || (!p->new_axis && rank == 0))
        return nn_call_error(c, NN_ERR_INVALID, "axis %lld is out of range for items of rank %d", (long long)p->axis,
                             first->ndim);
    int64_t dims[NN_MAX_DIMS], total = 0;
    for (int64_t k = 0; k < s->n; k++) {
        const nn_tensor *t = &s->items[k];
        bool same = t->ndim == first->ndim && t->dtype == first->dtype;
        for (int d = 0; same && d < t->ndim; d++)
            same = t->dims[d] == first->dims[d] || (!p->new_axis && d == *axis);
        if (!same)
            return nn_call_error(c, NN_ERR_SHAPE, "item %lld does not fit item 0 along axis %lld", (long long)k,
                                 (long long)*axis);
        if (!p->new_axis && __builtin_add_overflow(total, t->dims[*axis], &total))
            return nn_call_error(c, NN_ERR_SHAPE, "the concatenation overflows");
    }
    for (int d = 0, src = 0; d < rank; d++)
        dims[d] = p->new_axis && d == *axis ? s->n : first->dims[src++];
    if (!p->new_axis) dims[*axis] = total;
    nn_tensor_set_shape(out, first->dtype, rank, dims);
    return NN_OK;
}

static nn_status infer_ConcatFromSequence(nn_call *c) {
    const nn_seq *s = NULL;
    int64_t axis;
    nn_status st = nn_input_seq(c, 0, &s);
    return st == NN_OK ? concat_seq_shape(c, s, &axis, &c->out[0]) : st;
}

static nn_status run_ConcatFromSequence(nn_call *c) {
    const nn_seq *s = c->in[0].data;
    int64_t axis;
    nn_tensor shape;
    nn_status st = concat_seq_shape(c, s, &axis, &shape);
    if (st != NN_OK) return st;
    /* each item is rows x (its extent along the axis x inner) bytes */
    size_t esz = nn_dtype_size(shape.dtype);
    int64_t rows = nn_shape_elements(shape.dims, (int)axis);
    int64_t inner = nn_shape_elements(shape.dims + axis + 1, shape.ndim - (int)axis - 1) * (int64_t)esz;
    size_t row_out = (size_t)(shape.dims[axis] * inner);
    int64_t at = 0;
    for (int64_t k = 0; k < s->n; k++) {
        const nn_tensor *t = &s->items[k];
        int64_t extent = ((const concat_seq_params *)c->params)->new_axis ? 1 : t->dims[axis];
        size_t chunk = (size_t)(extent * inner);
        for (int64_t r = 0; r < rows && chunk; r++)
            memcpy((char *)c->out[0].data + (size_t)r * row_out + (size_t)(at * inner),
                   (const char *)t->data + (size_t)r * chunk, chunk);
        at += extent;
    }
    return NN_OK;
}

const nn_op_desc nn_op_ConcatFromSequence = {.name = "ConcatFromSequence",
                                             .min_inputs = 1,
                                             .max_inputs = 1,
                                             .min_outputs = 1,
                                             .max_outputs = 1,
                                             .flags = NN_OPF_CONTAINER | NN_OPF_ANY_DTYPE,
                                             .parse = parse_ConcatFromSequence,
                                             .check = check_ConcatFromSequence,
                                             .infer = infer_ConcatFromSequence,
                                             .run = run_ConcatFromSequence};

/* ---- Optional(input?): the input itself, or empty (its `type` attribute
 * only says what an empty one would hold) */

/* The output is input 0 as it is: a tensor (copied into the engine's
 * output) or a sequence (shared); NONE when input 0 is absent or empty. */
static nn_status infer_pass(nn_call *c) {
    memset(&c->out[0], 0, sizeof c->out[0]);
    if (!nn_present(c, 0) || c->in[0].dtype == NN_DTYPE_NONE) {
        c->out[0].dtype = NN_DTYPE_NONE;
        return NN_OK;
    }
    if (c->in[0].dtype == NN_DTYPE_SEQUENCE) {
        if (!c->in[0].data) return NN_DYNAMIC;
        return infer_seq_out(c);
    }
    nn_status st = need_tensor(c, 0);
    if (st != NN_OK && st != NN_DYNAMIC) return st;
    nn_tensor_set_shape(&c->out[0], c->in[0].dtype, c->in[0].ndim, c->in[0].dims);
    return NN_OK;
}

static nn_status run_pass(nn_call *c) {
    if (c->out[0].dtype == NN_DTYPE_NONE) return NN_OK;
    if (c->out[0].dtype == NN_DTYPE_SEQUENCE) {
        nn_output_seq(c, 0, c->in[0].data);
        return NN_OK;
    }
    size_t bytes = (size_t)nn_tensor_elements(&c->in[0]) * nn_dtype_size(c->in[0].dtype);
    if (bytes && c->out[0].data != c->in[0].data) memcpy(c->out[0].data, c->in[0].data, bytes);
    return NN_OK;
}

const nn_op_desc nn_op_Optional = {.name = "Optional",
                                   .min_inputs = 0,
                                   .max_inputs = 1,
                                   .min_outputs = 1,
                                   .max_outputs = 1,
                                   .flags = NN_OPF_CONTAINER | NN_OPF_ANY_DTYPE,
                                   .infer = infer_pass,
                                   .run = run_pass};

/* ---- OptionalGetElement: the element; an empty optional is an error.
 * Opset 18 also takes a plain tensor or sequence (returned as it is). */

static nn_status infer_OptionalGetElement(nn_call *c) {
    if (c->in[0].dtype == NN_DTYPE_NONE)
        return nn_call_error(c, NN_ERR_INVALID, "the optional is empty: it has no element to get");
    return infer_pass(c);
}

const nn_op_desc nn_op_OptionalGetElement = {.name = "OptionalGetElement",
                                             .min_inputs = 1,
                                             .max_inputs = 1,
                                             .min_outputs = 1,
                                             .max_outputs = 1,
                                             .flags = NN_OPF_CONTAINER | NN_OPF_ANY_DTYPE,
                                             .infer = infer_OptionalGetElement,
                                             .run = run_pass};

/* ---- OptionalHasElement: a bool scalar; false for an empty or absent input */

static nn_status infer_OptionalHasElement(nn_call *c) {
    if (nn_present(c, 0) && c->in[0].dtype == NN_DTYPE_SEQUENCE && !c->in[0].data) return NN_DYNAMIC;
    nn_tensor_set_shape(&c->out[0], NN_DTYPE_BOOL, 0, NULL);
    return NN_OK;
}

static nn_status run_OptionalHasElement(nn_call *c) {
    *(uint8_t *)c->out[0].data = nn_present(c, 0) && c->in[0].dtype != NN_DTYPE_NONE;
    return NN_OK;
}

const nn_op_desc nn_op_OptionalHasElement = {.name = "OptionalHasElement",
                                             .min_inputs = 0,
                                             .max_inputs = 1,
                                             .min_outputs = 1,
                                             .max_outputs = 1,
                                             .flags = NN_OPF_CONTAINER | NN_OPF_ANY_DTYPE,
                                             .infer = infer_OptionalHasElement,
                                             .run = run_OptionalHasElement};
