/* A foreign harness for one exported rms_norm case (docs/capture.md, Export): reads the case's
 * headerless float32 .bin inputs, computes RMSNorm naively, writes output_0.bin, and counts the
 * elements outside the exported per-element allowed error (the Ascend C verify_result style).
 * usage: harness CASE_DIR OUT_DIR ROWS WIDTH EPS   (compile with -DGEMMA for the (1 + w) bug) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static void *read_all(const char *dir, const char *name, size_t bytes) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    void *data = malloc(bytes);
    if (!f || fread(data, 1, bytes, f) != bytes) { fprintf(stderr, "cannot read %s\n", path); exit(2); }
    fclose(f);
    return data;
}

int main(int argc, char **argv) {
    if (argc != 6) { fprintf(stderr, "usage: %s CASE_DIR OUT_DIR ROWS WIDTH EPS\n", argv[0]); return 2; }
    const char *dir = argv[1], *out_dir = argv[2];
    long rows = atol(argv[3]), width = atol(argv[4]);
    double eps = atof(argv[5]);
    size_t n = (size_t)rows * width;
    float *x = read_all(dir, "input_x.bin", n * sizeof(float));
    float *w = read_all(dir, "input_weight.bin", width * sizeof(float));
    float *golden = read_all(dir, "golden_0.bin", n * sizeof(float));
    double *allowed = read_all(dir, "allowed_0.bin", n * sizeof(double));
    float *out = malloc(n * sizeof(float));
    long bad = 0;
    for (long r = 0; r < rows; r++) {
        double sum = 0;
        for (long c = 0; c < width; c++) sum += (double)x[r * width + c] * x[r * width + c];
        double inv = 1.0 / sqrt(sum / width + eps);
        for (long c = 0; c < width; c++) {
#ifdef GEMMA
            double weight = 1.0 + w[c];
#else
            double weight = w[c];
#endif
            size_t i = (size_t)r * width + c;
            out[i] = (float)(x[i] * inv * weight);
            if (fabs((double)out[i] - golden[i]) > allowed[i]) bad++;
        }
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/output_0.bin", out_dir);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(out, sizeof(float), n, f) != n) { fprintf(stderr, "cannot write %s\n", path); return 2; }
    fclose(f);
    printf("%ld of %zu elements outside the allowed error\n", bad, n);
    return 0;
}
