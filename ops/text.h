/* Cast to and from STRING, for Cast and CastLike (ops/unary.c); the
 * conversions are in ops/text.c. */
#ifndef NN_OPS_TEXT_H
#define NN_OPS_TEXT_H

#include "op.h"

/* Whether Cast converts `from` to `to` where one of them is STRING. */
bool nn_cast_string_supported(nn_dtype from, nn_dtype to);
/* Cast c->in[0] to c->out[0] where one of them is STRING: new strings go
 * into c->pool; a string that is not a number of the target dtype is an
 * error naming it. */
nn_status nn_cast_string(nn_call *c);

#endif
