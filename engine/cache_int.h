/* Private to the plan cache (engine/cache_*.c): the file's layout, each
 * record it holds described once as a field table (the writer encodes and
 * the reader decodes through the same table, so the two cannot drift), and
 * the key.
 *
 * One file per model file and plan-changing options, named
 * <model stem>-<16 hex digits>.nnplan in the cache folder:
 *
 *   header  HEADER_FIELDS at offset 0 (HEADER_BYTES)
 *   meta    the graph, its nodes' params and the memory plan, as a stream of
 *           records and strings (meta_offset, meta_bytes)
 *   data    constant tensors and prepared blocks (packed weights), each
 *           64-byte aligned, from a page-aligned data_offset, so that a hit
 *           uses them in place from a read-only mapping
 *
 * Every field of the header and the meta section is fixed-width and
 * little-endian.  The data section is the bytes kernels use in place, in
 * this machine's order: the key covers the CPU the plan was made for. */
#ifndef NN_CACHE_INT_H
#define NN_CACHE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "cache.h"

/* Bump when the layout of the file, of an op's params or of a prepared
 * block changes, or when the optimizer makes a faster graph of the same
 * model (17: with --precision bf16 the 3x3 convs Winograd takes keep its
 * fp32 transformed weights, engine/call.c, where version 16 packed them for
 * the bf16 GEMM; 16: with AVX2 too, stride-1 depthwise convs on rows of 9
 * to 128 run by rows, ops/conv_depthwise.c dw_rows, with no blocked
 * weights, where version 15 did so with AVX-512 only and version 14
 * blocked their 3x3 and 5x5 weights per 8 or 16 channels, ops/conv.c
 * PREP_DEPTHWISE): older files then read as stale. */
#define CACHE_FORMAT 17
#define CACHE_MAGIC  "nnplan\n"
enum {
    DATA_ALIGN = 64,
    PAGE = 4096,
    MAX_IO = 4096, /* inputs or outputs of a node: a control-flow node takes its bodies' outer values too */
    END_MARK = 0x21444e45, /* "END!" */
    HEADER_BYTES = 160,    /* cache_record_bytes(&cache_header_desc) */
    PLAN_OPTIONS_MAX = 512,
};

/* ---- records: the in-memory form of each, and its field table */

typedef enum field_type { FT_U8, FT_I32, FT_U32, FT_I64, FT_U64, FT_F32, FT_CHAR } field_type;

typedef struct field {
    field_type type;
    int count;     /* consecutive elements */
    size_t offset; /* in the record struct */
} field;

typedef struct record_desc {
    const field *fields;
    int n_fields;
} record_desc;

typedef struct cache_header {
    char magic[8];
    uint32_t format, header_bytes;
    uint64_t key[2];
    uint64_t file_bytes;
    uint64_t meta_offset, meta_bytes;
    uint64_t data_offset, data_bytes;
    uint64_t content[2];  /* nn_hash128 of the model file's bytes ... */
    uint64_t model_id[5]; /* ... when it had this identity (see cache_model_identity) */
    uint64_t checksum[2]; /* of the file with this field zeroed (cache_checksum) */
    char engine[16];      /* NN_VERSION_STRING, for people reading the file */
} cache_header;

/* meta starts with the graph's counts and model-level facts */
typedef struct graph_record {
    uint32_t n_values, n_nodes, n_inputs, n_outputs;
    int32_t opset, nodes_parsed;
    int64_t parameters;
    int32_t plan_batch;
    uint8_t has_batch, dynamic, whole_batch;
    char whole_batch_why[200]; /* NUL-terminated by the reader */
} graph_record;

/* then each value: its name, this record, then a data reference */
enum { V_INPUT = 1, V_OUTPUT = 2, V_CONST = 4, V_SHAPE_KNOWN = 8, V_BATCHED = 16 };
typedef struct value_record {
    int32_t dtype, ndim;
    int64_t dims[NN_MAX_DIMS]; /* unused ones zero: the same plan, the same bytes */
    int32_t producer;
    uint8_t flags; /* V_* */
    int32_t alias;
    int64_t alias_offset;
} value_record;

/* then each node: its name and op name, node_head, its input and output
 * ids (i32 each), its params (u32 size or none, then the bytes), a data
 * reference for its prepared block, node_tail, and what it fused */
typedef struct node_head {
    int32_t n_in, n_out;
} node_head;

typedef struct node_tail {
    uint8_t has_epilogue;
    int32_t residual, act;
    float alpha, beta;
    uint8_t has_prologue;
    int32_t scale, shift, prologue_act;
    uint8_t elided;
} node_tail;

/* then the graph's input and output ids, and for static models the memory
 * plan: plan_record, then offset (i64), first_use and last_use (i32) per
 * value */
typedef struct plan_record {
    uint64_t arena_bytes, naive_bytes, lower_bound_bytes;
} plan_record;

/* then, for each control-flow node in order, each of its bodies: this
 * record, the body graph's name, the body itself from its graph_record on
 * (its own bodies follow it, at most CACHE_BODY_DEPTH deep), and a
 * value_record per body output with its declared type (ndim -1: open;
 * dims -1: symbolic).  The model's graph then ends with the device's
 * choices (a data reference) and END_MARK. */
typedef struct body_record {
    int32_t n_formal, capture_first, n_captured;
} body_record;
enum { CACHE_BODY_DEPTH = 16 };

extern const record_desc cache_header_desc, cache_graph_desc, cache_value_desc, cache_node_head_desc,
    cache_node_tail_desc, cache_plan_desc, cache_body_desc;

/* Bytes of an encoded record. */
size_t cache_record_bytes(const record_desc *d);
/* Encode `rec` into cache_record_bytes(d) bytes at dst; decode them back. */
void cache_encode(const record_desc *d, const void *rec, unsigned char *dst);
void cache_decode(const record_desc *d, const unsigned char *src, void *rec);
/* One little-endian value (the ids and plan arrays, which are not records). */
void cache_put_le(unsigned char *dst, uint64_t v, int bytes);
uint64_t cache_get_le(const unsigned char *src, int bytes);

/* ---- the key and the file's checksum (cache_key.c) */

/* Everything besides the model's bytes that changes the plan. */
void cache_plan_options(const nn_model *m, char *buf, size_t size);
/* m->cache_path and m->cache_model_id for the model at model_path; false
 * (with a warning when worth one) when there is no cache to use. */
bool cache_locate(nn_model *m, const char *model_path, const char *opts);
/* m->cache_key from the model's bytes (hashed now, unless known_content is
 * given because the file's identity matches the one recorded with it). */
bool cache_derive_key(nn_model *m, const char *model_path, const char *opts, const uint64_t *known_content);
/* The checksum of a whole file of h->file_bytes bytes, its own field zeroed. */
void cache_checksum(const cache_header *h, const unsigned char *file, int threads, uint64_t out[2]);
/* Add to the model's cache warning (a load and the rewrite may both fail). */
void cache_warn(nn_model *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
