/* nn's own single-precision GEMM:  C[M,N] = alpha * A[M,K] B[K,N]  (+ C),
 * then a fused epilogue per element: bias (per row or per column), a residual
 * of C's layout, an activation.
 *
 * Operands are packed into panels (A: MR rows, B: NR columns, both blocked
 * along K) and multiplied by a register-blocked microkernel chosen once at
 * run time: AVX-512, AVX2+FMA or plain C.  A constant operand can be packed
 * once (nn_gemm_pack_a / nn_gemm_pack_b, e.g. in an op's prepare hook); B can
 * also be read straight from an NCHW conv input (implicit im2col), so no
 * im2col matrix is ever materialized.
 *
 * One call can run a batch of independent products, indexed (outer, inner):
 * conv uses (image, group); Winograd's 36 products of transformed weights
 * U[t] (M x K) and inputs V[t] (K x N) into M[t] would be
 *     batch = {1, 36}, stride_a = {0, M*K}, stride_b = {0, K*N}, stride_c = {0, M*N}
 * with U packed once by nn_gemm_pack_a (same batch and strides, a = U).
 * Operand pointers advance by the given element strides per step.
 *
 * Threading: nn_gemm_run opens one OpenMP team of `threads` and splits
 * (batch x M blocks x N blocks) tasks over it; with threads == 1 it runs on
 * the calling thread, so a caller that parallelizes by itself can call it
 * from inside its own parallel region (each thread with its own workspace).
 * Scratch is the caller's: nn_gemm_workspace bytes; nothing is allocated. */
#ifndef NN_GEMM_H
#define NN_GEMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "op.h"

#define NN_GEMM_CONV_DIMS (NN_MAX_DIMS - 2)

/* B as the im2col matrix of one image (and group) of a convolution:
 * K = channels * prod(kernel) rows (channel-major, then kernel taps in
 * row-major order: the layout of W[M, C/group, k...]); N = prod(out) columns.
 * B's pointer is the first input channel's plane (in[] positions, dense). */
typedef struct nn_gemm_conv {
    int nsp; /* spatial dims, 1 .. NN_GEMM_CONV_DIMS */
    int64_t channels;
    int64_t in[NN_GEMM_CONV_DIMS], out[NN_GEMM_CONV_DIMS], kernel[NN_GEMM_CONV_DIMS];
    int64_t stride[NN_GEMM_CONV_DIMS], dilation[NN_GEMM_CONV_DIMS], pad[NN_GEMM_CONV_DIMS]; /* pad: leading */
} nn_gemm_conv;

/* An operand packed ahead of time for the kernel that was active then;
 * one packed matrix per inner batch index (the outer batch shares it). */
typedef struct nn_gemm_packed {
    int kernel;      /* internal: which kernel's layout */
    int kc;          /* internal: the K block size it was packed with (cpu_caches.h) */
    int64_t rows, k; /* A: M x K;  B: N columns x K */
    int64_t count;   /* matrices */
    size_t stride;   /* floats from one matrix to the next */
    float *data;
} nn_gemm_packed;

typedef enum nn_gemm_bias {
    NN_GEMM_BIAS_NONE,
    NN_GEMM_BIAS_ROW, /* bias[m]: conv's per output channel */
    NN_GEMM_BIAS_COL, /* bias[n]: Gemm's C of shape [N] */
} nn_gemm_bias;

typedef struct nn_gemm {
    int64_t m, n, k;
    /* A(i, p) = a[i*lda + p], or a[p*lda + i] when trans_a */
    const float *a;
    int64_t lda;
    bool trans_a;
    const nn_gemm_packed *a_packed; /* NULL: packed on the fly from a */
    /* B(p, j) = b[p*ldb + j], or b[j*ldb + p] when trans_b, or the conv's im2col */
    const float *b;
    int64_t ldb;
    bool trans_b;
    const nn_gemm_packed *b_packed;
    const nn_gemm_conv *b_conv;
    /* C(i, j) = c[i*ldc + j], or c[j*ldc + i] when trans_c (the residual
     * likewise, with ldr): a pointwise conv computing positions x channels
     * into its NCHW output */
    float *c;
    int64_t ldc;
    bool trans_c;
    float alpha;     /* scales the product (set it: 1 for a plain one); applied while A is
                      * packed, so a pre-packed A carries the alpha it was packed with */
    bool accumulate; /* C += product instead of C = product */
    /* epilogue: C = act(C + bias + residual); residual has C's layout (ldr, C's strides) */
    nn_gemm_bias bias_kind;
    const float *bias;
    const float *residual;
    int64_t ldr;
    nn_act act;
    float act_alpha, act_beta;
    /* prologue on B, with b_scale set: B(p, j) is read as
     * b_act(B(p, j) * b_scale[p] + b_shift[p]), b_act NN_ACT_NONE or
     * NN_ACT_RELU, the same for every batch entry.  A pointwise conv's
     * per-channel BatchNormalization+Relu, applied while B is packed.  Only
     * for a plain B (neither transposed, pre-packed nor a conv's im2col). */
    const float *b_scale, *b_shift;
    nn_act b_act;
    /* bf16: A and B rounded to bfloat16 (nearest even) as they are packed,
     * products accumulated in fp32, the epilogue in fp32 (docs/precision.md);
     * needs nn_gemm_bf16_available().  Matrix-vector products stay fp32. */
    bool bf16;
    /* batch: (outer, inner) counts, 0 taken as 1; strides in floats per step */
    int64_t batch[2];
    int64_t stride_a[2], stride_b[2], stride_c[2], stride_bias[2];
} nn_gemm;

/* Pack A (every inner batch matrix; stride_a[0] must be 0) or B (a plain or
 * transposed matrix; batch must be 1) for the current kernel.  `mem` holds
 * nn_gemm_pack_*_floats(g) floats, 64-byte aligned. */
size_t nn_gemm_pack_a_floats(const nn_gemm *g);
void nn_gemm_pack_a(const nn_gemm *g, float *mem, nn_gemm_packed *out);
size_t nn_gemm_pack_b_floats(const nn_gemm *g);
void nn_gemm_pack_b(const nn_gemm *g, float *mem, nn_gemm_packed *out);

/* A packed operand as one position-independent block, for an op's prepare
 * (the plan cache stores the block and maps it back at another address):
 * the nn_gemm_packed header without its pointer, then the floats at
 * NN_GEMM_BLOCK_DATA bytes.  nn_gemm_block_view gives the usable operand. */
#define NN_GEMM_BLOCK_DATA 64
size_t nn_gemm_pack_a_block_bytes(const nn_gemm *g);
void nn_gemm_pack_a_block(const nn_gemm *g, void *block);
size_t nn_gemm_pack_b_block_bytes(const nn_gemm *g);
void nn_gemm_pack_b_block(const nn_gemm *g, void *block);
nn_gemm_packed nn_gemm_block_view(const void *block);
/* Whether a block (e.g. read back from the plan cache: untrusted) is exactly
 * what packing g's A / B gives with the current kernel. */
bool nn_gemm_block_fits_a(const nn_gemm *g, const void *block, size_t size);
bool nn_gemm_block_fits_b(const nn_gemm *g, const void *block, size_t size);

/* Whether this build and processor run the bf16 kernel (AVX512-BF16) and
 * the ISA in use allows it (NN_ISA below avx512 does not). */
bool nn_gemm_bf16_available(void);
/* Whether bf16 products run on AMX tiles (AMX-BF16, ops/gemm_amx_x86.c)
 * rather than AVX512-BF16 vectors; nn_gemm_bf16_use_amx(false) keeps them
 * on the vectors (tests, A/B runs; NN_AMX=0 in the environment does the
 * same from the start).  Not while products run. */
bool nn_gemm_bf16_amx(void);
void nn_gemm_bf16_use_amx(bool on);

/* A conv's GEMM with positions as rows (ops/conv.c): A is the transposed
 * im2col matrix of one image, m = its positions, k = channels x taps.
 * nn_gemm_pack_conv_a packs it from the image's first channel plane x, in
 * parallel by K blocks, for the kernel g runs with, into `mem` (at least
 * nn_gemm_conv_a_bytes, its scratch after the packed A), and gives the
 * packed A's header, to pass as g's a_packed.  false when g or the size
 * does not fit. */
size_t nn_gemm_conv_a_bytes(const nn_gemm *g, const nn_gemm_conv *cv, int threads);
bool nn_gemm_pack_conv_a(const nn_gemm *g, const nn_gemm_conv *cv, const float *x, void *mem, size_t size, int threads,
                         nn_gemm_packed *out);

/* Scratch bytes nn_gemm_run needs for this problem with `threads` threads. */
size_t nn_gemm_workspace(const nn_gemm *g, int threads);
/* How nn_gemm_run would cut the product into tasks on `threads` threads:
 * *mparts row parts by *nparts column parts per batch entry (tests). */
void nn_gemm_split(const nn_gemm *g, int threads, int64_t *mparts, int64_t *nparts);
/* Run the product.  false when the workspace is too small, when an
 * operand's data is NULL (freed once packed) and its packed form was made
 * for another kernel, or when B's prologue is set for a B it does not
 * apply to. */
bool nn_gemm_run(const nn_gemm *g, void *workspace, size_t workspace_size, int threads);

/* y[i] = act(y[i]) with the active kernel's vector code (exp-based
 * activations use a polynomial exp accurate to a few ulp). */
void nn_gemm_act(float *y, int64_t n, nn_act act, float alpha, float beta);

/* The kernel in use: nn_isa_name(nn_isa_active()) (isa.h), the name the
 * plan cache keys by.  nn_gemm_use_kernel is nn_isa_select by name, for
 * tests and benchmarks (false when this CPU lacks it); it switches every
 * kernel family.  Operands packed for another kernel are repacked on the fly. */
const char *nn_gemm_kernel_name(void);
/* "L1d 32 KiB, L2 1024 KiB, L3 32768 KiB (sysfs); GEMM avx512 14x32: KC 288,
 * MC 224, NC 448": the caches read and the blocking derived from them;
 * compact: the numbers only, for the plan cache's key. */
void nn_gemm_describe_blocking(char *buf, size_t size, bool compact);
bool nn_gemm_use_kernel(const char *name);

#endif
