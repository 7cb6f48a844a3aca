/* The CUDA backend (engine/backend.h): attach a planned model to a GPU
 * (device, weights, one kernel or CPU fallback per node, memory), detach.
 * The batch pipeline that nn_predict runs is in pipeline.cu. */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static const size_t ALIGN = 256;

static size_t round_up(size_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

/* nn_options' math choices; both off by default (exact fp32 parity). */
static cu_options options_of(const nn_model *m) {
    cu_options o = {m->opt.tf32 != 0, m->opt.fp16 != 0};
    return o;
}

bool cu_half(const cu_ctx *c, int v) { return c->opt.fp16 && c->m->g.values[v].t.dtype == NN_DTYPE_FLOAT; }

int cu_esize(const cu_ctx *c, int v) { return cu_half(c, v) ? 2 : (int)nn_dtype_size(c->m->g.values[v].t.dtype); }

size_t cu_value_bytes(const cu_ctx *c, int v) {
    return (size_t)nn_tensor_elements(&c->m->g.values[v].t) * (size_t)cu_esize(c, v);
}

bool cu_on_device(const cu_ctx *c, int v) {
    return v >= 0 && (c->m->g.values[v].is_const ? c->weight_at[v] >= 0 : c->value_at[v] >= 0);
}

void *cu_ptr(const cu_ctx *c, int v) {
    if (!cu_on_device(c, v)) return NULL;
    if (c->m->g.values[v].is_const) return c->weights + c->weight_at[v];
    return c->mem ? c->mem + c->value_at[v] : NULL;
}

size_t cu_value_alignment(const cu_ctx *c, int v) {
    if (c->m->g.values[v].is_const) return ALIGN;
    int64_t off = c->value_at[v];
    size_t a = 1;
    while (a < ALIGN && off % (int64_t)(2 * a) == 0)
        a *= 2;
    return a;
}

void cu_node_call(cu_ctx *c, int node, nn_call *call, char *err, size_t err_size) {
    nn_model *m = c->m;
    nn_lane *lane = &m->lanes[0]; /* the GPU runs one lane */
    const nn_node *n = &m->g.nodes[node];
    for (int k = 0; k < n->n_in; k++) {
        memset(&lane->call_in[k], 0, sizeof lane->call_in[k]);
        if (n->in[k] >= 0) lane->call_in[k] = m->g.values[n->in[k]].t; /* data set for constants only */
    }
    for (int k = 0; k < n->n_out; k++) {
        memset(&lane->call_out[k], 0, sizeof lane->call_out[k]);
        if (n->out[k] >= 0) {
            lane->call_out[k] = m->g.values[n->out[k]].t;
            lane->call_out[k].data = NULL;
        }
    }
    *call = nn_node_call(m, n, lane->call_in, lane->call_out, err, err_size);
}

/* ---- attach */

static nn_status device_open(cu_ctx *c, int index) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        cudaGetLastError();
        /* the runtime says "driver version is insufficient" when there is no
         * driver at all: tell the two apart by the driver's library */
        void *driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
        if (driver) dlclose(driver);
        int runtime = 0;
        cudaRuntimeGetVersion(&runtime);
        if (!driver || e == cudaErrorNoDevice)
            return nn_set_error(NN_ERR_DEVICE, "device '%s' is not available: no NVIDIA driver/GPU found%s", c->device,
                                driver ? "" : " (libcuda.so.1 is not installed)");
        if (e == cudaErrorInsufficientDriver)
            return nn_set_error(NN_ERR_DEVICE,
                                "device '%s' is not available: the NVIDIA driver is older than CUDA %d.%d needs",
                                c->device, runtime / 1000, runtime % 1000 / 10);
        return nn_set_error(NN_ERR_DEVICE, "device '%s' is not available: the CUDA runtime cannot start (%s)",
                            c->device, cudaGetErrorString(e));
    }
    if (count == 0)
        return nn_set_error(NN_ERR_DEVICE, "device '%s' is not available: no NVIDIA driver/GPU found", c->device);
    if (index >= count)
        return nn_set_error(NN_ERR_DEVICE, "device '%s' is not available: this machine has %d CUDA device%s", c->device,
                            count, count == 1 ? "" : "s");
    CU_CUDA(c->device, cudaSetDevice(index));
    CU_CUDA(c->device, cudaStreamCreateWithFlags(&c->compute, cudaStreamNonBlocking));
    CU_CUDA(c->device, cudaStreamCreateWithFlags(&c->upload, cudaStreamNonBlocking));
    CU_CUDA(c->device, cudaStreamCreateWithFlags(&c->download, cudaStreamNonBlocking));
    CU_CUDNN(c->device, cudnnCreate(&c->cudnn));
    CU_CUDNN(c->device, cudnnSetStream(c->cudnn, c->compute));
    CU_TRY(cu_lt_open(&c->lt, c->device));
    CU_LT(&c->lt, c->device, c->lt.cublasLtCreate(&c->blas));
    return NN_OK;
}

/* Where each planned value's data starts.  The plan places values by their
 * fp32 sizes; in fp16 a value inside another's buffer (a Concat slice) moves
 * to half its distance from the buffer's start, where the half-precision
 * elements of the buffer put it. */
static nn_status place_values(cu_ctx *c) {
    const nn_graph *g = &c->m->g;
    c->value_at = (int64_t *)malloc(sizeof(int64_t) * ((size_t)g->n_values + 1));
    if (!c->value_at) return nn_set_error(NN_ERR_NOMEM, "out of memory");
    for (int v = 0; v < g->n_values; v++) {
        c->value_at[v] = c->m->plan.offset[v];
        if (g->values[v].is_const || c->value_at[v] < 0 || !cu_half(c, v)) continue;
        int64_t delta = 0;
        int root = nn_value_root(g, v, &delta);
        c->value_at[v] = c->m->plan.offset[root] + delta / 2;
    }
    return NN_OK;
}

/* Every constant a node reads, in one allocation (fp16: float ones in half). */
static nn_status upload_weights(cu_ctx *c) {
    const nn_graph *g = &c->m->g;
    c->weight_at = (int64_t *)malloc(sizeof(int64_t) * ((size_t)g->n_values + 1));
    if (!c->weight_at) return nn_set_error(NN_ERR_NOMEM, "out of memory");
    for (int v = 0; v < g->n_values; v++)
        c->weight_at[v] = -1;
    size_t total = 0, largest = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const nn_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_in && !n->elided; k++) {
            int v = n->in[k];
            if (v < 0 || !g->values[v].is_const || !g->values[v].t.data || c->weight_at[v] >= 0) continue;
            c->weight_at[v] = (int64_t)total;
            total += round_up(cu_value_bytes(c, v));
            if (cu_value_bytes(c, v) > largest) largest = cu_value_bytes(c, v);
        }
    }
    if (!total) return NN_OK;
    CU_CUDA(c->device, cudaMalloc((void **)&c->weights, total));
    uint16_t *halves = NULL;
    if (c->opt.fp16 && !(halves = (uint16_t *)malloc(largest))) return nn_set_error(NN_ERR_NOMEM, "out of memory");
    nn_status st = NN_OK;
    for (int v = 0; v < g->n_values && st == NN_OK; v++) {
        if (c->weight_at[v] < 0) continue;
        const void *src = g->values[v].t.data;
        if (cu_half(c, v)) {
            int64_t n = nn_tensor_elements(&g->values[v].t);
            for (int64_t i = 0; i < n; i++)
                halves[i] = nn_cu_f32_to_f16(((const float *)src)[i]);
            src = halves;
        }
        cudaError_t e = cudaMemcpy(c->weights + c->weight_at[v], src, cu_value_bytes(c, v), cudaMemcpyHostToDevice);
        if (e != cudaSuccess) st = cu_cuda_error(c->device, e, "cudaMemcpy (weights)", __FILE__, __LINE__);
    }
    free(halves);
    return st;
}

static nn_status node_error(const cu_ctx *c, int node, nn_status st) {
    char msg[400];
    snprintf(msg, sizeof msg, "%s", nn_last_error());
    const nn_node *n = &c->m->g.nodes[node];
    return nn_set_error(st, "node '%s' (%s): %s", n->name, nn_op_get(n->op)->name, msg);
}

/* The GPU kernel family an op belongs to; CU_EW takes the elementwise ops
 * among the rest (nn_cu_ew_for_node). */
static cu_kind family_of(int op) {
    switch (op) {
    case NN_OP_Conv: return CU_CONV;
    case NN_OP_Gemm:
    case NN_OP_MatMul: return CU_GEMM;
    case NN_OP_MaxPool:
    case NN_OP_AveragePool: return CU_POOL;
    case NN_OP_ReduceSum:
    case NN_OP_ReduceMean:
    case NN_OP_ReduceMax:
    case NN_OP_ReduceMin:
    case NN_OP_ReduceProd:
    case NN_OP_ReduceL2:
    case NN_OP_GlobalAveragePool:
    case NN_OP_GlobalMaxPool: return CU_REDUCE;
    case NN_OP_Softmax:
    case NN_OP_LogSoftmax: return CU_SOFTMAX;
    case NN_OP_Identity:
    case NN_OP_Dropout:
    case NN_OP_Reshape:
    case NN_OP_Flatten:
    case NN_OP_Squeeze:
    case NN_OP_Unsqueeze: return CU_COPY;
    case NN_OP_Transpose: return CU_TRANSPOSE;
    case NN_OP_Concat: return CU_CONCAT;
    case NN_OP_Resize:
    case NN_OP_Upsample: return CU_RESIZE;
    default: return CU_EW;
    }
}

/* Whether a GPU kernel family takes the node as it stands.  Attach may
 * still run it on the host where its shapes fall outside what the family's
 * library expresses (a conv's pads cuDNN cannot take). */
static bool cu_supports_node(const nn_model *m, const nn_node *n) {
    if (n->has_prologue) return false; /* no GPU kernel applies one */
    if (family_of(n->op) != CU_EW) return true;
    enum { MAX_IO = NN_EW_MAX_INPUTS + 1 };
    nn_tensor in[MAX_IO], out[MAX_IO];
    if (n->n_in > MAX_IO || n->n_out > MAX_IO) return false;
    for (int k = 0; k < n->n_in + n->n_out; k++) {
        int v = k < n->n_in ? n->in[k] : n->out[k - n->n_in];
        nn_tensor *t = k < n->n_in ? &in[k] : &out[k - n->n_in];
        memset(t, 0, sizeof *t);
        if (v < 0) continue;
        if (!m->g.values[v].shape_known) return false;
        *t = m->g.values[v].t;
    }
    char err[256];
    nn_call call = nn_node_call(m, n, in, out, err, sizeof err);
    nn_cu_ew e;
    const char *why;
    return nn_cu_ew_for_node(&e, n->op, &call, m->g.opset, &why);
}

/* Give node i a GPU kernel, or the CPU kernel when no GPU one fits it. */
static nn_status setup_node(cu_ctx *c, int i) {
    const nn_node *n = &c->m->g.nodes[i];
    cu_node *dn = &c->nodes[i];
    dn->node = i;
    if (n->elided) {
        dn->kind = CU_SKIP;
        return NN_OK;
    }
    char err[256];
    nn_call call;
    cu_node_call(c, i, &call, err, sizeof err);
    const char *why = "no GPU kernel for this op";
    nn_status st = NN_ERR_UNSUPPORTED;
    dn->kind = family_of(n->op);
    switch (dn->kind) {
    case CU_CONV: st = cu_conv_setup(c, dn, &call, &why); break;
    case CU_GEMM: st = cu_gemm_setup(c, dn, &call, &why); break;
    case CU_POOL: st = cu_pool_setup(c, dn, &call, &why); break;
    case CU_REDUCE: st = cu_reduce_setup(c, dn, &call, &why); break;
    case CU_SOFTMAX: st = cu_softmax_setup(c, dn, &call, &why); break;
    case CU_COPY: st = cu_copy_setup(c, dn, &call, &why); break;
    case CU_TRANSPOSE: st = cu_transpose_setup(c, dn, &call, &why); break;
    case CU_CONCAT: st = cu_concat_setup(c, dn, &call, &why); break;
    case CU_RESIZE: st = cu_resize_setup(c, dn, &call, &why); break;
    default: st = cu_ew_setup(c, dn, &call, &why); break;
    }
    if (st == NN_ERR_UNSUPPORTED) {
        if (dn->kind == CU_CONV) cu_conv_release(c, dn);
        if (dn->kind == CU_GEMM) cu_gemm_release(c, dn);
        free(dn->const_host);
        dn->const_host = NULL;
        dn->const_bytes = dn->workspace = 0;
        memset(&dn->u, 0, sizeof dn->u);
        dn->kind = CU_HOST;
        dn->cpu_why = why;
        c->cpu_nodes++;
        cu_node_call(c, i, &call, err, sizeof err);
        st = cu_host_setup(c, dn, &call, &why);
    }
    return st == NN_OK ? NN_OK : node_error(c, i, st);
}

/* Everything but the weights in one allocation: activations at the
 * planned offsets, the workspace, node constants and the staging buffers;
 * then the pinned host buffers. */
static nn_status allocate(cu_ctx *c) {
    nn_model *m = c->m;
    const nn_graph *g = &m->g;
    for (int i = 0; i < g->n_nodes; i++) {
        cu_node *dn = &c->nodes[i];
        if (dn->workspace > c->workspace_bytes) c->workspace_bytes = dn->workspace;
        if (dn->const_bytes) {
            dn->const_at = c->consts_bytes;
            c->consts_bytes += round_up(dn->const_bytes);
        }
    }
    c->in_at = (size_t *)calloc((size_t)g->n_inputs + 1, sizeof(size_t));
    c->out_at = (size_t *)calloc((size_t)g->n_outputs + 1, sizeof(size_t));
    if (!c->in_at || !c->out_at) return nn_set_error(NN_ERR_NOMEM, "out of memory");
    /* the staging buffers hold a batch as the caller has it: fp32 floats */
    for (int side = 0; side < 2; side++) {
        int count = side ? g->n_outputs : g->n_inputs;
        for (int i = 0; i < count; i++) {
            const nn_tensor *t = &g->values[side ? g->outputs[i] : g->inputs[i]].t;
            (side ? c->out_at : c->in_at)[i] = c->stage_bytes[side];
            c->stage_bytes[side] += round_up((size_t)nn_tensor_elements(t) * nn_dtype_size(t->dtype));
        }
    }
    size_t at = round_up(m->plan.arena_bytes);
    c->workspace_at = at;
    at += round_up(c->workspace_bytes);
    c->consts_at = at;
    at += c->consts_bytes;
    for (int side = 0; side < 2; side++)
        for (int p = 0; p < 2; p++) {
            c->stage_at[side][p] = at;
            at += c->stage_bytes[side];
        }
    c->mem_bytes = at;
    CU_TRY(nn_check_memory_limit(m, at - m->plan.arena_bytes));
    cudaError_t e = cudaMalloc((void **)&c->mem, at ? at : ALIGN);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return nn_set_error(
            NN_ERR_DEVICE, "device '%s': cannot allocate %.1f MiB (activations %.1f, workspace %.1f): %s", c->device,
            at / 1048576.0, m->plan.arena_bytes / 1048576.0, c->workspace_bytes / 1048576.0, cudaGetErrorString(e));
    }
    for (int i = 0; i < g->n_nodes; i++) {
        cu_node *dn = &c->nodes[i];
        if (!dn->const_bytes) continue;
        CU_CUDA(c->device, cudaMemcpy(c->mem + c->consts_at + dn->const_at, dn->const_host, dn->const_bytes,
                                      cudaMemcpyHostToDevice));
        free(dn->const_host);
        dn->const_host = NULL;
    }
    size_t pinned = 2 * (c->stage_bytes[0] + c->stage_bytes[1]) + c->mirror_bytes;
    CU_CUDA(c->device, cudaHostAlloc((void **)&c->pinned, pinned ? pinned : ALIGN, cudaHostAllocDefault));
    char *p = c->pinned;
    for (int side = 0; side < 2; side++)
        for (int q = 0; q < 2; q++) {
            c->host_stage[side][q] = p;
            p += c->stage_bytes[side];
        }
    c->mirror = p;
    if (c->host_workspace_bytes && !(c->host_workspace = malloc(c->host_workspace_bytes)))
        return nn_set_error(NN_ERR_NOMEM, "out of memory for %zu bytes of CPU scratch", c->host_workspace_bytes);
    /* a short last batch is zero-padded; the rest of a staging buffer starts as zeros too */
    CU_CUDA(c->device, cudaMemset(c->mem + c->stage_at[0][0], 0, 2 * (c->stage_bytes[0] + c->stage_bytes[1])));
    memset(c->pinned, 0, pinned);
    return NN_OK;
}

static nn_status cu_attach(nn_model *m, int device_index) {
    cu_ctx *c = (cu_ctx *)calloc(1, sizeof *c);
    if (!c) return nn_set_error(NN_ERR_NOMEM, "out of memory");
    m->device_state = c;
    c->m = m;
    c->device = m->device;
    c->opt = options_of(m);
    c->host_status = NN_OK;
    CU_TRY(device_open(c, device_index));
    CU_TRY(place_values(c));
    CU_TRY(upload_weights(c));
    c->nodes = (cu_node *)calloc((size_t)m->g.n_nodes + 1, sizeof(cu_node));
    if (!c->nodes) return nn_set_error(NN_ERR_NOMEM, "out of memory");
    for (int i = 0; i < m->g.n_nodes; i++)
        CU_TRY(setup_node(c, i));
    CU_TRY(cu_conv_search(c));
    CU_TRY(allocate(c));
    c->stats.cpu_nodes = c->cpu_nodes;
    for (int i = 0; i < m->g.n_nodes; i++)
        c->stats.gpu_nodes += c->nodes[i].kind != CU_SKIP && c->nodes[i].kind != CU_HOST;
    m->n_slots = 2; /* the staging parities */
    return cu_pipeline_prepare(c);
}

static void cu_detach(nn_model *m) {
    cu_ctx *c = (cu_ctx *)m->device_state;
    if (!c) return;
    if (c->compute) { /* the device was opened: let queued work finish before freeing */
        cudaSetDevice(m->device_index);
        cudaStreamSynchronize(c->compute);
        cudaStreamSynchronize(c->upload);
        cudaStreamSynchronize(c->download);
    }
    for (int p = 0; p < 2; p++) {
        if (c->graph[p]) cudaGraphExecDestroy(c->graph[p]);
        cudaEvent_t *evs[] = {&c->ev[p].h2d_start,   &c->ev[p].h2d_end,   &c->ev[p].compute_start,
                              &c->ev[p].compute_end, &c->ev[p].d2h_start, &c->ev[p].d2h_end};
        for (size_t i = 0; i < sizeof evs / sizeof *evs; i++)
            if (*evs[i]) cudaEventDestroy(*evs[i]);
        for (int i = 0; c->ev[p].nodes && i <= m->g.n_nodes; i++)
            if (c->ev[p].nodes[i]) cudaEventDestroy(c->ev[p].nodes[i]);
        free(c->ev[p].nodes);
    }
    if (c->begin) cudaEventDestroy(c->begin);
    for (int i = 0; c->nodes && i < m->g.n_nodes; i++) {
        cu_node *dn = &c->nodes[i];
        if (dn->kind == CU_CONV) cu_conv_release(c, dn);
        if (dn->kind == CU_GEMM) cu_gemm_release(c, dn);
        if (dn->kind == CU_HOST) cu_host_release(dn);
        free(dn->const_host);
    }
    free(c->nodes);
    if (c->blas) c->lt.cublasLtDestroy(c->blas);
    cu_lt_close(&c->lt);
    if (c->cudnn) cudnnDestroy(c->cudnn);
    if (c->compute) cudaStreamDestroy(c->compute);
    if (c->upload) cudaStreamDestroy(c->upload);
    if (c->download) cudaStreamDestroy(c->download);
    if (c->mem) cudaFree(c->mem);
    if (c->weights) cudaFree(c->weights);
    if (c->pinned) cudaFreeHost(c->pinned);
    free(c->host_workspace);
    free(c->weight_at);
    free(c->value_at);
    free(c->in_at);
    free(c->out_at);
    free(c);
    m->device_state = NULL;
}

extern "C" __attribute__((visibility("default"))) nn_status nn_cuda_get_stats(const nn_model *m, nn_cuda_stats *s) {
    if (!m || !s || m->backend != &nn_cuda_backend || !m->device_state)
        return nn_set_error(NN_ERR_ARG, "nn_cuda_get_stats: the model is not attached to a GPU");
    *s = ((const cu_ctx *)m->device_state)->stats;
    return NN_OK;
}

/* Whole batches, one chunk at a time (pipelined over the two slots). */
extern "C" const nn_backend nn_cuda_backend = {
    "cuda",          0,         cu_attach,         cu_supports_node, cu_input_buffer, cu_output_buffer, cu_launch,
    cu_finish,       cu_detach, cu_conv_save_choices};
