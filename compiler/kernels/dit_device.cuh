// Device helpers shared by the kernel templates (dit_kernels.cu, dit_attn_sm90.cu): the storage
// types, bf16 conversions and the base-2 exponential. ditc hands it to NVRTC as the header
// "dit_device.cuh" of every kernel and hashes it into the kernel cache key.
#ifndef DIT_DEVICE_CUH
#define DIT_DEVICE_CUH

#define DIT_INF __int_as_float(0x7f800000)

typedef unsigned short bf16_t;
typedef unsigned int u32;
typedef unsigned long long u64;

// bf16 <-> fp32 with round-to-nearest-even, bit-identical to the CPU reference's conversion
// (NaN stays NaN, quieted).
__device__ __forceinline__ float bf2f(bf16_t h) { return __uint_as_float(((u32)h) << 16); }
__device__ __forceinline__ bf16_t f2bf(float f) {
  u32 u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (bf16_t)(u >> 16);
}

// Two floats to packed bf16 (round to nearest even) in one instruction; lo in the low half.
__device__ __forceinline__ u32 pack_bf16(float lo, float hi) {
  u32 r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// 2^x on the special-function unit (relative error ~2^-22; denormal results flush to zero).
__device__ __forceinline__ float ex2(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
  return r;
}

#endif
