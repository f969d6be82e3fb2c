/* artifacts/plan: round trip and every validation rule the runtime relies on. */
#include <stdlib.h>
#include <string.h>

#include "artifacts/plan.h"
#include "check.h"

/* A valid plan: y = silu(x) -> arena, z = add(y, w) -> output. */
#define VALUES_OK                                                                              \
  "\"values\":[{\"name\":\"x\",\"storage\":\"input\",\"ref\":\"x\",\"dtype\":\"f32\",\"shape\":[2,4]},"  \
  "{\"name\":\"w\",\"storage\":\"weight\",\"ref\":\"w\",\"dtype\":\"bf16\",\"shape\":[2,4]},"           \
  "{\"name\":\"y\",\"storage\":\"arena\",\"dtype\":\"f32\",\"shape\":[2,4],\"offset\":256},"             \
  "{\"name\":\"z\",\"storage\":\"output\",\"ref\":\"z\",\"dtype\":\"f32\",\"shape\":[2,4]}]"
#define STEPS_OK                                                                               \
  "\"steps\":[{\"op\":\"silu\",\"in\":[0],\"out\":[2],\"block\":0},"                                  \
  "{\"op\":\"layernorm\",\"in\":[2],\"out\":[3],\"floats\":{\"eps\":1e-06},\"block\":-1}]"

static dit_status_t parse(const char *text) {
  dit_plan_t *p = NULL;
  dit_status_t s = dit_plan_parse(text, strlen(text), "plan.json", &p);
  dit_plan_free(p);
  return s;
}

/* p printed, parsed again and printed again: the same text, which is returned (caller frees). */
static char *print_stable(const dit_plan_t *p) {
  char *a = NULL, *b = NULL;
  CHECK_OK(dit_plan_to_json(p, &a));
  dit_plan_t *q = NULL;
  CHECK_OK(dit_plan_parse(a, strlen(a), "again", &q));
  if (q) CHECK_OK(dit_plan_to_json(q, &b));
  CHECK(a && b && strcmp(a, b) == 0);
  free(b);
  dit_plan_free(q);
  return a;
}

static void test_round_trip(void) {
  const char *text = "{\"format\":\"ditc-plan\",\"version\":1,\"arena_bytes\":512," VALUES_OK "," STEPS_OK "}";
  dit_plan_t *p = NULL;
  CHECK_OK(dit_plan_parse(text, strlen(text), "plan.json", &p));
  if (!p) return;
  CHECK_EQ_INT(p->n_values, 4);
  CHECK_EQ_INT(p->n_steps, 2);
  CHECK_EQ_INT(p->values[1].dtype, DIT_BF16);
  CHECK_EQ_INT(p->values[1].nbytes, 16);
  CHECK_EQ_INT(p->values[2].offset, 256);
  CHECK_EQ_INT(p->steps[1].kind, DIT_OP_LAYERNORM);
  const dit_attr_t *eps = dit_attrs_find(&p->steps[1].attrs, "eps");
  CHECK(eps && eps->is_float && eps->f == 1e-6);
  char *a = print_stable(p), *b = NULL;
  dit_plan_t *q = NULL;
  CHECK_OK(dit_plan_parse(a, strlen(a), "again", &q));
  if (!q) return;
  /* An integral float attribute stays a float. */
  dit_attrs_set_float(&q->steps[1].attrs, "theta", 10000.0);
  dit_attrs_set_int(&q->steps[1].attrs, "heads", 3);
  free(b);
  CHECK_OK(dit_plan_to_json(q, &b));
  dit_plan_t *r = NULL;
  CHECK_OK(dit_plan_parse(b, strlen(b), "attrs", &r));
  if (r) {
    const dit_attr_t *th = dit_attrs_find(&r->steps[1].attrs, "theta"), *h = dit_attrs_find(&r->steps[1].attrs, "heads");
    CHECK(th && th->is_float && th->f == 10000.0);
    CHECK(h && !h->is_float && h->i == 3);
  }
  free(a);
  free(b);
  dit_plan_free(p);
  dit_plan_free(q);
  dit_plan_free(r);
}

static void test_rejections(void) {
#define HEAD "{\"format\":\"ditc-plan\",\"version\":1,\"arena_bytes\":512,"
  CHECK_ERR(parse("{"), INVALID_ARGUMENT, "not valid JSON");
  CHECK_ERR(parse("[]"), INVALID_ARGUMENT, "not a JSON object");
  CHECK_ERR(parse("{\"format\":\"other\",\"version\":1}"), INVALID_ARGUMENT, "expected \"ditc-plan\"");
  CHECK_ERR(parse("{\"format\":\"ditc-plan\",\"version\":2,\"arena_bytes\":0,\"values\":[],\"steps\":[]}"),
            FAILED_PRECONDITION, "plan version 1, found 2");
  /* arena value beyond the arena */
  CHECK_ERR(parse(HEAD "\"values\":[{\"name\":\"y\",\"storage\":\"arena\",\"dtype\":\"f32\",\"shape\":[200],\"offset\":0}],\"steps\":[]}"),
            OUT_OF_RANGE, "outside the arena of 512");
  CHECK_ERR(parse(HEAD "\"values\":[{\"name\":\"y\",\"storage\":\"arena\",\"dtype\":\"f32\",\"shape\":[1],\"offset\":600}],\"steps\":[]}"),
            OUT_OF_RANGE, "field 'offset' = 600");
  CHECK_ERR(parse(HEAD "\"values\":[{\"name\":\"y\",\"storage\":\"disk\",\"dtype\":\"f32\",\"shape\":[1]}],\"steps\":[]}"),
            INVALID_ARGUMENT, "unknown storage 'disk'");
  CHECK_ERR(parse(HEAD "\"values\":[{\"name\":\"y\",\"storage\":\"input\",\"dtype\":\"f64\",\"shape\":[1],\"ref\":\"y\"}],\"steps\":[]}"),
            INVALID_ARGUMENT, "unknown dtype 'f64'");
  CHECK_ERR(parse(HEAD "\"values\":[{\"name\":\"y\",\"storage\":\"input\",\"dtype\":\"f32\",\"shape\":[1]}],\"steps\":[]}"),
            NOT_FOUND, "missing field 'ref'");
  CHECK_ERR(parse(HEAD "\"values\":[{\"name\":\"y\",\"storage\":\"input\",\"ref\":\"y\",\"dtype\":\"f32\",\"shape\":[1,2,3,4,5,6,7,8,9]}],\"steps\":[]}"),
            OUT_OF_RANGE, "rank 9 exceeds 8");
  CHECK_ERR(parse(HEAD "\"values\":[{\"name\":\"y\",\"storage\":\"input\",\"ref\":\"y\",\"dtype\":\"f32\",\"shape\":[-1]}],\"steps\":[]}"),
            OUT_OF_RANGE, "shape[0]");
  /* steps */
  CHECK_ERR(parse(HEAD VALUES_OK ",\"steps\":[{\"op\":\"conv9d\",\"in\":[0],\"out\":[2]}]}"), INVALID_ARGUMENT, "unknown op 'conv9d'");
  CHECK_ERR(parse(HEAD VALUES_OK ",\"steps\":[{\"op\":\"silu\",\"in\":[7],\"out\":[2]}]}"), OUT_OF_RANGE, "in[0] is not a value index");
  CHECK_ERR(parse(HEAD VALUES_OK ",\"steps\":[{\"op\":\"silu\",\"in\":[0,1],\"out\":[2]}]}"), INVALID_ARGUMENT, "silu with 2 inputs");
  CHECK_ERR(parse(HEAD VALUES_OK ",\"steps\":[{\"op\":\"silu\",\"in\":[2],\"out\":[3]}]}"), INVALID_ARGUMENT, "reads 'y' before any step writes it");
  CHECK_ERR(parse(HEAD VALUES_OK ",\"steps\":[{\"op\":\"silu\",\"in\":[0],\"out\":[1]}]}"), INVALID_ARGUMENT, "writes weight 'w'");
  CHECK_ERR(parse(HEAD VALUES_OK ",\"steps\":[{\"op\":\"silu\",\"in\":[0],\"out\":[3]},{\"op\":\"silu\",\"in\":[0],\"out\":[3]}]}"),
            INVALID_ARGUMENT, "written a second time");
  CHECK_ERR(parse(HEAD VALUES_OK ",\"steps\":[{\"op\":\"silu\",\"in\":[0],\"out\":[2]}]}"), INVALID_ARGUMENT, "output 'z' is never written");
  CHECK_ERR(parse(HEAD VALUES_OK ",\"steps\":[{\"op\":\"silu\",\"in\":[0],\"out\":[3],\"ints\":{\"k\":1.5}}]}"),
            INVALID_ARGUMENT, "integer attribute 'k' = 1.5");
  /* an op writing over its own arena input */
  CHECK_ERR(parse(HEAD "\"values\":[{\"name\":\"x\",\"storage\":\"input\",\"ref\":\"x\",\"dtype\":\"f32\",\"shape\":[4]},"
                  "{\"name\":\"a\",\"storage\":\"arena\",\"dtype\":\"f32\",\"shape\":[4],\"offset\":0},"
                  "{\"name\":\"b\",\"storage\":\"arena\",\"dtype\":\"f32\",\"shape\":[4],\"offset\":8}],"
                  "\"steps\":[{\"op\":\"silu\",\"in\":[0],\"out\":[1]},{\"op\":\"silu\",\"in\":[1],\"out\":[2]}]}"),
            INVALID_ARGUMENT, "overlaps input 'a'");
}

/* Tensor maps of a kernel: parsed, printed back, and refused when they could mislead a
 * runtime (an argument the step does not have, a box past the copy engine's limits, a swizzle
 * it does not know). */
static void test_tensor_maps(void) {
#define KSTEP(TMAPS)                                                                                       \
  HEAD VALUES_OK ",\"steps\":[{\"op\":\"silu\",\"in\":[0],\"out\":[2]},{\"op\":\"add\",\"in\":[2,1],\"out\":[3]," \
  "\"kernel\":{\"cubin\":\"0123456789abcdef0123456789abcdef\",\"ptx\":\"\",\"entry\":\"dit_kernel\","              \
  "\"grid\":[1,1,1],\"block\":[128,1,1],\"smem\":0" TMAPS "}}]}"
  const char *ok = KSTEP(",\"tmaps\":[{\"arg\":1,\"box\":[64,128],\"swizzle\":128},{\"arg\":2,\"box\":[8,1],\"swizzle\":0}]");
  dit_plan_t *p = NULL;
  CHECK_OK(dit_plan_parse(ok, strlen(ok), "plan.json", &p));
  if (p) {
    const dit_plan_kernel_t *k = &p->steps[1].kernel;
    CHECK_EQ_INT(k->n_tmaps, 2);
    CHECK_EQ_INT(k->tmaps[0].arg, 1);
    CHECK_EQ_INT(k->tmaps[0].box[0], 64);
    CHECK_EQ_INT(k->tmaps[0].box[1], 128);
    CHECK_EQ_INT(k->tmaps[0].swizzle, 128);
    CHECK_EQ_INT(k->tmaps[1].arg, 2);
    CHECK_EQ_INT(k->ptx[0], 0);
    char *a = print_stable(p);
    CHECK(a && strstr(a, "\"tmaps\":[{\"arg\":1,\"box\":[64,128],\"swizzle\":128}"));
    free(a);
  }
  dit_plan_free(p);
  /* add has 1 output and 2 inputs: arguments 0..2 */
  CHECK_ERR(parse(KSTEP(",\"tmaps\":[{\"arg\":3,\"box\":[64,128],\"swizzle\":128}]")), OUT_OF_RANGE,
            "kernel tmaps[0]: field 'arg' = 3, expected an integer in 0..2");
  CHECK_ERR(parse(KSTEP(",\"tmaps\":[{\"arg\":1,\"box\":[64,257],\"swizzle\":128}]")), OUT_OF_RANGE, "box[1] outside 1..256");
  CHECK_ERR(parse(KSTEP(",\"tmaps\":[{\"arg\":1,\"box\":[0,8],\"swizzle\":128}]")), OUT_OF_RANGE, "box[0] outside 1..256");
  CHECK_ERR(parse(KSTEP(",\"tmaps\":[{\"arg\":1,\"box\":[64],\"swizzle\":128}]")), INVALID_ARGUMENT, "'box' must be an array of 2");
  CHECK_ERR(parse(KSTEP(",\"tmaps\":[{\"arg\":1,\"box\":[64,8],\"swizzle\":16}]")), OUT_OF_RANGE, "swizzle 16, expected 0, 32, 64 or 128");
  CHECK_ERR(parse(KSTEP(",\"tmaps\":[{\"arg\":1,\"box\":[64,8]}]")), NOT_FOUND, "missing field 'swizzle'");
  CHECK_ERR(parse(KSTEP(",\"tmaps\":[]")), INVALID_ARGUMENT, "array of 1..4 tensor maps");
  CHECK_ERR(parse(KSTEP(",\"tmaps\":{}")), INVALID_ARGUMENT, "array of 1..4 tensor maps");
  CHECK_ERR(parse(KSTEP(",\"tmaps\":[1]")), INVALID_ARGUMENT, "kernel tmaps[0] is not an object");
#undef KSTEP
}

static void test_bindings(void) {
  const char *text = "{\"format\":\"ditc-plan\",\"version\":1,\"arena_bytes\":512," VALUES_OK "," STEPS_OK "}";
  dit_plan_t *p = NULL;
  CHECK_OK(dit_plan_parse(text, strlen(text), "plan.json", &p));
  if (!p) return;
  dit_manifest_t m;
  memset(&m, 0, sizeof m);
  dit_manifest_io_t in = {"x", DIT_F32, 2, {2, 4}}, out = {"z", DIT_F32, 2, {2, 4}};
  m.io_inputs = &in;
  m.n_inputs = 1;
  m.io_outputs = &out;
  m.n_outputs = 1;
  dit_manifest_tensor_t t = {"w", DIT_BF16, 2, {2, 4}, 0, 16};
  dit_manifest_weights_t w;
  memset(&w, 0, sizeof w);
  strcpy(w.blob, "00000000000000000000000000000000");
  w.tensors = &t;
  w.n_tensors = 1;
  CHECK_OK(dit_plan_check_bindings(p, &m, &w, "plan"));
  t.dtype = DIT_F32;
  CHECK_ERR(dit_plan_check_bindings(p, &m, &w, "plan"), INVALID_ARGUMENT, "weight 'w' is bf16 rank 2 in the plan but f32");
  t.dtype = DIT_BF16;
  t.name = "other";
  CHECK_ERR(dit_plan_check_bindings(p, &m, &w, "plan"), NOT_FOUND, "weight 'w' is not in weights blob");
  t.name = "w";
  in.dims[1] = 5;
  CHECK_ERR(dit_plan_check_bindings(p, &m, &w, "plan"), INVALID_ARGUMENT, "input 'x' differs");
  in.dims[1] = 4;
  m.n_inputs = 0;
  CHECK_ERR(dit_plan_check_bindings(p, &m, &w, "plan"), NOT_FOUND, "input 'x' is not in the manifest");
  dit_plan_free(p);
}

int main(void) {
  test_round_trip();
  test_rejections();
  test_tensor_maps();
  test_bindings();
  return check_summary("test_plan");
}
