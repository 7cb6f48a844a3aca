/* Elementwise unary operators and activations (one output shaped like the input). */
#include <math.h>

#include "op.h"

/* Output has the input's dtype and shape. */
static nn_status infer_same(nn_call *c) {
    nn_tensor_set_shape(&c->out[0], c->in[0].dtype, c->in[0].ndim, c->in[0].dims);
    return NN_OK;
}

/* One generic float body per activation: `expr` computes y from x. */
#define FLOAT_UNARY(Name, expr)                                                         \
    static nn_status run_##Name(nn_call *c) {                                           \
        if (c->in[0].dtype != NN_DTYPE_FLOAT)                                           \
            return nn_call_error(c, NN_ERR_UNSUPPORTED, "dtype %s not supported",       \
                                 nn_dtype_name(c->in[0].dtype));                        \
        const float *src = c->in[0].data;                                               \
        float *dst = c->out[0].data;                                                    \
        int64_t n = nn_shape_elements(c->in[0].dims, c->in[0].ndim);                    \
        _Pragma("omp parallel for num_threads(c->threads) if (n > 32768)")              \
        for (int64_t i = 0; i < n; i++) {                                               \
            float x = src[i];                                                           \
            dst[i] = (expr);                                                            \
        }                                                                               \
        return NN_OK;                                                                   \
    }                                                                                   \
    const nn_op_desc nn_op_##Name = {#Name, 1, 1, 1, 1, 0, NULL, infer_same, NULL, run_##Name};

FLOAT_UNARY(Relu, x > 0.0f ? x : 0.0f)
