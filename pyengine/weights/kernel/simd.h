/* The few vector operations kernel.c needs, on 256-bit vectors of clang's vector extensions.
 *
 * A vector of 32 bytes is two sub-blocks of 16 weights' codes. Clang lowers each operation to one AVX2
 * instruction, to two of SSE or wasm SIMD128 (a 256-bit vector is two 128-bit registers there), or to
 * plain scalar code on any other target. Only the products (byte_products: pmaddubsw; madd: pmaddwd,
 * i32x4.dot_i16x8_s) and lookup16 (pshufb) need the target's own intrinsic; everything else is portable C.
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
typedef uint8_t  u8x32  __attribute__((vector_size(32)));
typedef int8_t   i8x32  __attribute__((vector_size(32)));
typedef uint32_t u32x4  __attribute__((vector_size(16)));
typedef uint32_t u32x8  __attribute__((vector_size(32)));
typedef int16_t  i16x8  __attribute__((vector_size(16)));
typedef uint16_t u16x8  __attribute__((vector_size(16)));
typedef int32_t  i32x4  __attribute__((vector_size(16)));
typedef int16_t  i16x16 __attribute__((vector_size(32)));
typedef uint16_t u16x16 __attribute__((vector_size(32)));
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

/* a then b: 32 bytes */
INLINE u8x32 cat16(u8x16 a, u8x16 b) {
    return __builtin_shufflevector(a, b, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20,
                                   21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31);
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

/* ---- the products of weight codes and activation codes ----
 * x86 multiplies bytes by bytes (pmaddubsw, as ggml's AVX2 vec_dots), so its activation codes are int8.
 * SIMD128 has no such product that V8 runs in one instruction (i16x8.extmul is three or more), so the page
 * widens a sub-block's codes to int16 once, scales them there, and multiplies pairs of int16
 * (i32x4.dot_i16x8_s, one pmaddwd): its activation codes are int16, widened when they are rounded. Relaxed
 * SIMD has one (i16x8.relaxed_dot_i8x16_i7x16_s), so its build multiplies bytes as x86 does. */
#if defined(__wasm_relaxed_simd__) || (defined(__SSSE3__) && !defined(__wasm_simd128__))
#define CODE_BYTES 1
typedef int8_t code;

#if !defined(__wasm_relaxed_simd__)
/* pmaddubsw on 32 bytes (AVX2: one instruction; SSSE3: two halves): 16 int16 sums of adjacent products of w
   (unsigned) and x (signed); `sign`: w signed, taken as |w| times x with w's sign (ggml's mul_sum_i8_pairs) */
INLINE i16x16 maddubs(u8x32 w, i8x32 x, int sign) {
#if defined(__AVX2__)
    __m256i wv = (__m256i)w, xv = (__m256i)x;
    if (sign) xv = _mm256_sign_epi8(xv, wv), wv = _mm256_sign_epi8(wv, wv);
    return (i16x16)_mm256_maddubs_epi16(wv, xv);
#else
    __m128i d[2];
    for (int h = 0; h < 2; h++) {
        __m128i wh, xh;
        __builtin_memcpy(&wh, (const uint8_t *)&w + 16 * h, 16);
        __builtin_memcpy(&xh, (const int8_t *)&x + 16 * h, 16);
        if (sign) xh = _mm_sign_epi8(xh, wh), wh = _mm_sign_epi8(wh, wh);
        d[h] = _mm_maddubs_epi16(wh, xh);
    }
    i16x16 r;
    __builtin_memcpy(&r, d, 32);
    return r;
#endif
}

/* the same with x the 32 codes at a */
INLINE i16x16 maddubs32(u8x32 w, const code *a, int sign) {
    i8x32 x;
    __builtin_memcpy(&x, a, 32);
    return maddubs(w, x, sign);
}
#endif

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
typedef uint8_t u8x64 __attribute__((vector_size(64)));
typedef int8_t  i8x64 __attribute__((vector_size(64)));
typedef int16_t i16x32 __attribute__((vector_size(64)));
typedef int32_t i32x16 __attribute__((vector_size(64)));
/* acc plus the sums of 4 adjacent products of w (unsigned) and x (signed) in each int32 lane (vpdpbusd: exact,
   no int16 step); `sign`: w signed, taken as |w| times x with w's sign */
INLINE i32x16 dpbusd(i32x16 acc, u8x64 w, i8x64 x, int sign) {
    __m512i wv = (__m512i)w, xv = (__m512i)x;
    if (sign) xv = _mm512_mask_sub_epi8(xv, _mm512_movepi8_mask(wv), _mm512_setzero_si512(), xv),
              wv = _mm512_abs_epi8(wv);
    return (i32x16)_mm512_dpbusd_epi32((__m512i)acc, wv, xv);
}
/* acc plus the sums of adjacent int16 products of a and b in each int32 lane (vpdpwssd: pmaddwd and an add) */
INLINE i32x16 dpwssd(i32x16 acc, i16x32 a, i16x32 b) {
    return (i32x16)_mm512_dpwssd_epi32((__m512i)acc, (__m512i)a, (__m512i)b);
}
#endif

/* 32 weight codes w, unsigned < 128, times 32 activation codes a: 16 int16 sums of adjacent products (lane m:
   bytes 2m and 2m + 1), exact for |a| <= 127 (an activation code of -128 only comes with a NaN scale) */
INLINE i16x16 byte_products(u8x32 w, const code *a) {
#if defined(__wasm_relaxed_simd__)
    /* i16x8.relaxed_dot_i8x16_i7x16_s: pmaddubsw in V8 on x86; exact for 7-bit w */
    v128_t x[2], wh[2];
    __builtin_memcpy(x, a, 32);
    __builtin_memcpy(wh, &w, 32);
    const i16x8 lo = (i16x8)wasm_i16x8_relaxed_dot_i8x16_i7x16(x[0], wh[0]);
    const i16x8 hi = (i16x8)wasm_i16x8_relaxed_dot_i8x16_i7x16(x[1], wh[1]);
    return __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
#else
    return maddubs32(w, a, 0);
#endif
}

/* The same for signed codes w (|w| <= 127), scaled: 8 int32 lanes summing to sc0 * (products of bytes 0-15) +
   sc1 * (products of bytes 16-31). x86: |w| times a with w's sign; relaxed SIMD (whose byte product wants
   7-bit w): both widened to int16. */
INLINE i32x8 signed_products(u8x32 w, const code *a, i16x16 sc) {
#if defined(__wasm_relaxed_simd__)
    i8x16 x[2];
    __builtin_memcpy(x, a, 32);
    const i16x16 w0 = i8_to_i16((i8x16)__builtin_shufflevector(w, w, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13,
                                                               14, 15));
    const i16x16 w1 = i8_to_i16((i8x16)__builtin_shufflevector(w, w, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27,
                                                               28, 29, 30, 31));
    return madd(w0 * sc[0], i8_to_i16(x[0])) + madd(w1 * sc[8], i8_to_i16(x[1]));
#else
    return madd(maddubs32(w, a, 1), sc);
#endif
}
#else
#define CODE_BYTES 2
typedef int16_t code;
#endif

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

/* the lanes' sums of four vectors at once: (sum a, sum b, sum c, sum d), pairs of lanes added side by side
   (x86 phaddd) */
INLINE i32x8 hadd_i32(i32x8 a, i32x8 b) {
    return __builtin_shufflevector(a, b, 0, 2, 8, 10, 4, 6, 12, 14) + __builtin_shufflevector(a, b, 1, 3, 9, 11, 5, 7, 13, 15);
}
INLINE i32x4 hsum4_i32(i32x8 a, i32x8 b, i32x8 c, i32x8 d) {
    const i32x8 v = hadd_i32(hadd_i32(a, b), hadd_i32(c, d));   /* a0123 b0123 c0123 d0123 a4567 b4567 ... */
    return __builtin_shufflevector(v, v, 0, 1, 2, 3) + __builtin_shufflevector(v, v, 4, 5, 6, 7);
}
/* the lanes' sums of eight vectors at once: (sum s[0], ..., sum s[7]) */
INLINE i32x8 hsum8_i32(const i32x8 s[8]) {
    const i32x8 u = hadd_i32(hadd_i32(s[0], s[1]), hadd_i32(s[2], s[3]));   /* s0..s3's low halves, high halves */
    const i32x8 v = hadd_i32(hadd_i32(s[4], s[5]), hadd_i32(s[6], s[7]));
    return __builtin_shufflevector(u, v, 0, 1, 2, 3, 8, 9, 10, 11) + __builtin_shufflevector(u, v, 4, 5, 6, 7, 12, 13, 14, 15);
}

#endif
