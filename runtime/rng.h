/* Counter-based normal noise: Philox4x32-10 and Box-Muller with our own log/sin/cos built
 * from IEEE basic operations only (no fused multiply-add), so the CUDA backend can produce
 * bit-identical latents for a seed.
 * Element i of a stream uses Philox block j = i / 4 (counter = {j lo32, j hi32, 0, 0},
 * key = {seed lo32, seed hi32}); words (x0, x1) give normals z[0], z[1] and (x2, x3) give
 * z[2], z[3]; element i takes z[i % 4]. */
#ifndef DIT_RUNTIME_RNG_H
#define DIT_RUNTIME_RNG_H

#include <stddef.h>
#include <stdint.h>

void dit_philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]);
/* Fills out[0..n) with elements offset..offset+n-1 of the standard normal stream. */
void dit_rng_normal(uint64_t seed, uint64_t offset, float *out, size_t n);

#endif
