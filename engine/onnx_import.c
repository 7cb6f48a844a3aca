/* ONNX ModelProto -> nn_graph.  The protobuf is freed before returning;
 * nothing downstream sees protobuf types. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/registry.h"
#include "error.h"
#include "import.h"
#include "model.h"
#include "onnx_tensor.h"

/* ---- name -> value id, open addressing; lives only during import */
typedef struct name_map {
    int *slots; /* value id or -1 */
    size_t cap;
    const nn_graph *g;
} name_map;

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull;
    while (*s)
        h = (h ^ (unsigned char)*s++) * 1099511628211ull;
    return h;
}

static int *map_slot(name_map *m, const char *name) {
    for (size_t i = hash_str(name) & (m->cap - 1);; i = (i + 1) & (m->cap - 1))
        if (m->slots[i] < 0 || !strcmp(m->g->values[m->slots[i]].name, name)) return &m->slots[i];
}

/* Keep the table at most half full (bodies add the outer values they read
 * to their enclosing graphs, beyond the count sized for at first). */
static bool map_reserve(name_map *m) {
    if ((size_t)m->g->n_values * 2 + 2 < m->cap) return true;
    size_t cap = m->cap * 2;
    int *slots = malloc(sizeof(int) * cap);
    if (!slots) return false;
    memset(slots, 0xff, sizeof(int) * cap);
    free(m->slots);
    m->slots = slots;
    m->cap = cap;
    for (int v = 0; v < m->g->n_values; v++)
        *map_slot(m, m->g->values[v].name) = v;
    return true;
}

/* Value id for `name`, created when new. -1 when out of memory. */
static int value_for(nn_graph *g, name_map *m, const char *name) {
    if (!map_reserve(m)) return -1;
    int *slot = map_slot(m, name);
    if (*slot < 0) *slot = nn_graph_add_value(g, name);
    return *slot;
}

/* A graph being imported and the graphs around it: a body's names that it
 * does not define are looked up there (outer-scope values). */
typedef struct scope {
    nn_graph *g;
    name_map *map;
    struct scope *parent;
    int depth; /* 0: the model's graph */
    const nn_onnx_file *file;
    const char *base_dir;
} scope;

nn_status nn_read_file(const char *path, uint8_t **buf, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return nn_set_error(NN_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    nn_status st = NN_OK;
    if (fseeko(f, 0, SEEK_END) != 0) {
        st = nn_set_error(NN_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
        goto out;
    }
    off_t size = ftello(f);
    if (size < 0) {
        st = nn_set_error(NN_ERR_IO, "cannot read '%s': not a regular file", path);
        goto out;
    }
    rewind(f);
    *buf = malloc((size_t)size + 1);
    if (!*buf) {
        st = nn_set_error(NN_ERR_NOMEM, "out of memory reading '%s' (%lld bytes)", path, (long long)size);
        goto out;
    }
    if (fread(*buf, 1, (size_t)size, f) != (size_t)size) {
        free(*buf);
        *buf = NULL;
        st = nn_set_error(NN_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
        goto out;
    }
    *len = (size_t)size;
out:
    fclose(f);
    return st;
}

nn_status nn_read_protobuf(const char *path, void *(*unpack)(size_t, const uint8_t *), void **msg) {
    uint8_t *buf = NULL;
    size_t len = 0;
    nn_status st = nn_read_file(path, &buf, &len);
    if (st != NN_OK) return st;
    *msg = len ? unpack(len, buf) : NULL;
    free(buf);
    if (!*msg)
        return nn_set_error(NN_ERR_PARSE, "'%s' is not a valid ONNX protobuf (%s)", path,
                            len ? "decoding failed: truncated or not protobuf" : "empty file");
    return NN_OK;
}

/* ONNX's spelling of a type, as in its operator docs: tensor(float),
 * seq(tensor(int64)), optional(seq(tensor(float))), map(string,tensor(float)). */
static void type_string(const Onnx__TypeProto *tp, char *buf, size_t size, int depth) {
    char dt[32], inner[160] = "?";
    const char *kind = "?";
    int32_t elem = 0;
    if (!tp || depth > 8) {
        snprintf(buf, size, "?");
        return;
    }
    switch (tp->value_case) {
    case ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE:
    case ONNX__TYPE_PROTO__VALUE_SPARSE_TENSOR_TYPE:
        if (tp->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE)
            elem = tp->tensor_type->has_elem_type ? tp->tensor_type->elem_type : 0;
        else
            elem = tp->sparse_tensor_type->has_elem_type ? tp->sparse_tensor_type->elem_type : 0;
        snprintf(dt, sizeof dt, "%s", nn_onnx_dtype_name(elem));
        for (char *c = dt; *c; c++)
            *c = (char)(*c >= 'A' && *c <= 'Z' ? *c - 'A' + 'a' : *c);
        snprintf(buf, size, "%s(%s)", tp->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE ? "tensor" : "sparse_tensor",
                 dt);
        return;
    case ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE:
        kind = "seq";
        type_string(tp->sequence_type->elem_type, inner, sizeof inner, depth + 1);
        break;
    case ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE:
        kind = "optional";
        type_string(tp->optional_type->elem_type, inner, sizeof inner, depth + 1);
        break;
    case ONNX__TYPE_PROTO__VALUE_MAP_TYPE: {
        char value[140];
        type_string(tp->map_type->value_type, value, sizeof value, depth + 1);
        snprintf(dt, sizeof dt, "%s", nn_onnx_dtype_name(tp->map_type->key_type));
        for (char *c = dt; *c; c++)
            *c = (char)(*c >= 'A' && *c <= 'Z' ? *c - 'A' + 'a' : *c);
        snprintf(buf, size, "map(%s,%s)", dt, value);
        return;
    }
    default: snprintf(buf, size, "no type"); return;
    }
    snprintf(buf, size, "%s(%s)", kind, inner);
}

/* Declared type of a graph input/output: dtype and dims, -1 for a symbolic
 * (named or unknown) dimension.  Tensors of the dtypes nn holds, sequences of
 * them, and optionals of either (docs/sequences.md); for those two, v->t
 * describes the element tensor and v->kind says what holds it. */
static nn_status declared_type(const Onnx__ValueInfoProto *vi, nn_value *v, const char *role, bool body) {
    const Onnx__TypeProto *tp = vi->type;
    char type[200];
    v->kind = v->elem_kind = NN_KIND_TENSOR;
    if (body && (!tp || tp->value_case == ONNX__TYPE_PROTO__VALUE__NOT_SET)) { /* bodies may leave types open */
        v->t.dtype = NN_DTYPE_UNDEFINED;
        v->t.ndim = -1;
        return NN_OK;
    }
    type_string(tp, type, sizeof type, 0);
    v->kind = v->elem_kind = NN_KIND_TENSOR;
    if (tp && tp->value_case == ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE && tp->optional_type->elem_type) {
        v->kind = NN_KIND_OPTIONAL;
        tp = tp->optional_type->elem_type;
        if (tp->value_case == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE) v->elem_kind = NN_KIND_SEQUENCE;
    }
    if (tp && tp->value_case == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE && tp->sequence_type->elem_type) {
        if (v->kind == NN_KIND_TENSOR) v->kind = NN_KIND_SEQUENCE;
        tp = tp->sequence_type->elem_type;
    }
    if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE) {
        const char *what = !tp                                                       ? "untyped"
                           : tp->value_case == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE ? "a sequence"
                           : tp->value_case == ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE ? "an optional"
                           : tp->value_case == ONNX__TYPE_PROTO__VALUE_MAP_TYPE      ? "a map"
                           : tp->value_case == ONNX__TYPE_PROTO__VALUE_SPARSE_TENSOR_TYPE ? "a sparse tensor"
                                                                                          : "untyped";
        return nn_set_error(NN_ERR_UNSUPPORTED,
                            "graph %s '%s' is %s (%s): only tensors, sequences of tensors and optionals of those are "
                            "supported",
                            role, vi->name, what, type);
    }
    const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
    int32_t dt = tt->has_elem_type ? tt->elem_type : 0;
    if (!nn_dtype_supported(dt))
        return nn_set_error(NN_ERR_UNSUPPORTED, "graph %s '%s' is a %s: dtype %s is not supported", role, vi->name,
                            type, nn_onnx_dtype_name(dt));
    v->t.dtype = (nn_dtype)dt;
    if (!tt->shape) { /* unknown rank */
        v->t.ndim = -1;
        return NN_OK;
    }
    if (tt->shape->n_dim > NN_MAX_DIMS)
        return nn_set_error(NN_ERR_UNSUPPORTED, "graph %s '%s' has %zu dimensions, at most %d supported", role,
                            vi->name, tt->shape->n_dim, NN_MAX_DIMS);
    v->t.ndim = (int)tt->shape->n_dim;
    for (size_t i = 0; i < tt->shape->n_dim; i++) {
        const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
        bool fixed = d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
        if (fixed && d->dim_value < 0)
            return nn_set_error(NN_ERR_INVALID, "graph %s '%s' has negative dimension %lld", role, vi->name,
                                (long long)d->dim_value);
        v->t.dims[i] = fixed ? d->dim_value : -1;
    }
    return NN_OK;
}

/* Bodies nest at most this deep (a body's body ... ): no real model comes
 * close, and each level costs a stack frame of the importer. */
enum { MAX_BODY_DEPTH = 16 };

static nn_status import_graph(nn_graph *g, const Onnx__GraphProto *gp, scope *sc, int **captured, int *n_captured);

/* A GRAPH attribute: the body as a nested model, registered with g (which
 * frees it); the outer values it reads come back in a->graph's inputs and
 * in *captured (value ids of sc's graph). */
static nn_status import_body(scope *sc, const Onnx__AttributeProto *ap, const char *node_name, nn_attr *a,
                             int **captured) {
    nn_graph *g = sc->g;
    if (!ap->g) return nn_set_error(NN_ERR_INVALID, "node '%s': graph attribute '%s' is empty", node_name, ap->name);
    if (sc->depth + 1 > MAX_BODY_DEPTH)
        return nn_set_error(NN_ERR_UNSUPPORTED, "node '%s': subgraphs nest more than %d deep", node_name,
                            MAX_BODY_DEPTH);
    nn_model *body = nn_body_new(sc->depth + 1);
    if (!body || !nn_graph_add_body(g, body)) return nn_set_error(NN_ERR_NOMEM, "out of memory");
    body->g.opset = g->opset;
    scope inner = {.g = &body->g, .parent = sc, .depth = sc->depth + 1, .file = NULL, .base_dir = sc->base_dir};
    nn_status st = import_graph(&body->g, ap->g, &inner, captured, &a->n_captured);
    if (st != NN_OK && sc->depth == 0) { /* the model's node and body, then the innermost error */
        char why[512];
        snprintf(why, sizeof why, "%s", nn_last_error());
        return nn_set_error(st, "node '%s', body '%s': %s", node_name, ap->name, why);
    }
    if (st != NN_OK) return st;
    a->graph = body;
    return NN_OK;
}

static nn_status convert_attrs(scope *sc, const Onnx__NodeProto *np, const char *node_name, nn_attr **out,
                               int ***captured) {
    nn_graph *g = sc->g;
    *captured = nn_arena_alloc(&g->meta, sizeof(int *) * (np->n_attribute + 1));
    if (!*captured) return nn_set_error(NN_ERR_NOMEM, "out of memory");
    nn_attr *attrs = nn_arena_alloc(&g->meta, sizeof(nn_attr) * (np->n_attribute + 1));
    if (!attrs) return nn_set_error(NN_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < np->n_attribute; i++) {
        const Onnx__AttributeProto *ap = np->attribute[i];
        nn_attr *a = &attrs[i];
        memset(a, 0, sizeof *a);
        a->name = nn_arena_strdup(&g->meta, ap->name);
        a->type = (nn_attr_type)ap->type;
        a->i = ap->i;
        a->f = ap->f;
        if (ap->ref_attr_name && ap->ref_attr_name[0])
            return nn_set_error(NN_ERR_UNSUPPORTED, "node '%s': attribute '%s' refers to a function attribute",
                                node_name, ap->name);
        switch (ap->type) {
        case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING:
            a->s = nn_arena_alloc(&g->meta, ap->s.len + 1);
            if (a->s && ap->s.len) memcpy((char *)a->s, ap->s.data, ap->s.len);
            break;
        case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS:
            a->n = (int)ap->n_ints;
            a->ints = nn_arena_memdup(&g->meta, ap->ints, sizeof(int64_t) * ap->n_ints);
            break;
        case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS:
            a->n = (int)ap->n_floats;
            a->floats = nn_arena_memdup(&g->meta, ap->floats, sizeof(float) * ap->n_floats);
            break;
        case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR: {
            if (!ap->t)
                return nn_set_error(NN_ERR_INVALID, "node '%s': tensor attribute '%s' is empty", node_name, ap->name);
            nn_tensor *t = nn_arena_alloc(&g->meta, sizeof *t);
            char what[300];
            snprintf(what, sizeof what, "attribute '%s' of node '%s'", ap->name, node_name);
            if (!t) return nn_set_error(NN_ERR_NOMEM, "out of memory");
            nn_status st = nn_tensor_from_proto(ap->t, NULL, &g->weights, NULL, what, t);
            if (st != NN_OK) return st;
            a->t = t;
            break;
        }
        case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS: {
            /* the recurrent ops' activations: copied as NUL-terminated strings */
            char **list = nn_arena_alloc(&g->meta, sizeof(char *) * (ap->n_strings + 1));
            if (!list) return nn_set_error(NN_ERR_NOMEM, "out of memory");
            for (size_t k = 0; k < ap->n_strings; k++) {
                if (!(list[k] = nn_arena_alloc(&g->meta, ap->strings[k].len + 1)))
                    return nn_set_error(NN_ERR_NOMEM, "out of memory");
                if (ap->strings[k].len) memcpy(list[k], ap->strings[k].data, ap->strings[k].len);
            }
            a->n = (int)ap->n_strings;
            a->strings = (const char *const *)list;
            break;
        }
        case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH: {
            nn_status st = import_body(sc, ap, node_name, a, &(*captured)[i]);
            if (st != NN_OK) return st;
            break;
        }
        case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT:
        case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT:
        /* a type (Optional's, SequenceEmpty-like ops'): what the value would hold, which the engine learns
         * when it runs; kept as a name only */
        case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TYPE_PROTO: break;
        default:
            return nn_set_error(NN_ERR_UNSUPPORTED, "node '%s': attribute '%s' has a type (%d) that is not supported",
                                node_name, ap->name, (int)ap->type);
        }
        if (!a->name) return nn_set_error(NN_ERR_NOMEM, "out of memory");
    }
    *out = attrs;
    return NN_OK;
}

static nn_status import_node(scope *sc, const Onnx__NodeProto *np, int index) {
    nn_graph *g = sc->g;
    name_map *map = sc->map;
    char fallback[32];
    snprintf(fallback, sizeof fallback, "#%d", index);
    const char *name = np->name && np->name[0] ? np->name : fallback;
    const char *op_type = np->op_type ? np->op_type : "";
    if (np->domain && np->domain[0] && strcmp(np->domain, "ai.onnx") != 0)
        return nn_set_error(NN_ERR_UNSUPPORTED, "unsupported operator '%s::%s' at node '%s'", np->domain, op_type,
                            name);
    int op = nn_op_lookup(op_type);
    if (op < 0) return nn_set_error(NN_ERR_UNSUPPORTED, "unsupported operator '%s' at node '%s'", op_type, name);
    const nn_op_desc *d = nn_op_get(op);
    if (d->flags & NN_OPF_INTERNAL)
        return nn_set_error(NN_ERR_UNSUPPORTED,
                            "unsupported operator '%s' at node '%s' (an op nn's optimizer makes, not an ONNX operator)",
                            op_type, name);
    /* trailing empty names are absent optional inputs/outputs: drop them */
    int n_in = (int)np->n_input, n_out = (int)np->n_output;
    /* control flow keeps them: its optional inputs are positional (Loop's M, cond) */
    while (n_in > 0 && !np->input[n_in - 1][0] && !(d->flags & NN_OPF_SUBGRAPH))
        n_in--;
    while (n_out > 0 && !np->output[n_out - 1][0])
        n_out--;
    if (n_in < d->min_inputs || (d->max_inputs >= 0 && n_in > d->max_inputs))
        return nn_set_error(NN_ERR_INVALID, "node '%s' (%s) has %d inputs, expected %d to %d", name, op_type, n_in,
                            d->min_inputs, d->max_inputs);
    bool too_many_out = d->max_outputs >= 0 && n_out > d->max_outputs; /* -1: variadic */
    if (n_out < d->min_outputs || too_many_out)
        return nn_set_error(too_many_out ? NN_ERR_UNSUPPORTED : NN_ERR_INVALID,
                            "node '%s' (%s) has %d outputs, expected %d to %d", name, op_type, n_out, d->min_outputs,
                            d->max_outputs);
    int id = nn_graph_add_node(g, name, op, n_in, n_out);
    if (id < 0) return nn_set_error(NN_ERR_NOMEM, "out of memory");
    nn_node *node = &g->nodes[id];
    for (int i = 0; i < n_in; i++) {
        node->in[i] = np->input[i][0] ? value_for(g, map, np->input[i]) : -1;
        if (np->input[i][0] && node->in[i] < 0) return nn_set_error(NN_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < n_out; i++) {
        node->out[i] = -1;
        if (!np->output[i][0]) continue;
        int v = value_for(g, map, np->output[i]);
        if (v < 0) return nn_set_error(NN_ERR_NOMEM, "out of memory");
        nn_value *val = &g->values[v];
        if (val->producer >= 0 || val->is_input || val->is_const)
            return nn_set_error(NN_ERR_INVALID, "value '%s' is produced more than once (again by node '%s')", val->name,
                                name);
        val->producer = id;
        node->out[i] = v;
    }
    nn_attr *attrs = NULL;
    int **captured;
    nn_status st = convert_attrs(sc, np, name, &attrs, &captured);
    if (st != NN_OK) return st;
    /* the outer values the bodies read become inputs of the node after its
     * own, body after body, so that liveness and order see them */
    int n_captured = 0;
    for (size_t i = 0; i < np->n_attribute; i++)
        n_captured += attrs[i].graph ? attrs[i].n_captured : 0;
    if (n_captured) {
        if (n_in + n_captured > 4096)
            return nn_set_error(NN_ERR_UNSUPPORTED, "node '%s' (%s): its bodies read %d outer values, at most %d",
                                name, op_type, n_captured, 4096 - n_in);
        int *in = nn_arena_alloc(&g->meta, sizeof(int) * (size_t)(n_in + n_captured));
        if (!in) return nn_set_error(NN_ERR_NOMEM, "out of memory");
        memcpy(in, g->nodes[id].in, sizeof(int) * (size_t)n_in);
        int at = n_in;
        for (size_t i = 0; i < np->n_attribute; i++) {
            if (!attrs[i].graph) continue;
            attrs[i].capture_first = at;
            for (int k = 0; k < attrs[i].n_captured; k++)
                in[at++] = captured[i][k];
        }
        g->nodes[id].in = in;
        g->nodes[id].n_in = n_in + n_captured;
    }
    char err[256] = "";
    nn_parse_ctx ctx = {.attrs = attrs,
                        .n_attrs = (int)np->n_attribute,
                        .opset = g->opset,
                        .n_inputs = n_in,
                        .n_outputs = n_out,
                        .arena = &g->meta,
                        .err = err,
                        .err_size = sizeof err};
    if (d->parse && (st = d->parse(&ctx)) != NN_OK)
        return nn_set_error(st, "node '%s' (%s): %s", name, op_type, err[0] ? err : nn_strerror(st));
    if (d->parse && ctx.params_size > NN_PARAMS_MAX)
        return nn_set_error(NN_ERR_UNSUPPORTED, "node '%s' (%s): its attributes take %zu bytes, at most %d supported",
                            name, op_type, ctx.params_size, NN_PARAMS_MAX);
    if (d->check && (st = d->check(ctx.params, err, sizeof err)) != NN_OK)
        return nn_set_error(st, "node '%s' (%s): %s", name, op_type, err[0] ? err : nn_strerror(st));
    g->has_containers |= (d->flags & NN_OPF_CONTAINER) != 0;
    g->nodes[id].params = ctx.params;
    g->nodes[id].params_size = ctx.params_size;
    return NN_OK;
}

/* A body's names that none of its nodes, inputs or initializers define are
 * outer-scope values: each becomes a body input (after the formal ones),
 * and the enclosing graph's value of that name goes to *captured, which an
 * enclosing body may in turn capture from further out. */
static nn_status capture_outer(nn_graph *g, scope *sc, int **captured, int *n_captured) {
    int n = 0;
    for (int v = 0; v < g->n_values; v++)
        n += g->values[v].producer < 0 && !g->values[v].is_input && !g->values[v].is_const;
    int *inputs = nn_arena_alloc(&g->meta, sizeof(int) * (size_t)(g->n_inputs + n + 1));
    *captured = nn_arena_alloc(&g->meta, sizeof(int) * (size_t)(n + 1));
    if (!inputs || !*captured) return nn_set_error(NN_ERR_NOMEM, "out of memory");
    memcpy(inputs, g->inputs, sizeof(int) * (size_t)g->n_inputs);
    g->inputs = inputs;
    *n_captured = 0;
    for (int v = 0; v < g->n_values; v++) {
        nn_value *val = &g->values[v];
        if (val->producer >= 0 || val->is_input || val->is_const) continue;
        int outer = value_for(sc->parent->g, sc->parent->map, val->name);
        if (outer < 0) return nn_set_error(NN_ERR_NOMEM, "out of memory");
        val = &g->values[v];
        val->is_input = true;
        val->t.dtype = NN_DTYPE_UNDEFINED; /* nn_bodies_prepare gives it the outer value's type */
        val->t.ndim = -1;
        g->inputs[g->n_inputs++] = v;
        (*captured)[(*n_captured)++] = outer;
    }
    return NN_OK;
}

static nn_status import_graph(nn_graph *g, const Onnx__GraphProto *gp, scope *sc, int **captured, int *n_captured) {
    name_map map = {NULL, 64, g};
    sc->map = &map;
    bool body = sc->depth > 0;
    size_t expect = gp->n_initializer + gp->n_input + gp->n_output;
    for (size_t i = 0; i < gp->n_node; i++)
        expect += gp->node[i]->n_output + gp->node[i]->n_input;
    while (map.cap < expect * 2)
        map.cap *= 2;
    map.slots = malloc(sizeof(int) * map.cap);
    if (!map.slots) return nn_set_error(NN_ERR_NOMEM, "out of memory");
    memset(map.slots, 0xff, sizeof(int) * map.cap);
    nn_status st = NN_OK;
    g->name = nn_arena_strdup(&g->meta, gp->name ? gp->name : "");

    for (size_t i = 0; i < gp->n_initializer; i++) {
        const Onnx__TensorProto *tp = gp->initializer[i];
        const char *name = tp->name ? tp->name : "";
        int v = value_for(g, &map, name);
        if (v < 0) {
            st = nn_set_error(NN_ERR_NOMEM, "out of memory");
            goto out;
        }
        if (g->values[v].is_const) {
            st = nn_set_error(NN_ERR_INVALID, "initializer '%s' is defined twice", name);
            goto out;
        }
        char what[300];
        snprintf(what, sizeof what, "initializer '%s'", name);
        /* the slim file holds the payloads of the model graph's initializers; a body's stay in the protobuf */
        const nn_payload *raw = sc->file && i < sc->file->n_payloads ? &sc->file->payloads[i] : NULL;
        if ((st = nn_tensor_from_proto(tp, raw, &g->weights, sc->base_dir, what, &g->values[v].t)) != NN_OK) goto out;
        g->external_data |= tp->n_external_data > 0;
        if (raw && raw->data) nn_onnx_file_release(sc->file, raw);
        g->values[v].is_const = g->values[v].shape_known = true;
        g->has_containers |= g->values[v].t.dtype == NN_DTYPE_STRING;
        g->parameters += nn_tensor_elements(&g->values[v].t);
    }
    g->inputs = nn_arena_alloc(&g->meta, sizeof(int) * (gp->n_input + 1));
    g->outputs = nn_arena_alloc(&g->meta, sizeof(int) * (gp->n_output + 1));
    g->declared_out = nn_arena_alloc(&g->meta, sizeof(nn_tensor) * (gp->n_output + 1));
    if (!g->inputs || !g->outputs || !g->declared_out) {
        st = nn_set_error(NN_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < gp->n_input; i++) {
        const Onnx__ValueInfoProto *vi = gp->input[i];
        int v = value_for(g, &map, vi->name ? vi->name : "");
        if (v < 0) {
            st = nn_set_error(NN_ERR_NOMEM, "out of memory");
            goto out;
        }
        if (g->values[v].is_const) continue; /* an initializer listed as input (IR < 4): a constant */
        if (g->values[v].is_input) {
            st = nn_set_error(NN_ERR_INVALID, "graph input '%s' is listed twice", vi->name);
            goto out;
        }
        if ((st = declared_type(vi, &g->values[v], "input", body)) != NN_OK) goto out;
        g->values[v].is_input = true;
        g->has_containers |= g->values[v].kind != NN_KIND_TENSOR || g->values[v].t.dtype == NN_DTYPE_STRING;
        g->inputs[g->n_inputs++] = v;
    }
    for (size_t i = 0; i < gp->n_node; i++)
        if ((st = import_node(sc, gp->node[i], (int)i)) != NN_OK) goto out;
    g->nodes_parsed = g->n_nodes;
    for (size_t i = 0; i < gp->n_output; i++) {
        const Onnx__ValueInfoProto *vi = gp->output[i];
        const char *name = vi->name ? vi->name : "";
        /* a body may return an outer value as it is */
        int v = body ? value_for(g, &map, name) : *map_slot(&map, name);
        if (v < 0) {
            st = body ? nn_set_error(NN_ERR_NOMEM, "out of memory")
                      : nn_set_error(NN_ERR_INVALID, "graph output '%s' is produced by no node", vi->name);
            goto out;
        }
        nn_value declared = {0};
        if ((st = declared_type(vi, &declared, "output", body)) != NN_OK) goto out;
        nn_value *val = &g->values[v];
        val->is_output = true; /* whether it carries the batch follows from the graph (batch.c) */
        val->kind = declared.kind;
        val->elem_kind = declared.elem_kind;
        g->has_containers |= declared.kind != NN_KIND_TENSOR || declared.t.dtype == NN_DTYPE_STRING;
        g->declared_out[g->n_outputs] = declared.t;
        g->outputs[g->n_outputs++] = v;
    }
    if (!g->n_outputs) {
        st = nn_set_error(NN_ERR_INVALID, "the graph has no outputs: nothing to compute");
        goto out;
    }
    if (body && (st = capture_outer(g, sc, captured, n_captured)) != NN_OK) goto out;
    st = nn_graph_toposort(g);
out:
    free(map.slots);
    sc->map = NULL;
    return st;
}

nn_status nn_import_onnx(const char *path, nn_graph *g) {
    memset(g, 0, sizeof *g);
    g->weights.chunk_size = 1 << 20;
    nn_onnx_file file;
    nn_status st = nn_onnx_file_open(path, &file);
    if (st != NN_OK) return st;
    Onnx__ModelProto *mp = onnx__model_proto__unpack(NULL, file.slim_size, file.slim);
    if (!mp) {
        nn_onnx_file_close(&file);
        return nn_set_error(NN_ERR_PARSE,
                            "'%s' is not a valid ONNX protobuf (decoding failed: truncated or not protobuf)", path);
    }
    if (!mp->graph) {
        st = nn_set_error(NN_ERR_PARSE, "'%s' holds no graph (is it an ONNX model?)", path);
        goto out;
    }
    g->opset = 0;
    for (size_t i = 0; i < mp->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *os = mp->opset_import[i];
        if (!os->domain || !os->domain[0] || !strcmp(os->domain, "ai.onnx")) g->opset = (int)os->version;
    }
    if (g->opset == 0) g->opset = 1; /* IR v1 files carry no opset_import */
    /* external data is resolved against the model's folder */
    char base_dir[4096];
    snprintf(base_dir, sizeof base_dir, "%s", path);
    char *slash = strrchr(base_dir, '/');
    if (slash)
        *slash = 0;
    else
        snprintf(base_dir, sizeof base_dir, ".");
    scope top = {.g = g, .depth = 0, .file = &file, .base_dir = base_dir};
    st = import_graph(g, mp->graph, &top, NULL, NULL);
out:
    onnx__model_proto__free_unpacked(mp, NULL);
    nn_onnx_file_close(&file);
    if (st != NN_OK) nn_graph_free(g);
    return st;
}
