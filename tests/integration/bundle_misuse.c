/* Calls a one-input, one-output bundle compiled for batch size 1 the ways a
 * careless or unlucky caller would, and prints what each call returns, for
 * the tests:
 *   cc -DPREFIX=digits -DUPREFIX=DIGITS -include digits.h bundle_misuse.c digits.o -lm
 *   ./misuse WEIGHTS
 * Every line is "what: STATUS [MESSAGE]". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define FN(x) CAT(PREFIX, x)
#define K(x) CAT(UPREFIX, x)

static size_t round_up(size_t n) { return (n + K(_ALIGNMENT) - 1) / K(_ALIGNMENT) * K(_ALIGNMENT); }

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  FN()* model = NULL;
  int32_t rc = FN(_create)(argv[1], &model);
  printf("create: %d %s\n", rc, model ? FN(_last_error)(model) : "");
  if (rc == K(_OK)) {
    rc = FN(_set_batch_rule)(model, "3:2,1");
    printf("bad rule: %d %s\n", rc, FN(_last_error)(model));
    rc = FN(_set_batch_rule)(model, NULL);
    printf("null rule: %d %s\n", rc, FN(_last_error)(model));
  }
  FN(_destroy)(model);

  /* The weights file in memory, with room for one byte more. */
  FILE* f = fopen(argv[1], "rb");
  if (!f || fseek(f, 0, SEEK_END) != 0) return 3;
  const long size = ftell(f);
  uint8_t* file = size > 0 ? aligned_alloc(K(_ALIGNMENT), round_up((size_t)size + 1)) : NULL;
  if (!file || fseek(f, 0, SEEK_SET) != 0 || fread(file, 1, (size_t)size, f) != (size_t)size) return 3;
  fclose(f);
  file[size] = 0;
  printf("check_weights: %d\n", FN(_check_weights)(file, (uint64_t)size));
  printf("check_weights with a byte more: %d\n", FN(_check_weights)(file, (uint64_t)size + 1));
  model = NULL;
  rc = FN(_create_from_memory)(file, (uint64_t)size + 1, &model);
  printf("create_from_memory with a byte more: %d %s\n", rc, model ? FN(_last_error)(model) : "");
  FN(_destroy)(model);

  /* The static API on one item of zeros. */
  void* arena = aligned_alloc(K(_ALIGNMENT), round_up(K(_ARENA_BYTES_B1) + 1));
  void* in = calloc(1, K(_INPUT_0_ITEM_BYTES));
  void* out = calloc(1, K(_OUTPUT_0_ITEM_BYTES));
  const void* inputs[] = {in};
  void* outputs[] = {out};
  if (!arena || !in || !out) return 3;
  printf("static run: %d\n", FN(_run_b1)(file, arena, inputs, outputs, NULL, NULL));
  free(arena);
  free(in);
  free(out);
  free(file);
  return 0;
}
