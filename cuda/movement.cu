/* Data movement on the device: copies that could not become aliases,
 * Transpose, Concat (as 2-D copies), Resize, and the fp32 <-> fp16
 * conversions at the edges of an fp16 model. */
#include <stdlib.h>

#include "internal.h"

enum { MOVE_THREADS = 256 };

/* ---- copies: Identity, Dropout, views the optimizer left, a no-op Reduce */

nn_status cu_copy_setup(cu_ctx *c, cu_node *dn, nn_call *call, const char **why) {
    const nn_node *n = &c->m->g.nodes[dn->node];
    if (n->op == NN_OP_Dropout && ((n->n_out > 1 && n->out[1] >= 0) || nn_present(call, 2))) {
        *why = "Dropout with a mask output or a training_mode input";
        return NN_ERR_UNSUPPORTED;
    }
    if (!cu_on_device(c, n->in[0])) {
        *why = "the input has no data";
        return NN_ERR_UNSUPPORTED;
    }
    return NN_OK;
}

nn_status cu_copy_run(cu_ctx *c, const cu_node *dn, cudaStream_t s) {
    const nn_node *n = &c->m->g.nodes[dn->node];
    void *src = cu_ptr(c, n->in[0]), *dst = cu_ptr(c, n->out[0]);
    if (src != dst && cu_value_bytes(c, n->out[0]))
        CU_CUDA(c->device, cudaMemcpyAsync(dst, src, cu_value_bytes(c, n->out[0]), cudaMemcpyDeviceToDevice, s));
    return NN_OK;
}

/* ---- Transpose */

typedef struct transpose_args {
    nn_cu_transpose t;
    const void *x;
    void *y;
} transpose_args;

__global__ void transpose_kernel(const __grid_constant__ transpose_args a) {
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.t.total; i += step)
        nn_cu_transpose_element(&a.t, a.x, a.y, i);
}

nn_status cu_transpose_setup(cu_ctx *c, cu_node *dn, nn_call *call, const char **why) {
    const nn_node *n = &c->m->g.nodes[dn->node];
    int64_t perm[NN_MAX_DIMS];
    nn_status st = nn_transpose_perm(call, perm);
    if (st != NN_OK) return nn_set_error(st, "%s", call->err);
    int esize = cu_esize(c, n->in[0]);
    if ((esize != 1 && esize != 2 && esize != 4 && esize != 8) || !cu_on_device(c, n->in[0])) {
        *why = "an element size or input the kernel does not move";
        return NN_ERR_UNSUPPORTED;
    }
    nn_cu_transpose_make(&dn->u.transpose, &call->in[0], perm);
    dn->u.transpose.esize = esize;
    return NN_OK;
}

nn_status cu_transpose_run(cu_ctx *c, const cu_node *dn, cudaStream_t s) {
    const nn_node *n = &c->m->g.nodes[dn->node];
    if (dn->u.transpose.total == 0) return NN_OK;
    transpose_args a;
    a.t = dn->u.transpose;
    a.x = cu_ptr(c, n->in[0]);
    a.y = cu_ptr(c, n->out[0]);
    transpose_kernel<<<cu_blocks(a.t.total, MOVE_THREADS), MOVE_THREADS, 0, s>>>(a);
    CU_CUDA(c->device, cudaGetLastError());
    return NN_OK;
}

/* ---- Concat: each input is a 2-D copy into its slice of the output */

nn_status cu_concat_setup(cu_ctx *c, cu_node *dn, nn_call *call, const char **why) {
    const nn_node *n = &c->m->g.nodes[dn->node];
    const nn_axis_params *p = (const nn_axis_params *)call->params;
    if (!nn_axis_normalize(p->axis, call->out[0].ndim, &dn->u.concat_axis))
        return nn_set_error(NN_ERR_INVALID, "axis %lld out of range", (long long)p->axis);
    for (int k = 0; k < n->n_in; k++)
        if (!cu_on_device(c, n->in[k])) {
            *why = "an input has no data";
            return NN_ERR_UNSUPPORTED;
        }
    return NN_OK;
}

nn_status cu_concat_run(cu_ctx *c, const cu_node *dn, cudaStream_t s) {
    const nn_node *n = &c->m->g.nodes[dn->node];
    const nn_graph *g = &c->m->g;
    char *y = (char *)cu_ptr(c, n->out[0]);
    int64_t before = 0;
    for (int k = 0; k < n->n_in; k++) {
        int64_t len = g->values[n->in[k]].t.dims[dn->u.concat_axis];
        nn_cu_slice sl;
        nn_cu_concat_slice(&g->values[n->out[0]].t, dn->u.concat_axis, before, len, cu_esize(c, n->out[0]), &sl);
        before += len;
        if (sl.width == 0 || sl.rows == 0) continue;
        CU_CUDA(c->device,
                cudaMemcpy2DAsync(y + sl.dst_offset, (size_t)sl.dst_pitch, cu_ptr(c, n->in[k]), (size_t)sl.src_pitch,
                                  (size_t)sl.width, (size_t)sl.rows, cudaMemcpyDeviceToDevice, s));
    }
    return NN_OK;
}

/* ---- Resize and Upsample: the taps come from ops/resize.c, as node constants */

typedef struct resize_args {
    nn_cu_resize r;
    const nn_resize_tap *taps;
    const void *x;
    void *y;
    bool half;
} resize_args;

__global__ void resize_kernel(const __grid_constant__ resize_args a) {
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.r.total; i += step)
        nn_cu_resize_element(&a.r, a.taps, a.x, a.y, a.half, i);
}

nn_status cu_resize_setup(cu_ctx *c, cu_node *dn, nn_call *call, const char **why) {
    const nn_tensor *y = &call->out[0];
    if (call->in[0].dtype != NN_DTYPE_FLOAT || y->ndim < 1 || !cu_on_device(c, c->m->g.nodes[dn->node].in[0])) {
        *why = "resizing on the GPU is float only";
        return NN_ERR_UNSUPPORTED;
    }
    int64_t taps = 0;
    for (int d = 0; d < y->ndim; d++)
        taps += y->dims[d];
    dn->const_bytes = sizeof(nn_resize_tap) * (size_t)(taps ? taps : 1);
    nn_resize_tap *t = (nn_resize_tap *)calloc(1, dn->const_bytes);
    if (!t) return nn_set_error(NN_ERR_NOMEM, "out of memory");
    dn->const_host = t;
    bool linear;
    nn_status st = nn_resize_taps(call, t, &linear);
    if (st == NN_DYNAMIC) {
        *why = "scales or sizes known only at run time";
        return NN_ERR_UNSUPPORTED;
    }
    if (st == NN_ERR_UNSUPPORTED) {
        *why = "cubic and tf_crop_and_resize resizing run on the CPU";
        return NN_ERR_UNSUPPORTED;
    }
    if (st != NN_OK) return nn_set_error(st, "%s", call->err);
    nn_cu_resize_make(&dn->u.resize, y, linear);
    return NN_OK;
}

nn_status cu_resize_run(cu_ctx *c, const cu_node *dn, cudaStream_t s) {
    const nn_node *n = &c->m->g.nodes[dn->node];
    if (dn->u.resize.total == 0) return NN_OK;
    resize_args a;
    a.r = dn->u.resize;
    a.taps = (const nn_resize_tap *)(c->mem + c->consts_at + dn->const_at);
    a.x = cu_ptr(c, n->in[0]);
    a.y = cu_ptr(c, n->out[0]);
    a.half = c->opt.fp16;
    resize_kernel<<<cu_blocks(a.r.total, MOVE_THREADS), MOVE_THREADS, 0, s>>>(a);
    CU_CUDA(c->device, cudaGetLastError());
    return NN_OK;
}

/* ---- fp32 <-> fp16 */

__global__ void convert_kernel(const void *src, void *dst, int64_t n, bool to_half) {
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step)
        nn_cu_convert_element(src, dst, to_half, i);
}

nn_status cu_convert_launch(const cu_ctx *c, const void *src, void *dst, int64_t n, bool to_half, cudaStream_t s) {
    if (n == 0) return NN_OK;
    convert_kernel<<<cu_blocks(n, MOVE_THREADS), MOVE_THREADS, 0, s>>>(src, dst, n, to_half);
    CU_CUDA(c->device, cudaGetLastError());
    return NN_OK;
}
