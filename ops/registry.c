#include "registry.h"

#include <string.h>

#include "gemm.h"

#define NN_OP(name, family) extern const nn_op_desc nn_op_##name;
#include "ops.def"
#undef NN_OP

static const nn_op_desc *const op_table[NN_OP_COUNT] = {
#define NN_OP(name, family) &nn_op_##name,
#include "ops.def"
#undef NN_OP
};

static const char *const op_names[NN_OP_COUNT] = {
#define NN_OP(name, family) #name,
#include "ops.def"
#undef NN_OP
};

const nn_op_desc *nn_op_get(int id) { return id >= 0 && id < NN_OP_COUNT ? op_table[id] : NULL; }

int nn_op_lookup(const char *name) {
    int lo = 0, hi = NN_OP_COUNT - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, c = strcmp(name, op_names[mid]);
        if (c == 0) return mid;
        if (c < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return -1;
}

int nn_op_table_check(void) {
    for (int i = 0; i < NN_OP_COUNT; i++) {
        if (i > 0 && strcmp(op_names[i - 1], op_names[i]) >= 0) return i;
        if (strcmp(op_table[i]->name, op_names[i]) != 0) return i;
    }
    return 0;
}

/* The dtypes every op's infer has always checked for itself. */
static bool common_dtype(nn_dtype t) {
    return t == NN_DTYPE_FLOAT || t == NN_DTYPE_UINT8 || t == NN_DTYPE_INT8 || t == NN_DTYPE_INT32 ||
           t == NN_DTYPE_INT64 || t == NN_DTYPE_BOOL;
}

nn_status nn_op_check_dtypes(const nn_op_desc *d, nn_call *c) {
    if (d->flags & NN_OPF_ANY_DTYPE) return NN_OK;
    for (int k = 0; k < c->n_in; k++)
        if (nn_present(c, k) && !common_dtype(c->in[k].dtype))
            return nn_call_error(c, NN_ERR_UNSUPPORTED, "input %d has dtype %s, which %s does not support", k,
                                 nn_dtype_name(c->in[k].dtype), d->name);
    return NN_OK;
}

const char *nn_ops_cpu_kernels(void) { return nn_gemm_kernel_name(); }
int nn_ops_cpu_amx(void) { return nn_gemm_bf16_amx(); }
void nn_ops_cpu_blocking(char *buf, size_t size, bool compact) { nn_gemm_describe_blocking(buf, size, compact); }
