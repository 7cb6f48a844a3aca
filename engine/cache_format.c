/* The plan cache's records (cache_int.h): each described once, encoded and
 * decoded field by field in little-endian order. */
#include <string.h>

#include "cache_int.h"

#define F(type, count, st, member)                                                                                     \
    { type, count, offsetof(st, member) }
#define DESC(table)                                                                                                    \
    { table, (int)(sizeof table / sizeof *table) }

static const field header_fields[] = {
    F(FT_CHAR, 8, cache_header, magic),       F(FT_U32, 1, cache_header, format),
    F(FT_U32, 1, cache_header, header_bytes), F(FT_U64, 2, cache_header, key),
    F(FT_U64, 1, cache_header, file_bytes),   F(FT_U64, 1, cache_header, meta_offset),
    F(FT_U64, 1, cache_header, meta_bytes),   F(FT_U64, 1, cache_header, data_offset),
    F(FT_U64, 1, cache_header, data_bytes),   F(FT_U64, 2, cache_header, content),
    F(FT_U64, 5, cache_header, model_id),     F(FT_U64, 2, cache_header, checksum),
    F(FT_CHAR, 16, cache_header, engine),
};
static const field graph_fields[] = {
    F(FT_U32, 1, graph_record, n_values),   F(FT_U32, 1, graph_record, n_nodes),
    F(FT_U32, 1, graph_record, n_inputs),   F(FT_U32, 1, graph_record, n_outputs),
    F(FT_I32, 1, graph_record, opset),      F(FT_I32, 1, graph_record, nodes_parsed),
    F(FT_I64, 1, graph_record, parameters), F(FT_I32, 1, graph_record, plan_batch),
    F(FT_U8, 1, graph_record, has_batch),   F(FT_U8, 1, graph_record, dynamic),
    F(FT_U8, 1, graph_record, whole_batch), F(FT_CHAR, 200, graph_record, whole_batch_why),
};
static const field value_fields[] = {
    F(FT_I32, 1, value_record, dtype),          F(FT_I32, 1, value_record, ndim),
    F(FT_I64, NN_MAX_DIMS, value_record, dims), F(FT_I32, 1, value_record, producer),
    F(FT_U8, 1, value_record, flags),           F(FT_I32, 1, value_record, alias),
    F(FT_I64, 1, value_record, alias_offset),
};
static const field node_head_fields[] = {F(FT_I32, 1, node_head, n_in), F(FT_I32, 1, node_head, n_out)};
static const field node_tail_fields[] = {
    F(FT_U8, 1, node_tail, has_epilogue), F(FT_I32, 1, node_tail, residual), F(FT_I32, 1, node_tail, act),
    F(FT_F32, 1, node_tail, alpha),       F(FT_F32, 1, node_tail, beta),     F(FT_U8, 1, node_tail, has_prologue),
    F(FT_I32, 1, node_tail, scale),       F(FT_I32, 1, node_tail, shift),    F(FT_I32, 1, node_tail, prologue_act),
    F(FT_U8, 1, node_tail, elided),
};
static const field plan_fields[] = {F(FT_U64, 1, plan_record, arena_bytes), F(FT_U64, 1, plan_record, naive_bytes),
                                    F(FT_U64, 1, plan_record, lower_bound_bytes)};
static const field body_fields[] = {F(FT_I32, 1, body_record, n_formal), F(FT_I32, 1, body_record, capture_first),
                                    F(FT_I32, 1, body_record, n_captured)};

static int type_bytes(field_type t) {
    switch (t) {
    case FT_U8:
    case FT_CHAR: return 1;
    case FT_I32:
    case FT_U32:
    case FT_F32: return 4;
    case FT_I64:
    case FT_U64: return 8;
    }
    return 0;
}

size_t cache_record_bytes(const record_desc *d) {
    size_t b = 0;
    for (int i = 0; i < d->n_fields; i++)
        b += (size_t)type_bytes(d->fields[i].type) * (size_t)d->fields[i].count;
    return b;
}

const record_desc cache_header_desc = DESC(header_fields), cache_graph_desc = DESC(graph_fields),
                  cache_value_desc = DESC(value_fields), cache_node_head_desc = DESC(node_head_fields),
                  cache_node_tail_desc = DESC(node_tail_fields), cache_plan_desc = DESC(plan_fields),
                  cache_body_desc = DESC(body_fields);

void cache_put_le(unsigned char *dst, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++)
        dst[i] = (unsigned char)(v >> (8 * i));
}

uint64_t cache_get_le(const unsigned char *src, int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v |= (uint64_t)src[i] << (8 * i);
    return v;
}

/* The element's bits as an unsigned integer of its width (memcpy keeps
 * floats and signed values exact). */
static uint64_t load_bits(const unsigned char *p, int bytes) {
    uint8_t u8;
    uint32_t u32;
    uint64_t u64;
    switch (bytes) {
    case 1: memcpy(&u8, p, 1); return u8;
    case 4: memcpy(&u32, p, 4); return u32;
    default: memcpy(&u64, p, 8); return u64;
    }
}

static void store_bits(unsigned char *p, uint64_t v, int bytes) {
    uint8_t u8 = (uint8_t)v;
    uint32_t u32 = (uint32_t)v;
    switch (bytes) {
    case 1: memcpy(p, &u8, 1); break;
    case 4: memcpy(p, &u32, 4); break;
    default: memcpy(p, &v, 8); break;
    }
}

void cache_encode(const record_desc *d, const void *rec, unsigned char *dst) {
    const unsigned char *base = rec;
    for (int i = 0; i < d->n_fields; i++) {
        int w = type_bytes(d->fields[i].type);
        for (int k = 0; k < d->fields[i].count; k++, dst += w)
            cache_put_le(dst, load_bits(base + d->fields[i].offset + (size_t)k * (size_t)w, w), w);
    }
}

void cache_decode(const record_desc *d, const unsigned char *src, void *rec) {
    unsigned char *base = rec;
    for (int i = 0; i < d->n_fields; i++) {
        int w = type_bytes(d->fields[i].type);
        for (int k = 0; k < d->fields[i].count; k++, src += w)
            store_bits(base + d->fields[i].offset + (size_t)k * (size_t)w, cache_get_le(src, w), w);
    }
}
