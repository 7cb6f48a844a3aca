/* The thread-local last-error message behind nn_last_error(). */
#ifndef NN_ERROR_H
#define NN_ERROR_H

#include "nn.h"

nn_status nn_set_error(nn_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void nn_clear_error(void);

#endif
