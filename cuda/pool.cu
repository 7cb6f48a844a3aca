/* MaxPool and AveragePool: one thread per output, its whole window
 * (nn_cu_pool_element in index.h).  Global pooling is a reduction
 * (segment.cu). */
#include "internal.h"

enum { POOL_THREADS = 256 };

typedef struct pool_args {
    nn_cu_pool p;
    const void *x;
    void *y;
    bool half;
} pool_args;

__global__ void pool_kernel(const __grid_constant__ pool_args a) {
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < a.p.total; o += step)
        nn_cu_pool_element(&a.p, a.x, a.y, a.half, o);
}

nn_status cu_pool_setup(cu_ctx *c, cu_node *dn, nn_call *call, const char **why) {
    const nn_node *n = &c->m->g.nodes[dn->node];
    bool max = n->op == NN_OP_MaxPool;
    if (call->in[0].dtype != NN_DTYPE_FLOAT) {
        *why = "pooling on the GPU is float only";
        return NN_ERR_UNSUPPORTED;
    }
    if (max && n->n_out > 1 && n->out[1] >= 0) {
        *why = "MaxPool's Indices output";
        return NN_ERR_UNSUPPORTED;
    }
    nn_pool_geom g;
    nn_status st = nn_pool_resolve(call, &g);
    if (st != NN_OK) return nn_set_error(st, "%s", call->err);
    const nn_pool_params *p = (const nn_pool_params *)call->params;
    nn_cu_pool_make(&dn->u.pool, &g, max, !max && p->count_include_pad);
    return NN_OK;
}

nn_status cu_pool_run(cu_ctx *c, const cu_node *dn, cudaStream_t s) {
    const nn_node *n = &c->m->g.nodes[dn->node];
    if (dn->u.pool.total == 0) return NN_OK;
    pool_args a;
    a.p = dn->u.pool;
    a.x = cu_ptr(c, n->in[0]);
    a.y = cu_ptr(c, n->out[0]);
    a.half = c->opt.fp16;
    pool_kernel<<<cu_blocks(a.p.total, POOL_THREADS), POOL_THREADS, 0, s>>>(a);
    CU_CUDA(c->device, cudaGetLastError());
    return NN_OK;
}
