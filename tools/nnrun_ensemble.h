/* nnrun --ensemble (tools/nnrun_ensemble.c) */
#ifndef NNRUN_ENSEMBLE_H
#define NNRUN_ENSEMBLE_H
#include "nn.h"
/* how: "mean" (of softmax) or "concat"; returns nnrun's exit status */
int nnrun_ensemble(const char *const *models, int n, const char *how, const nn_options *opt, int warmup, int iters);
#endif
