/* Control-flow bodies (docs/control-flow.md): each GRAPH attribute is a
 * nested model, prepared once its parent's graph is final (the outer values
 * it reads take their types from the parent), optimized and planned like
 * any graph, and run by its node's kernel through nn_body_run. */
#include <stdlib.h>
#include <string.h>

#include "../ops/registry.h"
#include "../passes/pass.h"
#include "backend.h"
#include "error.h"
#include "model.h"
#include "values.h"

nn_model *nn_body_new(int depth) {
    nn_model *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->g.weights.chunk_size = 1 << 16;
    m->depth = depth;
    m->opt = nn_options_default();
    m->opt.cache = 0;
    snprintf(m->device, sizeof m->device, "cpu");
    m->opt.device = m->device;
    m->batch = m->plan_batch = 1;
    m->threads = m->kernel_threads = 1;
    m->backend = &nn_cpu_backend; /* a body runs inside its node's kernel, on the CPU */
    pthread_mutex_init(&m->lock, NULL);
    return m;
}

/* The body's graph inputs past its formal ones take the types of the node
 * inputs that feed them; then it loads as a graph of its own. */
static nn_status prepare_body(const nn_model *m, const nn_node *n, const nn_subgraph *sub) {
    nn_model *b = sub->body;
    nn_graph *g = &b->g;
    b->opt = m->opt;
    b->opt.device = b->device;
    b->opt.cache = 0;
    b->opt.batch = 1;
    b->opt.micro_batch = 0;
    b->opt.profile = 0;
    b->threads = b->kernel_threads = m->threads;
    nn_status st;
    if (b->from_cache) /* the plan cache read it as planned, and checked its wiring */
        return (st = nn_bodies_prepare(b)) != NN_OK ? st : nn_make_runnable(b);
    if (sub->n_formal < 0 || sub->n_captured < 0 || sub->n_formal + sub->n_captured != g->n_inputs ||
        sub->capture_first < 0 || sub->capture_first + sub->n_captured > n->n_in)
        return nn_set_error(NN_ERR_INTERNAL, "node '%s': its body's inputs do not match the node's", n->name);
    for (int j = 0; j < sub->n_captured; j++) {
        int src = n->in[sub->capture_first + j];
        nn_value *v = &g->values[g->inputs[sub->n_formal + j]];
        if (src < 0) return nn_set_error(NN_ERR_INTERNAL, "node '%s': outer value '%s' is unwired", n->name, v->name);
        const nn_value *o = &m->g.values[src];
        v->t = o->t;
        v->t.data = NULL;
        v->kind = o->kind;
        v->elem_kind = o->elem_kind;
        /* the model's batch dimension is bound at load, but a dynamic model
         * takes any batch at run time: a body planned for the bound one would refuse it */
        if (!o->shape_known || m->has_batch) v->t.ndim = -1;
    }
    int folded;
    if ((st = nn_bind_inputs(b)) != NN_OK || (st = nn_infer_graph(b, false, &folded)) != NN_OK ||
        (b->opt.optimize && (st = nn_optimize(b, NULL, NULL)) != NN_OK) || (st = nn_bodies_prepare(b)) != NN_OK ||
        (st = nn_make_runnable(b)) != NN_OK)
        return st;
    return NN_OK;
}

nn_status nn_bodies_prepare(nn_model *m) {
    for (int i = 0; i < m->g.n_nodes; i++) {
        const nn_node *n = &m->g.nodes[i];
        const nn_op_desc *d = nn_op_get(n->op);
        if (!(d->flags & NN_OPF_SUBGRAPH)) continue;
        const nn_subgraph_set *set = n->params;
        for (int k = 0; set && k < set->n && k < 2; k++) {
            if (set->g[k].body->lanes) continue; /* prepared already */
            nn_status st = prepare_body(m, n, &set->g[k]);
            if (st != NN_OK) {
                char why[512];
                snprintf(why, sizeof why, "%s", nn_last_error());
                return nn_set_error(st, "node '%s' (%s), body '%s': %s", n->name, d->name,
                                    set->g[k].body->g.name, why);
            }
            /* the plan cache cannot store a body's sequences any more than the graph's */
            m->g.has_containers |= set->g[k].body->g.has_containers;
        }
    }
    return NN_OK;
}

int nn_body_inputs(const nn_model *body) { return body->g.n_inputs; }
int nn_body_outputs(const nn_model *body) { return body->g.n_outputs; }
const char *nn_body_name(const nn_model *body) { return body->g.name ? body->g.name : ""; }
nn_tensor nn_body_declared_output(const nn_model *body, int k) { return body->g.declared_out[k]; }

int64_t nn_loop_max(void) {
    const char *s = getenv("NN_LOOP_MAX");
    if (s && *s) {
        char *end;
        long long v = strtoll(s, &end, 10);
        if (!*end && v > 0) return v;
    }
    return NN_LOOP_MAX_DEFAULT;
}

static size_t tensor_bytes(const nn_tensor *t) { return (size_t)nn_tensor_elements(t) * nn_dtype_size(t->dtype); }

static void shape_string(const nn_tensor *t, char *buf, size_t size) {
    if (t->ndim < 0) {
        snprintf(buf, size, "%s of any shape", nn_dtype_name(t->dtype));
        return;
    }
    size_t at = (size_t)snprintf(buf, size, "%s [", nn_dtype_name(t->dtype));
    for (int d = 0; d < t->ndim && at < size; d++) {
        if (t->dims[d] >= 0)
            at += (size_t)snprintf(buf + at, size - at, "%s%lld", d ? "," : "", (long long)t->dims[d]);
        else
            at += (size_t)snprintf(buf + at, size - at, "%s?", d ? "," : "");
    }
    if (at < size) snprintf(buf + at, size - at, "]");
}

/* Whether t fits `want` (its dtype unless undefined, its rank unless open,
 * its fixed dims). */
static bool fits(const nn_tensor *t, const nn_tensor *want) {
    if (want->dtype != NN_DTYPE_UNDEFINED && t->dtype != want->dtype) return false;
    if (want->ndim < 0) return true;
    if (t->ndim != want->ndim) return false;
    for (int d = 0; d < t->ndim; d++)
        if (want->dims[d] >= 0 && t->dims[d] != want->dims[d]) return false;
    return true;
}

/* Whether run-time value t fits a body input or output of `kind` declared
 * as `want` (for a sequence or optional: its element).  An open type (no
 * dtype, no rank) takes any value. */
static bool fits_value(const nn_value *v, const nn_tensor *t, const nn_tensor *want) {
    if (v->kind == NN_KIND_TENSOR) {
        if (want->dtype == NN_DTYPE_UNDEFINED && want->ndim < 0) return true;
        return !nn_dtype_is_container(t->dtype) && fits(t, want);
    }
    if (v->kind == NN_KIND_OPTIONAL && t->dtype == NN_DTYPE_NONE) return true;
    if (v->kind == NN_KIND_SEQUENCE || v->elem_kind == NN_KIND_SEQUENCE) {
        const nn_seq *s = t->data;
        if (t->dtype != NN_DTYPE_SEQUENCE || !s) return false;
        /* an empty sequence read from a file may not name its dtype */
        bool any = want->dtype == NN_DTYPE_UNDEFINED || nn_dtype_is_container(want->dtype) || s->n == 0;
        return any || s->elem == want->dtype;
    }
    return !nn_dtype_is_container(t->dtype) && fits(t, want);
}

static void value_string(const nn_value *v, const nn_tensor *t, bool declared, char *buf, size_t size) {
    if (declared && v->kind != NN_KIND_TENSOR) {
        char e[120];
        shape_string(t, e, sizeof e);
        snprintf(buf, size, "%s(%s)", v->kind == NN_KIND_SEQUENCE ? "seq" : "optional", e);
    } else if (!declared && t->dtype == NN_DTYPE_SEQUENCE) {
        snprintf(buf, size, "a sequence");
    } else if (!declared && t->dtype == NN_DTYPE_NONE) {
        snprintf(buf, size, "an empty optional");
    } else {
        shape_string(t, buf, size);
    }
}

static nn_status mismatch(const nn_call *call, const nn_model *b, const char *role, const nn_value *v,
                          const nn_tensor *got, const nn_tensor *want) {
    char g[160], w[160];
    value_string(v, got, false, g, sizeof g);
    value_string(v, want, true, w, sizeof w);
    return nn_call_error(call, NN_ERR_SHAPE, "body '%s': %s '%s' is %s, declared %s", nn_body_name(b), role, v->name,
                         g, w);
}

/* out = a malloc'ed copy of body value t, which lives in the body's lane
 * (its pool included) only until the body's run is released. */
static nn_status copy_out(const nn_call *call, const nn_model *b, const nn_tensor *t, nn_tensor *out) {
    if (nn_dtype_is_container(t->dtype) || t->dtype == NN_DTYPE_STRING) {
        nn_status st = nn_value_pack(t, out, "a body output");
        if (st != NN_OK) {
            char why[512];
            snprintf(why, sizeof why, "%s", nn_last_error());
            return nn_call_error(call, st, "body '%s': %s", nn_body_name(b), why);
        }
        return NN_OK;
    }
    size_t bytes = tensor_bytes(t);
    *out = *t;
    out->data = malloc(bytes ? bytes : 1);
    if (!out->data)
        return nn_call_error(call, NN_ERR_NOMEM, "body '%s': out of memory for %zu bytes", nn_body_name(b), bytes);
    if (bytes) memcpy(out->data, t->data, bytes);
    return NN_OK;
}

/* out = sequence t with a malloc'ed header and item array; items whose data
 * is prev's at the same position are shared (prev's data outlives the
 * body: it is in `keep`, or the node's input), the others packed into
 * `keep`.  A loop that appends so copies each item's data once. */
static nn_status copy_seq_shared(const nn_call *call, const nn_model *b, const nn_tensor *t, const nn_tensor *prev,
                                 nn_arena *keep, nn_tensor *out) {
    const nn_seq *s = t->data, *p = prev->data;
    if (!s || s->n < 0 || s->n > NN_SEQ_MAX_LENGTH || (s->n && !s->items))
        return nn_call_error(call, NN_ERR_SHAPE, "body '%s': a sequence of %lld tensors is longer than "
                             "NN_SEQ_MAX_LENGTH or invalid", nn_body_name(b), s ? (long long)s->n : -1LL);
    char *block = malloc(sizeof(nn_seq) + sizeof(nn_tensor) * (size_t)s->n);
    if (!block) return nn_call_error(call, NN_ERR_NOMEM, "body '%s': out of memory", nn_body_name(b));
    nn_seq *q = (nn_seq *)block;
    nn_tensor *items = (nn_tensor *)(block + sizeof(nn_seq));
    for (int64_t i = 0; i < s->n; i++) {
        if (p && i < p->n && s->items[i].data == p->items[i].data) {
            items[i] = s->items[i];
            continue;
        }
        nn_status st = nn_value_pack_in(&s->items[i], &items[i], keep, "a sequence item");
        if (st != NN_OK) {
            char why[512];
            snprintf(why, sizeof why, "%s", nn_last_error());
            free(block);
            return nn_call_error(call, st, "body '%s': %s", nn_body_name(b), why);
        }
    }
    *q = (nn_seq){.elem = s->elem, .n = s->n, .items = items, .used = NULL, .cap = s->n};
    memset(out, 0, sizeof *out);
    out->dtype = NN_DTYPE_SEQUENCE;
    out->data = block;
    return NN_OK;
}

/* copy_out, or copy_seq_shared where t and prev are sequences and keep is given */
static nn_status copy_out_carried(const nn_call *call, const nn_model *b, const nn_tensor *t, const nn_tensor *prev,
                                  nn_arena *keep, nn_tensor *out) {
    if (keep && prev && t->dtype == NN_DTYPE_SEQUENCE && prev->dtype == NN_DTYPE_SEQUENCE && prev->data)
        return copy_seq_shared(call, b, t, prev, keep, out);
    return copy_out(call, b, t, out);
}

static nn_status run_locked(const nn_call *call, nn_model *b, const nn_tensor *in, nn_tensor *out,
                            const nn_tensor *prev, nn_arena *keep) {
    nn_graph *g = &b->g;
    nn_lane *lane = &b->lanes[0];
    for (int i = 0; i < g->n_inputs; i++) {
        int v = g->inputs[i];
        const nn_value *val = &g->values[v];
        /* a static plan was made for exactly these shapes */
        nn_tensor want = val->t;
        if (!b->dynamic && want.dtype == NN_DTYPE_UNDEFINED) want.ndim = -1;
        if (!fits_value(val, &in[i], &want)) return mismatch(call, b, "input", val, &in[i], &want);
        if (b->dynamic) { /* sequences are immutable: the body reads the caller's */
            lane->rt[v] = in[i];
            const nn_seq *s = in[i].dtype == NN_DTYPE_SEQUENCE ? in[i].data : NULL;
            if (s && !s->n && s->elem == NN_DTYPE_UNDEFINED && nn_dtype_size(want.dtype)) {
                /* an empty sequence from a file may not name its dtype: the body's declaration does */
                nn_seq *typed = nn_arena_alloc(&lane->pool, sizeof *typed);
                if (!typed) return nn_call_error(call, NN_ERR_NOMEM, "out of memory");
                *typed = (nn_seq){.elem = want.dtype};
                lane->rt[v].data = typed;
            }
            continue;
        }
        if (nn_dtype_is_container(in[i].dtype))
            return nn_call_error(call, NN_ERR_INTERNAL, "body '%s': input '%s' is a sequence in a static plan",
                                 nn_body_name(b), val->name);
        size_t bytes = tensor_bytes(&in[i]);
        if (bytes && !lane->rt[v].data)
            return nn_call_error(call, NN_ERR_INTERNAL, "body '%s': input '%s' has no buffer", nn_body_name(b),
                                 val->name);
        if (bytes) memcpy(lane->rt[v].data, in[i].data, bytes);
    }
    nn_status st = nn_execute(b, lane);
    if (st != NN_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", nn_last_error());
        return nn_call_error(call, st, "body '%s': %s", nn_body_name(b), why);
    }
    for (int k = 0; k < g->n_outputs && st == NN_OK; k++) {
        const nn_tensor *t = &lane->rt[g->outputs[k]];
        const nn_value *val = &g->values[g->outputs[k]];
        if (!fits_value(val, t, &g->declared_out[k])) {
            st = mismatch(call, b, "output", val, t, &g->declared_out[k]);
            break;
        }
        st = copy_out_carried(call, b, t, prev ? &prev[k] : NULL, keep, &out[k]);
    }
    if (st != NN_OK)
        for (int k = 0; k < g->n_outputs; k++)
            nn_tensor_release(&out[k]);
    return st;
}

nn_status nn_body_run(const nn_call *call, nn_model *b, const nn_tensor *in, int n_in, nn_tensor *out, int n_out) {
    return nn_body_run_carried(call, b, in, n_in, out, n_out, NULL, NULL);
}

nn_status nn_body_run_carried(const nn_call *call, nn_model *b, const nn_tensor *in, int n_in, nn_tensor *out,
                              int n_out, const nn_tensor *prev, nn_arena *keep) {
    if (n_in != b->g.n_inputs || n_out != b->g.n_outputs || !b->lanes)
        return nn_call_error(call, NN_ERR_INTERNAL, "body '%s' is called with %d inputs and %d outputs, has %d and %d",
                             nn_body_name(b), n_in, n_out, b->g.n_inputs, b->g.n_outputs);
    memset(out, 0, sizeof *out * (size_t)n_out);
    /* a body has one lane: runs of the same node on several threads take turns */
    pthread_mutex_lock(&b->lock);
    nn_status st = run_locked(call, b, in, out, prev, keep);
    nn_execute_release(b);
    pthread_mutex_unlock(&b->lock);
    return st;
}

nn_status nn_body_keep(nn_call *call, nn_tensor *t) {
    if (!nn_dtype_is_container(t->dtype)) return NN_OK;
    nn_tensor kept;
    nn_status st = nn_value_pack_in(t, &kept, call->pool, "a control-flow output");
    if (st != NN_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", nn_last_error());
        return nn_call_error(call, st, "%s", why);
    }
    nn_tensor_release(t);
    *t = kept;
    return NN_OK;
}

int nn_body_output_kind(const nn_model *body, int k) {
    const nn_value *v = &body->g.values[body->g.outputs[k]];
    const nn_tensor *d = &body->g.declared_out[k];
    if (v->kind == NN_KIND_TENSOR && d->dtype == NN_DTYPE_UNDEFINED && d->ndim < 0) return -1;
    return (int)v->kind;
}

nn_status nn_body_copy(const nn_call *call, const nn_model *body, const nn_tensor *t, nn_tensor *out) {
    return copy_out(call, body, t, out);
}

nn_status nn_body_copy_carried(const nn_call *call, const nn_model *body, const nn_tensor *t, nn_arena *keep,
                               nn_tensor *out) {
    return copy_out_carried(call, body, t, t, keep, out);
}

nn_status nn_body_to_pool(nn_call *call, nn_tensor *t) {
    nn_tensor kept;
    nn_status st = nn_value_pack_in(t, &kept, call->pool, "a control-flow output");
    if (st != NN_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", nn_last_error());
        nn_tensor_release(t);
        return nn_call_error(call, st, "%s", why);
    }
    nn_tensor_release(t);
    *t = kept;
    return NN_OK;
}
