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

const char *nn_ops_cpu_kernels(void) { return nn_gemm_kernel_name(); }
