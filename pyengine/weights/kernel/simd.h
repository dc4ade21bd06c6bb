/* The few vector operations kernel.c needs, on 256-bit vectors of clang's vector extensions.
 *
 * A vector of 16 int16 is one sub-block of 16 weights. Clang lowers each operation to one AVX2
 * instruction, to two of SSE or wasm SIMD128 (a 256-bit vector is two 128-bit registers there), or to
 * plain scalar code on any other target. Only madd (ggml's mul_sum_i8_pairs, pmaddwd) and lookup16
 * (pshufb) need the target's own intrinsic; everything else is portable C.
 */
#ifndef PYENGINE_SIMD_H
#define PYENGINE_SIMD_H

#include <stdint.h>

#if defined(__wasm_simd128__)
#include <wasm_simd128.h>
#elif defined(__AVX2__) || defined(__SSSE3__)
#include <immintrin.h>
#endif

typedef uint8_t  u8x16  __attribute__((vector_size(16)));
typedef int8_t   i8x16  __attribute__((vector_size(16)));
typedef int16_t  i16x8  __attribute__((vector_size(16)));
typedef uint16_t u16x8  __attribute__((vector_size(16)));
typedef int32_t  i32x4  __attribute__((vector_size(16)));
typedef int16_t  i16x16 __attribute__((vector_size(32)));
typedef int32_t  i32x8  __attribute__((vector_size(32)));
typedef float    f32x4  __attribute__((vector_size(16)));
typedef float    f32x8  __attribute__((vector_size(32)));

#define INLINE static inline __attribute__((always_inline))

/* 16 bytes from p (any alignment) */
INLINE u8x16 load_u8x16(const void *p) {
    u8x16 v;
    __builtin_memcpy(&v, p, sizeof v);
    return v;
}

/* 16 int16 from p (any alignment) */
INLINE i16x16 load_i16x16(const int16_t *p) {
    i16x16 v;
    __builtin_memcpy(&v, p, sizeof v);
    return v;
}

/* bytes as int16: zero-extended (u8_to_i16) or sign-extended (i8_to_i16) */
INLINE i16x16 u8_to_i16(u8x16 v) { return __builtin_convertvector(v, i16x16); }
INLINE i16x16 i8_to_i16(i8x16 v) { return __builtin_convertvector(v, i16x16); }

/* sums of adjacent products: r[i] = a[2i] * b[2i] + a[2i+1] * b[2i+1] (x86 pmaddwd, wasm i32x4.dot_i16x8_s) */
INLINE i32x8 madd(i16x16 a, i16x16 b) {
#if defined(__AVX2__)
    return (i32x8)_mm256_madd_epi16((__m256i)a, (__m256i)b);
#else
    const i16x8 a0 = __builtin_shufflevector(a, a, 0, 1, 2, 3, 4, 5, 6, 7);
    const i16x8 a1 = __builtin_shufflevector(a, a, 8, 9, 10, 11, 12, 13, 14, 15);
    const i16x8 b0 = __builtin_shufflevector(b, b, 0, 1, 2, 3, 4, 5, 6, 7);
    const i16x8 b1 = __builtin_shufflevector(b, b, 8, 9, 10, 11, 12, 13, 14, 15);
#if defined(__wasm_simd128__)
    const i32x4 r0 = (i32x4)wasm_i32x4_dot_i16x8((v128_t)a0, (v128_t)b0);
    const i32x4 r1 = (i32x4)wasm_i32x4_dot_i16x8((v128_t)a1, (v128_t)b1);
#elif defined(__SSE2__)
    const i32x4 r0 = (i32x4)_mm_madd_epi16((__m128i)a0, (__m128i)b0);
    const i32x4 r1 = (i32x4)_mm_madd_epi16((__m128i)a1, (__m128i)b1);
#else
    i32x4 r0, r1;
    for (int i = 0; i < 4; i++) {
        r0[i] = a0[2 * i] * b0[2 * i] + a0[2 * i + 1] * b0[2 * i + 1];
        r1[i] = a1[2 * i] * b1[2 * i] + a1[2 * i + 1] * b1[2 * i + 1];
    }
#endif
    return __builtin_shufflevector(r0, r1, 0, 1, 2, 3, 4, 5, 6, 7);
#endif
}

/* the 16 bytes table[idx[i]], each idx[i] < 16 (pshufb, i8x16.swizzle) */
INLINE i8x16 lookup16(i8x16 table, u8x16 idx) {
#if defined(__wasm_simd128__)
    return (i8x16)wasm_i8x16_swizzle((v128_t)table, (v128_t)idx);
#elif defined(__SSSE3__)
    return (i8x16)_mm_shuffle_epi8((__m128i)table, (__m128i)idx);
#else
    i8x16 r;
    for (int i = 0; i < 16; i++) r[i] = table[idx[i] & 15];
    return r;
#endif
}

/* 8 floats from p (any alignment) */
INLINE f32x8 load_f32x8(const float *p) {
    f32x8 v;
    __builtin_memcpy(&v, p, sizeof v);
    return v;
}

/* the 8 lanes' sum, in one fixed order on every target: (v0 + v4) + (v2 + v6) + ((v1 + v5) + (v3 + v7)) */
INLINE float hsum_f32(f32x8 v) {
    const f32x4 a = __builtin_shufflevector(v, v, 0, 1, 2, 3) + __builtin_shufflevector(v, v, 4, 5, 6, 7);
    const f32x4 b = a + __builtin_shufflevector(a, a, 2, 3, 0, 1);
    return b[0] + b[1];
}

INLINE int32_t hsum_i32(i32x8 v) {
    const i32x4 a = __builtin_shufflevector(v, v, 0, 1, 2, 3) + __builtin_shufflevector(v, v, 4, 5, 6, 7);
    const i32x4 b = a + __builtin_shufflevector(a, a, 2, 3, 0, 1);
    return b[0] + b[1];
}

#endif
