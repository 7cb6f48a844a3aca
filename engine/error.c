#include "error.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char last_error[512];

nn_status nn_set_error(nn_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    /* names come from the file: keep the message on one line whatever they hold */
    for (char *c = last_error; *c; c++)
        if ((unsigned char)*c < 0x20) *c = '?';
    return st;
}

void nn_clear_error(void) { last_error[0] = 0; }

NN_API const char *nn_last_error(void) { return last_error; }

NN_API const char *nn_strerror(nn_status st) {
    switch (st) {
    case NN_OK: return "ok";
    case NN_ERR_IO: return "i/o error";
    case NN_ERR_PARSE: return "parse error";
    case NN_ERR_INVALID: return "invalid model";
    case NN_ERR_UNSUPPORTED: return "unsupported";
    case NN_ERR_SHAPE: return "shape error";
    case NN_ERR_NOMEM: return "out of memory";
    case NN_ERR_ARG: return "invalid argument";
    case NN_ERR_DEVICE: return "device unavailable";
    case NN_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}
