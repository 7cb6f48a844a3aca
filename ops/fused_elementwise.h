/* FusedElementwise: an internal operator (made by passes/fuse_elementwise.c,
 * never read from a model file) that evaluates a chain of elementwise ops in
 * one pass over memory.
 *
 * Its params are a straight-line program over one running float value:
 * input 0 (shaped like the output) is loaded, each step transforms the value,
 * the result is stored.  A binary step's other operand is one of the node's
 * inputs, which must lay against the output as a single run of its dims:
 * the same shape, a per-channel [C,1,...,1], a trailing vector, [N,C,1,1],
 * or a scalar. */
#ifndef NN_FUSED_ELEMENTWISE_H
#define NN_FUSED_ELEMENTWISE_H

#include <stdbool.h>

#include "op.h"

enum { NN_EW_MAX_STEPS = 16, NN_EW_MAX_INPUTS = 8 };

/* Steps that take no operand, as X(OnnxName, expression of x).  The
 * activations the epilogue knows (Relu, Clip, Sigmoid, ...) are not listed:
 * they run as NN_EW_Act, through ops/epilogue.h, like a fused epilogue. */
#define NN_EW_UNARY_OPS(X)                                                                                             \
    X(Abs, fabsf(x))                                                                                                   \
    X(Neg, -x)                                                                                                         \
    X(Exp, expf(x))                                                                                                    \
    X(Log, logf(x))                                                                                                    \
    X(Sqrt, sqrtf(x))                                                                                                  \
    X(Reciprocal, 1.0f / x)                                                                                            \
    X(Floor, floorf(x))                                                                                                \
    X(Ceil, ceilf(x))                                                                                                  \
    X(Erf, erff(x))                                                                                                    \
    X(Sin, sinf(x))                                                                                                    \
    X(Cos, cosf(x))                                                                                                    \
    X(Sign, (float)((x > 0.0f) - (x < 0.0f)))                                                                          \
    X(Softsign, x / (1.0f + fabsf(x)))                                                                                 \
    X(Softplus, x > 0.0f ? x + log1pf(expf(-x)) : log1pf(expf(x)))

/* Steps with an operand y, as X(OnnxName, expression of x and y); x is the
 * left ONNX input.  Max and Min propagate a NaN on the left like ops/binary.c. */
#define NN_EW_BINARY_OPS(X)                                                                                            \
    X(Add, x + y)                                                                                                      \
    X(Sub, x - y)                                                                                                      \
    X(Mul, x *y)                                                                                                       \
    X(Div, x / y)                                                                                                      \
    X(Max, x > y || x != x ? x : y)                                                                                    \
    X(Min, x < y || x != x ? x : y)                                                                                    \
    X(Pow, y == 2.0f ? x * x : powf(x, y))                                                                             \
    X(PRelu, x < 0.0f ? x * y : x)

typedef enum nn_ew_op {
    NN_EW_Act, /* an epilogue activation: act, alpha, beta */
#define NN_EW_ENUM(name, expr) NN_EW_##name,
    NN_EW_UNARY_OPS(NN_EW_ENUM) NN_EW_BINARY_OPS(NN_EW_ENUM)
#undef NN_EW_ENUM
    /* act(x * operand + operand2), the two operands shaped alike: a
     * BatchNormalization (and its activation) in one loop */
    NN_EW_MulAdd,
    NN_EW_OP_COUNT
} nn_ew_op;

/* steps with one operand */
static inline bool nn_ew_is_binary(int op) { return op >= NN_EW_Add && op < NN_EW_MulAdd; }

typedef struct nn_ew_step {
    int op;       /* nn_ew_op */
    int operand;  /* binary and MulAdd: the node input holding the (first) operand */
    int operand2; /* MulAdd: the node input holding the addend */
    int swap;     /* binary: 1 when the running value is the right-hand input (k - x, k / x); an int, so
                   * that the struct has no padding and a cached program is the same bytes */
    nn_act act;   /* NN_EW_Act, and MulAdd (NN_ACT_NONE for none) */
    float alpha, beta;
} nn_ew_step;

typedef struct nn_ew_program {
    int n_steps;
    nn_ew_step steps[NN_EW_MAX_STEPS];
} nn_ew_program;

#endif
