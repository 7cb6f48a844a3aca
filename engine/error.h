/* The thread-local last-error message behind nn_last_error(). */
#ifndef NN_ERROR_H
#define NN_ERROR_H

#include "nn.h"

nn_status nn_set_error(nn_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void nn_clear_error(void);

/* Internal invariants: always on; a failure returns NN_ERR_INTERNAL from the
 * enclosing function instead of aborting the host process. */
#define NN_ASSERT(cond)                                                                         \
    do {                                                                                       \
        if (!(cond))                                                                           \
            return nn_set_error(NN_ERR_INTERNAL, "internal error: %s (%s:%d)", #cond, __FILE__, \
                                __LINE__);                                                     \
    } while (0)

#endif
