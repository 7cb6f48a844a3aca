/* ConvTranspose against a direct double-precision reference: groups,
 * batches, strides, dilations, asymmetric pads, bias and a fused epilogue,
 * with every kernel family this CPU runs (ConvTranspose's product is the
 * GEMM's) and one and two threads. */
#include "../ops/act.h"
#include "../ops/isa.h"
#include "op_harness.h"

typedef struct ct_case {
    int batch, in_ch, out_ch, group, h, w, k, stride, dilation;
    int64_t pads[4]; /* top, left, bottom, right */
    bool bias;
    nn_epilogue ep;
} ct_case;

static void reference(const ct_case *c, const float *x, const float *w, const float *bias, const float *res, int oh_n,
                      int ow_n, float *y) {
    int cg = c->in_ch / c->group, mg = c->out_ch / c->group;
    for (int n = 0; n < c->batch; n++)
        for (int oc = 0; oc < c->out_ch; oc++)
            for (int oh = 0; oh < oh_n; oh++)
                for (int ow = 0; ow < ow_n; ow++) {
                    double acc = bias ? bias[oc] : 0.0;
                    int grp = oc / mg, m = oc % mg;
                    for (int ic = 0; ic < cg; ic++)
                        for (int kh = 0; kh < c->k; kh++)
                            for (int kw = 0; kw < c->k; kw++) {
                                int th = oh + (int)c->pads[0] - kh * c->dilation,
                                    tw = ow + (int)c->pads[1] - kw * c->dilation;
                                if (th < 0 || tw < 0 || th % c->stride || tw % c->stride) continue;
                                int ih = th / c->stride, iw = tw / c->stride;
                                if (ih >= c->h || iw >= c->w) continue;
                                int cin = grp * cg + ic;
                                acc += (double)x[((n * c->in_ch + cin) * c->h + ih) * c->w + iw] *
                                       w[((cin * mg + m) * c->k + kh) * c->k + kw];
                            }
                    int64_t at = ((int64_t)(n * c->out_ch + oc) * oh_n + oh) * ow_n + ow;
                    if (res) acc += res[at];
                    y[at] = nn_act_apply(c->ep.act, c->ep.alpha, c->ep.beta, (float)acc);
                }
}

static void check_case(const ct_case *c, const char *isa) {
    int64_t kernel_shape[2] = {c->k, c->k}, strides[2] = {c->stride, c->stride},
            dilations[2] = {c->dilation, c->dilation};
    nn_attr attrs[] = {attr_int("group", c->group), attr_ints("kernel_shape", 2, kernel_shape),
                       attr_ints("strides", 2, strides), attr_ints("dilations", 2, dilations),
                       attr_ints("pads", 4, c->pads)};
    int span = (c->k - 1) * c->dilation + 1;
    int oh_n = (c->h - 1) * c->stride + span - (int)(c->pads[0] + c->pads[2]);
    int ow_n = (c->w - 1) * c->stride + span - (int)(c->pads[1] + c->pads[3]);
    bool residual = c->ep.residual >= 0;
    nn_tensor in[4] = {rand_tensor(-1, 1, 4, c->batch, c->in_ch, c->h, c->w),
                       rand_tensor(-1, 1, 4, c->in_ch, c->out_ch / c->group, c->k, c->k),
                       c->bias ? rand_tensor(-1, 1, 1, c->out_ch) : (nn_tensor){0},
                       residual ? rand_tensor(-1, 1, 4, c->batch, c->out_ch, oh_n, ow_n) : (nn_tensor){0}};
    int n_in = residual ? 4 : c->bias ? 3 : 2;
    char label[200];
    snprintf(label, sizeof label,
             "%s, %d thread(s): N=%d C=%d M=%d group %d %dx%d k%d s%d d%d pads %lld,%lld,%lld,%lld%s act %d%s", isa,
             cpu_threads, c->batch, c->in_ch, c->out_ch, c->group, c->h, c->w, c->k, c->stride, c->dilation,
             (long long)c->pads[0], (long long)c->pads[1], (long long)c->pads[2], (long long)c->pads[3],
             c->bias ? " bias" : "", (int)c->ep.act, residual ? " residual" : "");
    op_run r;
    bool fused = residual || c->ep.act != NN_ACT_NONE;
    if (cpu_run(&r, "ConvTranspose", 11, attrs, 5, NULL, in, n_in, 1, fused ? &c->ep : NULL)) {
        CHECK(r.out[0].ndim == 4 && r.out[0].dims[2] == oh_n && r.out[0].dims[3] == ow_n,
              "%s: output shape %lldx%lld, want %dx%d", label, (long long)r.out[0].dims[2], (long long)r.out[0].dims[3],
              oh_n, ow_n);
        int64_t n = (int64_t)c->batch * c->out_ch * oh_n * ow_n;
        float *want = malloc(sizeof(float) * (size_t)n);
        reference(c, r.in[0].data, r.in[1].data, c->bias ? r.in[2].data : NULL, residual ? r.in[3].data : NULL, oh_n,
                  ow_n, want);
        CHECK_CLOSE(label, r.out[0].data, want, n, 1e-5, 1e-5);
        free(want);
    }
    release(&r);
}

int main(void) {
    const nn_epilogue none = {.residual = -1}, relu = {.act = NN_ACT_RELU, .residual = -1},
                      res_clip = {.act = NN_ACT_CLIP, .alpha = -0.5f, .beta = 0.5f, .residual = 3};
    const ct_case cases[] = {
        {1, 3, 2, 1, 5, 5, 3, 1, 1, {0, 0, 0, 0}, false, none},
        {2, 4, 6, 2, 7, 6, 3, 2, 1, {1, 1, 1, 1}, true, relu},     /* a decoder's upsampling, grouped */
        {1, 8, 4, 1, 9, 11, 4, 2, 1, {1, 2, 2, 1}, true, none},    /* asymmetric pads */
        {2, 6, 3, 3, 5, 4, 3, 1, 2, {0, 0, 0, 0}, true, res_clip}, /* dilation, residual */
        {1, 32, 16, 1, 14, 14, 2, 2, 1, {0, 0, 0, 0}, true, relu}, /* K and N past one tile */
    };
    static const char *const names[] = {"avx512", "avx2", "scalar"};
    int families = 0;
    for (int i = 0; i < NN_ISA_COUNT; i++) {
        nn_isa isa;
        if (!nn_isa_parse(names[i], &isa) || !nn_isa_select(isa)) {
            printf("ISA %s: not supported here, skipped\n", names[i]);
            continue;
        }
        families++;
        for (cpu_threads = 1; cpu_threads <= 2; cpu_threads++)
            for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
                check_case(&cases[k], names[i]);
    }
    CHECK(families >= 1, "no kernel family ran");
    printf("conv transpose: %d kernel families\n", families);
    return check_summary();
}
