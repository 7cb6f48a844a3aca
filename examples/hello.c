/* hello.c: load an ONNX image classifier with nn, run one input, print the
 * top class.
 *
 *   cc hello.c -o hello $(pkg-config --cflags --libs nn)
 *   ./hello models/mobilenetv2.onnx
 */
#include <nn.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s MODEL.onnx\n", argv[0]);
        return 2;
    }
    /* CPU, batch 1, every core, optimizer and plan cache on */
    nn_options opt = nn_options_default();
    nn_model *model;
    if (nn_load(argv[1], &opt, &model) != NN_OK) {
        fprintf(stderr, "hello: %s\n", nn_last_error());
        return 1;
    }

    /* the first input's name, type and shape (e.g. float 1x3x224x224) */
    const char *name;
    nn_tensor in;
    nn_input_info(model, 0, &name, &in);
    if (in.dtype != NN_DTYPE_FLOAT) {
        fprintf(stderr, "hello: input '%s' is not float32\n", name);
        nn_free(model);
        return 1;
    }
    size_t n = (size_t)nn_tensor_elements(&in);
    float *pixels = malloc(n * sizeof *pixels);
    if (!pixels) return 1;
    for (size_t i = 0; i < n; i++) /* a real program puts its preprocessed image here */
        pixels[i] = (float)(i % 256) / 255.0f - 0.5f;
    in.data = pixels;

    /* outputs are allocated by the library: release them */
    nn_tensor out;
    if (nn_predict(model, &in, 1, &out, 1) != NN_OK) {
        fprintf(stderr, "hello: %s\n", nn_last_error());
        free(pixels);
        nn_free(model);
        return 1;
    }
    const float *scores = out.data;
    int64_t classes = nn_tensor_elements(&out), best = 0;
    for (int64_t c = 1; c < classes; c++)
        if (scores[c] > scores[best]) best = c;
    printf("%s: %lld scores, top class %lld (%.3f)\n", name, (long long)classes, (long long)best, scores[best]);

    nn_tensor_release(&out);
    free(pixels);
    nn_free(model);
    return 0;
}
