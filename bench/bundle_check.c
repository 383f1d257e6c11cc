/* Runs a frozen bundle once on inputs read from raw files and writes its
 * outputs as raw files, for bench/check_bundles.py to compare with the JIT.
 * Built with the item sizes the header names:
 *   cc -O2 -DPREFIX=m -DUPREFIX=M -include m.h bundle_check.c m.o -lm
 *   ./check WEIGHTS BATCH IN_0 ... IN_{n-1} OUT_0 ... OUT_{m-1}
 * Each input file holds BATCH items; each output file gets BATCH items. */
#include <stdio.h>
#include <stdlib.h>

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define FN(x) CAT(PREFIX, x)
#define K(x) CAT(UPREFIX, x)

static void* read_all(const char* path, long* size) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  *size = ftell(f);
  fseek(f, 0, SEEK_SET);
  void* data = malloc(*size ? (size_t)*size : 1);
  if (data && fread(data, 1, (size_t)*size, f) != (size_t)*size) {
    free(data);
    data = NULL;
  }
  fclose(f);
  return data;
}

int main(int argc, char** argv) {
  enum { IN = K(_NUM_INPUTS), OUT = K(_NUM_OUTPUTS) };
  if (argc != 3 + IN + OUT) {
    fprintf(stderr, "usage: %s WEIGHTS BATCH %d input file(s) %d output file(s)\n", argv[0], IN, OUT);
    return 2;
  }
  const long batch = atol(argv[2]);
  static const long out_bytes[] = OUTPUT_ITEM_BYTES; /* from the header, by the script */
  FN()* model = NULL;
  if (FN(_create)(argv[1], &model) != K(_OK)) {
    fprintf(stderr, "create: %s\n", FN(_last_error)(model));
    return 1;
  }
  const void* inputs[IN];
  void* outputs[OUT];
  for (int i = 0; i < IN; ++i) {
    long size = 0;
    if (!(inputs[i] = read_all(argv[3 + i], &size))) {
      fprintf(stderr, "cannot read %s\n", argv[3 + i]);
      return 1;
    }
  }
  for (int o = 0; o < OUT; ++o) outputs[o] = malloc((size_t)(batch * out_bytes[o]) + 1);
  if (FN(_run)(model, batch, inputs, outputs) != K(_OK)) {
    fprintf(stderr, "run: %s\n", FN(_last_error)(model));
    return 1;
  }
  for (int o = 0; o < OUT; ++o) {
    FILE* f = fopen(argv[3 + IN + o], "wb");
    if (!f || fwrite(outputs[o], 1, (size_t)(batch * out_bytes[o]), f) != (size_t)(batch * out_bytes[o])) return 1;
    fclose(f);
  }
  FN(_destroy)(model);
  return 0;
}
