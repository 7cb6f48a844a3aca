/* Nodes no GPU kernel handles run the op's own CPU kernel, in stream
 * order: their operands are copied to a pinned host mirror, a host function
 * (cudaLaunchHostFunc, which CUDA graphs capture too) runs the kernel, and
 * the outputs are copied back.  In fp16 the float operands pass through
 * fp32 copies in the device workspace, since the CPU kernels are fp32. */
#include <stdlib.h>

#include "internal.h"

enum { MIRROR_ALIGN = 64 };

static size_t host_bytes(const nn_tensor *t) { return (size_t)nn_tensor_elements(t) * nn_dtype_size(t->dtype); }
static size_t aligned(size_t n, size_t a) { return (n + a - 1) / a * a; }

nn_status cu_host_setup(cu_ctx *c, cu_node *dn, nn_call *call, const char **why) {
    (void)why;
    const nn_node *n = &c->m->g.nodes[dn->node];
    const nn_op_desc *d = nn_op_get(n->op);
    cu_host_state *hs = &dn->u.host;
    hs->ctx = c;
    hs->node = dn->node;
    int slots = n->n_in + n->n_out;
    hs->in = (nn_tensor *)calloc((size_t)slots + 1, sizeof(nn_tensor));
    hs->in_at = (int64_t *)calloc((size_t)slots + 1, sizeof(int64_t));
    hs->in_ws = (int64_t *)calloc((size_t)slots + 1, sizeof(int64_t));
    if (!hs->in || !hs->in_at || !hs->in_ws) return nn_set_error(NN_ERR_NOMEM, "out of memory");
    hs->out = hs->in + n->n_in;
    hs->out_at = hs->in_at + n->n_in;
    hs->out_ws = hs->in_ws + n->n_in;
    size_t mirror = 0, workspace = 0;
    for (int k = 0; k < slots; k++) {
        bool input = k < n->n_in;
        int v = input ? n->in[k] : n->out[k - n->n_in];
        hs->in[k] = input ? call->in[k] : call->out[k - n->n_in];
        hs->in_at[k] = hs->in_ws[k] = -1;
        if (v < 0) continue;
        if (c->m->g.values[v].is_const) { /* read where the model keeps it */
            if (!hs->in[k].data) return nn_set_error(NN_ERR_INTERNAL, "constant input %d has no data on the host", k);
            continue;
        }
        if (!cu_on_device(c, v)) continue; /* an output nobody reads: the kernel skips it, like on the CPU */
        hs->in_at[k] = (int64_t)mirror;
        mirror += aligned(host_bytes(&hs->in[k]), MIRROR_ALIGN);
        if (cu_half(c, v)) {
            hs->in_ws[k] = (int64_t)workspace;
            workspace += aligned(host_bytes(&hs->in[k]), 256);
        }
    }
    dn->workspace = workspace;
    if (mirror > c->mirror_bytes) c->mirror_bytes = mirror;
    size_t scratch = d->workspace ? d->workspace(call) : 0;
    if (scratch > c->host_workspace_bytes) c->host_workspace_bytes = scratch;
    return NN_OK;
}

/* The host function: no CUDA calls allowed here, so a failure is recorded
 * for cu_predict to report once the batch is done. */
static void CUDART_CB run_on_host(void *arg) {
    cu_host_state *hs = (cu_host_state *)arg;
    cu_ctx *c = hs->ctx;
    if (__atomic_load_n(&c->host_status, __ATOMIC_ACQUIRE) != NN_OK) return;
    const nn_node *n = &c->m->g.nodes[hs->node];
    const nn_op_desc *d = nn_op_get(n->op);
    for (int k = 0; k < n->n_in + n->n_out; k++)
        if (hs->in_at[k] >= 0) hs->in[k].data = c->mirror + hs->in_at[k];
    char err[256];
    nn_call call = nn_node_call(c->m, n, hs->in, hs->out, err, sizeof err);
    call.workspace = c->host_workspace;
    call.workspace_size = c->host_workspace_bytes;
    nn_status st = d->run(&call);
    if (st == NN_OK) return;
    snprintf(c->host_error, sizeof c->host_error, "node '%s' (%s, on the CPU): %s", n->name, d->name,
             err[0] ? err : nn_strerror(st));
    __atomic_store_n(&c->host_status, st, __ATOMIC_RELEASE);
}

nn_status cu_host_run(cu_ctx *c, const cu_node *dn, cudaStream_t s) {
    const nn_node *n = &c->m->g.nodes[dn->node];
    const cu_host_state *hs = &dn->u.host;
    char *ws = c->mem + c->workspace_at;
    for (int k = 0; k < n->n_in; k++) {
        if (hs->in_at[k] < 0 || !host_bytes(&hs->in[k])) continue;
        const void *src = cu_ptr(c, n->in[k]);
        if (hs->in_ws[k] >= 0) {
            CU_TRY(cu_convert_launch(c, src, ws + hs->in_ws[k], nn_tensor_elements(&hs->in[k]), false, s));
            src = ws + hs->in_ws[k];
        }
        CU_CUDA(c->device,
                cudaMemcpyAsync(c->mirror + hs->in_at[k], src, host_bytes(&hs->in[k]), cudaMemcpyDeviceToHost, s));
    }
    CU_CUDA(c->device, cudaLaunchHostFunc(s, run_on_host, (void *)hs));
    for (int k = 0; k < n->n_out; k++) {
        int at = n->n_in + k;
        if (hs->in_at[at] < 0 || !host_bytes(&hs->in[at])) continue;
        void *dst = cu_ptr(c, n->out[k]);
        const nn_tensor *t = &hs->in[at];
        if (hs->in_ws[at] >= 0) {
            CU_CUDA(c->device, cudaMemcpyAsync(ws + hs->in_ws[at], c->mirror + hs->in_at[at], host_bytes(t),
                                               cudaMemcpyHostToDevice, s));
            CU_TRY(cu_convert_launch(c, ws + hs->in_ws[at], dst, nn_tensor_elements(t), true, s));
        } else {
            CU_CUDA(c->device,
                    cudaMemcpyAsync(dst, c->mirror + hs->in_at[at], host_bytes(t), cudaMemcpyHostToDevice, s));
        }
    }
    return NN_OK;
}

void cu_host_release(cu_node *dn) {
    cu_host_state *hs = &dn->u.host;
    free(hs->in);
    free(hs->in_at);
    free(hs->in_ws);
    memset(hs, 0, sizeof *hs);
}
