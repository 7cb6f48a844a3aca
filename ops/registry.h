/* The operator table generated from ops/ops.def. */
#ifndef NN_REGISTRY_H
#define NN_REGISTRY_H

#include "op.h"

typedef enum nn_op_id {
#define NN_OP(name, family) NN_OP_##name,
#include "ops.def"
#undef NN_OP
    NN_OP_COUNT
} nn_op_id;

/* descriptor of an op id (NULL if out of range) */
const nn_op_desc *nn_op_get(int id);
/* op id for an ONNX op type, -1 if the engine does not implement it */
int nn_op_lookup(const char *name);
/* NN_ERR_UNSUPPORTED (described in c->err) when an input has a dtype the op
 * has not declared it handles (NN_OPF_ANY_DTYPE); called before every infer */
nn_status nn_op_check_dtypes(const nn_op_desc *d, nn_call *c);
/* 0 when the table is sorted and every descriptor's name matches its line */
int nn_op_table_check(void);
/* The CPU kernel set the ops run with ("avx512", "avx2", "portable"): packed
 * weights made for one do not fit another, so the plan cache keys on it. */
const char *nn_ops_cpu_kernels(void);
/* Whether bf16 products run on AMX (1) or not (0). */
int nn_ops_cpu_amx(void);
/* The cache sizes the CPU kernels block for and the GEMM blocking they
 * give: the plan cache keys on it too (scratch sizes, packed K blocks). */
void nn_ops_cpu_blocking(char *buf, size_t size, bool compact);

#endif
