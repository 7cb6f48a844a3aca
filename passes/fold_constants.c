/* Constant folding: evaluate, at load time and with the engine's own CPU
 * kernels, every node whose inputs are all known.  Runs after the batch is
 * bound, so Shape of an activation is a constant too and PyTorch's
 * Shape -> Gather -> Unsqueeze -> Concat -> Reshape chains fold away.
 * Shape inference walks the graph in the same step, since a folded value
 * is what lets a later node's shape become static. */
#include "pass.h"

static nn_status fold_constants(nn_model *m, int *rewrites) { return nn_infer_graph(m, true, rewrites); }

const nn_pass nn_pass_fold_constants = {"fold_constants", "evaluate nodes whose inputs are all constant",
                                        fold_constants};
