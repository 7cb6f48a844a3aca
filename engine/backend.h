/* A target that runs a loaded model's static plan: the CPU executor
 * (exec.c, the reference) or a device backend (cuda/, a plugin).  The model
 * is imported, optimized and planned the same way for every target (the plan
 * may come from the cache); the target then attaches to it.  nn_predict
 * (api.c) alone splits a call's samples into chunks of the plan batch, pads
 * the last one and gathers the outputs; a target runs one staged chunk at a
 * time in one of its slots. */
#ifndef NN_BACKEND_H
#define NN_BACKEND_H

#include "model.h"

/* How a target runs a plan.  The engine asks for a capability
 * (nn_target_has) or, for a node, supports_node; never the device's name. */
enum nn_target_cap {
    NN_TARGET_MICRO_BATCH = 1u << 0, /* runs micro-batches on lanes side by side (batch.c) */
    NN_TARGET_CONCURRENT = 1u << 1,  /* its slots may run on several threads at once */
    NN_TARGET_DYNAMIC = 1u << 2,     /* runs graphs whose shapes depend on run-time values (exec.c) */
};

typedef struct nn_backend {
    const char *name;
    unsigned caps; /* enum nn_target_cap bits */
    /* Claim what m->plan needs (memory, weights, kernels and algorithms),
     * keeping its state in m->device_state; set m->n_slots.  Errors:
     * NN_ERR_DEVICE (no device, no driver, out of device memory),
     * NN_ERR_NOMEM or NN_ERR_UNSUPPORTED, with nn_set_error's line. */
    nn_status (*attach)(nn_model *m, int device_index);
    /* Whether the target's own kernels run node n as it stands (its op,
     * params and fusions); a node they do not run costs a detour (the CUDA
     * backend runs it on the host).  Passes ask it before fusing. */
    bool (*supports_node)(const nn_model *m, const nn_node *n);
    /* Where nn_predict stages a chunk: slot's buffer for graph input i
     * (plan-batch rows, as the caller's dtype), and where graph output i's
     * rows are once finish has returned. */
    void *(*input_buffer)(nn_model *m, int slot, int i);
    const void *(*output_buffer)(nn_model *m, int slot, int i);
    /* Run the chunk staged in `slot` (chunk: its index in this call, 0
     * first), or start it: until finish(slot) returns, nn_predict touches
     * neither of the slot's buffers.  Every launch is followed by finish,
     * also after an error.  NULL finish: launch runs to completion. */
    nn_status (*launch)(nn_model *m, int slot, int64_t chunk);
    nn_status (*finish)(nn_model *m, int slot, int64_t chunk);
    /* Release everything attach claimed, also after it failed part way,
     * or before it ran (NULL: nothing beyond the lanes). */
    void (*detach)(nn_model *m);
    /* Optional: what attach measured and is worth keeping in the plan cache
     * (convolution algorithms), as plain bytes; returns their size and
     * writes them when `cap` holds it.  At a later attach from the cache,
     * m->device_choices holds those bytes (or NULL): the backend checks that
     * they are its own (device model, library version) before using them,
     * and measures again when they are not. */
    size_t (*save_choices)(const nn_model *m, void *buf, size_t cap);
} nn_backend;

/* The CPU executor as a target (exec.c): slots are the lanes. */
extern const nn_backend nn_cpu_backend;

/* Whether the model's target has every capability in `caps`. */
static inline bool nn_target_has(const nn_model *m, unsigned caps) { return (m->backend->caps & caps) == caps; }

#endif
