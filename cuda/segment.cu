/* Kernels that give each output a warp: reductions (Reduce*, global
 * pooling) and Softmax / LogSoftmax.  The lanes' partial results (index.h)
 * meet in a butterfly of warp shuffles. */
#include "internal.h"

enum { SEGMENT_THREADS = 256 };

typedef struct reduce_args {
    nn_cu_reduce r;
    const void *x;
    void *y;
    bool half;
} reduce_args;

__global__ void reduce_kernel(const __grid_constant__ reduce_args a) {
    int lane = threadIdx.x % NN_CU_LANES;
    int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / NN_CU_LANES;
    int64_t warps = (int64_t)gridDim.x * blockDim.x / NN_CU_LANES;
    for (int64_t seg = warp; seg < a.r.segments; seg += warps) { /* the same segment across the warp */
        double acc = nn_cu_reduce_partial(&a.r, a.x, a.half, seg, lane);
        for (int off = NN_CU_LANES / 2; off > 0; off /= 2)
            acc = nn_cu_reduce_merge(a.r.kind, acc, __shfl_xor_sync(0xffffffffu, acc, off));
        if (lane == 0) nn_cu_store(a.y, seg, nn_cu_reduce_final(a.r.kind, acc, a.r.count), a.half);
    }
}

nn_status cu_reduce_setup(cu_ctx *c, cu_node *dn, nn_call *call, const char **why) {
    const nn_node *n = &c->m->g.nodes[dn->node];
    const nn_tensor *x = &call->in[0];
    if (x->dtype != NN_DTYPE_FLOAT) {
        *why = "reductions on the GPU are float only";
        return NN_ERR_UNSUPPORTED;
    }
    bool reduced[NN_MAX_DIMS] = {false}, noop = false;
    if (n->op == NN_OP_GlobalAveragePool || n->op == NN_OP_GlobalMaxPool) {
        for (int d = 2; d < x->ndim; d++)
            reduced[d] = true;
    } else {
        nn_status st = nn_reduce_mask(call, reduced, &noop);
        if (st == NN_DYNAMIC) {
            *why = "axes known only at run time";
            return NN_ERR_UNSUPPORTED;
        }
        if (st != NN_OK) return nn_set_error(st, "%s", call->err);
    }
    if (noop) { /* noop_with_empty_axes: the output is the input */
        dn->kind = CU_COPY;
        return NN_OK;
    }
    nn_cu_reduce_make(&dn->u.reduce, x, reduced, nn_cu_reduce_kind_of(n->op));
    return NN_OK;
}

nn_status cu_reduce_run(cu_ctx *c, const cu_node *dn, cudaStream_t s) {
    const nn_node *n = &c->m->g.nodes[dn->node];
    if (dn->u.reduce.segments == 0) return NN_OK;
    reduce_args a;
    a.r = dn->u.reduce;
    a.x = cu_ptr(c, n->in[0]);
    a.y = cu_ptr(c, n->out[0]);
    a.half = c->opt.fp16;
    reduce_kernel<<<cu_blocks(a.r.segments * NN_CU_LANES, SEGMENT_THREADS), SEGMENT_THREADS, 0, s>>>(a);
    CU_CUDA(c->device, cudaGetLastError());
    return NN_OK;
}

typedef struct softmax_args {
    nn_cu_softmax sm;
    const void *x;
    void *y;
    bool half;
} softmax_args;

__global__ void softmax_kernel(const __grid_constant__ softmax_args a) {
    int lane = threadIdx.x % NN_CU_LANES;
    int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / NN_CU_LANES;
    int64_t warps = (int64_t)gridDim.x * blockDim.x / NN_CU_LANES;
    for (int64_t seg = warp; seg < a.sm.segments; seg += warps) {
        float max = nn_cu_softmax_partial_max(&a.sm, a.x, a.half, seg, lane);
        for (int off = NN_CU_LANES / 2; off > 0; off /= 2)
            max = nn_cu_max(max, __shfl_xor_sync(0xffffffffu, max, off));
        float sum = nn_cu_softmax_partial_sum(&a.sm, a.x, a.half, seg, lane, max);
        for (int off = NN_CU_LANES / 2; off > 0; off /= 2)
            sum += __shfl_xor_sync(0xffffffffu, sum, off);
        nn_cu_softmax_write(&a.sm, a.x, a.y, a.half, seg, lane, max, sum);
    }
}

nn_status cu_softmax_setup(cu_ctx *c, cu_node *dn, nn_call *call, const char **why) {
    const nn_node *n = &c->m->g.nodes[dn->node];
    if (call->in[0].dtype != NN_DTYPE_FLOAT) {
        *why = "softmax on the GPU is float only";
        return NN_ERR_UNSUPPORTED;
    }
    int64_t outer, len, inner;
    nn_status st = nn_softmax_view(call, &outer, &len, &inner);
    if (st != NN_OK) return nn_set_error(st, "%s", call->err);
    nn_cu_softmax_make(&dn->u.softmax, outer, len, inner, n->op == NN_OP_LogSoftmax);
    return NN_OK;
}

nn_status cu_softmax_run(cu_ctx *c, const cu_node *dn, cudaStream_t s) {
    const nn_node *n = &c->m->g.nodes[dn->node];
    if (dn->u.softmax.segments == 0 || dn->u.softmax.n == 0) return NN_OK;
    softmax_args a;
    a.sm = dn->u.softmax;
    a.x = cu_ptr(c, n->in[0]);
    a.y = cu_ptr(c, n->out[0]);
    a.half = c->opt.fp16;
    softmax_kernel<<<cu_blocks(a.sm.segments * NN_CU_LANES, SEGMENT_THREADS), SEGMENT_THREADS, 0, s>>>(a);
    CU_CUDA(c->device, cudaGetLastError());
    return NN_OK;
}
