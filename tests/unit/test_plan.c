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
  CHECK_ERR(parse("[]"), INVALID_ARGUMENT, "plan.json: expected a JSON object at the top level, found an array");
  CHECK_ERR(parse("{\"format\":\"other\",\"version\":1}"), INVALID_ARGUMENT, "plan.json: field 'format': expected \"ditc-plan\", found \"other\"");
  CHECK_ERR(parse("{\"format\":\"ditc-plan\",\"version\":5,\"arena_bytes\":0,\"values\":[],\"steps\":[]}"),
            FAILED_PRECONDITION, "field 'version': this build reads plan versions 1..4, found 5");
  CHECK_ERR(parse("{\"format\":\"ditc-plan\",\"version\":1,\"arena_bytes\":0,\"values\":[],\"steps\":[],\"a\":1,\"a\":2}"),
            INVALID_ARGUMENT, "duplicate key \"a\"");
  /* arena value beyond the arena */
  CHECK_ERR(parse(HEAD "\"values\":[{\"name\":\"y\",\"storage\":\"arena\",\"dtype\":\"f32\",\"shape\":[200],\"offset\":0}],\"steps\":[]}"),
            OUT_OF_RANGE, "field 'values[0]': \"y\": bytes 0..800 lie outside the arena of 512 bytes");
  CHECK_ERR(parse(HEAD "\"values\":[{\"name\":\"y\",\"storage\":\"arena\",\"dtype\":\"f32\",\"shape\":[1],\"offset\":600}],\"steps\":[]}"),
            OUT_OF_RANGE, "field 'values[0].offset': expected an integer in [0, 512], found 600");
  CHECK_ERR(parse(HEAD "\"values\":[{\"name\":\"y\",\"storage\":\"disk\",\"dtype\":\"f32\",\"shape\":[1]}],\"steps\":[]}"),
            INVALID_ARGUMENT, "field 'values[0].storage': expected one of arena, weight, input, output, found \"disk\"");
  CHECK_ERR(parse(HEAD "\"values\":[{\"name\":\"y\",\"storage\":\"input\",\"dtype\":\"f64\",\"shape\":[1],\"ref\":\"y\"}],\"steps\":[]}"),
            INVALID_ARGUMENT, "field 'values[0].dtype': expected one of f32, bf16, f16, i64, i32, found \"f64\"");
  CHECK_ERR(parse(HEAD "\"values\":[{\"name\":\"y\",\"storage\":\"input\",\"dtype\":\"f32\",\"shape\":[1]}],\"steps\":[]}"),
            NOT_FOUND, "field 'values[0].ref': missing");
  CHECK_ERR(parse(HEAD "\"values\":[{\"name\":\"y\",\"storage\":\"input\",\"ref\":\"y\",\"dtype\":\"f32\",\"shape\":[1,2,3,4,5,6,7,8,9]}],\"steps\":[]}"),
            OUT_OF_RANGE, "field 'values[0].shape': rank 9 exceeds the maximum 8");
  CHECK_ERR(parse(HEAD "\"values\":[{\"name\":\"y\",\"storage\":\"input\",\"ref\":\"y\",\"dtype\":\"f32\",\"shape\":[-1]}],\"steps\":[]}"),
            OUT_OF_RANGE, "field 'values[0].shape[0]': expected an integer in [0, 1099511627776], found -1");
  /* steps */
  CHECK_ERR(parse(HEAD VALUES_OK ",\"steps\":[{\"op\":\"conv9d\",\"in\":[0],\"out\":[2]}]}"), INVALID_ARGUMENT, "field 'steps[0].op': unknown op \"conv9d\"");
  CHECK_ERR(parse(HEAD VALUES_OK ",\"steps\":[{\"op\":\"silu\",\"in\":[7],\"out\":[2]}]}"), OUT_OF_RANGE,
            "field 'steps[0].in[0]': expected a value index in [0, 4), found 7");
  CHECK_ERR(parse(HEAD VALUES_OK ",\"steps\":[{\"op\":\"silu\",\"in\":[0,1],\"out\":[2]}]}"), INVALID_ARGUMENT,
            "field 'steps[0]': silu with 2 inputs and 1 outputs, expected 1..1 and 1..1");
  CHECK_ERR(parse(HEAD VALUES_OK ",\"steps\":[{\"op\":\"silu\",\"in\":[2],\"out\":[3]}]}"), INVALID_ARGUMENT,
            "field 'steps[0].in[0]': reads values[2] \"y\" before any step writes it");
  CHECK_ERR(parse(HEAD VALUES_OK ",\"steps\":[{\"op\":\"silu\",\"in\":[0],\"out\":[1]}]}"), INVALID_ARGUMENT, "field 'steps[0].out[0]': writes weight values[1] \"w\"");
  CHECK_ERR(parse(HEAD VALUES_OK ",\"steps\":[{\"op\":\"silu\",\"in\":[0],\"out\":[3]},{\"op\":\"silu\",\"in\":[0],\"out\":[3]}]}"),
            INVALID_ARGUMENT, "field 'steps[1].out[0]': values[3] \"z\" written a second time");
  CHECK_ERR(parse(HEAD VALUES_OK ",\"steps\":[{\"op\":\"silu\",\"in\":[0],\"out\":[2]}]}"), INVALID_ARGUMENT, "field 'values[3]': output \"z\" is never written");
  CHECK_ERR(parse(HEAD VALUES_OK ",\"steps\":[{\"op\":\"silu\",\"in\":[0],\"out\":[3],\"ints\":{\"k\":1.5}}]}"),
            INVALID_ARGUMENT, "field 'steps[0].ints.k': expected an integer, found 1.5");
  /* an op writing over its own arena input */
  CHECK_ERR(parse(HEAD "\"values\":[{\"name\":\"x\",\"storage\":\"input\",\"ref\":\"x\",\"dtype\":\"f32\",\"shape\":[4]},"
                  "{\"name\":\"a\",\"storage\":\"arena\",\"dtype\":\"f32\",\"shape\":[4],\"offset\":0},"
                  "{\"name\":\"b\",\"storage\":\"arena\",\"dtype\":\"f32\",\"shape\":[4],\"offset\":8}],"
                  "\"steps\":[{\"op\":\"silu\",\"in\":[0],\"out\":[1]},{\"op\":\"silu\",\"in\":[1],\"out\":[2]}]}"),
            INVALID_ARGUMENT, "field 'steps[1].out[0]': output \"b\" overlaps input \"a\" (in[0]) in the arena");
}

/* Tensor maps of a kernel: parsed, printed back, and refused when they could mislead a
 * runtime (an argument the step does not have, a box past the copy engine's limits, a swizzle
 * it does not know). */
static void test_tensor_maps(void) {
#define KSTEP(TMAPS)                                                                                       \
  HEAD VALUES_OK ",\"steps\":[{\"op\":\"silu\",\"in\":[0],\"out\":[2]},{\"op\":\"add\",\"in\":[2,1],\"out\":[3]," \
  "\"kernel\":{\"cubin\":\"0123456789abcdef0123456789abcdef\",\"ptx\":\"\",\"entry\":\"dit_kernel\","              \
  "\"grid\":[1,1,1],\"block\":[128,1,1],\"smem\":0" TMAPS "}}]}"
  const char *ok = KSTEP(",\"tmaps\":[{\"arg\":1,\"box\":[64,128],\"swizzle\":128},{\"arg\":2,\"box\":[32,16,8,1,1],\"swizzle\":64}]");
  dit_plan_t *p = NULL;
  CHECK_OK(dit_plan_parse(ok, strlen(ok), "plan.json", &p));
  if (p) {
    const dit_plan_kernel_t *k = &p->steps[1].kernel;
    CHECK_EQ_INT(k->n_tmaps, 2);
    CHECK_EQ_INT(k->tmaps[0].arg, 1);
    CHECK_EQ_INT(k->tmaps[0].box[0], 64);
    CHECK_EQ_INT(k->tmaps[0].box[1], 128);
    CHECK_EQ_INT(k->tmaps[0].swizzle, 128);
    CHECK_EQ_INT(k->tmaps[0].rank, 2);
    CHECK_EQ_INT(k->tmaps[1].arg, 2);
    CHECK_EQ_INT(k->tmaps[1].rank, 5);
    CHECK_EQ_INT(k->tmaps[1].box[2], 8);
    CHECK_EQ_INT(k->ptx[0], 0);
    char *a = print_stable(p);
    CHECK(a && strstr(a, "\"tmaps\":[{\"arg\":1,\"box\":[64,128],\"swizzle\":128},{\"arg\":2,\"box\":[32,16,8,1,1],\"swizzle\":64}]"));
    free(a);
  }
  dit_plan_free(p);
  /* add has 1 output and 2 inputs: arguments 0..2 */
  CHECK_ERR(parse(KSTEP(",\"tmaps\":[{\"arg\":3,\"box\":[64,128],\"swizzle\":128}]")), OUT_OF_RANGE,
            "field 'steps[1].kernel.tmaps[0].arg': expected an integer in [0, 2], found 3");
  CHECK_ERR(parse(KSTEP(",\"tmaps\":[{\"arg\":1,\"box\":[64,257],\"swizzle\":128}]")), OUT_OF_RANGE,
            "field 'steps[1].kernel.tmaps[0].box[1]': expected an integer in [1, 256], found 257");
  CHECK_ERR(parse(KSTEP(",\"tmaps\":[{\"arg\":1,\"box\":[0,8],\"swizzle\":128}]")), OUT_OF_RANGE,
            "field 'steps[1].kernel.tmaps[0].box[0]': expected an integer in [1, 256], found 0");
  CHECK_ERR(parse(KSTEP(",\"tmaps\":[{\"arg\":1,\"box\":[64],\"swizzle\":128}]")), INVALID_ARGUMENT,
            "field 'steps[1].kernel.tmaps[0].box': expected 2 integers (elements of a row, rows) or 3 to 5 (the value's dims), found 1 entries");
  CHECK_ERR(parse(KSTEP(",\"tmaps\":[{\"arg\":1,\"box\":[64,1,1,1,8,8],\"swizzle\":128}]")), INVALID_ARGUMENT,
            "field 'steps[1].kernel.tmaps[0].box': expected 2 integers (elements of a row, rows) or 3 to 5 (the value's dims), found 6 entries");
  CHECK_ERR(parse(KSTEP(",\"tmaps\":[{\"arg\":1,\"box\":[64,8],\"swizzle\":16}]")), OUT_OF_RANGE,
            "field 'steps[1].kernel.tmaps[0].swizzle': expected 0, 32, 64 or 128 bytes, found 16");
  CHECK_ERR(parse(KSTEP(",\"tmaps\":[{\"arg\":1,\"box\":[64,8]}]")), NOT_FOUND, "field 'steps[1].kernel.tmaps[0].swizzle': missing");
  CHECK_ERR(parse(KSTEP(",\"tmaps\":[]")), INVALID_ARGUMENT, "field 'steps[1].kernel.tmaps': expected 1..4 tensor maps, found none");
  CHECK_ERR(parse(KSTEP(",\"tmaps\":{}")), INVALID_ARGUMENT, "field 'steps[1].kernel.tmaps': expected an array, found an object");
  CHECK_ERR(parse(KSTEP(",\"tmaps\":[1]")), INVALID_ARGUMENT, "field 'steps[1].kernel.tmaps[0]': expected an object, found a number");
#undef KSTEP
}

/* Refusals name the field they are about by its full path, for every part of the plan. */
static void test_field_paths(void) {
#define KERNEL_OK                                                                                         \
  "\"kernel\":{\"cubin\":\"0123456789abcdef0123456789abcdef\",\"ptx\":\"\",\"entry\":\"dit_kernel\","      \
  "\"grid\":[1,1,1],\"block\":[128,1,1],\"smem\":0}"
#define STEP0 "{\"op\":\"silu\",\"in\":[0],\"out\":[2]}"
#define STEPS(S1) HEAD VALUES_OK ",\"steps\":[" STEP0 "," S1 "]}"
#define ADD(REST) "{\"op\":\"add\",\"in\":[2,1],\"out\":[3]" REST "}"
  /* the kernel line used below is accepted as it stands */
  CHECK_OK(parse(STEPS(ADD("," KERNEL_OK))));
  /* values */
  CHECK_ERR(parse(HEAD "\"values\":[{\"name\":\"y\",\"storage\":3,\"dtype\":\"f32\",\"shape\":[1],\"ref\":\"y\"}],\"steps\":[]}"),
            INVALID_ARGUMENT, "plan.json: field 'values[0].storage': expected a string, found a number");
  CHECK_ERR(parse(HEAD "\"values\":[{\"name\":\"y\",\"storage\":\"Arena\",\"dtype\":\"f32\",\"shape\":[1],\"offset\":0}],\"steps\":[]}"),
            INVALID_ARGUMENT, "field 'values[0].storage': expected one of arena, weight, input, output, found \"Arena\"");
  CHECK_ERR(parse(HEAD "\"values\":[{\"name\":\"y\",\"storage\":\"arena\",\"ref\":\"y\",\"dtype\":\"f32\",\"shape\":[1],\"offset\":0}],\"steps\":[]}"),
            INVALID_ARGUMENT, "field 'values[0].ref': an arena value has no ref");
  CHECK_ERR(parse(HEAD "\"values\":[{\"name\":\"y\",\"storage\":\"weight\",\"ref\":\"y\",\"dtype\":\"f32\",\"shape\":[1],\"offset\":0}],\"steps\":[]}"),
            INVALID_ARGUMENT, "field 'values[0].offset': only arena values have an offset (this one is weight)");
  CHECK_ERR(parse(HEAD "\"values\":[{\"name\":\"y\",\"storage\":\"input\",\"ref\":\"\",\"dtype\":\"f32\",\"shape\":[1]}],\"steps\":[]}"),
            INVALID_ARGUMENT, "field 'values[0].ref': must not be empty");
  CHECK_ERR(parse(HEAD "\"values\":[{\"name\":\"y\",\"storage\":\"input\",\"ref\":\"y\",\"dtype\":\"f32\",\"shape\":[2,1.5]}],\"steps\":[]}"),
            INVALID_ARGUMENT, "field 'values[0].shape[1]': expected an integer, found 1.5");
  CHECK_ERR(parse(HEAD "\"values\":[{\"name\":\"y\",\"storage\":\"input\",\"ref\":\"y\",\"dtype\":\"f32\","
                  "\"shape\":[1099511627776,1099511627776]}],\"steps\":[]}"),
            OUT_OF_RANGE, "field 'values[0].shape': more than 2^60 elements");
  CHECK_ERR(parse(HEAD "\"values\":{},\"steps\":[]}"), INVALID_ARGUMENT, "field 'values': expected an array, found an object");
  CHECK_ERR(parse(HEAD "\"values\":[]}"), NOT_FOUND, "field 'steps': missing");
  CHECK_ERR(parse(HEAD "\"values\":[{\"name\":\"x\",\"storage\":\"input\",\"ref\":\"x\",\"dtype\":\"f32\",\"shape\":[1]},"
                  "{\"name\":\"x2\",\"storage\":\"input\",\"ref\":\"x\",\"dtype\":\"f32\",\"shape\":[1]}],\"steps\":[]}"),
            INVALID_ARGUMENT, "field 'values[1].ref': input \"x\" listed twice (also values[0])");
  /* step inputs and outputs out of range */
  CHECK_ERR(parse(HEAD VALUES_OK ",\"steps\":[" STEP0 ",{\"op\":\"add\",\"in\":[2,4],\"out\":[3]}]}"), OUT_OF_RANGE,
            "field 'steps[1].in[1]': expected a value index in [0, 4), found 4");
  CHECK_ERR(parse(HEAD VALUES_OK ",\"steps\":[" STEP0 ",{\"op\":\"add\",\"in\":[2,-1],\"out\":[3]}]}"), OUT_OF_RANGE,
            "field 'steps[1].in[1]': expected a value index in [0, 4), found -1");
  CHECK_ERR(parse(HEAD VALUES_OK ",\"steps\":[" STEP0 ",{\"op\":\"add\",\"in\":[2,0.5],\"out\":[3]}]}"), OUT_OF_RANGE,
            "field 'steps[1].in[1]': expected a value index in [0, 4), found 0.5");
  CHECK_ERR(parse(HEAD VALUES_OK ",\"steps\":[" STEP0 ",{\"op\":\"add\",\"in\":[2,\"1\"],\"out\":[3]}]}"), INVALID_ARGUMENT,
            "field 'steps[1].in[1]': expected a number, found a string");
  CHECK_ERR(parse(HEAD VALUES_OK ",\"steps\":[" STEP0 ",{\"op\":\"add\",\"in\":[2,1,0,0,0,0,0,0],\"out\":[3]}]}"), OUT_OF_RANGE,
            "field 'steps[1].in': more than 7 entries");
  CHECK_ERR(parse(HEAD VALUES_OK ",\"steps\":[" STEP0 ",{\"op\":\"add\",\"in\":[2,1],\"out\":[9007199254740993]}]}"), OUT_OF_RANGE,
            "field 'steps[1].out[0]': expected a value index in [0, 4)");
  CHECK_ERR(parse(HEAD VALUES_OK ",\"steps\":[{\"op\":\"attention\",\"in\":[0,0,0],\"out\":[3,3]}]}"), INVALID_ARGUMENT,
            "field 'steps[0].out[1]': the same value written twice (values[3] \"z\", also out[0])");
  CHECK_ERR(parse(STEPS(ADD(",\"block\":1000001"))), OUT_OF_RANGE, "field 'steps[1].block': expected an integer in [-1, 1000000], found 1000001");
  CHECK_ERR(parse(STEPS(ADD(",\"block\":-2"))), OUT_OF_RANGE, "field 'steps[1].block': expected an integer in [-1, 1000000], found -2");
  /* attributes */
  CHECK_ERR(parse(STEPS(ADD(",\"ints\":{\"k\":1},\"floats\":{\"k\":2}"))), INVALID_ARGUMENT,
            "field 'steps[1].floats.k': attribute 'k' given twice");
  CHECK_ERR(parse(STEPS(ADD(",\"ints\":{\"a_key_of_16bytes\":1}"))), OUT_OF_RANGE,
            "field 'steps[1].ints.a_key_of_16bytes': attribute key of 16 bytes, expected 1..15");
  CHECK_ERR(parse(STEPS(ADD(",\"ints\":{\"\":1}"))), OUT_OF_RANGE, "attribute key of 0 bytes, expected 1..15");
  CHECK_ERR(parse(STEPS(ADD(",\"ints\":{\"a\":1,\"b\":1,\"c\":1,\"d\":1,\"e\":1,\"f\":1},\"floats\":{\"g\":1,\"h\":1,\"i\":1,\"j\":1,\"k\":1}"))),
            OUT_OF_RANGE, "field 'steps[1].floats.k': more than 10 attributes in the step");
  CHECK_ERR(parse(STEPS(ADD(",\"floats\":{\"eps\":\"1e-6\"}"))), INVALID_ARGUMENT, "field 'steps[1].floats.eps': expected a number, found a string");
  CHECK_ERR(parse(STEPS(ADD(",\"ints\":{\"n\":9007199254740994}"))), OUT_OF_RANGE,
            "field 'steps[1].ints.n': expected an integer in [-9007199254740992, 9007199254740992], found 9007199254740994");
  CHECK_ERR(parse(STEPS(ADD(",\"ints\":[1]"))), INVALID_ARGUMENT, "field 'steps[1].ints': expected an object, found an array");
  /* a kernel with a bad grid, block or module */
#define K(FIELD, VALUE) ADD(",\"kernel\":{\"cubin\":\"0123456789abcdef0123456789abcdef\",\"ptx\":\"\",\"entry\":\"dit_kernel\"," \
                            "\"grid\":[1,1,1],\"block\":[128,1,1],\"smem\":0,\"" FIELD "\":" VALUE "}")
  CHECK_ERR(parse(STEPS(ADD(",\"kernel\":{\"cubin\":\"0123456789abcdef0123456789abcdef\",\"ptx\":\"\",\"entry\":\"dit_kernel\","
                            "\"grid\":[1,0,1],\"block\":[128,1,1],\"smem\":0}"))),
            OUT_OF_RANGE, "plan.json: field 'steps[1].kernel.grid[1]': expected an integer in [1, 65535], found 0");
  CHECK_ERR(parse(STEPS(ADD(",\"kernel\":{\"cubin\":\"0123456789abcdef0123456789abcdef\",\"ptx\":\"\",\"entry\":\"dit_kernel\","
                            "\"grid\":[2147483648,1,1],\"block\":[128,1,1],\"smem\":0}"))),
            OUT_OF_RANGE, "field 'steps[1].kernel.grid[0]': expected an integer in [1, 2147483647], found 2147483648");
  CHECK_ERR(parse(STEPS(ADD(",\"kernel\":{\"cubin\":\"0123456789abcdef0123456789abcdef\",\"ptx\":\"\",\"entry\":\"dit_kernel\","
                            "\"grid\":[1,1],\"block\":[128,1,1],\"smem\":0}"))),
            INVALID_ARGUMENT, "field 'steps[1].kernel.grid': expected 3 integers (x, y, z), found 2 entries");
  CHECK_ERR(parse(STEPS(ADD(",\"kernel\":{\"cubin\":\"0123456789abcdef0123456789abcdef\",\"ptx\":\"\",\"entry\":\"dit_kernel\","
                            "\"grid\":[1,1,1],\"block\":[64,32,1],\"smem\":0}"))),
            OUT_OF_RANGE, "field 'steps[1].kernel.block': 2048 threads, at most 1024");
  CHECK_ERR(parse(STEPS(ADD(",\"kernel\":{\"cubin\":\"0123456789abcdef0123456789abcdef\",\"ptx\":\"\",\"entry\":\"dit_kernel\","
                            "\"grid\":[1,1,1],\"block\":[1,1,65],\"smem\":0}"))),
            OUT_OF_RANGE, "field 'steps[1].kernel.block[2]': expected an integer in [1, 64], found 65");
  CHECK_ERR(parse(STEPS(ADD(",\"kernel\":{\"cubin\":\"0123456789abcdef0123456789abcdeF\",\"ptx\":\"\",\"entry\":\"dit_kernel\","
                            "\"grid\":[1,1,1],\"block\":[128,1,1],\"smem\":0}"))),
            INVALID_ARGUMENT, "field 'steps[1].kernel.cubin': expected 32 lowercase hex digits, found \"0123456789abcdef0123456789abcdeF\"");
  CHECK_ERR(parse(STEPS(ADD(",\"kernel\":{\"cubin\":\"0123456789abcdef0123456789abcdef\",\"ptx\":\"abc\",\"entry\":\"dit_kernel\","
                            "\"grid\":[1,1,1],\"block\":[128,1,1],\"smem\":0}"))),
            INVALID_ARGUMENT, "field 'steps[1].kernel.ptx': expected \"\" or 32 lowercase hex digits, found \"abc\"");
  CHECK_ERR(parse(STEPS(ADD(",\"kernel\":{\"cubin\":\"0123456789abcdef0123456789abcdef\",\"ptx\":\"\",\"entry\":\"dit kernel\","
                            "\"grid\":[1,1,1],\"block\":[128,1,1],\"smem\":0}"))),
            INVALID_ARGUMENT, "field 'steps[1].kernel.entry': expected a PTX identifier ([A-Za-z_$][A-Za-z0-9_$]*), found \"dit kernel\"");
  CHECK_ERR(parse(STEPS(ADD(",\"kernel\":{\"cubin\":\"0123456789abcdef0123456789abcdef\",\"ptx\":\"\",\"entry\":\"a_kernel_name_of_thirty_two_byte\","
                            "\"grid\":[1,1,1],\"block\":[128,1,1],\"smem\":0}"))),
            OUT_OF_RANGE, "field 'steps[1].kernel.entry': expected at most 31 bytes, found 32");
  CHECK_ERR(parse(STEPS(ADD(",\"kernel\":{\"cubin\":\"0123456789abcdef0123456789abcdef\",\"ptx\":\"\",\"entry\":\"dit_kernel\","
                            "\"grid\":[1,1,1],\"block\":[128,1,1],\"smem\":232449}"))),
            OUT_OF_RANGE, "field 'steps[1].kernel.smem': expected an integer in [0, 232448], found 232449");
  CHECK_ERR(parse(STEPS(K("source", "\"nvrtc-12\""))), OUT_OF_RANGE, "field 'steps[1].kernel.source': expected at most 7 bytes, found 8");
  CHECK_ERR(parse(STEPS(K("tmaps", "[{\"arg\":1,\"box\":[64,8],\"swizzle\":0},{\"arg\":1,\"box\":[64,8],\"swizzle\":0},"
                                   "{\"arg\":1,\"box\":[64,8],\"swizzle\":0},{\"arg\":1,\"box\":[64,8],\"swizzle\":0},"
                                   "{\"arg\":1,\"box\":[64,8],\"swizzle\":0}]"))),
            OUT_OF_RANGE, "field 'steps[1].kernel.tmaps': more than 4 entries");
  CHECK_ERR(parse(STEPS(ADD(",\"kernel\":[]"))), INVALID_ARGUMENT, "field 'steps[1].kernel': expected an object, found an array");
  /* unknown members, at every level */
  CHECK_ERR(parse(HEAD VALUES_OK "," STEPS_OK ",\"arena\":512}"), INVALID_ARGUMENT, "plan.json: field '(top level)': unknown member \"arena\"");
  CHECK_ERR(parse(HEAD "\"values\":[{\"name\":\"y\",\"storage\":\"input\",\"ref\":\"y\",\"dtype\":\"f32\",\"shape\":[1],\"sneaky\":1}],\"steps\":[]}"),
            INVALID_ARGUMENT, "field 'values[0]': unknown member \"sneaky\"");
  CHECK_ERR(parse(STEPS(ADD(",\"Block\":0"))), INVALID_ARGUMENT, "field 'steps[1]': unknown member \"Block\"");
  CHECK_ERR(parse(STEPS(K("launch", "1"))), INVALID_ARGUMENT, "field 'steps[1].kernel': unknown member \"launch\"");
  CHECK_ERR(parse(STEPS(K("tmaps", "[{\"arg\":1,\"box\":[64,8],\"swizzle\":0,\"dims\":[1]}]"))), INVALID_ARGUMENT,
            "field 'steps[1].kernel.tmaps[0]': unknown member \"dims\"");
  /* a later version is refused for its version, not for members it may have added */
  CHECK_ERR(parse("{\"format\":\"ditc-plan\",\"version\":5,\"arena_bytes\":0,\"values\":[],\"steps\":[],\"new\":1}"), FAILED_PRECONDITION,
            "field 'version': this build reads plan versions 1..4, found 5");
#undef K
#undef ADD
#undef STEPS
#undef STEP0
#undef KERNEL_OK
}

/* ---- the offload section ---- */

/* Two blocks between a head and a tail weight, each weight one 4 KiB tensor at 4 KiB steps of
 * the blob: wh [0, 4096), block 0 = w0a, w0b [4096, 12288), block 1 = w1 [12288, 16384), wt
 * after. Block 1 starts with a collective (a yield point). */
#define OFF_VALUES                                                                                            \
  "\"values\":[{\"name\":\"x\",\"storage\":\"input\",\"ref\":\"x\",\"dtype\":\"f32\",\"shape\":[1024]},"     \
  "{\"name\":\"wh\",\"storage\":\"weight\",\"ref\":\"wh\",\"dtype\":\"f32\",\"shape\":[1024]},"              \
  "{\"name\":\"w0a\",\"storage\":\"weight\",\"ref\":\"w0a\",\"dtype\":\"f32\",\"shape\":[1024]},"            \
  "{\"name\":\"w0b\",\"storage\":\"weight\",\"ref\":\"w0b\",\"dtype\":\"f32\",\"shape\":[1024]},"            \
  "{\"name\":\"w1\",\"storage\":\"weight\",\"ref\":\"w1\",\"dtype\":\"f32\",\"shape\":[1024]},"              \
  "{\"name\":\"wt\",\"storage\":\"weight\",\"ref\":\"wt\",\"dtype\":\"f32\",\"shape\":[1024]},"              \
  "{\"name\":\"a\",\"storage\":\"arena\",\"dtype\":\"f32\",\"shape\":[1024],\"offset\":0},"                  \
  "{\"name\":\"b\",\"storage\":\"arena\",\"dtype\":\"f32\",\"shape\":[1024],\"offset\":4096},"               \
  "{\"name\":\"c\",\"storage\":\"arena\",\"dtype\":\"f32\",\"shape\":[1024],\"offset\":8192},"               \
  "{\"name\":\"d\",\"storage\":\"arena\",\"dtype\":\"f32\",\"shape\":[1024],\"offset\":12288},"              \
  "{\"name\":\"e\",\"storage\":\"arena\",\"dtype\":\"f32\",\"shape\":[1024],\"offset\":16384},"              \
  "{\"name\":\"y\",\"storage\":\"output\",\"ref\":\"y\",\"dtype\":\"f32\",\"shape\":[1024]}]"
#define OFF_STEPS                                                                                           \
  "\"steps\":[{\"op\":\"add\",\"in\":[0,1],\"out\":[6],\"block\":-1},{\"op\":\"add\",\"in\":[6,2],\"out\":[7],\"block\":0}," \
  "{\"op\":\"add\",\"in\":[7,3],\"out\":[8],\"block\":0},{\"op\":\"allreduce\",\"in\":[8],\"out\":[9],\"block\":1},"        \
  "{\"op\":\"add\",\"in\":[9,4],\"out\":[10],\"block\":1},{\"op\":\"add\",\"in\":[10,5],\"out\":[11],\"block\":-1}]"
#define OFF_SECTION                                                                                          \
  "\"offload\":{\"version\":1,\"mode\":\"chunked\",\"chunk_bytes\":4096,\"head_bytes\":4096,"               \
  "\"tail\":[16384,4096],\"overhead_bytes\":0,\"predicted_peak_bytes\":65536,\"resident_peak_bytes\":90000," \
  "\"predicted_step_ms\":1.5,\"resident_step_ms\":1,\"profile\":{\"name\":\"p\",\"p_peak_tflops\":1,"       \
  "\"bw_h2d_gbs\":2,\"eta_comp\":0.5,\"eta_pref\":0.5},\"blocks\":["                                          \
  "{\"index\":0,\"range\":[4096,12288],\"resident_bytes\":4096,\"chunks\":2,\"resident_chunks\":1,"         \
  "\"yield_steps\":[],\"window_chunks\":[0],\"flops\":100,\"f_star\":5,\"t_comp_ms\":0.5,\"t_pref_ms\":0.25," \
  "\"t_coll_ms\":0,\"resident\":0.5}" OFF_BLOCK1 "]}"
#define OFF_BLOCK1                                                                                           \
  ",{\"index\":1,\"range\":[12288,16384],\"resident_bytes\":0,\"chunks\":1,\"resident_chunks\":0,"           \
  "\"yield_steps\":[3],\"window_chunks\":[1,0],\"flops\":100,\"f_star\":5,\"t_comp_ms\":0.5,"               \
  "\"t_pref_ms\":0.5,\"t_coll_ms\":0.1,\"resident\":0}"

static const char kOffPlan[] = "{\"format\":\"ditc-plan\",\"version\":2,\"arena_bytes\":20480," OFF_VALUES "," OFF_STEPS "," OFF_SECTION "}";

/* kOffPlan with the first `from` replaced by `to` (caller frees). */
static char *damaged(const char *from, const char *to) {
  const char *at = strstr(kOffPlan, from);
  CHECK(at != NULL);
  if (!at) return strdup(kOffPlan);
  size_t n = strlen(kOffPlan) - strlen(from) + strlen(to) + 1;
  char *t = malloc(n);
  snprintf(t, n, "%.*s%s%s", (int)(at - kOffPlan), kOffPlan, to, at + strlen(from));
  return t;
}

static dit_status_t parse_damaged(const char *from, const char *to) {
  char *t = damaged(from, to);
  dit_status_t s = parse(t);
  free(t);
  return s;
}

static dit_manifest_tensor_t g_tensors[5] = {{"wh", DIT_F32, 1, {1024}, 0, 4096},
                                             {"w0a", DIT_F32, 1, {1024}, 4096, 4096},
                                             {"w0b", DIT_F32, 1, {1024}, 8192, 4096},
                                             {"w1", DIT_F32, 1, {1024}, 12288, 4096},
                                             {"wt", DIT_F32, 1, {1024}, 16384, 4096}};

/* Parses `text` and checks it against the layout above in a blob of blob_size bytes. */
static dit_status_t bind_offload(const char *text, uint64_t blob_size) {
  dit_plan_t *p = NULL;
  dit_status_t s = dit_plan_parse(text, strlen(text), "plan.json", &p);
  if (s) return s;
  dit_manifest_t m;
  memset(&m, 0, sizeof m);
  dit_manifest_io_t in = {"x", DIT_F32, 1, {1024}}, out = {"y", DIT_F32, 1, {1024}};
  m.io_inputs = &in, m.n_inputs = 1, m.io_outputs = &out, m.n_outputs = 1;
  dit_manifest_blob_t blob = {"weights", "0123456789abcdef0123456789abcdef", blob_size, "", ""};
  m.blobs = &blob, m.n_blobs = 1;
  dit_manifest_weights_t w;
  memset(&w, 0, sizeof w);
  strcpy(w.blob, blob.hash);
  w.tensors = g_tensors, w.n_tensors = 5;
  s = dit_plan_check_bindings(p, &m, &w, "plan.json");
  dit_plan_free(p);
  return s;
}

static void test_offload_section(void) {
  dit_plan_t *p = NULL;
  CHECK_OK(dit_plan_parse(kOffPlan, strlen(kOffPlan), "plan.json", &p));
  if (!p) return;
  const dit_plan_offload_t *o = &p->offload;
  CHECK_EQ_INT(o->mode, DIT_PLAN_OFFLOAD_CHUNKED);
  CHECK_EQ_INT(o->n_blocks, 2);
  CHECK_EQ_INT(o->head_bytes, 4096);
  CHECK_EQ_INT(o->tail_offset, 16384);
  CHECK_EQ_INT(o->blocks[0].split, 8192);
  CHECK_EQ_INT(o->blocks[0].first_step, 1);
  CHECK_EQ_INT(o->blocks[0].last_step, 2);
  CHECK_EQ_INT(o->blocks[1].first_step, 3);
  CHECK_EQ_INT(o->blocks[1].n_yields, 1);
  CHECK_EQ_INT(o->blocks[1].yield_steps[0], 3);
  CHECK_EQ_INT(o->blocks[1].window_chunks[0], 1);
  CHECK(o->profile.eta_comp == 0.5 && !strcmp(o->profile.name, "p"));
  free(print_stable(p));
  dit_plan_free(p);
  CHECK_OK(bind_offload(kOffPlan, 20480));

  /* Against the steps and itself. */
  CHECK_ERR(parse_damaged("\"mode\":\"chunked\"", "\"mode\":\"sideways\""), INVALID_ARGUMENT, "field 'offload.mode'");
  CHECK_ERR(parse_damaged("\"chunk_bytes\":4096", "\"chunk_bytes\":100"), OUT_OF_RANGE,
            "field 'offload.chunk_bytes': expected an integer in [4096, 1099511627776], found 100");
  CHECK_ERR(parse_damaged("\"version\":1,\"mode\"", "\"version\":3,\"mode\""), OUT_OF_RANGE, "field 'offload.version'");
  CHECK_ERR(parse_damaged("\"version\":1,\"mode\"", "\"version\":2,\"mode\""), NOT_FOUND, "missing 'swap' (an offload section of version 2");
  CHECK_ERR(parse_damaged("\"version\":2,", "\"version\":1,"), INVALID_ARGUMENT, "a version 1 plan has no offload section");
  CHECK_ERR(parse_damaged("\"head_bytes\":4096,", "\"head_bytes\":4096,\"extra\":1,"), INVALID_ARGUMENT, "offload");
  CHECK_ERR(parse_damaged(OFF_BLOCK1, ""), INVALID_ARGUMENT, "field 'offload.blocks': 1 blocks, but steps[3] belongs to block 1");
  CHECK_ERR(parse_damaged("\"index\":1", "\"index\":2"), OUT_OF_RANGE, "field 'offload.blocks[1].index': expected an integer in [1, 1], found 2");
  CHECK_ERR(parse_damaged("\"yield_steps\":[3]", "\"yield_steps\":[0]"), OUT_OF_RANGE,
            "field 'offload.blocks[1].yield_steps[0]': expected an integer in [3, 4], found 0");
  CHECK_ERR(parse_damaged("\"yield_steps\":[3]", "\"yield_steps\":[4]"), INVALID_ARGUMENT,
            "field 'offload.blocks[1].yield_steps[0]': steps[4] is add, expected a collective step");
  CHECK_ERR(parse_damaged("\"window_chunks\":[1,0]", "\"window_chunks\":[1]"), INVALID_ARGUMENT,
            "field 'offload.blocks[1].window_chunks': expected 2 counts (one per window between collectives), found 1");
  CHECK_ERR(parse_damaged("\"window_chunks\":[1,0]", "\"window_chunks\":[-1,0]"), OUT_OF_RANGE, "window_chunks[0]': expected an integer in [0, 4294967295]");
  CHECK_ERR(parse_damaged("\"resident_chunks\":1", "\"resident_chunks\":3"), OUT_OF_RANGE,
            "field 'offload.blocks[0].resident_chunks': expected an integer in [0, 2], found 3");
  CHECK_ERR(parse_damaged("\"chunks\":2", "\"chunks\":5"), OUT_OF_RANGE, "field 'offload.blocks[0].chunks': expected an integer in [2, 2], found 5");
  CHECK_ERR(parse_damaged("\"range\":[12288,16384]", "\"range\":[8192,16384]"), OUT_OF_RANGE,
            "field 'offload.blocks[1].range': expected [lo, hi) with 12288 <= lo < hi (after the previous block), found [8192, 16384)");
  CHECK_ERR(parse_damaged("\"tail\":[16384,4096]", "\"tail\":[12288,4096]"), OUT_OF_RANGE, "field 'offload.tail': starts at 12288, inside the last block");
  CHECK_ERR(parse_damaged("\"eta_comp\":0.5", "\"eta_comp\":5"), OUT_OF_RANGE, "field 'offload.profile.eta_comp'");
  CHECK_ERR(parse_damaged("\"t_pref_ms\":0.25", "\"t_pref_ms\":-1"), OUT_OF_RANGE, "field 'offload.blocks[0].t_pref_ms'");
  CHECK_ERR(parse_damaged("\"in\":[9,4],\"out\":[10],\"block\":1", "\"in\":[9,4],\"out\":[10],\"block\":0"), INVALID_ARGUMENT,
            "the steps of block 0 are not contiguous (steps[4] follows steps[2])");
  /* Against the weight layout. */
  char *t;
  CHECK_ERR(bind_offload(kOffPlan, 16384), OUT_OF_RANGE, "field 'offload.tail'");
  t = damaged("\"resident_bytes\":4096", "\"resident_bytes\":0");
  CHECK_ERR(bind_offload(t, 20480), INVALID_ARGUMENT,
            "field 'offload.blocks[0].resident_bytes': expected 4096 (1 resident chunks cut back to whole tensors), found 0");
  free(t);
  t = damaged("\"resident_bytes\":4096", "\"resident_bytes\":100");
  CHECK_ERR(bind_offload(t, 20480), INVALID_ARGUMENT, "the resident part ends at byte 100, inside tensor 'w0a'");
  free(t);
  t = damaged("\"range\":[4096,12288],\"resident_bytes\":4096,\"chunks\":2", "\"range\":[4096,8192],\"resident_bytes\":4096,\"chunks\":1");
  CHECK_ERR(bind_offload(t, 20480), INVALID_ARGUMENT, "tensor 'w0b' (bytes 8192..12288) lies in no block, nor in the head");
  free(t);
  t = damaged("\"range\":[4096,12288]", "\"range\":[4097,12288]");
  CHECK_ERR(bind_offload(t, 20480), OUT_OF_RANGE, "must start at a multiple of 4096");
  free(t);
  t = damaged("\"tail\":[16384,4096]", "\"tail\":[16384,0]");
  CHECK_ERR(bind_offload(t, 20480), INVALID_ARGUMENT, "tensor 'wt'");
  free(t);
  t = damaged("\"in\":[9,4]", "\"in\":[9,2]");
  CHECK_ERR(bind_offload(t, 20480), INVALID_ARGUMENT, "steps[4] (block 1) reads 'w0a' of offload block 0");
  free(t);
  t = damaged("\"in\":[0,1]", "\"in\":[0,4]");
  CHECK_ERR(bind_offload(t, 20480), INVALID_ARGUMENT, "steps[0] (block -1) reads 'w1' of offload block 1");
  free(t);
}

/* The expert swap (offload version 2): kOffPlan's resident set is the head, the tail and block
 * 0's resident 4 KiB: 12288 bytes, three chunks of 4096. */
#define SWAP_OK "\"swap\":{\"bytes\":12288,\"chunk_bytes\":4096,\"chunks\":3,\"chunks_per_block\":1,\"forwards\":2," \
                "\"predicted_stall_ms\":0.5,\"predicted_peak_bytes\":90000}"

static char *swap_plan(const char *swap) {
  char *a = damaged("\"version\":1,\"mode\"", "\"version\":2,\"mode\"");
  const char *end = "\"resident\":0}]}";
  char *at = strstr(a, end);
  CHECK(at != NULL);
  size_t n = strlen(a) + strlen(swap) + 8;
  char *t = malloc(n);
  snprintf(t, n, "%.*s\"resident\":0}],%s}%s", (int)(at - a), a, swap, at + strlen(end));
  free(a);
  return t;
}

static dit_status_t bind_swap(const char *swap) {
  char *t = swap_plan(swap);
  dit_status_t s = bind_offload(t, 20480);
  free(t);
  return s;
}

static void test_swap_section(void) {
  char *t = swap_plan(SWAP_OK);
  dit_plan_t *p = NULL;
  CHECK_OK(dit_plan_parse(t, strlen(t), "plan.json", &p));
  if (p) {
    const dit_plan_swap_t *w = &p->offload.swap;
    CHECK(w->present);
    CHECK_EQ_INT(w->bytes, 12288);
    CHECK_EQ_INT(w->chunks, 3);
    CHECK_EQ_INT(w->forwards, 2);
    CHECK_EQ_INT(w->predicted_peak_bytes, 90000);
    uint64_t bytes = 0, chunks = 0;
    dit_plan_swap_totals(&p->offload, 4096, &bytes, &chunks);
    CHECK_EQ_INT(bytes, 12288);
    CHECK_EQ_INT(chunks, 3);
    /* Written back as version 2 with the same swap; a plan without one stays version 1. */
    char *back = NULL;
    CHECK_OK(dit_plan_to_json(p, &back));
    CHECK(back && strstr(back, "\"swap\"") && strstr(back, "\"chunks_per_block\":1") && strstr(back, "\"offload\":{\"version\":2,"));
    free(back);
    dit_plan_free(p);
  }
  free(t);
  CHECK_OK(bind_swap(SWAP_OK));
  dit_plan_t *q = NULL;
  CHECK_OK(dit_plan_parse(kOffPlan, strlen(kOffPlan), "plan.json", &q));
  char *one = NULL;
  if (q) CHECK_OK(dit_plan_to_json(q, &one));
  CHECK(one && !strstr(one, "\"swap\"") && strstr(one, "\"offload\":{\"version\":1,"));
  free(one);
  dit_plan_free(q);
  /* The parser's checks. */
  t = damaged("\"resident\":0}]}", "\"resident\":0}]," SWAP_OK "}");
  CHECK_ERR(parse(t), INVALID_ARGUMENT, "field 'offload.swap': an offload section of version 1 has no swap");
  free(t);
  const struct {
    const char *from, *to, *msg;
    dit_code_t code;
  } bad[] = {
      {"\"chunks\":3,", "\"chunks\":0,", "field 'offload.swap.chunks': expected an integer in [1, 4294967295], found 0", DIT_CODE_OUT_OF_RANGE},
      {"\"chunks_per_block\":1", "\"chunks_per_block\":4", "field 'offload.swap.chunks_per_block': expected an integer in [1, 3], found 4",
       DIT_CODE_OUT_OF_RANGE},
      {"\"forwards\":2", "\"forwards\":0", "field 'offload.swap.forwards': expected an integer in [1, 100000], found 0", DIT_CODE_OUT_OF_RANGE},
      {"\"chunk_bytes\":4096,\"chunks\"", "\"chunk_bytes\":100,\"chunks\"", "field 'offload.swap.chunk_bytes'", DIT_CODE_OUT_OF_RANGE},
      {"\"bytes\":12288", "\"bytes\":0", "field 'offload.swap.bytes'", DIT_CODE_OUT_OF_RANGE},
      {"\"predicted_stall_ms\":0.5", "\"predicted_stall_ms\":-1", "field 'offload.swap.predicted_stall_ms'", DIT_CODE_OUT_OF_RANGE},
      {"\"forwards\":2,", "\"forwards\":2,\"extra\":1,", "offload.swap", DIT_CODE_INVALID_ARGUMENT},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char sw[512];
    const char *at = strstr(SWAP_OK, bad[i].from);
    CHECK(at != NULL);
    if (!at) continue;
    snprintf(sw, sizeof sw, "%.*s%s%s", (int)(at - SWAP_OK), SWAP_OK, bad[i].to, at + strlen(bad[i].from));
    t = swap_plan(sw);
    dit_status_t s = parse(t);
    CHECK(s && dit_status_code(s) == bad[i].code && strstr(dit_status_message(s), bad[i].msg));
    if (s && !strstr(dit_status_message(s), bad[i].msg)) fprintf(stderr, "  got: %s\n", dit_status_message(s));
    dit_status_free(s);
    free(t);
  }
  /* Against the layout: the bytes and chunks are the resident set's, and the forwards cover them. */
  CHECK_ERR(bind_swap("\"swap\":{\"bytes\":8192,\"chunk_bytes\":4096,\"chunks\":2,\"chunks_per_block\":1,\"forwards\":2,"
                      "\"predicted_stall_ms\":0,\"predicted_peak_bytes\":1}"),
            INVALID_ARGUMENT, "field 'offload.swap': expected 12288 bytes in 3 chunks (the head, the tail and the blocks' resident parts), found 8192 in 2");
  CHECK_ERR(bind_swap("\"swap\":{\"bytes\":12288,\"chunk_bytes\":4096,\"chunks\":3,\"chunks_per_block\":1,\"forwards\":1,"
                      "\"predicted_stall_ms\":0,\"predicted_peak_bytes\":1}"),
            INVALID_ARGUMENT, "field 'offload.swap': 1 forwards of 2 blocks at 1 chunks each move fewer than its 3 chunks");
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

/* The forward's work, which calibration rates the machine by: typed, version 3 and later. */
static void test_work_section(void) {
#define W(v, work) "{\"format\":\"ditc-plan\",\"version\":" #v ",\"arena_bytes\":0,\"values\":[],\"steps\":[],\"work\":" work "}"
  const char *ok = W(3, "{\"flops\":1.5e12,\"collectives\":9,\"collective_bytes\":4096}");
  dit_plan_t *p = NULL;
  CHECK_OK(dit_plan_parse(ok, strlen(ok), "plan.json", &p));
  CHECK(p && p->work.present && p->work.flops == 1.5e12 && p->work.collectives == 9 && p->work.collective_bytes == 4096);
  char *text = NULL;
  dit_plan_t *q = NULL;
  if (p) CHECK_OK(dit_plan_to_json(p, &text));
  if (text) CHECK_OK(dit_plan_parse(text, strlen(text), "again", &q));
  CHECK(q && q->work.present && q->work.flops == 1.5e12 && q->work.collectives == 9 && q->work.collective_bytes == 4096);
  free(text);
  dit_plan_free(q);
  dit_plan_free(p);
  const char *none = "{\"format\":\"ditc-plan\",\"version\":3,\"arena_bytes\":0,\"values\":[],\"steps\":[]}";
  CHECK_OK(dit_plan_parse(none, strlen(none), "plan.json", &p));
  CHECK(p && !p->work.present);
  dit_plan_free(p);
  CHECK_ERR(parse(W(2, "{\"flops\":1,\"collectives\":0,\"collective_bytes\":0}")), INVALID_ARGUMENT,
            "field 'work': a version 2 plan has no work section (version 3 and later)");
  CHECK_ERR(parse(W(3, "{\"flops\":-1,\"collectives\":0,\"collective_bytes\":0}")), OUT_OF_RANGE, "field 'work.flops'");
  CHECK_ERR(parse(W(3, "{\"flops\":1,\"collectives\":0.5,\"collective_bytes\":0}")), INVALID_ARGUMENT, "field 'work.collectives'");
  CHECK_ERR(parse(W(3, "{\"flops\":1,\"collectives\":0}")), NOT_FOUND, "field 'work.collective_bytes': missing");
  CHECK_ERR(parse(W(3, "{\"flops\":1,\"collectives\":0,\"collective_bytes\":0,\"steps\":3}")), INVALID_ARGUMENT,
            "field 'work': unknown member \"steps\"");
  CHECK_ERR(parse(W(3, "[1]")), INVALID_ARGUMENT, "field 'work': expected an object");
#undef W
}

/* An output that replaces an input in place: kept through a round trip; refused on a value
 * that is not an output, and when its input is not an input of its dtype and size or is
 * already taken. */
static void test_updates(void) {
#define UP(extra, next)                                                                                                    \
  "{\"format\":\"ditc-plan\",\"version\":4,\"arena_bytes\":0,\"values\":[{\"name\":\"c\",\"storage\":\"input\",\"ref\":\"c\","  \
  "\"dtype\":\"bf16\",\"shape\":[2]" extra "},{\"name\":\"n\",\"storage\":\"output\",\"ref\":\"c.next\",\"dtype\":\"bf16\"," \
  "\"shape\":[2]" next "}],\"steps\":[{\"op\":\"silu\",\"in\":[0],\"out\":[1],\"block\":-1}]}"
  const char *ok = UP("", ",\"updates\":0");
  dit_plan_t *p = NULL;
  CHECK_OK(dit_plan_parse(ok, strlen(ok), "plan.json", &p));
  if (p) {
    CHECK_EQ_INT(p->values[0].updates, -1);
    CHECK_EQ_INT(p->values[1].updates, 0);
    char *a = print_stable(p);
    CHECK(a && strstr(a, "\"updates\":0"));
    free(a);
  }
  dit_plan_free(p);
  CHECK_ERR(parse(UP(",\"updates\":1", "")), INVALID_ARGUMENT, "field 'values[0].updates': only outputs update an input in place (this value is input)");
  CHECK_ERR(parse(UP("", ",\"updates\":1")), INVALID_ARGUMENT,
            "field 'values[1].updates': value 1 is not an input of this output's dtype and size that no other output updates");
  CHECK_ERR(parse(UP("", ",\"updates\":7")), INVALID_ARGUMENT, "value 7 is not an input");
  CHECK_ERR(parse(UP("", ",\"updates\":-1")), OUT_OF_RANGE, "field 'values[1].updates'");
#undef UP
}

int main(void) {
  test_round_trip();
  test_updates();
  test_work_section();
  test_rejections();
  test_tensor_maps();
  test_field_paths();
  test_bindings();
  test_offload_section();
  test_swap_section();
  return check_summary("test_plan");
}
