/* Reading the plan cache (layout in cache_int.h).
 *
 * Reading trusts nothing: magic, format version, file size and key are
 * compared; a checksum covers every byte but its own field (it finds
 * damage, not intent: anyone who can write the cache folder can re-seal an
 * edited file); every count, index, offset and size is bounds-checked as it
 * is read; every node's params go through its op's check, like a parse's;
 * then every node's shapes are inferred again and must match, and each
 * prepared block must be exactly what its op would make
 * (nn_op_desc.prepared_fits).  Any failure is a miss with a warning, and
 * the plan is rebuilt and rewritten.
 *
 * Fuzz builds (FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION) skip the key and
 * checksum comparisons, so that the fuzzer reaches everything behind them. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../ops/registry.h"
#include "cache_int.h"
#include "error.h"
#include "model.h"

typedef struct reader {
    const unsigned char *p;
    size_t n, at;
    bool ok;
    const unsigned char *data; /* the data section */
    uint64_t data_bytes;
    const char *why;  /* first problem found */
    char detail[200]; /* why, when it needs words of its own (an op's check) */
} reader;

static bool fail(reader *r, const char *why) {
    if (r->ok) r->why = why;
    r->ok = false;
    return false;
}

/* The next `size` bytes of meta; NULL (and a failure) when they run past it. */
static const unsigned char *take(reader *r, size_t size) {
    if (!r->ok) return NULL;
    if (r->n - r->at < size) {
        fail(r, "meta section ends early");
        return NULL;
    }
    const unsigned char *at = r->p + r->at;
    r->at += size;
    return at;
}

static bool get_record(reader *r, const record_desc *d, void *rec) {
    const unsigned char *at = take(r, cache_record_bytes(d));
    if (at) cache_decode(d, at, rec);
    return at != NULL;
}

static uint64_t get_le(reader *r, int bytes) {
    const unsigned char *at = take(r, (size_t)bytes);
    return at ? cache_get_le(at, bytes) : 0;
}

static int32_t get_i32(reader *r) { return (int32_t)(uint32_t)get_le(r, 4); }

static const char *get_str(reader *r, nn_arena *a) {
    uint32_t len = (uint32_t)get_le(r, 4);
    if (!r->ok || len == UINT32_MAX) return NULL;
    const unsigned char *at = take(r, len);
    if (!at) return NULL;
    char *s = nn_arena_alloc(a, (size_t)len + 1);
    if (!s) {
        fail(r, "out of memory");
        return NULL;
    }
    memcpy(s, at, len);
    s[len] = 0;
    return s;
}

static const void *get_data(reader *r, uint64_t *size) {
    uint64_t at = get_le(r, 8);
    *size = 0;
    if (!r->ok || at == UINT64_MAX) return NULL;
    *size = get_le(r, 8);
    if (!r->ok) return NULL;
    if (at % DATA_ALIGN || at > r->data_bytes || *size > r->data_bytes - at) {
        fail(r, "a data reference lies outside the data section");
        return NULL;
    }
    return r->data + at;
}

/* Bytes of a shape, false when it overflows. */
static bool shape_bytes(const nn_tensor *t, uint64_t *bytes) {
    uint64_t b = nn_dtype_size(t->dtype);
    for (int d = 0; d < t->ndim; d++) {
        if (t->dims[d] < 0 || (t->dims[d] && b > UINT64_MAX / 2 / (uint64_t)t->dims[d])) return false;
        b *= (uint64_t)t->dims[d];
    }
    *bytes = b;
    return true;
}

static bool read_value(reader *r, nn_graph *g, int v, int n_nodes) {
    nn_value *val = &g->values[v];
    value_record vr;
    val->name = get_str(r, &g->meta);
    get_record(r, &cache_value_desc, &vr);
    uint64_t size, bytes = 0;
    const void *data = get_data(r, &size);
    if (!r->ok) return false;
    if (!val->name) return fail(r, "a value has no name");
    val->t.dtype = (nn_dtype)vr.dtype;
    val->t.ndim = vr.ndim;
    memcpy(val->t.dims, vr.dims, sizeof vr.dims);
    val->producer = vr.producer;
    val->is_input = vr.flags & V_INPUT;
    val->is_output = vr.flags & V_OUTPUT;
    val->is_const = vr.flags & V_CONST;
    val->shape_known = vr.flags & V_SHAPE_KNOWN;
    val->batched = vr.flags & V_BATCHED;
    val->alias = vr.alias;
    val->alias_offset = vr.alias_offset;
    if (vr.ndim < -1 || vr.ndim > NN_MAX_DIMS || (vr.ndim < 0 && val->shape_known)) /* -1: rank unknown */
        return fail(r, "a value has an invalid rank");
    if (val->t.dtype == NN_DTYPE_STRING) /* pointers: never written (cache_write.c), so never read */
        return fail(r, "a value holds strings");
    if (val->shape_known && (!nn_dtype_size(val->t.dtype) || !shape_bytes(&val->t, &bytes)))
        return fail(r, "a value has an invalid dtype or shape");
    if (val->producer < -1 || val->producer >= n_nodes) return fail(r, "a value names a producer out of range");
    if (val->alias < -1 || val->alias >= g->n_values || val->alias == v || val->alias_offset < 0)
        return fail(r, "a value aliases out of range");
    if (data && (!val->is_const || !val->shape_known || size != bytes))
        return fail(r, "constant data does not match its value's shape");
    val->t.data = (void *)data;
    return true;
}

static bool read_ids(reader *r, nn_arena *a, int count, int n_values, int **out) {
    *out = nn_arena_alloc(a, sizeof(int) * (size_t)(count ? count : 1));
    if (!*out) return fail(r, "out of memory");
    for (int k = 0; k < count && r->ok; k++)
        if (((*out)[k] = get_i32(r)) < -1 || (*out)[k] >= n_values) return fail(r, "a value id is out of range");
    return r->ok;
}

/* A node's params, held to what its op's parse would make: into
 * NN_PARAMS_MAX zeroed bytes (a short block reads zeros, never past its
 * end), then the op's check.  An op without parse takes none; one with
 * parse always gets a block, zeros when the file has none (which is what
 * kernels assume for the nodes passes make without params). */
static bool read_params(reader *r, nn_arena *a, nn_node *n, const nn_op_desc *d) {
    uint32_t psize = (uint32_t)get_le(r, 4);
    if (!r->ok) return false;
    bool none = psize == UINT32_MAX;
    if (!d->check) {
        if (!none) return fail(r, "a node has params its op never takes");
        return true;
    }
    if (!none && psize > NN_PARAMS_MAX) return fail(r, "node params are larger than any op's");
    const unsigned char *at = none ? NULL : take(r, psize);
    if (!none && !at) return false;
    unsigned char *p = nn_arena_alloc(a, NN_PARAMS_MAX);
    if (!p) return fail(r, "out of memory");
    memset(p, 0, NN_PARAMS_MAX);
    if (at) memcpy(p, at, psize);
    n->params = p;
    n->params_size = none ? 0 : psize;
    char err[160] = "";
    if (d->check(p, err, sizeof err) != NN_OK) {
        snprintf(r->detail, sizeof r->detail, "node '%s' (%s) has invalid params: %s", n->name, d->name, err);
        return fail(r, r->detail);
    }
    return true;
}

static bool read_node(reader *r, nn_graph *g, nn_node *n) {
    n->name = get_str(r, &g->meta);
    const char *op = get_str(r, &g->meta);
    node_head head;
    if (!get_record(r, &cache_node_head_desc, &head)) return false;
    if (!n->name || !op || (n->op = nn_op_lookup(op)) < 0) return fail(r, "a node has no name or an unknown op");
    /* Constant's params point into the model: it is always folded before a plan exists */
    if (n->op == NN_OP_Constant) return fail(r, "a node is a Constant, which plans never hold");
    if (nn_op_get(n->op)->flags & (NN_OPF_CONTAINER | NN_OPF_UNCACHED))
        return fail(r, "a node's op is one plans never hold (sequences, pointer attributes)");
    n->n_in = head.n_in;
    n->n_out = head.n_out;
    if (n->n_in < 0 || n->n_in > MAX_IO || n->n_out < 1 || n->n_out > MAX_IO)
        return fail(r, "a node has too many inputs or outputs");
    if (!read_ids(r, &g->meta, n->n_in, g->n_values, &n->in) || !read_ids(r, &g->meta, n->n_out, g->n_values, &n->out))
        return false;
    const nn_op_desc *d = nn_op_get(n->op);
    if (!read_params(r, &g->meta, n, d)) return false;
    uint64_t prepared_size;
    n->prepared = get_data(r, &prepared_size);
    n->prepared_size = (size_t)prepared_size;
    node_tail t;
    get_record(r, &cache_node_tail_desc, &t);
    n->fused = get_str(r, &g->meta);
    if (!r->ok) return false;
    n->has_epilogue = t.has_epilogue != 0;
    n->epilogue = (nn_epilogue){.residual = t.residual, .alpha = t.alpha, .beta = t.beta};
    n->has_prologue = t.has_prologue != 0;
    n->prologue = (nn_prologue){.scale = t.scale, .shift = t.shift};
    n->elided = t.elided != 0;
    /* the enums are stored only once known to be in range */
    if (t.act < NN_ACT_NONE || t.act >= NN_ACT_COUNT || t.prologue_act < NN_ACT_NONE || t.prologue_act >= NN_ACT_COUNT)
        return fail(r, "a node has an unknown activation");
    n->epilogue.act = (nn_act)t.act;
    n->prologue.act = (nn_act)t.prologue_act;
    if (n->has_epilogue &&
        (!(d->flags & NN_OPF_EPILOGUE) || n->epilogue.residual < -1 || n->epilogue.residual >= n->n_in))
        return fail(r, "a node has an invalid epilogue");
    if (n->has_prologue && (!(d->flags & NN_OPF_PROLOGUE) || n->prologue.scale < 0 || n->prologue.scale >= n->n_in ||
                            n->prologue.shift < 0 || n->prologue.shift >= n->n_in ||
                            (n->prologue.act != NN_ACT_NONE && n->prologue.act != NN_ACT_RELU)))
        return fail(r, "a node has an invalid prologue");
    if (n->prepared && !d->prepared_fits) return fail(r, "a node has prepared data its op never makes");
    if (nn_node_check_wiring(n, d) != NN_OK) {
        nn_clear_error();
        return fail(r, "a node lacks an input or output its op requires");
    }
    return true;
}

static bool read_plan(reader *r, nn_model *m) {
    nn_graph *g = &m->g;
    nn_plan *p = &m->plan;
    size_t nv = (size_t)g->n_values + 1;
    plan_record pr;
    if (!get_record(r, &cache_plan_desc, &pr)) return false;
    p->arena_bytes = (size_t)pr.arena_bytes;
    p->naive_bytes = (size_t)pr.naive_bytes;
    p->lower_bound_bytes = (size_t)pr.lower_bound_bytes;
    p->offset = malloc(sizeof(int64_t) * nv);
    p->first_use = malloc(sizeof(int) * nv);
    p->last_use = malloc(sizeof(int) * nv);
    if (!p->offset || !p->first_use || !p->last_use) return fail(r, "out of memory");
    for (int v = 0; v < g->n_values; v++)
        p->offset[v] = (int64_t)get_le(r, 8);
    for (int v = 0; v < g->n_values; v++)
        p->first_use[v] = get_i32(r);
    for (int v = 0; v < g->n_values; v++)
        p->last_use[v] = get_i32(r);
    if (!r->ok) return false;
    if (p->arena_bytes > (uint64_t)1 << 46) return fail(r, "the planned arena is implausibly large");
    for (int v = 0; v < g->n_values; v++) {
        uint64_t bytes = 0;
        if (p->offset[v] < -1 || p->first_use[v] < -1 || p->first_use[v] > g->n_nodes || p->last_use[v] < -1 ||
            p->last_use[v] > g->n_nodes)
            return fail(r, "the memory plan is out of range");
        if (p->offset[v] < 0) continue;
        if (!g->values[v].shape_known || !shape_bytes(&g->values[v].t, &bytes) ||
            (uint64_t)p->offset[v] > p->arena_bytes || bytes > p->arena_bytes - (uint64_t)p->offset[v])
            return fail(r, "a planned buffer lies outside the arena");
        /* the planner puts buffers on 64-byte boundaries and values inside them on their elements' */
        if ((uint64_t)p->offset[v] % (g->values[v].alias < 0 ? DATA_ALIGN : nn_dtype_size(g->values[v].t.dtype)))
            return fail(r, "a planned buffer is misaligned");
    }
    return true;
}

/* Structure the kernels rely on: aliases end at a root inside which the
 * value fits, every non-constant a node touches has planned memory, and
 * constants have data unless their node prepared them away. */
/* Order and wiring the executor relies on (dynamic plans too, which have
 * no planned memory to check): every value a node reads or the graph
 * returns is a fed input, a constant, or made by one earlier node; the
 * graph's input list holds exactly the values marked as inputs. */
static bool check_wiring(reader *r, const nn_graph *g) {
    int *made = malloc(sizeof(int) * ((size_t)g->n_values + 1));
    if (!made) return fail(r, "out of memory");
    bool ok = true;
    int marked = 0;
    for (int v = 0; v < g->n_values; v++) {
        made[v] = -1;
        marked += g->values[v].is_input;
    }
    for (int i = 0; i < g->n_inputs && ok; i++) {
        ok = g->values[g->inputs[i]].is_input && made[g->inputs[i]] == -1;
        made[g->inputs[i]] = -2; /* listed once */
    }
    ok &= marked == g->n_inputs;
    for (int i = 0; i < g->n_nodes && ok; i++) {
        const nn_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_in && ok; k++) {
            int v = n->in[k];
            ok = v < 0 || g->values[v].is_input || g->values[v].is_const || (made[v] >= 0 && made[v] < i);
        }
        for (int k = 0; k < n->n_out && ok; k++) {
            int v = n->out[k];
            if (v < 0) continue;
            ok = made[v] == -1 && !g->values[v].is_input && !g->values[v].is_const;
            made[v] = i;
        }
    }
    for (int i = 0; i < g->n_outputs && ok; i++) {
        int v = g->outputs[i];
        ok = g->values[v].is_input || g->values[v].is_const || made[v] >= 0;
    }
    free(made);
    return ok || fail(r, "a node reads a value that no earlier node makes");
}

static bool check_memory(reader *r, const nn_model *m) {
    const nn_graph *g = &m->g;
    if (!check_wiring(r, g)) return false;
    for (int v = 0; v < g->n_values; v++) {
        const nn_value *val = &g->values[v];
        int root = v, steps = 0;
        while (g->values[root].alias >= 0 && steps++ <= g->n_values)
            root = g->values[root].alias;
        if (steps > g->n_values) return fail(r, "value aliases form a cycle");
        if (val->alias < 0) continue;
        const nn_value *host = &g->values[val->alias];
        uint64_t bytes, host_bytes;
        if (!val->shape_known || !host->shape_known || !shape_bytes(&val->t, &bytes) ||
            !shape_bytes(&host->t, &host_bytes) || (uint64_t)val->alias_offset > host_bytes ||
            bytes > host_bytes - (uint64_t)val->alias_offset)
            return fail(r, "an aliased value does not fit inside its host");
        if ((uint64_t)val->alias_offset % nn_dtype_size(val->t.dtype))
            return fail(r, "an aliased value is misaligned in its host");
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const nn_node *n = &g->nodes[i];
        unsigned released = n->prepared ? nn_op_get(n->op)->prepared_inputs : 0;
        for (int k = 0; k < n->n_in + n->n_out; k++) {
            int v = k < n->n_in ? n->in[k] : n->out[k - n->n_in];
            if (v < 0) continue;
            const nn_value *val = &g->values[v];
            if (val->is_const && k < n->n_in) {
                if (!val->t.data && !(k < 32 && (released & (1u << k))))
                    return fail(r, "a node reads a constant that has no data");
                continue;
            }
            if (m->dynamic) continue;
            if (m->plan.offset[nn_value_root(g, v, NULL)] < 0) return fail(r, "a node's value has no planned memory");
        }
    }
    return true;
}

/* What the passes guaranteed when they fused and elided, which the kernels
 * rely on: a residual is present and shaped like the output (kernels add it
 * element by element), and an elided node's output lies in its input's memory. */
static bool check_fusion(reader *r, const nn_model *m) {
    const nn_graph *g = &m->g;
    for (int i = 0; i < g->n_nodes; i++) {
        const nn_node *n = &g->nodes[i];
        if (n->has_epilogue && n->epilogue.residual >= 0) {
            int v = n->in[n->epilogue.residual], o = n->out[0];
            const nn_tensor *res = v >= 0 ? &g->values[v].t : NULL, *out = o >= 0 ? &g->values[o].t : NULL;
            if (!res || !out || !g->values[v].shape_known || !g->values[o].shape_known ||
                res->dtype != NN_DTYPE_FLOAT || out->dtype != NN_DTYPE_FLOAT || res->ndim != out->ndim ||
                memcmp(res->dims, out->dims, sizeof(int64_t) * (size_t)out->ndim))
                return fail(r, "a node's residual is not shaped like its output");
        }
        /* a view aliases its input 0, a Concat's inputs alias its output: either way one root */
        if (n->elided && (n->n_in < 1 || n->in[0] < 0 || n->out[0] < 0 ||
                          nn_value_root(g, n->in[0], NULL) != nn_value_root(g, n->out[0], NULL)))
            return fail(r, "an elided node's output does not share its input's memory");
    }
    return true;
}

/* Each prepared block must be exactly what its op makes for these shapes. */
static bool check_prepared(reader *r, nn_model *m) {
    const nn_graph *g = &m->g;
    nn_tensor *in = malloc(sizeof(nn_tensor) * MAX_IO), *out = malloc(sizeof(nn_tensor) * MAX_IO);
    char err[256];
    bool ok = in && out;
    for (int i = 0; i < g->n_nodes && ok; i++) {
        const nn_node *n = &g->nodes[i];
        if (!n->prepared) continue;
        for (int k = 0; k < n->n_in; k++)
            in[k] = n->in[k] >= 0 ? g->values[n->in[k]].t : (nn_tensor){0};
        for (int k = 0; k < n->n_out; k++)
            out[k] = n->out[k] >= 0 ? g->values[n->out[k]].t : (nn_tensor){0};
        nn_call call = nn_node_call(m, n, in, out, err, sizeof err);
        ok = nn_op_get(n->op)->prepared_fits(&call, n->prepared, n->prepared_size);
    }
    bool allocated = in && out;
    free(in);
    free(out);
    return ok || fail(r, allocated ? "a prepared block does not fit its node" : "out of memory");
}

static bool read_bodies(reader *r, nn_model *m, int depth);

static bool read_graph(reader *r, nn_model *m, int depth) {
    nn_graph *g = &m->g;
    graph_record gr;
    if (!get_record(r, &cache_graph_desc, &gr)) return false;
    g->opset = gr.opset;
    g->nodes_parsed = gr.nodes_parsed;
    g->parameters = gr.parameters;
    m->plan_batch = gr.plan_batch;
    m->has_batch = gr.has_batch != 0;
    m->dynamic = gr.dynamic != 0;
    m->whole_batch = gr.whole_batch != 0;
    gr.whole_batch_why[sizeof gr.whole_batch_why - 1] = 0;
    memcpy(m->whole_batch_why, gr.whole_batch_why, sizeof m->whole_batch_why);
    if (m->plan_batch < 1 || m->plan_batch > m->batch) return fail(r, "its plan batch is out of range");
    /* every value and node takes dozens of bytes of meta: bound the counts before allocating */
    size_t left = r->n - r->at;
    if (gr.n_values > left / 32 || gr.n_nodes > left / 32 || gr.n_inputs > gr.n_values || gr.n_outputs > gr.n_values)
        return fail(r, "counts larger than the meta section can hold");
    g->values = calloc((size_t)gr.n_values + 1, sizeof *g->values);
    g->nodes = calloc((size_t)gr.n_nodes + 1, sizeof *g->nodes);
    g->inputs = nn_arena_alloc(&g->meta, sizeof(int) * ((size_t)gr.n_inputs + 1));
    g->outputs = nn_arena_alloc(&g->meta, sizeof(int) * ((size_t)gr.n_outputs + 1));
    if (!g->values || !g->nodes || !g->inputs || !g->outputs) return fail(r, "out of memory");
    g->n_values = g->cap_values = (int)gr.n_values;
    g->n_nodes = g->cap_nodes = (int)gr.n_nodes;
    g->n_inputs = (int)gr.n_inputs;
    g->n_outputs = (int)gr.n_outputs;
    for (int v = 0; v < g->n_values; v++)
        if (!read_value(r, g, v, g->n_nodes)) return false;
    for (int i = 0; i < g->n_nodes; i++)
        if (!read_node(r, g, &g->nodes[i])) return false;
    for (int i = 0; i < g->n_inputs + g->n_outputs && r->ok; i++) {
        int v = get_i32(r);
        if (i < g->n_inputs)
            g->inputs[i] = v;
        else
            g->outputs[i - g->n_inputs] = v;
        if (r->ok && (v < 0 || v >= g->n_values)) return fail(r, "a graph input or output is out of range");
    }
    if (!r->ok) return false;
    if (!m->dynamic && !read_plan(r, m)) return false;
    return check_memory(r, m) && read_bodies(r, m, depth);
}

/* A declared output type: dtype (or undefined), rank -1 (open) or in
 * range, dims -1 (symbolic) or more. */
static bool read_declared(reader *r, nn_tensor *t) {
    value_record dr;
    if (!get_record(r, &cache_value_desc, &dr)) return false;
    memset(t, 0, sizeof *t);
    if (dr.ndim < -1 || dr.ndim > NN_MAX_DIMS || (dr.dtype != NN_DTYPE_UNDEFINED && !nn_dtype_size(dr.dtype)))
        return fail(r, "a body output has an invalid declared type");
    t->dtype = (nn_dtype)dr.dtype;
    t->ndim = dr.ndim;
    for (int d = 0; d < dr.ndim; d++)
        if ((t->dims[d] = dr.dims[d]) < -1) return fail(r, "a body output has an invalid declared type");
    return true;
}

/* The bodies of g's control-flow nodes (see cache_int.h), each checked as
 * a plan of its own, and pointed to from its node's params. */
static bool read_bodies(reader *r, nn_model *m, int depth) {
    nn_graph *g = &m->g;
    for (int i = 0; i < g->n_nodes; i++) {
        nn_node *n = &g->nodes[i];
        if (!(nn_op_get(n->op)->flags & NN_OPF_SUBGRAPH)) continue;
        if (depth + 1 > CACHE_BODY_DEPTH) return fail(r, "its bodies nest too deep");
        nn_subgraph_set *set = (nn_subgraph_set *)n->params; /* NN_PARAMS_MAX bytes of the arena, checked */
        for (int k = 0; k < set->n; k++) {
            nn_subgraph *s = &set->g[k];
            body_record br;
            if (!get_record(r, &cache_body_desc, &br)) return false;
            if (br.n_formal != s->n_formal || br.capture_first != s->capture_first ||
                br.n_captured != s->n_captured || br.n_formal < 0 || br.n_formal > MAX_IO || br.n_captured < 0 ||
                br.capture_first < 0 || br.capture_first > n->n_in || br.n_captured > n->n_in - br.capture_first)
                return fail(r, "a body's wiring is out of range");
            nn_model *b = nn_body_new(depth + 1);
            if (!b || !nn_graph_add_body(g, b)) return fail(r, "out of memory");
            b->threads = b->kernel_threads = m->threads;
            b->g.name = get_str(r, &b->g.meta);
            if (!b->g.name || !read_graph(r, b, depth + 1)) return fail(r, "a body is truncated");
            if (b->g.n_inputs != br.n_formal + br.n_captured) return fail(r, "a body's inputs do not match its node");
            b->g.declared_out = nn_arena_alloc(&b->g.meta, sizeof(nn_tensor) * ((size_t)b->g.n_outputs + 1));
            if (!b->g.declared_out) return fail(r, "out of memory");
            for (int o = 0; o < b->g.n_outputs; o++)
                if (!read_declared(r, &b->g.declared_out[o])) return false;
            if (nn_verify_graph(b, "loading the plan cache") != NN_OK) {
                nn_clear_error();
                return fail(r, "inconsistent: a body's shapes do not follow from its graph");
            }
            if (!check_fusion(r, b) || (!b->dynamic && !check_prepared(r, b))) return false;
            b->from_cache = true;
            s->body = b;
        }
    }
    return true;
}

static bool read_meta(reader *r, nn_model *m) {
    if (!read_graph(r, m, 0)) return false;
    uint64_t choices_bytes;
    m->device_choices = get_data(r, &choices_bytes);
    m->device_choices_bytes = (size_t)choices_bytes;
    if (get_le(r, 4) != END_MARK || r->at != r->n) return fail(r, "the meta section has a wrong length");
    return r->ok;
}

/* Read and check the mapped file; false (with r->why) on anything amiss. */
static bool read_plan_file(nn_model *m, const unsigned char *file, size_t size, reader *r) {
    cache_header h;
    if (size < HEADER_BYTES) return fail(r, "shorter than its header");
    cache_decode(&cache_header_desc, file, &h);
    if (memcmp(h.magic, CACHE_MAGIC, sizeof h.magic)) return fail(r, "not an nn plan file");
    if (h.format != CACHE_FORMAT || h.header_bytes != HEADER_BYTES)
        return fail(r, "written by another version of the plan format");
    if (h.file_bytes != size) return fail(r, "truncated or extended (size differs from its header)");
#ifndef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
    if (memcmp(h.key, m->cache_key, sizeof h.key))
        return fail(r, "stale: the model file, the options or the CPU changed since it was written");
#endif
    if (h.meta_offset < HEADER_BYTES || h.meta_offset > size || h.meta_bytes > size - h.meta_offset ||
        h.data_offset < h.meta_offset + h.meta_bytes || h.data_offset % PAGE || h.data_offset > size ||
        h.data_bytes != size - h.data_offset)
        return fail(r, "its sections lie outside the file");
#ifndef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
    uint64_t sum[2];
    cache_checksum(&h, file, m->threads, sum);
    if (memcmp(sum, h.checksum, sizeof sum)) return fail(r, "damaged (checksum mismatch)");
#endif
    r->p = file + h.meta_offset;
    r->n = (size_t)h.meta_bytes;
    r->at = 0;
    r->data = file + h.data_offset;
    r->data_bytes = h.data_bytes;
    if (!read_meta(r, m)) return false;
    const char *batch_wrong = nn_batch_check(m);
    if (batch_wrong) return fail(r, batch_wrong);
    if (nn_verify_graph(m, "loading the plan cache") != NN_OK) {
        nn_clear_error();
        return fail(r, "inconsistent: its shapes do not follow from its graph");
    }
    if (!check_fusion(r, m) || (!m->dynamic && !check_prepared(r, m))) return false;
    m->g.weights.chunk_size = 1 << 20;
    m->cache_data_bytes = (size_t)h.data_bytes;
    return true;
}

void nn_cache_load(nn_model *m, const char *model_path, bool *hit) {
    *hit = false;
    m->cache_state = NN_CACHE_MISS;
    char opts[PLAN_OPTIONS_MAX], warning[120];
    m->cache_cap = nn_cache_cap(m->opt.cache_max, warning, sizeof warning);
    if (warning[0]) cache_warn(m, "%s", warning);
    cache_plan_options(m, opts, sizeof opts);
    if (!cache_locate(m, model_path, opts)) return;
    const char *why = NULL;
    size_t size = 0;
    void *map = MAP_FAILED;
    int fd = open(m->cache_path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0) {
        if (errno != ENOENT) cache_warn(m, "cannot read the plan cache '%s': %s", m->cache_path, strerror(errno));
    } else if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        why = "not a regular file";
    } else if (!(size = (size_t)st.st_size)) {
        why = "empty";
    } else if ((map = mmap(NULL, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0)) == MAP_FAILED) {
        cache_warn(m, "cannot map the plan cache '%s': %s", m->cache_path, strerror(errno));
    }
    if (fd >= 0) close(fd);
    /* the model's bytes need hashing only when the file is not, by its
     * identity, the one the plan recorded (the checksum still covers that record) */
    cache_header h;
    bool same_model = false;
    if (map != MAP_FAILED && size >= HEADER_BYTES) {
        cache_decode(&cache_header_desc, map, &h);
        same_model = !memcmp(h.magic, CACHE_MAGIC, sizeof h.magic) && h.format == CACHE_FORMAT &&
                     !memcmp(h.model_id, m->cache_model_id, sizeof h.model_id);
    }
    if (!cache_derive_key(m, model_path, opts, same_model ? h.content : NULL)) {
        if (map != MAP_FAILED) munmap(map, size);
        return;
    }
    reader r = {.ok = true};
    if (map != MAP_FAILED) {
        if (read_plan_file(m, map, size, &r)) {
            m->cache_map = map;
            m->cache_map_bytes = size;
            m->from_cache = true;
            m->cache_state = NN_CACHE_HIT;
            nn_cache_touch(m->cache_path);
            *hit = true;
            return;
        }
        why = r.why;
    }
    if (why) cache_warn(m, "plan cache '%s' is %s; rebuilt the plan", m->cache_path, why);
    if (map != MAP_FAILED) munmap(map, size);
    nn_plan_free(&m->plan);
    memset(&m->plan, 0, sizeof m->plan);
    nn_graph_free(&m->g);
    m->has_batch = m->dynamic = m->whole_batch = false;
    m->plan_batch = m->batch;
    m->device_choices = NULL;
    m->device_choices_bytes = 0;
}

void nn_cache_release(nn_model *m) {
    if (m->cache_map) munmap(m->cache_map, m->cache_map_bytes);
    m->cache_map = NULL;
    free(m->cache_path);
    m->cache_path = NULL;
}
