/* Gemm and MatMul through cuBLASLt.  Row-major products run column-major
 * with the operands swapped (layout.h: nn_cu_matmul_make); the epilogue
 * goes to cuBLASLt where it can (bias per output column, ReLU, a residual
 * or a full C through its C matrix) and the rest to one elementwise pass.
 * The algorithm comes from cuBLASLt's heuristic once, at attach. */
#include "internal.h"

/* scratch cuBLASLt may use (NVIDIA suggests 32 MiB for Hopper) */
static const uint64_t LT_WORKSPACE = (uint64_t)32 << 20;

static cudaDataType_t data_type(const cu_ctx *c) { return c->opt.fp16 ? CUDA_R_16F : CUDA_R_32F; }

/* Alignment of a value's address plus any multiple of `stride` elements. */
static uint32_t operand_alignment(const cu_ctx *c, int v, int64_t stride) {
    size_t a = cu_value_alignment(c, v);
    int64_t bytes = stride * (c->opt.fp16 ? 2 : 4);
    while (bytes && bytes % (int64_t)a)
        a /= 2;
    return (uint32_t)a;
}

static nn_status layout(cu_ctx *c, cublasLtMatrixLayout_t *l, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                        int64_t stride) {
    CU_LT(&c->lt, c->device, c->lt.cublasLtMatrixLayoutCreate(l, data_type(c), (uint64_t)rows, (uint64_t)cols, ld));
    if (batch > 1) {
        int32_t count = (int32_t)batch;
        CU_LT(&c->lt, c->device,
              c->lt.cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
        CU_LT(&c->lt, c->device,
              c->lt.cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                     sizeof stride));
    }
    return NN_OK;
}

static nn_status set_desc(cu_ctx *c, cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const void *v,
                          size_t size) {
    CU_LT(&c->lt, c->device, c->lt.cublasLtMatmulDescSetAttribute(d, attr, v, size));
    return NN_OK;
}

static nn_status set_pref(cu_ctx *c, cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr,
                          const void *v, size_t size) {
    CU_LT(&c->lt, c->device, c->lt.cublasLtMatmulPreferenceSetAttribute(p, attr, v, size));
    return NN_OK;
}

/* Descriptors and the heuristic's best algorithm for the state's product. */
static nn_status make_plan(cu_ctx *c, cu_node *dn, const char **why) {
    const nn_node *n = &c->m->g.nodes[dn->node];
    cu_gemm_state *gs = &dn->u.gemm;
    const nn_cu_matmul *mm = &gs->mm;
    /* fp16 and fp32 both accumulate in fp32; fp32 gets TF32 only when asked */
    cublasComputeType_t compute = !c->opt.fp16 && c->opt.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    CU_LT(&c->lt, c->device, c->lt.cublasLtMatmulDescCreate(&gs->desc, compute, CUDA_R_32F));
    int32_t ta = mm->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = mm->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    CU_TRY(set_desc(c, gs->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CU_TRY(set_desc(c, gs->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    uint32_t epilogue = gs->epi.bias_input >= 0 ? (gs->epi.relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                                                : (gs->epi.relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT);
    CU_TRY(set_desc(c, gs->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
    if (gs->epi.bias_input >= 0) {
        const void *bias = cu_ptr(c, n->in[gs->epi.bias_input]);
        CU_TRY(set_desc(c, gs->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    }
    int64_t batch = gs->batching == NN_CU_BATCH_STRIDED ? mm->batch : 1;
    CU_TRY(layout(c, &gs->a, mm->a_rows, mm->a_cols, mm->lda, batch, mm->stride_a));
    CU_TRY(layout(c, &gs->b, mm->b_rows, mm->b_cols, mm->ldb, batch, mm->stride_b));
    CU_TRY(layout(c, &gs->c, mm->n, mm->m, mm->n, batch, mm->stride_d));
    CU_TRY(layout(c, &gs->d, mm->n, mm->m, mm->n, batch, mm->stride_d));

    /* the alignments the operands will have: cuBLASLt's A is our B */
    int64_t a_step = gs->batching == NN_CU_BATCH_EACH ? mm->k * mm->n : mm->stride_a;
    int64_t b_step = gs->batching == NN_CU_BATCH_EACH ? mm->m * mm->k : mm->stride_b;
    int64_t d_step = gs->batching == NN_CU_BATCH_EACH ? mm->m * mm->n : mm->stride_d;
    uint32_t align_a = operand_alignment(c, n->in[1], a_step), align_b = operand_alignment(c, n->in[0], b_step);
    uint32_t align_d = operand_alignment(c, n->out[0], d_step);
    uint32_t align_c = gs->epi.c_input >= 0 ? operand_alignment(c, n->in[gs->epi.c_input], d_step) : align_d;
    cublasLtMatmulPreference_t pref = NULL;
    CU_LT(&c->lt, c->device, c->lt.cublasLtMatmulPreferenceCreate(&pref));
    nn_status st = set_pref(c, pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &LT_WORKSPACE, sizeof LT_WORKSPACE);
    if (st == NN_OK) st = set_pref(c, pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof align_a);
    if (st == NN_OK) st = set_pref(c, pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof align_b);
    if (st == NN_OK) st = set_pref(c, pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof align_c);
    if (st == NN_OK) st = set_pref(c, pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d, sizeof align_d);
    cublasLtMatmulHeuristicResult_t best;
    int returned = 0;
    cublasStatus_t bs = CUBLAS_STATUS_SUCCESS;
    if (st == NN_OK)
        bs = c->lt.cublasLtMatmulAlgoGetHeuristic(c->blas, gs->desc, gs->a, gs->b, gs->c, gs->d, pref, 1, &best,
                                                  &returned);
    c->lt.cublasLtMatmulPreferenceDestroy(pref);
    if (st != NN_OK) return st;
    if (bs == CUBLAS_STATUS_NOT_SUPPORTED || (bs == CUBLAS_STATUS_SUCCESS && returned == 0)) {
        *why = "cuBLASLt has no algorithm for this product";
        return NN_ERR_UNSUPPORTED;
    }
    CU_LT(&c->lt, c->device, bs);
    gs->algo = best.algo;
    gs->algo_workspace = best.workspaceSize;
    dn->workspace = best.workspaceSize;
    return NN_OK;
}

nn_status cu_gemm_setup(cu_ctx *c, cu_node *dn, nn_call *call, const char **why) {
    const nn_node *n = &c->m->g.nodes[dn->node];
    cu_gemm_state *gs = &dn->u.gemm;
    for (int k = 0; k < call->n_in; k++)
        if (nn_present(call, k) && (call->in[k].dtype != NN_DTYPE_FLOAT || !cu_on_device(c, n->in[k]))) {
            *why = "an operand that is not float or has no data";
            return NN_ERR_UNSUPPORTED;
        }
    const nn_tensor *a = &call->in[0], *b = &call->in[1], *y = &call->out[0], *cmat = NULL;
    float beta = 0.0f;
    int c_input = -1;
    if (n->op == NN_OP_Gemm) {
        const nn_gemm_params *p = (const nn_gemm_params *)call->params;
        if (a->ndim != 2 || b->ndim != 2) return nn_set_error(NN_ERR_SHAPE, "Gemm needs 2-D A and B");
        nn_cu_matmul_make(&gs->mm, a->dims[p->trans_a ? 1 : 0], b->dims[p->trans_b ? 0 : 1],
                          a->dims[p->trans_a ? 0 : 1], p->trans_a != 0, p->trans_b != 0);
        gs->batching = NN_CU_BATCH_STRIDED;
        gs->batch.entries = 1;
        gs->alpha = p->alpha;
        if (nn_present(call, 2) && p->beta != 0.0f) {
            cmat = &call->in[2];
            beta = p->beta;
            c_input = 2;
        }
    } else {
        if (call->n_in > 2 && nn_present(call, 2) && !(call->epilogue && call->epilogue->residual == 2)) {
            *why = "a MatMul with a fused bias (passes/fuse_bias.c)";
            return NN_ERR_UNSUPPORTED;
        }
        gs->batching = nn_cu_matmul_batched(&gs->mm, &gs->batch, a, b);
        gs->alpha = 1.0f;
    }
    if (gs->mm.m == 0 || gs->mm.n == 0 || gs->mm.k == 0 || gs->batch.entries == 0) {
        *why = "an empty product";
        return NN_ERR_UNSUPPORTED;
    }
    bool c_const = c_input >= 0 && c->m->g.values[n->in[c_input]].is_const;
    if (!nn_cu_gemm_epilogue_make(&gs->epi, y, c_input, cmat, beta, c_const, call->epilogue, why))
        return NN_ERR_UNSUPPORTED;
    return make_plan(c, dn, why);
}

nn_status cu_gemm_run(cu_ctx *c, const cu_node *dn, cudaStream_t s) {
    const nn_node *n = &c->m->g.nodes[dn->node];
    const cu_gemm_state *gs = &dn->u.gemm;
    const nn_cu_matmul *mm = &gs->mm;
    size_t esize = c->opt.fp16 ? 2 : 4;
    const char *a = (const char *)cu_ptr(c, n->in[0]), *b = (const char *)cu_ptr(c, n->in[1]);
    char *y = (char *)cu_ptr(c, n->out[0]);
    const char *cm = gs->epi.c_input >= 0 ? (const char *)cu_ptr(c, n->in[gs->epi.c_input]) : y;
    float beta = gs->epi.c_input >= 0 ? gs->epi.beta : 0.0f;
    int64_t entries = gs->batching == NN_CU_BATCH_EACH ? gs->batch.entries : 1;
    for (int64_t e = 0; e < entries; e++) {
        int64_t a_off = 0, b_off = 0, y_off = e * mm->m * mm->n;
        if (gs->batching == NN_CU_BATCH_EACH) nn_cu_matmul_entry(&gs->batch, e, &a_off, &b_off);
        /* cuBLASLt's A is our B, its B our A */
        CU_LT(&c->lt, c->device,
              c->lt.cublasLtMatmul(c->blas, gs->desc, &gs->alpha, b + b_off * esize, gs->a, a + a_off * esize, gs->b,
                                   &beta, cm + y_off * esize, gs->c, y + y_off * esize, gs->d, &gs->algo,
                                   c->mem + c->workspace_at, gs->algo_workspace, s));
    }
    if (gs->epi.ew.n_steps == 0) return NN_OK;
    const void *in[NN_EW_MAX_INPUTS];
    in[0] = y;
    for (int k = 1; k < gs->epi.n_ew_inputs; k++)
        in[k] = cu_ptr(c, n->in[gs->epi.ew_inputs[k]]);
    return cu_ew_launch(c, &gs->epi.ew, in, y, s);
}

void cu_gemm_release(cu_ctx *c, cu_node *dn) {
    cu_gemm_state *gs = &dn->u.gemm;
    if (gs->desc) c->lt.cublasLtMatmulDescDestroy(gs->desc);
    cublasLtMatrixLayout_t *ls[] = {&gs->a, &gs->b, &gs->c, &gs->d};
    for (size_t i = 0; i < sizeof ls / sizeof *ls; i++)
        if (*ls[i]) c->lt.cublasLtMatrixLayoutDestroy(*ls[i]);
    memset(gs, 0, sizeof *gs);
}
