/* Writing the plan cache (layout in cache_int.h).
 *
 * Writing goes to a temporary file in the same folder, which is synced and
 * renamed over the real name: readers see the old file or the whole new one. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../ops/registry.h"
#include "backend.h"
#include "cache_int.h"

typedef struct wbuf {
    unsigned char *p;
    size_t n, cap;
    bool failed;
} wbuf;

typedef struct blob {
    const void *p;
    uint64_t size, offset;
} blob;

typedef struct writer {
    wbuf meta;
    blob *blobs;
    int n_blobs, cap_blobs;
    uint64_t data_bytes;
} writer;

/* Room for `size` more bytes at the end; NULL (and failed) when out of memory. */
static unsigned char *grow(wbuf *w, size_t size) {
    if (w->failed) return NULL;
    if (w->cap - w->n < size) {
        size_t cap = w->cap ? w->cap * 2 : 1 << 16;
        while (cap - w->n < size)
            cap *= 2;
        unsigned char *p = realloc(w->p, cap);
        if (!p) {
            w->failed = true;
            return NULL;
        }
        w->p = p;
        w->cap = cap;
    }
    unsigned char *at = w->p + w->n;
    w->n += size;
    return at;
}

static void put(wbuf *w, const void *src, size_t size) {
    unsigned char *at = grow(w, size);
    if (at) memcpy(at, src, size);
}

static void put_le(wbuf *w, uint64_t v, int bytes) {
    unsigned char *at = grow(w, (size_t)bytes);
    if (at) cache_put_le(at, v, bytes);
}

static void put_record(wbuf *w, const record_desc *d, const void *rec) {
    unsigned char *at = grow(w, cache_record_bytes(d));
    if (at) cache_encode(d, rec, at);
}

static void put_str(wbuf *w, const char *s) {
    put_le(w, s ? strlen(s) : UINT32_MAX, 4);
    if (s) put(w, s, strlen(s));
}

static void put_ids(wbuf *w, const int *ids, int count) {
    for (int k = 0; k < count; k++)
        put_le(w, (uint32_t)ids[k], 4);
}

/* A reference to bytes that go to the data section; NULL writes "none". */
static void put_data(writer *wr, const void *p, size_t size) {
    if (!p) {
        put_le(&wr->meta, UINT64_MAX, 8);
        return;
    }
    if (wr->n_blobs == wr->cap_blobs) {
        int cap = wr->cap_blobs ? wr->cap_blobs * 2 : 256;
        blob *b = realloc(wr->blobs, sizeof *b * (size_t)cap);
        if (!b) {
            wr->meta.failed = true;
            return;
        }
        wr->blobs = b;
        wr->cap_blobs = cap;
    }
    uint64_t at = (wr->data_bytes + DATA_ALIGN - 1) / DATA_ALIGN * DATA_ALIGN;
    wr->blobs[wr->n_blobs++] = (blob){p, size, at};
    wr->data_bytes = at + size;
    put_le(&wr->meta, at, 8);
    put_le(&wr->meta, size, 8);
}

static size_t value_bytes(const nn_tensor *t) { return (size_t)nn_tensor_elements(t) * nn_dtype_size(t->dtype); }

static void write_node_params(wbuf *w, const nn_node *n) {
    put_le(w, n->params ? n->params_size : UINT32_MAX, 4);
    if (!n->params) return;
    if (!(nn_op_get(n->op)->flags & NN_OPF_SUBGRAPH) || n->params_size < sizeof(nn_subgraph_set)) {
        put(w, n->params, n->params_size);
        return;
    }
    /* the bodies' addresses mean nothing in a file: zeros, re-pointed on reading */
    unsigned char *at = grow(w, n->params_size);
    if (!at) return;
    memcpy(at, n->params, n->params_size);
    nn_subgraph_set set;
    memcpy(&set, at, sizeof set);
    for (int k = 0; k < 2; k++)
        set.g[k].body = NULL;
    memcpy(at, &set, sizeof set);
}

static void write_node(writer *wr, const nn_node *n) {
    wbuf *w = &wr->meta;
    put_str(w, n->name);
    put_str(w, nn_op_get(n->op)->name);
    put_record(w, &cache_node_head_desc, &(node_head){n->n_in, n->n_out});
    put_ids(w, n->in, n->n_in);
    put_ids(w, n->out, n->n_out);
    write_node_params(w, n);
    put_data(wr, n->prepared, n->prepared_size);
    node_tail t = {.has_epilogue = n->has_epilogue,
                   .residual = n->epilogue.residual,
                   .act = n->epilogue.act,
                   .alpha = n->epilogue.alpha,
                   .beta = n->epilogue.beta,
                   .has_prologue = n->has_prologue,
                   .scale = n->prologue.scale,
                   .shift = n->prologue.shift,
                   .prologue_act = n->prologue.act,
                   .elided = n->elided};
    put_record(w, &cache_node_tail_desc, &t);
    put_str(w, n->fused);
}

static void write_graph(writer *wr, const nn_model *m);

/* After a graph, the bodies of its control-flow nodes, node by node: how
 * each is wired (body_record), its name, the body as a graph of its own,
 * then its outputs' declared types. */
static void write_bodies(writer *wr, const nn_graph *g) {
    for (int i = 0; i < g->n_nodes; i++) {
        const nn_node *n = &g->nodes[i];
        if (!(nn_op_get(n->op)->flags & NN_OPF_SUBGRAPH)) continue;
        const nn_subgraph_set *set = n->params;
        for (int k = 0; k < set->n; k++) {
            const nn_subgraph *s = &set->g[k];
            const nn_graph *bg = &s->body->g;
            body_record br = {s->n_formal, s->capture_first, s->n_captured};
            put_record(&wr->meta, &cache_body_desc, &br);
            put_str(&wr->meta, bg->name);
            write_graph(wr, s->body);
            for (int o = 0; o < bg->n_outputs; o++) {
                value_record dr = {.dtype = bg->declared_out[o].dtype, .ndim = bg->declared_out[o].ndim};
                if (dr.ndim > 0 && dr.ndim <= NN_MAX_DIMS)
                    memcpy(dr.dims, bg->declared_out[o].dims, sizeof(int64_t) * (size_t)dr.ndim);
                put_record(&wr->meta, &cache_value_desc, &dr);
            }
        }
    }
}

static void write_graph(writer *wr, const nn_model *m) {
    const nn_graph *g = &m->g;
    wbuf *w = &wr->meta;
    bool *read = calloc((size_t)g->n_values + 1, 1);                 /* constants still needed */
    int *producer = malloc(sizeof(int) * ((size_t)g->n_values + 1)); /* values of removed nodes keep stale ones */
    if (!read || !producer) {
        free(read);
        free(producer);
        w->failed = true;
        return;
    }
    for (int v = 0; v < g->n_values; v++)
        producer[v] = -1;
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_out; k++)
            if (g->nodes[i].out[k] >= 0) producer[g->nodes[i].out[k]] = i;
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++)
            if (g->nodes[i].in[k] >= 0) read[g->nodes[i].in[k]] = true;
    for (int i = 0; i < g->n_outputs; i++)
        read[g->outputs[i]] = true;
    graph_record gr = {.n_values = (uint32_t)g->n_values,
                       .n_nodes = (uint32_t)g->n_nodes,
                       .n_inputs = (uint32_t)g->n_inputs,
                       .n_outputs = (uint32_t)g->n_outputs,
                       .opset = g->opset,
                       .nodes_parsed = g->nodes_parsed,
                       .parameters = g->parameters,
                       .plan_batch = m->plan_batch,
                       .has_batch = m->has_batch,
                       .dynamic = m->dynamic,
                       .whole_batch = m->whole_batch};
    memcpy(gr.whole_batch_why, m->whole_batch_why, sizeof gr.whole_batch_why);
    put_record(w, &cache_graph_desc, &gr);
    for (int v = 0; v < g->n_values; v++) {
        const nn_value *val = &g->values[v];
        value_record vr = {.dtype = val->t.dtype,
                           .ndim = val->t.ndim,
                           .producer = producer[v],
                           .flags = (uint8_t)((val->is_input ? V_INPUT : 0) | (val->is_output ? V_OUTPUT : 0) |
                                              (val->is_const ? V_CONST : 0) | (val->shape_known ? V_SHAPE_KNOWN : 0) |
                                              (val->batched ? V_BATCHED : 0)),
                           .alias = val->alias,
                           .alias_offset = val->alias_offset};
        if (val->t.ndim > 0 && val->t.ndim <= NN_MAX_DIMS)
            memcpy(vr.dims, val->t.dims, sizeof(int64_t) * (size_t)val->t.ndim);
        put_str(w, val->name);
        put_record(w, &cache_value_desc, &vr);
        bool keep = val->is_const && val->t.data && read[v];
        put_data(wr, keep ? val->t.data : NULL, keep ? value_bytes(&val->t) : 0);
    }
    free(read);
    free(producer);
    for (int i = 0; i < g->n_nodes; i++)
        write_node(wr, &g->nodes[i]);
    put_ids(w, g->inputs, g->n_inputs);
    put_ids(w, g->outputs, g->n_outputs);
    if (!m->dynamic) {
        plan_record pr = {m->plan.arena_bytes, m->plan.naive_bytes, m->plan.lower_bound_bytes};
        put_record(w, &cache_plan_desc, &pr);
        for (int v = 0; v < g->n_values; v++)
            put_le(w, (uint64_t)m->plan.offset[v], 8);
        put_ids(w, m->plan.first_use, g->n_values);
        put_ids(w, m->plan.last_use, g->n_values);
    }
    write_bodies(wr, g);
}

static void write_meta(writer *wr, const nn_model *m, const void *choices, size_t choices_bytes) {
    write_graph(wr, m);
    put_data(wr, choices, choices_bytes);
    put_le(&wr->meta, END_MARK, 4);
}

/* Whether some initializer, in the graph or a body, came from an external file. */
static bool external_data(const nn_graph *g) {
    bool any = g->external_data;
    for (int i = 0; i < g->n_bodies && !any; i++)
        any = external_data(&g->bodies[i]->g);
    return any;
}

static bool write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n) {
        ssize_t k = write(fd, c, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        c += k;
        n -= (size_t)k;
    }
    return true;
}

static bool write_zeros(int fd, uint64_t n) {
    static const char zeros[DATA_ALIGN * 64];
    for (; n; n -= n < sizeof zeros ? n : sizeof zeros)
        if (!write_all(fd, zeros, n < sizeof zeros ? n : sizeof zeros)) return false;
    return true;
}

static bool make_folder(const char *path) {
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return false;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0700) != 0 && errno != EEXIST) return false;
        *p = '/';
    }
    return true;
}

/* Write the file body, then checksum it through a mapping of what was
 * written and write the header last. */
static bool write_file(int fd, const nn_model *m, const writer *wr, cache_header *h) {
    if (!write_zeros(fd, h->meta_offset) || !write_all(fd, wr->meta.p, wr->meta.n) ||
        !write_zeros(fd, h->data_offset - h->meta_offset - h->meta_bytes))
        return false;
    uint64_t at = 0;
    for (int i = 0; i < wr->n_blobs; i++) {
        if (!write_zeros(fd, wr->blobs[i].offset - at) || !write_all(fd, wr->blobs[i].p, wr->blobs[i].size))
            return false;
        at = wr->blobs[i].offset + wr->blobs[i].size;
    }
    void *map = mmap(NULL, h->file_bytes, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) return false;
    cache_checksum(h, map, m->threads, h->checksum);
    munmap(map, h->file_bytes);
    unsigned char head[HEADER_BYTES];
    cache_encode(&cache_header_desc, h, head);
    return pwrite(fd, head, sizeof head, 0) == (ssize_t)sizeof head && fsync(fd) == 0;
}

void nn_cache_store(nn_model *m) {
    if (!m->cache_key_known || m->cache_state == NN_CACHE_HIT) return;
    if (external_data(&m->g)) {
        cache_warn(
            m, "not cached: the model keeps its weights in external data files, which the cache key does not cover");
        return;
    }
    for (int i = 0; i < m->g.n_nodes; i++)
        if (nn_op_get(m->g.nodes[i].op)->flags & NN_OPF_UNCACHED) {
            cache_warn(m, "not cached: node '%s' (%s) keeps attributes the plan cache does not store",
                       m->g.nodes[i].name, nn_op_get(m->g.nodes[i].op)->name);
            return;
        }
    if (m->g.has_containers) {
        /* their values are pointers (strings, sequence items), which a file cannot hold; and such
         * graphs run dynamically, so a cached plan would save little (docs/sequences.md) */
        cache_warn(m, "not cached: the graph holds strings, sequences or optionals, which the plan cache does not "
                      "store");
        return;
    }
    /* the device's measured choices (GPU algorithms) go along with the plan */
    size_t choices_bytes = m->backend && m->backend->save_choices ? m->backend->save_choices(m, NULL, 0) : 0;
    void *choices = choices_bytes ? malloc(choices_bytes) : NULL;
    if (choices) m->backend->save_choices(m, choices, choices_bytes);
    writer wr = {0};
    write_meta(&wr, m, choices, choices ? choices_bytes : 0);
    if (wr.meta.failed) {
        cache_warn(m, "out of memory writing the plan cache");
        goto done;
    }
    cache_header h = {.magic = CACHE_MAGIC, .format = CACHE_FORMAT, .header_bytes = HEADER_BYTES};
    memcpy(h.key, m->cache_key, sizeof h.key);
    memcpy(h.content, m->cache_content, sizeof h.content);
    memcpy(h.model_id, m->cache_model_id, sizeof h.model_id);
    snprintf(h.engine, sizeof h.engine, "%s", NN_VERSION_STRING);
    h.meta_offset = (HEADER_BYTES + DATA_ALIGN - 1) / DATA_ALIGN * DATA_ALIGN;
    h.meta_bytes = wr.meta.n;
    h.data_offset = (h.meta_offset + h.meta_bytes + PAGE - 1) / PAGE * PAGE;
    h.data_bytes = wr.data_bytes;
    h.file_bytes = h.data_offset + h.data_bytes;
    if (m->cache_cap >= 0 && h.file_bytes > (uint64_t)m->cache_cap) {
        cache_warn(m, "not cached: the plan's %.1f MiB exceed the plan cache's cap of %.1f MiB (NN_CACHE_MAX)",
                   (double)h.file_bytes / (1 << 20), (double)m->cache_cap / (1 << 20));
        goto done;
    }

    char *dir = strdup(m->cache_path), *tmp = malloc(strlen(m->cache_path) + 32);
    if (!dir || !tmp) {
        cache_warn(m, "out of memory writing the plan cache");
        free(dir);
        free(tmp);
        goto done;
    }
    *strrchr(dir, '/') = 0;
    sprintf(tmp, "%s.%d.tmp.XXXXXX", m->cache_path, (int)getpid());
    int fd = make_folder(dir) && (mkdir(dir, 0700) == 0 || errno == EEXIST) ? mkstemp(tmp) : -1;
    if (fd < 0) {
        cache_warn(m, "cannot write the plan cache in '%s': %s", dir, strerror(errno));
    } else {
        bool ok = write_file(fd, m, &wr, &h);
        int err = errno;
        ok = close(fd) == 0 && ok;
        if (ok && rename(tmp, m->cache_path) == 0) {
            m->cache_written = true;
            /* the least recently used plans make room; eviction failing only leaves the folder larger */
            nn_cache_trim(dir, m->cache_cap, m->cache_path, NULL);
        } else {
            cache_warn(m, "cannot write the plan cache '%s': %s", m->cache_path, strerror(ok ? errno : err));
            unlink(tmp);
        }
    }
    free(dir);
    free(tmp);
done:
    free(wr.meta.p);
    free(wr.blobs);
    free(choices);
}
