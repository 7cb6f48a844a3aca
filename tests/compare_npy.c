/* compare_npy ACTUAL EXPECTED MAX_REL_L2
 *
 * Compares two float32 tensors (.npy or .pb, read with nn_tensor_load) and
 * prints the relative L2 error ||a - b|| / ||b|| and the largest absolute
 * difference.  Exit status: 0 within MAX_REL_L2, 1 above it (or NaN),
 * 2 when the files cannot be read or do not match in dtype or shape.
 * Lets the model checks run without numpy. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "nn.h"

static int load(const char *path, nn_tensor *t) {
    nn_status st = nn_tensor_load(path, t);
    if (st != NN_OK) {
        fprintf(stderr, "compare_npy: %s: %s: %s\n", path, nn_strerror(st), nn_last_error());
        return -1;
    }
    if (t->dtype != NN_DTYPE_FLOAT) {
        fprintf(stderr, "compare_npy: %s: dtype %s, expected float\n", path, nn_dtype_name(t->dtype));
        return -1;
    }
    return 0;
}

static void print_shape(FILE *f, const nn_tensor *t) {
    fputc('(', f);
    for (int i = 0; i < t->ndim; i++)
        fprintf(f, i ? ", %lld" : "%lld", (long long)t->dims[i]);
    fputc(')', f);
}

static int same_shape(const nn_tensor *a, const nn_tensor *b) {
    if (a->ndim != b->ndim)
        return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->dims[i] != b->dims[i])
            return 0;
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: compare_npy ACTUAL EXPECTED MAX_REL_L2\n");
        return 2;
    }
    char *end;
    double limit = strtod(argv[3], &end);
    if (*end || !(limit >= 0)) {
        fprintf(stderr, "compare_npy: bad threshold '%s'\n", argv[3]);
        return 2;
    }
    nn_tensor a = {0}, b = {0};
    int rc = 2;
    if (load(argv[1], &a) || load(argv[2], &b))
        goto done;
    if (!same_shape(&a, &b)) {
        fprintf(stderr, "compare_npy: shape ");
        print_shape(stderr, &a);
        fprintf(stderr, " of %s differs from ", argv[1]);
        print_shape(stderr, &b);
        fprintf(stderr, " of %s\n", argv[2]);
        goto done;
    }
    const float *x = a.data, *y = b.data;
    int64_t n = nn_tensor_elements(&a);
    double diff2 = 0, ref2 = 0, max_abs = 0;
    int64_t nans = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)x[i] - (double)y[i];
        if (isnan(d)) {
            nans++;
            continue;
        }
        diff2 += d * d;
        ref2 += (double)y[i] * y[i];
        if (fabs(d) > max_abs)
            max_abs = fabs(d);
    }
    /* an all-zero reference only matches an all-zero result */
    double rel = ref2 > 0 ? sqrt(diff2 / ref2) : (diff2 > 0 ? INFINITY : 0);
    rc = rel <= limit && !nans ? 0 : 1;
    printf("rel_l2 %.3e max_abs %.3e elements %lld", rel, max_abs, (long long)n);
    if (nans)
        printf(" NaN %lld", (long long)nans);
    printf(" %s\n", rc ? "FAIL" : "ok");
done:
    nn_tensor_release(&a);
    nn_tensor_release(&b);
    return rc;
}
