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
    /* bodies exchange tensors with their node; sequences and optionals
     * (docs/sequences.md) do not cross that boundary yet */
    for (int i = 0; i < g->n_inputs + g->n_outputs; i++) {
        const nn_value *v = &g->values[i < g->n_inputs ? g->inputs[i] : g->outputs[i - g->n_inputs]];
        if (v->kind != NN_KIND_TENSOR)
            return nn_set_error(NN_ERR_UNSUPPORTED, "%s '%s' is a sequence or optional: control-flow bodies take and "
                                "return tensors only", i < g->n_inputs ? "input" : "output", v->name);
    }
    for (int k = 0; k < n->n_in + n->n_out; k++) {
        int id = k < n->n_in ? n->in[k] : n->out[k - n->n_in];
        if (id < 0) continue;
        const nn_value *v = &m->g.values[id];
        if (v->kind != NN_KIND_TENSOR || nn_dtype_is_container(v->t.dtype))
            return nn_set_error(NN_ERR_UNSUPPORTED, "value '%s' is a sequence or optional: control-flow nodes take and "
                                "return tensors only", v->name);
    }
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

static nn_status mismatch(const nn_call *call, const nn_model *b, const char *role, const char *name,
                          const nn_tensor *got, const nn_tensor *want) {
    char g[160], w[160];
    shape_string(got, g, sizeof g);
    shape_string(want, w, sizeof w);
    return nn_call_error(call, NN_ERR_SHAPE, "body '%s': %s '%s' is %s, declared %s", nn_body_name(b), role, name, g,
                         w);
}

static nn_status run_locked(const nn_call *call, nn_model *b, const nn_tensor *in, nn_tensor *out) {
    nn_graph *g = &b->g;
    nn_lane *lane = &b->lanes[0];
    for (int i = 0; i < g->n_inputs; i++) {
        int v = g->inputs[i];
        const nn_value *val = &g->values[v];
        /* a static plan was made for exactly these shapes */
        nn_tensor want = val->t;
        if (!b->dynamic && want.dtype == NN_DTYPE_UNDEFINED) want.ndim = -1;
        if (!fits(&in[i], &want)) return mismatch(call, b, "input", val->name, &in[i], &want);
        if (b->dynamic) {
            lane->rt[v] = in[i];
            continue;
        }
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
        if (!fits(t, &g->declared_out[k])) {
            st = mismatch(call, b, "output", g->values[g->outputs[k]].name, t, &g->declared_out[k]);
            break;
        }
        size_t bytes = tensor_bytes(t);
        out[k] = *t;
        out[k].data = malloc(bytes ? bytes : 1);
        if (!out[k].data) {
            st = nn_call_error(call, NN_ERR_NOMEM, "body '%s': out of memory for %zu bytes", nn_body_name(b), bytes);
            break;
        }
        if (bytes) memcpy(out[k].data, t->data, bytes);
    }
    if (st != NN_OK)
        for (int k = 0; k < g->n_outputs; k++)
            nn_tensor_release(&out[k]);
    return st;
}

nn_status nn_body_run(const nn_call *call, nn_model *b, const nn_tensor *in, int n_in, nn_tensor *out, int n_out) {
    if (n_in != b->g.n_inputs || n_out != b->g.n_outputs || !b->lanes)
        return nn_call_error(call, NN_ERR_INTERNAL, "body '%s' is called with %d inputs and %d outputs, has %d and %d",
                             nn_body_name(b), n_in, n_out, b->g.n_inputs, b->g.n_outputs);
    memset(out, 0, sizeof *out * (size_t)n_out);
    /* a body has one lane: runs of the same node on several threads take turns */
    pthread_mutex_lock(&b->lock);
    nn_status st = run_locked(call, b, in, out);
    nn_execute_release(b);
    pthread_mutex_unlock(&b->lock);
    return st;
}
