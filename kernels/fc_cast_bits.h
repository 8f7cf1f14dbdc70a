/*
 * fc_cast_bits.h - the float conversions as bit operations, shared by the CPU
 * kernels and the CUDA kernels (compiled as __host__ __device__ there).
 *
 * Why one header for both: casts are compared bit-for-bit between CPU and
 * device, and the device intrinsics (__float2bfloat16, __float2half, cvt.*)
 * canonicalise NaNs differently from torch's CPU path.  So every rounding and
 * NaN rule is written here with integer operations; the only floating-point
 * operations left are IEEE conversions of non-NaN values between float64 and
 * float32 and one exact multiply, which behave the same on x86, ARM and CUDA
 * (CUDA without -ftz/--use_fast_math, which the Makefile does not pass).
 *
 * Every conversion is "source bits -> float32 bits -> destination bits"; this
 * is exactly how torch casts between the four float types (float64 -> bfloat16
 * rounds twice, as torch does), except float64 -> float64 which is a copy.
 *
 * Internal to kernels/: not part of the API.
 */
#ifndef FC_CAST_BITS_H
#define FC_CAST_BITS_H

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define FC_CB_FN static __host__ __device__ __forceinline__
#else
#define FC_CB_FN static inline
#endif

FC_CB_FN uint32_t fc_cb_bits32(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

FC_CB_FN float fc_cb_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

FC_CB_FN uint64_t fc_cb_bits64(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof(u));
    return u;
}

FC_CB_FN double fc_cb_double(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof(d));
    return d;
}

/* c ? a : b written as masks, so that compilers keep it a select, not a branch. */
FC_CB_FN uint32_t fc_cb_sel(int c, uint32_t a, uint32_t b)
{
    const uint32_t m = 0u - (uint32_t)(c != 0);
    return (a & m) | (b & ~m);
}

/* ---- to float32 bits ---- */

FC_CB_FN uint32_t fc_cb_f32_to_f32(uint32_t x)
{
    return x;
}

/* IEEE narrowing (round to nearest even); NaN: sign, quiet bit, top 22 payload bits. */
FC_CB_FN uint32_t fc_cb_f64_to_f32(uint64_t x)
{
    const uint32_t nan = ((uint32_t)(x >> 32) & 0x80000000u) | 0x7fc00000u |
                         (uint32_t)((x & 0x000fffffffffffffu) >> 29);
    const uint32_t val = fc_cb_bits32((float)fc_cb_double(x));
    return (x & 0x7fffffffffffffffu) > 0x7ff0000000000000u ? nan : val;
}

/* Exact.  NaN: sign and payload kept, quiet bit set (vcvtph2ps does this). */
FC_CB_FN uint32_t fc_cb_f16_to_f32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1fu;
    const uint32_t m = h & 0x3ffu;
    const uint32_t special = 0x7f800000u | (m << 13) | (m != 0 ? 0x00400000u : 0u);
    const uint32_t sub = fc_cb_bits32((float)m * 5.9604644775390625e-8f); /* m * 2^-24, exact */
    const uint32_t normal = ((e + 112u) << 23) | (m << 13);
    uint32_t r = normal;
    r = e == 0 ? sub : r;
    r = e == 0x1fu ? special : r;
    return sign | r;
}

/* Exact, signalling NaNs included (torch just shifts the bits). */
FC_CB_FN uint32_t fc_cb_bf16_to_f32(uint16_t b)
{
    return (uint32_t)b << 16;
}

/* ---- from float32 bits ---- */

/* Exact.  NaN: sign and payload kept, quiet bit set (as x86/ARM hardware). */
FC_CB_FN uint64_t fc_cb_f32_to_f64(uint32_t x)
{
    const uint64_t nan = ((uint64_t)(x & 0x80000000u) << 32) | 0x7ff8000000000000u |
                         ((uint64_t)(x & 0x007fffffu) << 29);
    const uint64_t val = fc_cb_bits64((double)fc_cb_float(x));
    return (x & 0x7fffffffu) > 0x7f800000u ? nan : val;
}

/* c10::BFloat16 round_to_nearest_even(): RNE on the bits; any NaN -> 0x7fc0. */
FC_CB_FN uint16_t fc_cb_f32_to_bf16(uint32_t x)
{
    const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    return (x & 0x7fffffffu) > 0x7f800000u ? (uint16_t)0x7fc0u : (uint16_t)rounded;
}

/*
 * RNE, subnormal results kept, overflow to inf.  NaN: sign, quiet bit and the
 * top 9 payload bits (F16C vcvtps2ph, which torch's float16 path uses).
 */
FC_CB_FN uint16_t fc_cb_f32_to_f16(uint32_t x)
{
    /* Every candidate is computed and one is selected, which keeps the loop
     * free of branches (vectorisable) and is cheap on the GPU too. */
    const uint32_t sign = x & 0x80000000u;
    const uint32_t a = x & 0x7fffffffu;
    const uint32_t nan = 0x7e00u | ((a >> 13) & 0x3ffu);
    /* Normal: rebias the exponent by 127 - 15, then round 23 -> 10 bits; a
     * mantissa carry correctly bumps the exponent. */
    const uint32_t u = a - 0x38000000u;
    const uint32_t normal = (u + 0xfffu + ((u >> 13) & 1u)) >> 13;
    /* Subnormal result, 2^-25 < |x| < 2^-14: |x| / 2^-24 rounded to nearest
     * even, i.e. the 24-bit significand shifted right by 14..24 (the shift is
     * clamped elsewhere only to stay defined).  Adding half - 1 + lsb before the
     * shift rounds to nearest even without a comparison. */
    const uint32_t e = a >> 23;
    const uint32_t s = 126u - e < 14u ? 14u : (126u - e > 24u ? 24u : 126u - e);
    const uint32_t m = (a & 0x007fffffu) | 0x00800000u;
    const uint32_t sub = (m + (1u << (s - 1u)) - 1u + ((m >> s) & 1u)) >> s;
    uint32_t r = 0; /* |x| <= 2^-25 rounds to zero (2^-25 itself is a tie, to even) */
    r = fc_cb_sel(a > 0x33000000u, sub, r);
    r = fc_cb_sel(a >= 0x38800000u, normal, r);
    r = fc_cb_sel(a >= 0x477ff000u, 0x7c00u, r); /* inf, or at least halfway 65504..65536 */
    r = fc_cb_sel(a > 0x7f800000u, nan, r);
    return (uint16_t)((sign | (r << 16)) >> 16);
}

#if defined(__cplusplus)
/*
 * Type tags for the CUDA templates: raw storage type plus the two halves of
 * every conversion.  fc_cb_convert<S, D>() is the single definition of a cast.
 */
struct fc_cb_f64 {
    typedef uint64_t raw;
    FC_CB_FN uint32_t to_f32(raw x)
    {
        return fc_cb_f64_to_f32(x);
    }
    FC_CB_FN raw from_f32(uint32_t x)
    {
        return fc_cb_f32_to_f64(x);
    }
};
struct fc_cb_f32 {
    typedef uint32_t raw;
    FC_CB_FN uint32_t to_f32(raw x)
    {
        return x;
    }
    FC_CB_FN raw from_f32(uint32_t x)
    {
        return x;
    }
};
struct fc_cb_f16 {
    typedef uint16_t raw;
    FC_CB_FN uint32_t to_f32(raw x)
    {
        return fc_cb_f16_to_f32(x);
    }
    FC_CB_FN raw from_f32(uint32_t x)
    {
        return fc_cb_f32_to_f16(x);
    }
};
struct fc_cb_bf16 {
    typedef uint16_t raw;
    FC_CB_FN uint32_t to_f32(raw x)
    {
        return fc_cb_bf16_to_f32(x);
    }
    FC_CB_FN raw from_f32(uint32_t x)
    {
        return fc_cb_f32_to_bf16(x);
    }
};
#endif

#endif
