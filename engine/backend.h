/* A device backend: runs a loaded model's plan somewhere other than the CPU
 * executor (exec.c).  The model is imported, optimized and planned exactly
 * as for the CPU (the plan may come from the cache); the backend then
 * attaches to it and takes over nn_predict.  Nodes keep their original
 * constant weights when a backend is attached (CPU prepare does not run). */
#ifndef NN_BACKEND_H
#define NN_BACKEND_H

#include "model.h"

/* What a target's kernels apply beyond the op itself.  Passes that make
 * such nodes ask for the capability (nn_target_has), never the device's
 * name. */
enum nn_target_cap {
    NN_TARGET_PROLOGUE = 1u << 0,    /* a Conv's fused input scale, shift and Relu (nn_prologue) */
    NN_TARGET_MICRO_BATCH = 1u << 1, /* runs micro-batches on lanes side by side (batch.c) */
};
/* The CPU executor's kernels apply every fusion the passes make. */
#define NN_TARGET_CPU_CAPS ((unsigned)(NN_TARGET_PROLOGUE | NN_TARGET_MICRO_BATCH))

typedef struct nn_backend {
    const char *name;
    unsigned caps; /* enum nn_target_cap bits */
    /* Claim device memory for m->plan (one arena), upload the weights,
     * choose kernels and algorithms; keep its state in m->device_state.
     * Errors: NN_ERR_DEVICE (no device, no driver, out of device memory)
     * or NN_ERR_UNSUPPORTED, with nn_set_error's one-line message. */
    nn_status (*attach)(nn_model *m, int device_index);
    /* nn_predict on this device: run `samples` samples of the inputs (dim 0
     * of batched inputs; -1 when no input is batched) in chunks of
     * m->batch, writing the rows of `out` (allocated by the caller, shapes
     * set). */
    nn_status (*predict)(nn_model *m, const nn_tensor *in, nn_tensor *out, int n_out, int64_t samples);
    /* Release everything attach claimed. */
    void (*detach)(nn_model *m);
    /* Optional: what attach measured and is worth keeping in the plan cache
     * (convolution algorithms), as plain bytes; returns their size and
     * writes them when `cap` holds it.  At a later attach from the cache,
     * m->device_choices holds those bytes (or NULL): the backend checks that
     * they are its own (device model, library version) before using them,
     * and measures again when they are not. */
    size_t (*save_choices)(const nn_model *m, void *buf, size_t cap);
} nn_backend;

/* Whether the model's target (its backend, else the CPU executor) has
 * every capability in `caps`. */
static inline bool nn_target_has(const nn_model *m, unsigned caps) {
    return ((m->backend ? m->backend->caps : NN_TARGET_CPU_CAPS) & caps) == caps;
}

#ifdef NN_HAVE_CUDA
extern const nn_backend nn_cuda_backend; /* cuda/ */
#endif

#endif
