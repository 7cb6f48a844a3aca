/* What the CUDA backend measured on the last nn_predict, for tests/gpu,
 * which links the plugin (libnn_cuda.so exports the function; libnn does
 * not have it). */
#ifndef NN_CUDA_STATS_H
#define NN_CUDA_STATS_H

#include <stdint.h>

#include "../engine/nn.h"

typedef struct nn_cuda_stats {
    int64_t batches;                           /* batches the last nn_predict ran */
    double upload_ms, compute_ms, download_ms; /* summed over them (CUDA events) */
    double wall_ms;                            /* first upload started to last download done */
    double overlap;                            /* share of copy time hidden under compute, 0 to 1 */
    int gpu_nodes, cpu_nodes;                  /* nodes run by GPU kernels / by the CPU on host copies */
    int graphs;                                /* 1: each batch replays a CUDA graph */
} nn_cuda_stats;

#ifdef __cplusplus
extern "C" {
#endif
/* NN_ERR_ARG when the model is not attached to a GPU. */
nn_status nn_cuda_get_stats(const nn_model *m, nn_cuda_stats *s);
#ifdef __cplusplus
}
#endif

#endif
