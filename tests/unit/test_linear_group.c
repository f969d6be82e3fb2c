/* runtime/linear_group.c: which plan steps a backend may run as one batched product. A group of
 * three linears (q, k, v over one x, biases) bound one stride apart is taken, with its strides in
 * elements; every way it can be wrong is refused: offload, a mark out of place, another x, an
 * activation or accumulated input, a kernel of its own, shapes or dtypes that differ, strides that
 * are not one, outputs that overlap. */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "runtime/linear_group.h"

enum { X, W0, B0, Y0, W1, B1, Y1, W2, B2, Y2, X2, NV };

typedef struct fixture {
  dit_plan_t plan;
  dit_plan_step_t steps[4];
  dit_tensor_t bound[NV];
} fixture_t;

static dit_tensor_t tensor(uintptr_t at, int rank, int64_t d0, int64_t d1, int64_t d2) {
  dit_tensor_t t = {.data = (void *)at, .dtype = DIT_BF16, .rank = rank, .dims = {d0, d1, d2}};
  return t;
}

/* x [1, 64, 32] at 0x100000; weights [48, 32] 0x10000 bytes apart from 0x200000, biases [48]
 * 0x1000 apart from 0x300000, outputs [1, 64, 48] 0x2000 apart from 0x400000 (6144 bytes each). */
static void setup(fixture_t *f) {
  memset(f, 0, sizeof *f);
  f->bound[X] = tensor(0x100000, 3, 1, 64, 32);
  f->bound[X2] = tensor(0x180000, 3, 1, 64, 32);
  for (int m = 0; m < 3; m++) {
    f->bound[W0 + 3 * m] = tensor(0x200000 + 0x10000u * (unsigned)m, 2, 48, 32, 0);
    f->bound[B0 + 3 * m] = tensor(0x300000 + 0x1000u * (unsigned)m, 1, 48, 0, 0);
    f->bound[Y0 + 3 * m] = tensor(0x400000 + 0x2000u * (unsigned)m, 3, 1, 64, 48);
    dit_plan_step_t *s = &f->steps[m + 1];
    s->kind = DIT_OP_LINEAR;
    s->n_in = 3, s->n_out = 1;
    s->in[0] = X, s->in[1] = W0 + 3 * m, s->in[2] = B0 + 3 * m, s->out[0] = Y0 + 3 * m;
    dit_attrs_set_int(&s->attrs, "group_size", 3);
    dit_attrs_set_int(&s->attrs, "group_at", m);
  }
  f->steps[0].kind = DIT_OP_SILU; /* a step before the group */
  f->steps[0].n_in = f->steps[0].n_out = 1;
  f->steps[0].in[0] = X2, f->steps[0].out[0] = X;
  f->plan.n_values = NV;
  f->plan.n_steps = 4;
  f->plan.steps = f->steps;
}

static int taken(fixture_t *f, size_t i) {
  dit_linear_batch_t b = {0};
  return dit_linear_group(&f->plan, i, f->bound, &b);
}

int main(void) {
  fixture_t f;
  setup(&f);
  dit_linear_batch_t b = {0};
  CHECK(dit_linear_group(&f.plan, 1, f.bound, &b));
  CHECK_EQ_INT(b.count, 3);
  CHECK(b.w_stride == 0x10000 / 2 && b.bias_stride == 0x1000 / 2 && b.y_stride == 0x2000 / 2);
  CHECK(!taken(&f, 0) && !taken(&f, 2) && !taken(&f, 3) && !taken(&f, 4)); /* not a first member; past the end */

  setup(&f); /* without biases */
  for (int m = 1; m <= 3; m++) f.steps[m].n_in = 2;
  CHECK(dit_linear_group(&f.plan, 1, f.bound, &b) && b.bias_stride == 0 && b.count == 3);
  setup(&f); /* a bias on some members only */
  f.steps[2].n_in = 2;
  CHECK(!taken(&f, 1));

  setup(&f);
  f.plan.offload.mode = DIT_PLAN_OFFLOAD_LAYERWISE;
  CHECK(!taken(&f, 1));
  setup(&f);
  dit_attrs_set_int(&f.steps[3].attrs, "group_at", 1);
  CHECK(!taken(&f, 1));
  setup(&f);
  dit_attrs_set_int(&f.steps[2].attrs, "group_size", 2);
  CHECK(!taken(&f, 1));
  setup(&f);
  dit_attrs_set_int(&f.steps[1].attrs, "group_size", 5); /* more members than steps left */
  CHECK(!taken(&f, 1));
  setup(&f);
  f.steps[3].in[0] = X2;
  CHECK(!taken(&f, 1));
  setup(&f);
  dit_attrs_set_int(&f.steps[2].attrs, "act", 1);
  CHECK(!taken(&f, 1));
  setup(&f);
  dit_attrs_set_int(&f.steps[1].attrs, "act", 1);
  CHECK(!taken(&f, 1));
  setup(&f); /* k accumulates onto x2 (acc: a last input) */
  dit_attrs_set_int(&f.steps[2].attrs, "acc", 1);
  f.steps[2].in[3] = X2, f.steps[2].n_in = 4;
  CHECK(!taken(&f, 1));
  setup(&f);
  f.steps[3].has_kernel = 1;
  CHECK(!taken(&f, 1));
  setup(&f);
  f.bound[W2].dims[0] = 40;
  CHECK(!taken(&f, 1));
  setup(&f);
  f.bound[Y1].dtype = DIT_F32;
  CHECK(!taken(&f, 1));
  setup(&f);
  f.bound[B2].data = (void *)0x303000; /* biases not one stride apart */
  CHECK(!taken(&f, 1));
  setup(&f);
  f.bound[W1].data = (void *)0x1F0000; /* below the first */
  CHECK(!taken(&f, 1));
  setup(&f);
  f.bound[Y2].data = (void *)0x404001; /* not a whole element */
  CHECK(!taken(&f, 1));
  setup(&f); /* outputs 0x1000 apart overlap (6144 bytes each) */
  f.bound[Y1].data = (void *)0x401000, f.bound[Y2].data = (void *)0x402000;
  CHECK(!taken(&f, 1));
  return check_summary("test_linear_group");
}
