/* Print the kernel family OpenBLAS picked for this CPU under the current
 * environment (OPENBLAS_CORETYPE overrides its detection), so a benchmark can
 * report which GEMM kernels were measured.  Built and run by tools/bench. */
#include <cblas.h>
#include <stdio.h>

int main(void) {
    printf("%s (%s, %d threads)\n", openblas_get_corename(), openblas_get_config(), openblas_get_num_threads());
    return 0;
}
