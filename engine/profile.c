/* Reports for tools: per-node profile and what this build and machine run
 * with (nn.h: nn_profile_node, nn_runtime_info). */
#include <dlfcn.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "../ops/isa.h"
#include "../ops/params.h"
#include "../ops/registry.h"
#include "error.h"
#include "model.h"
#include "plugin.h"

NN_API int nn_profile_node_count(const nn_model *m) {
    return m && m->n_lanes && m->lanes[0].node_ns ? m->g.n_nodes : -1;
}

static const nn_tensor *value_shape(const nn_graph *g, const nn_node *n, int k, bool input) {
    int v = input ? (k < n->n_in ? n->in[k] : -1) : (k < n->n_out ? n->out[k] : -1);
    return v >= 0 && g->values[v].shape_known ? &g->values[v].t : NULL;
}

/* Multiply-adds count two: the figure GFLOP/s tables in papers use.  The
 * quantized convs and MatMuls count their integer multiply-adds alike. */
static double node_flops(const nn_graph *g, const nn_node *n) {
    /* the QLinear ops' second operand is their input 3 (x, x_scale, x_zero_point, w, ...) */
    bool qconv = n->op == NN_OP_QLinearConv || n->op == NN_OP_QLinearConvNhwc;
    int wi = qconv || n->op == NN_OP_QLinearMatMul ? 3 : 1;
    const nn_tensor *y = value_shape(g, n, 0, false), *a = value_shape(g, n, 0, true), *w = value_shape(g, n, wi, true);
    if (!y || !a || !w) return 0;
    double out = (double)nn_tensor_elements(y), k = 1;
    if (out <= 0) return 0;
    if (n->op == NN_OP_Conv || qconv || n->op == NN_OP_ConvInteger) { /* W is [M, C/group, k...]: each output sums C/group * prod(k) products */
        for (int d = 1; d < w->ndim; d++)
            k *= (double)w->dims[d];
    } else if (n->op == NN_OP_MatMul || n->op == NN_OP_QLinearMatMul || n->op == NN_OP_MatMulInteger) {
        k = a->ndim > 0 ? (double)a->dims[a->ndim - 1] : 0;
    } else if (n->op == NN_OP_Gemm && a->ndim == 2) {
        const nn_gemm_params *p = n->params;
        k = (double)a->dims[p && p->trans_a ? 0 : 1];
    } else {
        return 0;
    }
    return 2.0 * out * k;
}

NN_API nn_status nn_profile_node(const nn_model *m, int index, nn_node_profile *p) {
    if (!m || !p) return nn_set_error(NN_ERR_ARG, "nn_profile_node: NULL argument");
    if (nn_profile_node_count(m) < 0)
        return nn_set_error(NN_ERR_ARG, "profiling is off: load with options.profile = 1");
    const nn_graph *g = &m->g;
    if (index < 0 || index >= g->n_nodes)
        return nn_set_error(NN_ERR_ARG, "no node %d (the plan has %d)", index, g->n_nodes);
    double total = 0, mine = 0;
    int64_t runs = 0;
    for (int l = 0; l < m->n_lanes; l++) {
        runs += m->lanes[l].profiled_runs;
        mine += m->lanes[l].node_ns[index];
        for (int i = 0; i < g->n_nodes; i++)
            total += m->lanes[l].node_ns[i];
    }
    const nn_node *n = &g->nodes[index];
    memset(p, 0, sizeof *p);
    p->name = n->name;
    p->op = nn_op_get(n->op)->name;
    p->fused = n->fused;
    const nn_tensor *y = value_shape(g, n, 0, false);
    if (y) p->output = *y;
    p->output.data = NULL;
    p->ms = mine / (double)(runs ? runs : 1) / 1e6;
    p->share = total > 0 ? mine / total : 0;
    p->flops = node_flops(g, n);
    return NN_OK;
}

NN_API void nn_get_cpu_caches(char *buf, size_t size) {
    if (buf && size) nn_ops_cpu_blocking(buf, size, false);
}

NN_API void nn_get_build_info(nn_build_info *info) {
    if (!info) return;
    memset(info, 0, sizeof *info);
    info->version = NN_VERSION_STRING;
    info->isa = nn_isa_name(nn_isa_active());
    info->cpu_kernels = nn_ops_cpu_kernels();
    info->processors = omp_get_num_procs();
    info->openmp_version = _OPENMP;
    /* the shared object omp_get_num_procs came from names the OpenMP runtime (libomp, libgomp) */
    Dl_info dl;
    info->openmp_library = dladdr((void *)omp_get_num_procs, &dl) && dl.dli_fname ? dl.dli_fname : "linked statically";
    info->cuda_plugin = nn_cuda_plugin_path();
}
