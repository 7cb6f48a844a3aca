/* Conv through cuDNN.  Conv + bias + ReLU (+ a residual through z) is one
 * cudnnConvolutionBiasActivationForward; any other fused epilogue (bias,
 * residual, an activation cuDNN cannot fuse) follows cudnnConvolutionForward
 * as one elementwise pass.  The algorithm is measured once at attach
 * (cudnnFindConvolutionForwardAlgorithmEx) and kept in the node state. */
#include <stdlib.h>

#include "internal.h"

/* cuDNN may take this much scratch for a faster algorithm */
static const size_t SEARCH_WORKSPACE_MAX = (size_t)1 << 30;

static cudnnDataType_t data_type(const cu_ctx *c) { return c->opt.fp16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT; }

/* fp32 without TF32 must stay on FMA kernels: cuDNN's default math lets
 * Ampere and later GPUs round fp32 operands to TF32. */
static cudnnMathType_t math_type(const cu_ctx *c) {
    return c->opt.fp16 ? CUDNN_TENSOR_OP_MATH : c->opt.tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
}

static nn_status packed_tensor(const cu_ctx *c, cudnnTensorDescriptor_t *d, int nd, const int *dims) {
    int strides[5], s = 1;
    for (int i = nd - 1; i >= 0; i--) {
        strides[i] = s;
        s *= dims[i];
    }
    CU_CUDNN(c->device, cudnnCreateTensorDescriptor(d));
    CU_CUDNN(c->device, cudnnSetTensorNdDescriptor(*d, data_type(c), nd, dims, strides));
    return NN_OK;
}

/* The pass after cudnnConvolutionForward, y = act(y + bias + residual):
 * operand 0 is y, then the bias (as [C, 1, ...] against [N, C, ...]) and
 * the residual. */
static void make_post(const cu_ctx *c, cu_node *dn) {
    const nn_node *n = &c->m->g.nodes[dn->node];
    const nn_graph *g = &c->m->g;
    cu_conv_state *cv = &dn->u.conv;
    const nn_tensor *y = &g->values[n->out[0]].t;
    const nn_epilogue *ep = n->has_epilogue ? &n->epilogue : NULL;
    nn_tensor shapes[3];
    int count = 0, bias_op = -1, residual_op = -1;
    shapes[count] = *y;
    cv->post_inputs[count++] = -1;
    if (cv->bias_input >= 0) {
        memset(&shapes[count], 0, sizeof shapes[count]);
        shapes[count].ndim = cv->shape.nsp + 1;
        shapes[count].dims[0] = cv->shape.y[1];
        for (int d = 1; d <= cv->shape.nsp; d++)
            shapes[count].dims[d] = 1;
        cv->post_inputs[count] = cv->bias_input;
        bias_op = count++;
    }
    if (cv->residual_input >= 0) {
        shapes[count] = g->values[n->in[cv->residual_input]].t;
        cv->post_inputs[count] = cv->residual_input;
        residual_op = count++;
    }
    nn_cu_ew_layout(&cv->post, y->ndim, y->dims, count, shapes);
    nn_cu_ew_push_epilogue(&cv->post, bias_op, residual_op, ep ? ep->act : NN_ACT_NONE, ep ? ep->alpha : 0.0f,
                           ep ? ep->beta : 0.0f);
}

nn_status cu_conv_setup(cu_ctx *c, cu_node *dn, nn_call *call, const char **why) {
    const nn_node *n = &c->m->g.nodes[dn->node];
    cu_conv_state *cv = &dn->u.conv;
    for (int k = 0; k < call->n_in; k++)
        if (nn_present(call, k) && (call->in[k].dtype != NN_DTYPE_FLOAT || !cu_on_device(c, n->in[k]))) {
            *why = "an operand that is not float or has no data";
            return NN_ERR_UNSUPPORTED;
        }
    if (call->prologue) { /* fused only for the CPU (passes/fuse_prologue.c); the CPU kernel applies it */
        *why = "a fused input prologue";
        return NN_ERR_UNSUPPORTED;
    }
    nn_conv_geom g;
    nn_status st = nn_conv_resolve(call, false, &g);
    if (st != NN_OK) return nn_set_error(st, "%s", call->err);
    if (!nn_cu_conv_make(&cv->shape, &g, why)) return NN_ERR_UNSUPPORTED;
    const nn_cu_conv *sh = &cv->shape;
    cv->bias_input = nn_present(call, 2) ? 2 : -1;
    const nn_epilogue *ep = call->epilogue;
    cv->residual_input = ep && ep->residual >= 0 ? ep->residual : -1;
    cv->math = math_type(c);

    CU_TRY(packed_tensor(c, &cv->x, sh->nd, sh->x));
    CU_TRY(packed_tensor(c, &cv->y, sh->nd, sh->y));
    CU_CUDNN(c->device, cudnnCreateFilterDescriptor(&cv->w));
    CU_CUDNN(c->device, cudnnSetFilterNdDescriptor(cv->w, data_type(c), CUDNN_TENSOR_NCHW, sh->nd, sh->w));
    CU_CUDNN(c->device, cudnnCreateConvolutionDescriptor(&cv->conv));
    /* accumulation in fp32 for fp16 data too (cuDNN's PSEUDO_HALF_CONFIG) */
    CU_CUDNN(c->device, cudnnSetConvolutionNdDescriptor(cv->conv, sh->nd - 2, sh->pad, sh->stride, sh->dilation,
                                                        CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CU_CUDNN(c->device, cudnnSetConvolutionGroupCount(cv->conv, sh->group));
    CU_CUDNN(c->device, cudnnSetConvolutionMathType(cv->conv, cv->math));
    int out[5];
    CU_CUDNN(c->device, cudnnGetConvolutionNdForwardOutputDim(cv->conv, cv->x, cv->w, sh->nd, out));
    for (int d = 0; d < sh->nd; d++)
        if (out[d] != sh->y[d]) {
            *why = "cuDNN computes another output shape";
            return NN_ERR_UNSUPPORTED;
        }

    if (ep && ep->act == NN_ACT_RELU) {
        CU_CUDNN(c->device, cudnnCreateActivationDescriptor(&cv->relu));
        CU_CUDNN(c->device,
                 cudnnSetActivationDescriptor(cv->relu, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0));
        int bias_dims[5] = {1, sh->y[1], 1, 1, 1};
        CU_TRY(packed_tensor(c, &cv->bias, sh->nd, bias_dims));
        if (cv->bias_input < 0) { /* the fused call always adds a bias: zeros */
            dn->const_bytes = (size_t)sh->y[1] * (c->opt.fp16 ? 2 : 4);
            if (!(dn->const_host = calloc(1, dn->const_bytes))) return nn_set_error(NN_ERR_NOMEM, "out of memory");
        }
        return NN_OK;
    }
    make_post(c, dn);
    return NN_OK;
}

/* Where a value will sit relative to a 256-byte boundary, so that the
 * algorithms are measured on buffers aligned like the real ones. */
static size_t misalignment(const cu_ctx *c, int v) {
    return c->m->g.values[v].is_const ? 0 : (size_t)(c->value_at[v] % 256);
}

/* Give up the fused ReLU call: cudnnConvolutionForward and the pass. */
static void unfuse_relu(cu_node *dn, const cu_ctx *c) {
    cu_conv_state *cv = &dn->u.conv;
    cudnnDestroyActivationDescriptor(cv->relu);
    cudnnDestroyTensorDescriptor(cv->bias);
    cv->relu = NULL;
    cv->bias = NULL;
    free(dn->const_host);
    dn->const_host = NULL;
    dn->const_bytes = 0;
    make_post(c, dn);
}

/* The first of cuDNN's measured algorithms (fastest first) that fits the
 * workspace and, for the fused call, that cudnnConvolutionBiasActivationForward
 * accepts (tried once on the scratch buffers); *algo -1 when none does. */
static nn_status first_fit(cu_ctx *c, cu_conv_state *cv, const cudnnConvolutionFwdAlgoPerf_t *perf, int count,
                           const void *x, const void *w, void *y, void *ws, size_t room, int *algo) {
    const float one = 1.0f, zero = 0.0f;
    *algo = -1;
    for (int i = 0; i < count && *algo < 0; i++) {
        if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > room) continue;
        /* without TF32 the FMA restriction stays, whatever the measurement used */
        cudnnMathType_t math = cv->math == CUDNN_FMA_MATH ? CUDNN_FMA_MATH : perf[i].mathType;
        size_t need = 0;
        CU_CUDNN(c->device, cudnnSetConvolutionMathType(cv->conv, math));
        cudnnStatus_t s =
            cudnnGetConvolutionForwardWorkspaceSize(c->cudnn, cv->x, cv->w, cv->conv, cv->y, perf[i].algo, &need);
        if (s == CUDNN_STATUS_NOT_SUPPORTED || s == CUDNN_STATUS_BAD_PARAM || need > room) continue;
        CU_CUDNN(c->device, s);
        if (cv->relu) { /* any scratch serves as the bias: the result is thrown away */
            s = cudnnConvolutionBiasActivationForward(c->cudnn, &one, cv->x, x, cv->w, w, cv->conv, perf[i].algo, ws,
                                                      need, &zero, cv->y, y, cv->bias, x, cv->relu, cv->y, y);
            if (s == CUDNN_STATUS_NOT_SUPPORTED || s == CUDNN_STATUS_BAD_PARAM) continue;
            CU_CUDNN(c->device, s);
        }
        *algo = i;
        cv->algo = perf[i].algo;
        cv->math = math;
        cv->algo_workspace = need;
    }
    return NN_OK;
}

/* ---- the convs' choices in the plan cache (backend.h, save_choices):
 * a header naming the GPU and the cuDNN version, then one entry per conv */
#define CHOICES_MAGIC "nncudnn"
typedef struct conv_choices_header {
    char magic[8];
    int32_t cudnn_version, count;
    char gpu[256];
} conv_choices_header;
typedef struct conv_choice {
    int32_t node, algo, math, fused;
    uint64_t workspace;
} conv_choice;

static void choices_header_of(const cu_ctx *c, int count, conv_choices_header *h) {
    cudaDeviceProp prop;
    memset(h, 0, sizeof *h);
    memcpy(h->magic, CHOICES_MAGIC, sizeof CHOICES_MAGIC);
    h->cudnn_version = (int32_t)cudnnGetVersion();
    h->count = count;
    if (cudaGetDeviceProperties(&prop, c->m->device_index) == cudaSuccess)
        snprintf(h->gpu, sizeof h->gpu, "%s", prop.name);
}

size_t cu_conv_save_choices(const nn_model *m, void *buf, size_t cap) {
    const cu_ctx *c = (const cu_ctx *)m->device_state;
    int count = 0;
    for (int i = 0; c && i < m->g.n_nodes; i++)
        count += c->nodes[i].kind == CU_CONV;
    size_t bytes = sizeof(conv_choices_header) + sizeof(conv_choice) * (size_t)count;
    if (!count || !buf || cap < bytes) return count ? bytes : 0;
    conv_choices_header h;
    choices_header_of(c, count, &h);
    memcpy(buf, &h, sizeof h);
    conv_choice *out = (conv_choice *)((char *)buf + sizeof h);
    for (int i = 0; i < m->g.n_nodes; i++) {
        const cu_node *dn = &c->nodes[i];
        if (dn->kind != CU_CONV) continue;
        conv_choice e;
        memset(&e, 0, sizeof e);
        e.node = i;
        e.algo = (int32_t)dn->u.conv.algo;
        e.math = (int32_t)dn->u.conv.math;
        e.fused = dn->u.conv.relu != NULL;
        e.workspace = dn->u.conv.algo_workspace;
        memcpy(out++, &e, sizeof e);
    }
    return bytes;
}

/* The choice an earlier attach stored for this conv, when the cache holds
 * one made on this GPU model with this cuDNN and it fits what this attach
 * allows (workspace, math mode, fusion); false: measure. */
static bool stored_choice(const cu_ctx *c, const cu_node *dn, size_t workspace_room, conv_choice *out) {
    const nn_model *m = c->m;
    conv_choices_header want, have;
    if (!m->device_choices || m->device_choices_bytes < sizeof have) return false;
    memcpy(&have, m->device_choices, sizeof have);
    choices_header_of(c, have.count, &want);
    if (memcmp(&have, &want, sizeof have) || have.count < 0 ||
        (size_t)have.count > (m->device_choices_bytes - sizeof have) / sizeof(conv_choice))
        return false;
    const cu_conv_state *cv = &dn->u.conv;
    for (int32_t k = 0; k < have.count; k++) {
        memcpy(out, (const char *)m->device_choices + sizeof have + sizeof *out * (size_t)k, sizeof *out);
        if (out->node != dn->node) continue;
        bool math_ok = cv->math == CUDNN_FMA_MATH ? out->math == CUDNN_FMA_MATH
                                                   : out->math >= CUDNN_DEFAULT_MATH && out->math <= CUDNN_FMA_MATH;
        return out->algo >= 0 && out->algo < CUDNN_CONVOLUTION_FWD_ALGO_COUNT && math_ok &&
               (out->fused == 0 || (out->fused == 1 && cv->relu)) && out->workspace <= workspace_room;
    }
    return false;
}

/* Measure cuDNN's algorithms for this conv, or take the choice the plan
 * cache kept from an earlier attach on the same GPU model and cuDNN. */
static nn_status choose_algo(cu_ctx *c, cu_node *dn, char *scratch, size_t x_room, size_t w_room,
                             size_t workspace_room) {
    const nn_node *n = &c->m->g.nodes[dn->node];
    cu_conv_state *cv = &dn->u.conv;
    conv_choice stored;
    if (stored_choice(c, dn, workspace_room, &stored)) {
        if (!stored.fused && cv->relu) unfuse_relu(dn, c);
        cv->algo = (cudnnConvolutionFwdAlgo_t)stored.algo;
        cv->math = (cudnnMathType_t)stored.math;
        cv->algo_workspace = (size_t)stored.workspace;
        CU_CUDNN(c->device, cudnnSetConvolutionMathType(cv->conv, cv->math));
        dn->workspace = cv->algo_workspace;
        return NN_OK;
    }
    char *x = scratch + misalignment(c, n->in[0]), *w = scratch + x_room + misalignment(c, n->in[1]);
    char *y = scratch + x_room + w_room + misalignment(c, n->out[0]);
    char *ws = scratch + x_room + w_room + x_room;            /* y's room is x_room: both hold the largest activation */
    if (cu_ptr(c, n->in[1])) w = (char *)cu_ptr(c, n->in[1]); /* the real weights when they are constants */
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int returned = 0, best;
    CU_CUDNN(c->device, cudnnFindConvolutionForwardAlgorithmEx(c->cudnn, cv->x, x, cv->w, w, cv->conv, cv->y, y,
                                                               CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf, ws,
                                                               workspace_room));
    CU_TRY(first_fit(c, cv, perf, returned, x, w, y, ws, workspace_room, &best));
    if (best < 0 && cv->relu) { /* no algorithm takes the fused call: convolve, then one pass */
        unfuse_relu(dn, c);
        CU_TRY(first_fit(c, cv, perf, returned, x, w, y, ws, workspace_room, &best));
    }
    if (best < 0)
        return nn_set_error(NN_ERR_DEVICE,
                            "device '%s': no cuDNN algorithm runs this convolution in %zu bytes of workspace",
                            c->device, workspace_room);
    CU_CUDNN(c->device, cudnnSetConvolutionMathType(cv->conv, cv->math));
    dn->workspace = cv->algo_workspace;
    return NN_OK;
}

nn_status cu_conv_search(cu_ctx *c) {
    const nn_graph *g = &c->m->g;
    size_t x_room = 0, w_room = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const nn_node *n = &g->nodes[i];
        if (c->nodes[i].kind != CU_CONV) continue;
        size_t x = cu_value_bytes(c, n->in[0]), y = cu_value_bytes(c, n->out[0]), w = cu_value_bytes(c, n->in[1]);
        x_room = x > x_room ? x : x_room;
        x_room = y > x_room ? y : x_room;
        w_room = w > w_room ? w : w_room;
    }
    if (!x_room) return NN_OK;
    x_room = (x_room + 2 * 256 - 1) / 256 * 256; /* room for the misalignment, and 256-aligned rooms */
    w_room = (w_room + 2 * 256 - 1) / 256 * 256;
    size_t free_bytes = 0, total_bytes = 0;
    CU_CUDA(c->device, cudaMemGetInfo(&free_bytes, &total_bytes));
    size_t workspace = free_bytes / 4 < SEARCH_WORKSPACE_MAX ? free_bytes / 4 : SEARCH_WORKSPACE_MAX;
    char *scratch = NULL;
    while (cudaMalloc((void **)&scratch, 2 * x_room + w_room + workspace) != cudaSuccess) {
        cudaGetLastError();
        if (workspace == 0)
            return nn_set_error(NN_ERR_DEVICE, "device '%s': out of memory measuring convolution algorithms",
                                c->device);
        workspace /= 4;
    }
    nn_status st = NN_OK;
    for (int i = 0; i < g->n_nodes && st == NN_OK; i++) {
        if (c->nodes[i].kind != CU_CONV) continue;
        st = choose_algo(c, &c->nodes[i], scratch, x_room, w_room, workspace);
        if (st != NN_OK) {
            char msg[400];
            snprintf(msg, sizeof msg, "%s", nn_last_error());
            st = nn_set_error(st, "node '%s' (Conv): %s", g->nodes[i].name, msg);
        }
    }
    cudaError_t e = cudaStreamSynchronize(c->compute); /* the trial calls are done with the scratch */
    cudaFree(scratch);
    if (st == NN_OK && e != cudaSuccess) st = cu_cuda_error(c->device, e, "cudaStreamSynchronize", __FILE__, __LINE__);
    return st;
}

nn_status cu_conv_run(cu_ctx *c, const cu_node *dn, cudaStream_t s) {
    const nn_node *n = &c->m->g.nodes[dn->node];
    const cu_conv_state *cv = &dn->u.conv;
    const float one = 1.0f, zero = 0.0f;
    void *x = cu_ptr(c, n->in[0]), *w = cu_ptr(c, n->in[1]), *y = cu_ptr(c, n->out[0]);
    void *ws = c->mem + c->workspace_at;
    if (cv->relu) {
        const void *bias =
            cv->bias_input >= 0 ? cu_ptr(c, n->in[cv->bias_input]) : c->mem + c->consts_at + dn->const_at;
        const float alpha2 = cv->residual_input >= 0 ? 1.0f : 0.0f;
        const void *z = cv->residual_input >= 0 ? cu_ptr(c, n->in[cv->residual_input]) : y;
        CU_CUDNN(c->device, cudnnConvolutionBiasActivationForward(c->cudnn, &one, cv->x, x, cv->w, w, cv->conv,
                                                                  cv->algo, ws, cv->algo_workspace, &alpha2, cv->y, z,
                                                                  cv->bias, bias, cv->relu, cv->y, y));
        return NN_OK;
    }
    CU_CUDNN(c->device, cudnnConvolutionForward(c->cudnn, &one, cv->x, x, cv->w, w, cv->conv, cv->algo, ws,
                                                cv->algo_workspace, &zero, cv->y, y));
    if (cv->post.n_steps == 0) return NN_OK;
    const void *in[3];
    in[0] = y;
    for (int k = 1; k < cv->post.n_in; k++)
        in[k] = cu_ptr(c, n->in[cv->post_inputs[k]]);
    return cu_ew_launch(c, &cv->post, in, y, s);
}

void cu_conv_release(cu_ctx *c, cu_node *dn) {
    (void)c;
    cu_conv_state *cv = &dn->u.conv;
    if (cv->x) cudnnDestroyTensorDescriptor(cv->x);
    if (cv->y) cudnnDestroyTensorDescriptor(cv->y);
    if (cv->bias) cudnnDestroyTensorDescriptor(cv->bias);
    if (cv->w) cudnnDestroyFilterDescriptor(cv->w);
    if (cv->conv) cudnnDestroyConvolutionDescriptor(cv->conv);
    if (cv->relu) cudnnDestroyActivationDescriptor(cv->relu);
    memset(cv, 0, sizeof *cv);
}
