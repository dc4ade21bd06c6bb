/* pyengine's quantized products: weights in their GGUF blocks times activations rounded to 8-bit codes.
 *
 * This is ggml's CPU matrix product for the types pyengine reads (ggml-cpu/quants.c, the generic
 * ggml_vec_dot_<type>_q8_<x>; ggml-cpu/arch/wasm/quants.c for which SIMD sequences pay). As in ggml:
 * - the activations x (T tokens of n floats) are first rounded to 8-bit codes per block, the weight type's
 *   "vec_dot_type" (quantize_row_q8_0, q8_1, q8_K);
 * - each weight block is read as integer codes, integer sub-block scales and a float scale;
 * - a block's codes times x's codes are summed exactly as integers, and only then scaled:
 *
 *     y[t][r] += d_w * d_x * sum_i (sc_i * q_i * xq_i)  -  dmin_w * d_x * sum_j (min_j * bsum_j)
 *
 *   (the types with 32-weight blocks have no sub-block scales: sc = 1; Q4_1 and Q5_1 add m_w * s_x).
 *
 * Each type is two small functions that follow ggml's dequantize_row_<type>: head_<type> reads a
 * block's scales, sub_<type> the 16 codes of one of its sub-blocks as bytes. One dot product
 * (block_dot) and one loop over rows and tokens (mul_mat_type) then serve every type. A prompt runs
 * tokens in tiles over each block (four; eight on x86), so a sub-block's codes are read once for the tile,
 * and the tile's activation scales are laid out token by token once (tile_cols); on x86 a prompt takes 8
 * (AVX2) or 16 (AVX-512) rows at once instead, a row in each lane (rows_dot_32, rows_dot_k, as ggml's repacked
 * GEMMs). The 32-weight types sum a row's blocks in four running sums (LANES), the K types in one, in block
 * order; every target and tile adds the same floats in the same order, so wasm and native give the same bits.
 *
 * The products (the product step, codes_at and products) differ by target. On x86 two sub-blocks' codes
 * are multiplied as bytes by the activations' int8 codes and summed in pairs into int16 (pmaddubsw, as
 * ggml's AVX2 vec_dots), then scaled by the sub-blocks' scales into int32 (pmaddwd). pmaddubsw takes
 * unsigned weight codes, so the types whose codes are offset (Q4_0's q - 8, Q6_K's q - 32) multiply the
 * unsigned q and take off the offset times the activations' sums once a block, as ggml's AVX2 Q6_K does:
 * sum (q - o) * xq = sum q * xq - o * sum xq, the same integer; signed codes go through pmaddubsw as |q|
 * times xq with q's sign (mul_sum_i8_pairs). In wasm a sub-block's codes are widened to int16, centred and
 * scaled once, then multiplied by int16 activation codes (i32x4.dot_i16x8_s). The page's relaxed-SIMD
 * build takes x86's way (i16x8.relaxed_dot_i8x16_i7x16_s is pmaddubsw in V8; exact for 7-bit codes).
 *
 * Activations are not held as ggml's block_q8 structs but as one record per token (act_layout): the
 * codes (int8 on x86, int16 in wasm), the block scales, the sums of each 16 codes (ggml's bsums) and Q8_1's s. The integers are
 * ggml's exactly.
 *
 * At the end: attention's two float32 products over the KV cache, and a Gated DeltaNet layer between its two
 * products (its convolution, norms, gates and delta rule: some sixty small numpy calls a token), the loops
 * numpy runs slowest without SIMD (their float sums in one order on every target; e^x and log are our own,
 * as the wasm module has no libm).
 *
 * Safety: the Python wrapper (pyengine/weights/kernel/__init__.py) checks every buffer's size before a
 * call. The functions here check what they are told (the type, n a whole number of blocks, counts not
 * negative) and return a negative number for anything else; they never read outside the sizes those
 * numbers imply.
 */
#include <stddef.h>

#include "simd.h"

/* ggml's type numbers (ggml.h, enum ggml_type) */
enum {
    Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
    Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15, IQ4_NL = 20, IQ4_XS = 23,
};
enum { E_TYPE = -1, E_SIZE = -2 };   /* errors: an unknown type; n or a count that does not fit it */

#define QK 32                /* weights a block of the 32-weight types */
#define QK_K 256             /* weights a super-block of the K types and IQ4_XS */
#define TILE 4               /* tokens of a prompt multiplied at once by each block */
#define MAX_TILE 8           /* x86's tile: eight tokens a block, their sums in AVX2's 16 registers */
#define TOKEN_TILE 32        /* a prompt's tokens whose codes stay in cache while the rows pass */
#if CODE_BYTES == 1 && !defined(__wasm__)
#define WIDE_TILE 1          /* (wasm's relaxed build keeps four: V8 has 16 registers of 128 bits) */
#else
#define WIDE_TILE 0
#endif
#if defined(__wasm__)
#define SUMS4 0              /* a 32-weight row's four blocks at once in decode: slower in V8 (its shuffles) */
#else
#define SUMS4 1
#endif
#define PACKED __attribute__((packed))
#define UNROLL _Pragma("clang loop unroll(full)")   /* a loop of a few (constant) rounds, kept in registers */

/* ---- the blocks, as ggml-common.h declares them (half: an IEEE binary16 as its bits) ---- */
typedef uint16_t half;
typedef struct PACKED { half d; uint8_t qs[QK / 2]; } block_q4_0;
typedef struct PACKED { half d, m; uint8_t qs[QK / 2]; } block_q4_1;
typedef struct PACKED { half d; uint8_t qh[4]; uint8_t qs[QK / 2]; } block_q5_0;
typedef struct PACKED { half d, m; uint8_t qh[4]; uint8_t qs[QK / 2]; } block_q5_1;
typedef struct PACKED { half d; int8_t qs[QK]; } block_q8_0;
typedef struct PACKED { half d; uint8_t qs[QK / 2]; } block_iq4_nl;
typedef struct PACKED { uint8_t scales[QK_K / 16]; uint8_t qs[QK_K / 4]; half d, dmin; } block_q2_K;
typedef struct PACKED { uint8_t hmask[QK_K / 8]; uint8_t qs[QK_K / 4]; uint8_t scales[12]; half d; } block_q3_K;
typedef struct PACKED { half d, dmin; uint8_t scales[12]; uint8_t qs[QK_K / 2]; } block_q4_K;
typedef struct PACKED { half d, dmin; uint8_t scales[12]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; } block_q5_K;
typedef struct PACKED { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; half d; } block_q6_K;
typedef struct PACKED { half d; uint16_t scales_h; uint8_t scales_l[QK_K / 64]; uint8_t qs[QK_K / 2]; } block_iq4_xs;

_Static_assert(sizeof(block_q4_0) == 2 + 16, "q4_0");
_Static_assert(sizeof(block_q4_1) == 2 + 2 + 16, "q4_1");
_Static_assert(sizeof(block_q5_0) == 2 + 4 + 16, "q5_0");
_Static_assert(sizeof(block_q5_1) == 2 + 2 + 4 + 16, "q5_1");
_Static_assert(sizeof(block_q8_0) == 2 + 32, "q8_0");
_Static_assert(sizeof(block_q2_K) == 16 + 64 + 2 + 2, "q2_K");
_Static_assert(sizeof(block_q3_K) == 32 + 64 + 12 + 2, "q3_K");
_Static_assert(sizeof(block_q4_K) == 2 + 2 + 12 + 128, "q4_K");
_Static_assert(sizeof(block_q5_K) == 2 + 2 + 12 + 32 + 128, "q5_K");
_Static_assert(sizeof(block_q6_K) == 128 + 64 + 16 + 2, "q6_K");
_Static_assert(sizeof(block_iq4_xs) == 2 + 2 + 4 + 128, "iq4_xs");

/* the 16 values of IQ4_NL and IQ4_XS codes (ggml-common.h kvalues_iq4nl) */
static const i8x16 KVALUES_IQ4NL = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* ---- binary16 <-> float32 ---- */

static inline float bits_f32(uint32_t u) { float f; __builtin_memcpy(&f, &u, 4); return f; }
static inline uint32_t f32_bits(float f) { uint32_t u; __builtin_memcpy(&u, &f, 4); return u; }

/* h's value, exactly: its exponent and mantissa moved into a float32's and rescaled by 2^112
   (subnormals included); exponent 31 is infinity or NaN (ggml_compute_fp16_to_fp32) */
static inline float fp16_to_f32(half h) {
    uint32_t u = (uint32_t)(h & 0x7fff) << 13;
    float f = (h & 0x7c00) == 0x7c00 ? bits_f32(u | 0x7f800000) : bits_f32(u) * 0x1p112f;
    return (h & 0x8000) ? -f : f;
}

/* every binary16's value, looked up in the hot loops (ggml's table_f32_f16): one load instead of the
   conversion's dozen operations; filled by pe_mul_mat's first call */
static float FP16[1 << 16];
static int fp16_filled;

static void fill_fp16(void) {
    for (uint32_t h = 0; h < (1u << 16); h++) FP16[h] = fp16_to_f32((half)h);
    fp16_filled = 1;
}

INLINE float fp16(half h) { return FP16[h]; }

/* f rounded to the nearest binary16, ties to even (ggml_compute_fp32_to_fp16): scaling |f| by 2^112
   then 2^-110 lets the float adder round the mantissa at binary16's precision */
static inline half f32_to_fp16(float f) {
    const uint32_t w = f32_bits(f), shl1 = w + w, sign = w & 0x80000000u;
    uint32_t bias = shl1 & 0xff000000u;
    if (bias < 0x71000000u) bias = 0x71000000u;
    const float base = bits_f32((bias >> 1) + 0x07800000u) + __builtin_fabsf(f) * 0x1p112f * 0x1p-110f;
    const uint32_t bits = f32_bits(base);
    const uint32_t nonsign = ((bits >> 13) & 0x7c00u) + (bits & 0x0fffu);
    return (half)((sign >> 16) | (shl1 > 0xff000000u ? 0x7e00u : nonsign));
}

/* ---- activations: one record a token ----
 * code q[n] (int8 on x86, int16 on wasm: simd.h's CODE_BYTES); float d[n / block]; int16 bsum[n / 16]; Q8_1 only: float s[n / 32] (ggml's s: fp16(d * sum q)).
 * block is 32 (Q8_0, Q8_1) or 256 (Q8_K). Records follow each other every act_bytes(type, n) bytes. */

typedef struct { code *q; float *d; int16_t *bsum; float *s; } act_view;

static int act_block(int type) { return type == Q8_K ? QK_K : type == Q8_0 || type == Q8_1 ? QK : 0; }

/* A record's bytes: an odd number of cache lines of 64, so that the same field of many tokens' records falls
   in as many sets of a cache (a tile reads block b of 32 tokens at once; records 2^k lines apart would share a
   few sets: 2 of L1's 64 at n = 8192, 32 tokens where 12 fit) */
static ptrdiff_t act_bytes(int type, ptrdiff_t n) {
    const ptrdiff_t bytes = CODE_BYTES * n + 4 * (n / act_block(type)) + 2 * (n / 16) + (type == Q8_1 ? 4 * (n / QK) : 0);
    const ptrdiff_t lines = (bytes + 63) / 64;
    return 64 * (lines | 1);
}

static act_view act_at(int type, uint8_t *rec, ptrdiff_t n) {
    act_view a;
    a.q = (code *)rec;
    a.d = (float *)(rec + CODE_BYTES * n);
    a.bsum = (int16_t *)(rec + CODE_BYTES * n + 4 * (n / act_block(type)));
    a.s = type == Q8_1 ? (float *)((uint8_t *)a.bsum + 2 * (n / 16)) : 0;
    return a;
}

/* 32 floats as ggml-cpu x86's quantize_row_q8_0 / q8_1 (AVX2) round them: d = max|x| / 127, codes
   round(x * 127 / max|x|) half to even; d stored as fp16. Returns the sum of the codes. */
/* v within [lo, hi], and lo for a NaN: never a NaN or infinity at a float -> int conversion (a wasm trap) */
static inline float clamp(float v, float lo, float hi) { return v >= lo ? (v <= hi ? v : hi) : lo; }

/* A block holding a NaN or an infinity gets a NaN scale, so that every product with it is NaN, as a float
   product would be (the codes alone would hide it: a NaN rounds to a finite code). `finite`: |x| of one value
   is a finite number (false for a NaN), checked in the pass that finds the block's largest |x|. */
static inline int finite(float ax) { return ax <= 3.40282347e38f; }

static int quantize_block_q8_0(const float *x, code *q, float *d, float *d_exact) {
    float amax = 0;
    int ok = 1;
    for (int i = 0; i < QK; i++) {
        const float ax = __builtin_fabsf(x[i]);
        ok &= finite(ax);
        amax = ax > amax ? ax : amax;
    }
    const float id = amax != 0 ? 127.f / amax : 0.f;
    int sum = 0;
    for (int i = 0; i < QK; i++) {
        q[i] = (code)clamp(__builtin_roundevenf(x[i] * id), -127.f, 127.f);
        sum += q[i];
    }
    *d_exact = ok ? amax / 127.f : __builtin_nanf("");
    *d = fp16_to_f32(f32_to_fp16(*d_exact));
    return sum;
}
static void quantize_block_q8_K(const float *x, code *q, float *d) {
    float amax = 0, max = 0;
    int ok = 1;
    for (int i = 0; i < QK_K; i++) {
        const float ax = __builtin_fabsf(x[i]);
        ok &= finite(ax);
        if (ax > amax) { amax = ax; max = x[i]; }
    }
    if (amax == 0) {                                      /* zeros, or NaNs only */
        for (int i = 0; i < QK_K; i++) q[i] = 0;
        *d = ok ? 0 : __builtin_nanf("");
        return;
    }
    const float iscale = -127.f / max;
    for (int i = 0; i < QK_K; i++)
        q[i] = (code)clamp(__builtin_roundevenf(iscale * x[i]), -128.f, 127.f);
    *d = ok ? 1 / iscale : __builtin_nanf("");
}

static void quantize_row(int type, const float *x, ptrdiff_t n, uint8_t *rec) {
    const act_view a = act_at(type, rec, n);
    if (type == Q8_K) {
        for (ptrdiff_t b = 0; b < n / QK_K; b++) quantize_block_q8_K(x + b * QK_K, a.q + b * QK_K, a.d + b);
    } else {
        for (ptrdiff_t b = 0; b < n / QK; b++) {
            float d_exact;
            const int sum = quantize_block_q8_0(x + b * QK, a.q + b * QK, a.d + b, &d_exact);
            if (a.s) a.s[b] = fp16_to_f32(f32_to_fp16(d_exact * (float)sum));
        }
    }
    for (ptrdiff_t j = 0; j < n / 16; j++) {
        int sum = 0;
        for (int i = 0; i < 16; i++) sum += a.q[16 * j + i];
        a.bsum[j] = (int16_t)sum;
    }
}

/* ---- weights: each type's blocks read as codes and scales ----
 * For each type, head_<type> reads a block's scales (the float d and m, the integer scale and min of each
 * sub-block of 16 weights) and sub_<type>(block, j) the 16 codes of sub-block j as bytes: the type's
 * signed codes (the OFF column of WEIGHT_TYPES says SIGNED), or unsigned codes q of weights whose integer
 * is q - OFF (Q4_0's q - 8; 0 for the types with mins). sub_ is called with a
 * constant j in an unrolled loop, so the bytes sub-blocks share are loaded once. */

typedef struct {
    i16x16 sc;               /* lane j: sub-block j's integer scale (K types) */
    i16x16 mins;             /* lane j: sub-block j's integer min (Q2_K, Q4_K, Q5_K) */
    float d, m;              /* w = d * sc_j * q - m * min_j (K types), w = d * q + m (Q4_1, Q5_1) */
} head;

/* low and high nibbles of 16 bytes */
INLINE u8x16 lo4(u8x16 v) { return v & 15; }
INLINE u8x16 hi4(u8x16 v) { return v >> 4; }
/* 16 bytes' nibbles: the low ones for sub-block 0, the high ones for 1 */
INLINE u8x16 nibbles(const uint8_t *qs, int j) { return j ? hi4(load_u8x16(qs)) : lo4(load_u8x16(qs)); }
/* each byte of v shifted left by `by` (right for by < 0) and masked with `mask`, the bits it keeps never
   crossing a byte (shifted as int16 lanes: one wasm shift, where a byte shift is several) */
INLINE u8x16 shift_mask(u8x16 v, int by, uint8_t mask) {
    return (u8x16)(by >= 0 ? (u16x8)v << by : (u16x8)v >> -by) & mask;
}

/* ggml dequantize_row_q4_0: w = d * (q - 8), q the low nibbles of qs then the high ones */
INLINE void head_q4_0(const void *p, head *h) { h->d = fp16(((const block_q4_0 *)p)->d); }
INLINE u8x16 sub_q4_0(const void *p, int j) { return nibbles(((const block_q4_0 *)p)->qs, j); }

/* dequantize_row_q4_1: w = d * q + m */
INLINE void head_q4_1(const void *p, head *h) {
    const block_q4_1 *b = p;
    h->d = fp16(b->d);
    h->m = fp16(b->m);
}
INLINE u8x16 sub_q4_1(const void *p, int j) { return nibbles(((const block_q4_1 *)p)->qs, j); }

/* byte k: 16 where bit k of the 16 bits at p is set, else 0 (ggml's bytes_from_bits_32, for 16 bits): each
   byte of the two spread over 8 lanes, each lane testing its own bit */
INLINE u8x16 bits_as_16(const uint8_t *p) {
    const u8x16 bit = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    u16x8 two = {0};
    __builtin_memcpy(&two, p, 2);
    const u8x16 b = __builtin_shufflevector((u8x16)two, (u8x16)two, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    return (u8x16)((b & bit) == bit) & 16;
}

#if CODE_BYTES == 1
/* Both sub-blocks of a Q5 block at once (x86's product step takes 32 codes): the 32 bits of qh spread over
   32 lanes in one go, and the low nibbles then the high ones of qs */
INLINE u8x32 q5_pair(const uint8_t *qs, const uint8_t *qh) {
    const u8x32 bit = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128,
                       1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    uint32_t four;
    __builtin_memcpy(&four, qh, 4);
    const u8x32 all = (u8x32)((uint32_t __attribute__((vector_size(32)))){0} + four);
    const u8x32 b = __builtin_shufflevector(all, all, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                            2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const u8x16 q = load_u8x16(qs);
    return cat16(lo4(q), hi4(q)) | ((u8x32)((b & bit) == bit) & 16);
}
#endif

/* dequantize_row_q5_0 / q5_1: a nibble, and bit j of qh as the fifth bit of weight j */
INLINE u8x16 q5_codes(const uint8_t *qs, const uint8_t *qh, int j) { return nibbles(qs, j) | bits_as_16(qh + 2 * j); }
INLINE void head_q5_0(const void *p, head *h) { h->d = fp16(((const block_q5_0 *)p)->d); }
INLINE u8x16 sub_q5_0(const void *p, int j) {
    const block_q5_0 *b = p;
    return q5_codes(b->qs, b->qh, j);
}
INLINE void head_q5_1(const void *p, head *h) {
    const block_q5_1 *b = p;
    h->d = fp16(b->d);
    h->m = fp16(b->m);
}
INLINE u8x16 sub_q5_1(const void *p, int j) {
    const block_q5_1 *b = p;
    return q5_codes(b->qs, b->qh, j);
}

/* dequantize_row_q8_0: w = d * q, q int8 */
INLINE void head_q8_0(const void *p, head *h) { h->d = fp16(((const block_q8_0 *)p)->d); }
INLINE u8x16 sub_q8_0(const void *p, int j) { return load_u8x16(((const block_q8_0 *)p)->qs + 16 * j); }

/* dequantize_row_iq4_nl: codes looked up in kvalues_iq4nl */
INLINE void head_iq4_nl(const void *p, head *h) { h->d = fp16(((const block_iq4_nl *)p)->d); }
INLINE u8x16 sub_iq4_nl(const void *p, int j) {
    return (u8x16)lookup16(KVALUES_IQ4NL, nibbles(((const block_iq4_nl *)p)->qs, j));
}

/* dequantize_row_q2_K: 2-bit codes; scales[j] holds sub-block j's scale (low nibble) and min (high) */
INLINE void head_q2_K(const void *p, head *h) {
    const block_q2_K *b = p;
    const u8x16 s = load_u8x16(b->scales);
    h->sc = u8_to_i16(lo4(s));
    h->mins = u8_to_i16(hi4(s));
    h->d = fp16(b->d);
    h->m = fp16(b->dmin);
}
/* sub-block j: half j / 8 of 128 weights, bits 2k..2k+1 (k = j % 8 / 2) of 16 bytes (j % 2) of its 32 */
INLINE u8x16 sub_q2_K(const void *p, int j) {
    const u8x16 v = load_u8x16(((const block_q2_K *)p)->qs + 32 * (j / 8) + 16 * (j % 2));
    return shift_mask(v, -2 * (j % 8 / 2), 3);
}

/* dequantize_row_q3_K: 2 low bits as Q2_K's, a high bit in hmask (clear: -4, so q - 4 with the bit as 4);
   6-bit scales - 32 */
INLINE void head_q3_K(const void *p, head *h) {
    const block_q3_K *b = p;
    uint32_t a[4];
    __builtin_memcpy(a, b->scales, 12);
    const uint32_t m1 = 0x03030303, m2 = 0x0f0f0f0f, t = a[2];
    a[2] = ((a[0] >> 4) & m2) | (((t >> 4) & m1) << 4);
    a[3] = ((a[1] >> 4) & m2) | (((t >> 6) & m1) << 4);
    a[0] = (a[0] & m2) | (((t >> 0) & m1) << 4);
    a[1] = (a[1] & m2) | (((t >> 2) & m1) << 4);
    h->sc = i8_to_i16((i8x16)load_u8x16(a)) - 32;
    h->d = fp16(b->d);
}
INLINE u8x16 sub_q3_K(const void *p, int j) {
    const block_q3_K *b = p;
    const int k = j % 8 / 2;
    const u8x16 v = load_u8x16(b->qs + 32 * (j / 8) + 16 * (j % 2));
    const u8x16 high = shift_mask(load_u8x16(b->hmask + 16 * (j % 2)), 2 - (4 * (j / 8) + k), 4);
    return shift_mask(v, -2 * k, 3) | high;
}

/* get_scale_min_k4: Q4_K's and Q5_K's 8 6-bit scales and mins, one for 32 weights (two sub-blocks) */
INLINE void scales_k4(const uint8_t *q, head *h) {
    uint32_t u[4];                                        /* ggml's kmask unpacking, four 6-bit values a word */
    __builtin_memcpy(u, q, 12);
    const uint32_t m1 = 0x3f3f3f3f, m2 = 0x0f0f0f0f, m3 = 0x03030303;
    u[3] = ((u[2] >> 4) & m2) | (((u[1] >> 6) & m3) << 4);
    const uint32_t mins_lo = u[1] & m1;
    u[1] = (u[2] & m2) | (((u[0] >> 6) & m3) << 4);
    u[2] = mins_lo;
    u[0] &= m1;
    u8x16 b;
    __builtin_memcpy(&b, u, 16);                          /* scales 0..7, mins 0..7: each for 2 sub-blocks */
    h->sc = u8_to_i16(__builtin_shufflevector(b, b, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7));
    h->mins = u8_to_i16(__builtin_shufflevector(b, b, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15));
}

/* dequantize_row_q4_K: groups of 64 weights, the low nibbles of 32 bytes then their high nibbles */
INLINE void head_q4_K(const void *p, head *h) {
    const block_q4_K *b = p;
    scales_k4(b->scales, h);
    h->d = fp16(b->d);
    h->m = fp16(b->dmin);
}
INLINE u8x16 sub_q4_K(const void *p, int j) {
    return nibbles(((const block_q4_K *)p)->qs + 32 * (j / 4) + 16 * (j % 2), j % 4 / 2);
}

/* dequantize_row_q5_K: Q4_K's codes plus 16 where bit 2g (low nibbles) or 2g+1 (high) of qh is set */
INLINE void head_q5_K(const void *p, head *h) {
    const block_q5_K *b = p;
    scales_k4(b->scales, h);
    h->d = fp16(b->d);
    h->m = fp16(b->dmin);
}
INLINE u8x16 sub_q5_K(const void *p, int j) {
    const block_q5_K *b = p;
    const u8x16 high = shift_mask(load_u8x16(b->qh + 16 * (j % 2)), 4 - (2 * (j / 4) + j % 4 / 2), 16);
    return nibbles(b->qs + 32 * (j / 4) + 16 * (j % 2), j % 4 / 2) | high;
}

/* dequantize_row_q6_K: 4 low bits in ql, 2 high bits in qh, minus 32; an int8 scale for 16 weights.
   Sub-block j: half j / 8; in it, 16 bytes c = j % 2 of the low nibbles of ql[0..31] (k = 0), of
   ql[32..63] (1), their high nibbles (2, 3), each with bits 2k..2k+1 of qh */
INLINE void head_q6_K(const void *p, head *h) {
    const block_q6_K *b = p;
    h->sc = i8_to_i16((i8x16)load_u8x16(b->scales));
    h->d = fp16(b->d);
}
INLINE u8x16 sub_q6_K(const void *p, int j) {
    const block_q6_K *b = p;
    const int c = j % 2, k = j % 8 / 2;
    const u8x16 lo = nibbles(b->ql + 64 * (j / 8) + 32 * (k % 2) + 16 * c, k / 2);
    const u8x16 hi = shift_mask(load_u8x16(b->qh + 32 * (j / 8) + 16 * c), 4 - 2 * k, 0x30);   /* bits 2k, 2k+1 */
    return lo | hi;
}

/* dequantize_row_iq4_xs: kvalues_iq4nl codes, a 6-bit scale - 32 for 32 weights */
INLINE void head_iq4_xs(const void *p, head *h) {
    const block_iq4_xs *b = p;
    for (int ib = 0; ib < 8; ib++) {
        const int ls = ((b->scales_l[ib / 2] >> 4 * (ib % 2)) & 0xf) | (((b->scales_h >> 2 * ib) & 3) << 4);
        h->sc[2 * ib] = h->sc[2 * ib + 1] = (int16_t)(ls - 32);
    }
    h->d = fp16(b->d);
}
INLINE u8x16 sub_iq4_xs(const void *p, int j) {
    return (u8x16)lookup16(KVALUES_IQ4NL, nibbles(((const block_iq4_xs *)p)->qs + 16 * (j / 2), j % 2));
}

/* ---- the product ---- */

#define SIGNED (-1)          /* OFF of the types whose sub_ gives signed codes */

/* every weight type: its name, ggml number, weights a block, block struct, activations' type, has mins,
   the offset its unsigned codes carry (or SIGNED); and for x86's rows in lanes (rows_dot_pieces), PIECES: the
   pieces of 4 codes one scale covers (weights a scale / 4; a 32-weight block: 8), and SUMS16: how many
   pmaddubsw results int16 holds, 32767 / (2 * 127 * largest |code|), at most 8 */
#define WEIGHT_TYPES(X)                                         \
    X(q4_0, Q4_0, QK, block_q4_0, Q8_0, 0, 8, 8, 8)             \
    X(q4_1, Q4_1, QK, block_q4_1, Q8_1, 1, 0, 8, 8)             \
    X(q5_0, Q5_0, QK, block_q5_0, Q8_0, 0, 16, 8, 4)            \
    X(q5_1, Q5_1, QK, block_q5_1, Q8_1, 1, 0, 8, 4)             \
    X(q8_0, Q8_0, QK, block_q8_0, Q8_0, 0, SIGNED, 8, 1)        \
    X(iq4_nl, IQ4_NL, QK, block_iq4_nl, Q8_0, 0, SIGNED, 8, 1)  \
    X(q2_K, Q2_K, QK_K, block_q2_K, Q8_K, 1, 0, 4, 8)           \
    X(q3_K, Q3_K, QK_K, block_q3_K, Q8_K, 0, 4, 4, 8)           \
    X(q4_K, Q4_K, QK_K, block_q4_K, Q8_K, 1, 0, 8, 8)           \
    X(q5_K, Q5_K, QK_K, block_q5_K, Q8_K, 1, 0, 8, 4)           \
    X(q6_K, Q6_K, QK_K, block_q6_K, Q8_K, 0, 32, 4, 2)          \
    X(iq4_xs, IQ4_XS, QK_K, block_iq4_xs, Q8_K, 0, SIGNED, 8, 1)

typedef struct {
    int type, qk, bytes, act, mins, off, pieces, sums16;
    void (*head)(const void *, head *);
    u8x16 (*sub)(const void *, int);
} type_info;

#define TYPE_INFO(name, T, qk, block, act, mins, off, pieces, sums16) \
    {T, qk, sizeof(block), act, mins, off, pieces, sums16, head_##name, sub_##name}
#define TYPE_ITEM(...) TYPE_INFO(__VA_ARGS__),
static const type_info TYPES[] = {WEIGHT_TYPES(TYPE_ITEM)};

static const type_info *type_of(int type) {
    for (unsigned i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++)
        if (TYPES[i].type == type) return &TYPES[i];
    return 0;
}

/* ---- a product step: SUBS sub-blocks' codes (read once) times each token's codes ----
 * x86: two sub-blocks' 32 bytes, unsigned (the offset, if any, taken off later with the activations' sums)
 * or signed, through pmaddubsw, then scaled by pmaddwd. wasm: one sub-block's codes widened to int16,
 * centred (q - off) and scaled, then pmaddwd with the int16 activation codes. Either way 8 int32 lanes whose
 * sum is the step's exact integer sum sc_j * sum (q - off) * xq, less off * sc_j * bsum_j on x86. */
#if CODE_BYTES == 1
#define SUBS 2
#define OFFSET_BY_SUMS 1
typedef struct { u8x32 q; i16x16 sc; } wcodes;
INLINE wcodes codes_at(const type_info *t, const uint8_t *blk, int j, const int16_t *sc) {
    const int16_t s0 = sc[0], s1 = sc[1];
    const u8x32 q = t->type == Q5_0 ? q5_pair(((const block_q5_0 *)blk)->qs, ((const block_q5_0 *)blk)->qh)
                  : t->type == Q5_1 ? q5_pair(((const block_q5_1 *)blk)->qs, ((const block_q5_1 *)blk)->qh)
                  : cat16(t->sub(blk, j), t->sub(blk, j + 1));
    return (wcodes){q, {s0, s0, s0, s0, s0, s0, s0, s0, s1, s1, s1, s1, s1, s1, s1, s1}};
}
INLINE i32x8 products(const type_info *t, wcodes w, const code *a) {
    return t->off == SIGNED ? signed_products(w.q, a, w.sc) : madd(byte_products(w.q, a), w.sc);
}
#else
#define SUBS 1
#define OFFSET_BY_SUMS 0
typedef i16x16 wcodes;
INLINE wcodes codes_at(const type_info *t, const uint8_t *blk, int j, const int16_t *sc) {
    const u8x16 c = t->sub(blk, j) - (uint8_t)(t->off > 0 ? t->off : 0);     /* centred as bytes: one op */
    return (t->off ? i8_to_i16((i8x16)c) : u8_to_i16(c)) * sc[0];
}
INLINE i32x8 products(const type_info *t, wcodes w, const code *a) { (void)t; return madd(w, load_i16x16(a)); }
#endif

static const int16_t ONES[2] = {1, 1};

/* x86, unsigned codes of weights q - off: off times the sums of block b's activation codes, each sub-block's
   scaled as its weights are (K types; h unused otherwise), to take off the block's integer sum; else 0 */
INLINE int32_t offset_sum(const type_info *t, const head *h, const act_view *a, ptrdiff_t b) {
    if (!OFFSET_BY_SUMS || t->off <= 0) return 0;
    const int16_t *bsum = a->bsum + b * (t->qk / 16);
    return t->off * (t->qk == QK_K ? hsum_i32(madd(h->sc, load_i16x16(bsum))) : bsum[0] + bsum[1]);
}

/* One block times nt tokens' codes (act records acts[0..nt-1], block b of each), added to acc[i]:
   ggml_vec_dot_<type>_q8_<x> for one block, its generic form: the block's exact integer sum, then one
   float product, added to the row's running sum in block order. Two sub-blocks' 32 codes are read once
   for the nt tokens. On x86, unsigned codes of weights q - off: sum sc_j (q - off) xq =
   sum sc_j q xq - off sum sc_j bsum_j. */
INLINE void block_dot(const type_info *t, const uint8_t *blk, const act_view *acts, int nt, ptrdiff_t b,
                      float *acc) {
    head h;
    t->head(blk, &h);
    i32x8 s[MAX_TILE];
    UNROLL for (int i = 0; i < nt; i++) s[i] = (i32x8){0};
    int16_t sc[QK_K / 16];
    UNROLL for (int j = 0; j < t->qk / 16; j++) sc[j] = t->qk == QK_K ? h.sc[j] : 1;
    UNROLL for (int j = 0; j < t->qk / 16; j += SUBS) {
        const wcodes w = codes_at(t, blk, j, sc + j);
        UNROLL for (int i = 0; i < nt; i++) s[i] += products(t, w, acts[i].q + b * t->qk + 16 * j);
    }
    UNROLL for (int i = 0; i < nt; i++) {
        const float dx = acts[i].d[b];
        int32_t sum = hsum_i32(s[i]);
        sum -= offset_sum(t, &h, &acts[i], b);
        float y = (h.d * dx) * (float)sum;
        if (t->mins && t->qk == QK) {                     /* Q4_1, Q5_1: + m * s */
            y += h.m * acts[i].s[b];
        } else if (t->mins) {                             /* K types: - dmin * d_x * sum_j min_j bsum_j */
            const int32_t m = hsum_i32(madd(h.mins, load_i16x16(acts[i].bsum + b * (QK_K / 16))));
            y -= (h.m * dx) * (float)m;
        }
        acc[i] += y;
    }
}

/* The 32-weight types' rows sum their blocks in LANES running sums, block b's product in sum b % LANES, then
   (s0 + s1) + (s2 + s3): four chains of float adds, not one, on every target and for every tile (so the
   bits are the same in wasm and native, one token or a prompt's). The K types, eight times fewer blocks a
   row, keep one sum in block order. */
#define LANES 4
INLINE float lane_sum(const float *s, ptrdiff_t step) { return (s[0] + s[step]) + (s[2 * step] + s[3 * step]); }

/* x86: four sums at once: four blocks of a row times one token (decode; the row read in order, as memory
   streams best: four rows side by side ran at half the speed on a matrix past the caches), or one row times
   a tile of tokens (a prompt). Each lane's float products are block_dot's, (d_w * d_x) * sum (+ m_w * s_x:
   Q4_1, Q5_1). */
INLINE f32x4 scaled4(i32x8 s[4], i32x4 offsets, f32x4 dw, f32x4 dx) {
    return (dw * dx) * __builtin_convertvector(hsum4_i32(s[0], s[1], s[2], s[3]) - offsets, f32x4);
}

INLINE f32x4 load_f32x4(const float *p) { f32x4 v; __builtin_memcpy(&v, p, sizeof v); return v; }
INLINE i32x4 load_i32x4(const int32_t *p) { i32x4 v; __builtin_memcpy(&v, p, sizeof v); return v; }

/* offset_sum of four 32-weight blocks b..b+3 at once */
INLINE i32x4 offset_sums4(const type_info *t, const act_view *a, ptrdiff_t b) {
    if (!OFFSET_BY_SUMS || t->off <= 0) return (i32x4){0};
    i16x8 p;
    __builtin_memcpy(&p, a->bsum + 2 * b, sizeof p);
    const i32x4 lo = __builtin_convertvector(__builtin_shufflevector(p, p, 0, 2, 4, 6), i32x4);
    return t->off * (lo + __builtin_convertvector(__builtin_shufflevector(p, p, 1, 3, 5, 7), i32x4));
}

INLINE void row_dot_32(const type_info *t, const uint8_t *row, ptrdiff_t nb, const act_view *a, float *y) {
    f32x4 acc = {0};                                          /* lane k: the blocks b % 4 == k */
    ptrdiff_t b = 0;
    for (; b + 4 <= nb; b += 4) {
        i32x8 s[4];
        f32x4 dw, mw = {0};
        UNROLL for (int k = 0; k < 4; k++) {
            const uint8_t *blk = row + (b + k) * t->bytes;
            head h;
            t->head(blk, &h);
            dw[k] = h.d;
            if (t->mins) mw[k] = h.m;
            s[k] = (i32x8){0};
            UNROLL for (int j = 0; j < 2; j += SUBS)
                s[k] += products(t, codes_at(t, blk, j, ONES), a->q + (b + k) * QK + 16 * j);
        }
        f32x4 v = scaled4(s, offset_sums4(t, a, b), dw, load_f32x4(a->d + b));
        if (t->mins) v += mw * load_f32x4(a->s + b);
        acc += v;
    }
    float lanes[LANES] = {acc[0], acc[1], acc[2], acc[3]};
    for (; b < nb; b++) block_dot(t, row + b * t->bytes, a, 1, b, lanes + b % LANES);
    *y = lane_sum(lanes, 1);
}

/* A prompt tile's columns: for MAX_TILE tokens, each block's activation scale, offset sum (offset_sum) and
   Q8_1's s, token by token in one place, so a block's lanes load them at once (not one token's record at a
   time) while every row passes. COLS blocks at a time (48 KB on the stack; 12 KB in wasm, whose stack is
   Pyodide's): the K types' rows in pieces, their sums carried in y; a 32-weight type's whole row (its four
   sums cannot be carried), or row_dot for a row past COLS blocks (n > 16384). */
#if defined(__wasm__)
#define COLS 128
#else
#define COLS 512
#endif
typedef struct { float d[COLS][MAX_TILE], s[COLS][MAX_TILE]; int32_t off[COLS][MAX_TILE]; } tile_cols;

INLINE void fill_cols(const type_info *t, const act_view *acts, int nt, ptrdiff_t b0, ptrdiff_t b1, tile_cols *c) {
    for (ptrdiff_t b = b0; b < b1; b++)
        UNROLL for (int i = 0; i < nt; i++) {
            c->d[b - b0][i] = acts[i].d[b];
            if (t->qk == QK_K) continue;                  /* a K type's offsets go by its block's scales */
            c->s[b - b0][i] = t->mins ? acts[i].s[b] : 0;
            c->off[b - b0][i] = offset_sum(t, 0, &acts[i], b);
        }
}

/* a row of nb <= COLS blocks times a tile of nt tokens (columns c: fill_cols's), into y[i * ldy] */
INLINE void row_dot_32_tile(const type_info *t, const uint8_t *row, ptrdiff_t nb, const act_view *acts,
                            const tile_cols *c, int nt, float *y, ptrdiff_t ldy) {
    f32x4 acc[LANES][MAX_TILE / 4];
    UNROLL for (int k = 0; k < LANES; k++) UNROLL for (int g = 0; g < nt / 4; g++) acc[k][g] = (f32x4){0};
    for (ptrdiff_t b4 = 0; b4 < nb; b4 += LANES) UNROLL for (int k = 0; k < LANES; k++) {
        const ptrdiff_t b = b4 + k;
        if (b >= nb) break;
        const uint8_t *blk = row + b * t->bytes;
        head h;
        t->head(blk, &h);
        wcodes w[2 / SUBS];
        UNROLL for (int j = 0; j < 2; j += SUBS) w[j / SUBS] = codes_at(t, blk, j, ONES);
        UNROLL for (int g = 0; g < nt / 4; g++) {           /* four tokens' sums at a time */
            const act_view *a = acts + 4 * g;
            i32x8 s[4];
            UNROLL for (int i = 0; i < 4; i++) {
                s[i] = (i32x8){0};
                UNROLL for (int j = 0; j < 2; j += SUBS) s[i] += products(t, w[j / SUBS], a[i].q + b * QK + 16 * j);
            }
            f32x4 v = scaled4(s, load_i32x4(c->off[b] + 4 * g), (f32x4){0} + h.d, load_f32x4(c->d[b] + 4 * g));
            if (t->mins) v += h.m * load_f32x4(c->s[b] + 4 * g);
            acc[k][g] += v;
        }
    }
    UNROLL for (int i = 0; i < nt; i++) {
        float lanes[LANES];
        UNROLL for (int k = 0; k < LANES; k++) lanes[k] = acc[k][i / 4][i % 4];
        y[i * ldy] = lane_sum(lanes, 1);
    }
}

/* A K type's tile: KTILE tokens, each a lane, their sums taken at once (x86: eight, hsum8_i32; wasm: four,
   hsum4_i32) */
#if WIDE_TILE
#define KTILE MAX_TILE
typedef f32x8 ktile_f;
typedef i32x8 ktile_i;
INLINE ktile_i ktile_sums(const i32x8 s[KTILE]) { return hsum8_i32(s); }
INLINE ktile_f ktile_load(const float *p) { return load_f32x8(p); }
#else
#define KTILE TILE
typedef f32x4 ktile_f;
typedef i32x4 ktile_i;
INLINE ktile_i ktile_sums(const i32x8 s[KTILE]) { return hsum4_i32(s[0], s[1], s[2], s[3]); }
INLINE ktile_f ktile_load(const float *p) { return load_f32x4(p); }
#endif

/* A K type's row times a tile of KTILE tokens (blocks b0..b1, columns c), added to y[i * ldy] (first: y
   starts at 0): block_dot's integers and float steps, each token a lane */
INLINE void row_dot_k_tile(const type_info *t, const uint8_t *row, ptrdiff_t b0, ptrdiff_t b1, const act_view *acts,
                           const tile_cols *c, int first, float *y, ptrdiff_t ldy) {
    ktile_f acc;
    UNROLL for (int i = 0; i < KTILE; i++) acc[i] = first ? 0 : y[i * ldy];
    for (ptrdiff_t b = b0; b < b1; b++) {
        const uint8_t *blk = row + b * t->bytes;
        head h;
        t->head(blk, &h);
        int16_t sc[QK_K / 16];
        UNROLL for (int j = 0; j < QK_K / 16; j++) sc[j] = h.sc[j];
        i32x8 s[KTILE];
        UNROLL for (int i = 0; i < KTILE; i++) s[i] = (i32x8){0};
        UNROLL for (int j = 0; j < QK_K / 16; j += SUBS) {
            const wcodes w = codes_at(t, blk, j, sc + j);
            UNROLL for (int i = 0; i < KTILE; i++) s[i] += products(t, w, acts[i].q + b * QK_K + 16 * j);
        }
        ktile_i sum = ktile_sums(s);
        if (OFFSET_BY_SUMS && t->off > 0) {               /* offset_sum's, a tile at once */
            UNROLL for (int i = 0; i < KTILE; i++) s[i] = madd(h.sc, load_i16x16(acts[i].bsum + b * (QK_K / 16)));
            sum -= t->off * ktile_sums(s);
        }
        const ktile_f dx = ktile_load(c->d[b - b0]);
        ktile_f v = (h.d * dx) * __builtin_convertvector(sum, ktile_f);
        if (t->mins) {                                    /* - dmin * d_x * sum_j min_j bsum_j */
            UNROLL for (int i = 0; i < KTILE; i++) s[i] = madd(h.mins, load_i16x16(acts[i].bsum + b * (QK_K / 16)));
            v -= (h.m * dx) * __builtin_convertvector(ktile_sums(s), ktile_f);
        }
        acc += v;
    }
    UNROLL for (int i = 0; i < KTILE; i++) y[i * ldy] = acc[i];
}

/* row r times nt tokens into y[i * ldy + r]: block_dot's products summed in block order (K types) or in
   LANES sums (32-weight types) */
INLINE void row_dot(const type_info *t, const uint8_t *row, ptrdiff_t nb, const act_view *acts, int nt,
                    float *y, ptrdiff_t ldy) {
    const int lanes = t->qk == QK ? LANES : 1;
    float acc[LANES][MAX_TILE];
    UNROLL for (int k = 0; k < LANES; k++) UNROLL for (int i = 0; i < nt; i++) acc[k][i] = 0;
    for (ptrdiff_t b = 0; b < nb; b++) block_dot(t, row + b * t->bytes, acts, nt, b, acc[b % lanes]);
    UNROLL for (int i = 0; i < nt; i++) y[i * ldy] = lanes == 1 ? acc[0][i] : lane_sum(&acc[0][i], MAX_TILE);
}

/* ---- x86's prompt tiles: a row in each lane ----
 * As ggml-cpu/arch/x86/repack.cpp's GEMMs (ggml_gemm_q4_0_8x8_q8_0, ggml_gemm_q4_K_8x8_q8_K), without their
 * repacking: a block of ROWS rows (8: AVX2; 16: AVX-512), read where the rows lie, is transposed once for a
 * chunk of tokens (rows_codes: lane r of vector k holds row r's codes 4k..4k+3) and each token's codes are
 * broadcast 4 at a time to every lane, so that pmaddubsw (vpdpbusd with AVX-512 VNNI) sums a row in each
 * lane: no sums across lanes. The float steps are block_dot's, ROWS rows at once: each (row, token) adds the
 * same floats in the same order as one token's row_dot, so the bits are the same. */
#if WIDE_TILE
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define ROWS 16
/* unpck[lh]dq, unpck[lh]qdq: pairs of lanes of two vectors interleaved within each 128 bits */
#define LO32 0, 16, 1, 17, 4, 20, 5, 21, 8, 24, 9, 25, 12, 28, 13, 29
#define HI32 2, 18, 3, 19, 6, 22, 7, 23, 10, 26, 11, 27, 14, 30, 15, 31
#define LO64 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29
#define HI64 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31
#else
#define ROWS 8
#define LO32 0, 8, 1, 9, 4, 12, 5, 13
#define HI32 2, 10, 3, 11, 6, 14, 7, 15
#define LO64 0, 1, 8, 9, 4, 5, 12, 13
#define HI64 2, 3, 10, 11, 6, 7, 14, 15
#endif
typedef uint8_t rows_u8 __attribute__((vector_size(4 * ROWS)));       /* 4 bytes of each row */
typedef int8_t rows_i8 __attribute__((vector_size(4 * ROWS)));
typedef int16_t rows_i16 __attribute__((vector_size(4 * ROWS)));
typedef uint16_t rows_u16 __attribute__((vector_size(4 * ROWS)));
typedef int32_t rows_i32 __attribute__((vector_size(4 * ROWS)));     /* an int32 for each row */
typedef uint32_t rows_u32 __attribute__((vector_size(4 * ROWS)));
typedef float rows_f32 __attribute__((vector_size(4 * ROWS)));

/* ROWS rows' 16 bytes v[r] by pieces of 4: out[c] lane r = bytes 4c..4c+3 of v[r]. Vector i first holds rows
   i, i + 4, (i + 8, i + 12) in its 128-bit lanes; then two rounds of interleaving within those lanes. */
INLINE void transpose_rows(const u32x4 v[ROWS], rows_u32 out[4]) {
    rows_u32 p[4];
    UNROLL for (int i = 0; i < 4; i++) {
        const u32x8 a = __builtin_shufflevector(v[i], v[i + 4], 0, 1, 2, 3, 4, 5, 6, 7);
#if ROWS == 16
        const u32x8 b = __builtin_shufflevector(v[i + 8], v[i + 12], 0, 1, 2, 3, 4, 5, 6, 7);
        p[i] = __builtin_shufflevector(a, b, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
#else
        p[i] = a;
#endif
    }
    const rows_u32 t0 = __builtin_shufflevector(p[0], p[1], LO32), t1 = __builtin_shufflevector(p[0], p[1], HI32);
    const rows_u32 t2 = __builtin_shufflevector(p[2], p[3], LO32), t3 = __builtin_shufflevector(p[2], p[3], HI32);
    out[0] = __builtin_shufflevector(t0, t2, LO64);
    out[1] = __builtin_shufflevector(t0, t2, HI64);
    out[2] = __builtin_shufflevector(t1, t3, LO64);
    out[3] = __builtin_shufflevector(t1, t3, HI64);
}

/* the 16 bytes at byte o of ROWS rows' blocks blk[r], by pieces of 4 (transpose_rows) */
INLINE void rows_piece(const uint8_t *const blk[ROWS], size_t o, rows_u8 p[4]) {
    u32x4 v[ROWS];
    UNROLL for (int r = 0; r < ROWS; r++) __builtin_memcpy(&v[r], blk[r] + o, 16);
    transpose_rows(v, (rows_u32 *)p);
}

/* each byte's low or high nibble; bits by, by + 1 of each byte as bits 4, 5 (sub_q6_K's high bits) */
INLINE rows_u8 nibble_rows(rows_u8 v, int high) { return high ? (rows_u8)((rows_u16)v >> 4) & 15 : v & 15; }
INLINE rows_u8 bits45_rows(rows_u8 v, int by) {
    return (rows_u8)(by <= 4 ? (rows_u16)v << (4 - by) : (rows_u16)v >> (by - 4)) & 0x30;
}

/* A block's codes of ROWS rows blk[r]: q[g][k] lane r = row r's codes 32g + 4k..32g + 4k + 3. The packed bytes
   of Q4_0, Q4_K and Q6_K are transposed first and unpacked for all rows at once (dequantize_row_<type>'s
   layouts, as their sub_ read them); other types' sub-blocks a row at a time. */
INLINE void rows_codes(const type_info *t, const uint8_t *const blk[ROWS], rows_u8 q[][8]) {
    rows_u8 p[16], h[8];
    if (t->type == Q4_0) {                               /* low nibbles: weights 0..15, high: 16..31 */
        rows_piece(blk, offsetof(block_q4_0, qs), p);
        UNROLL for (int c = 0; c < 4; c++) q[0][c] = nibble_rows(p[c], 0), q[0][c + 4] = nibble_rows(p[c], 1);
    } else if (t->type == Q4_K) {                        /* 32 bytes a 64 weights: low nibbles, then high */
        UNROLL for (int g = 0; g < 8; g += 2) {
            rows_piece(blk, offsetof(block_q4_K, qs) + 16 * g, p);
            rows_piece(blk, offsetof(block_q4_K, qs) + 16 * g + 16, p + 4);
            UNROLL for (int c = 0; c < 8; c++) q[g][c] = nibble_rows(p[c], 0), q[g + 1][c] = nibble_rows(p[c], 1);
        }
    } else if (t->type == Q6_K) {                        /* 128 weights: ql[64 n..], qh[32 n..] */
        UNROLL for (int n = 0; n < 2; n++) {
            UNROLL for (int i = 0; i < 4; i++) rows_piece(blk, offsetof(block_q6_K, ql) + 64 * n + 16 * i, p + 4 * i);
            UNROLL for (int i = 0; i < 2; i++) rows_piece(blk, offsetof(block_q6_K, qh) + 32 * n + 16 * i, h + 4 * i);
            UNROLL for (int k = 0; k < 4; k++) UNROLL for (int c = 0; c < 8; c++)    /* weights 32k + 4c.. */
                q[4 * n + k][c] = nibble_rows(p[8 * (k % 2) + c], k / 2) | bits45_rows(h[c], 2 * k);
        }
    } else {
        UNROLL for (int j = 0; j < t->qk / 16; j += 2) {
            u32x4 lo[ROWS], hi[ROWS];
            UNROLL for (int r = 0; r < ROWS; r++)
                lo[r] = (u32x4)t->sub(blk[r], j), hi[r] = (u32x4)t->sub(blk[r], j + 1);
            transpose_rows(lo, (rows_u32 *)q[j / 2]);
            transpose_rows(hi, (rows_u32 *)q[j / 2] + 4);
        }
    }
}

/* 4 bytes at p in every lane */
INLINE rows_u32 broadcast4(const void *p) {
    uint32_t four;
    __builtin_memcpy(&four, p, 4);
    return (rows_u32){0} + four;
}

/* ROWS rows' block b (rows row_bytes apart from w): blk[r], its head h[r], and d and m a row a lane; the same
   block of the next ROWS rows (`next`, or 0) fetched into the cache meanwhile */
INLINE void rows_heads(const type_info *t, const uint8_t *w, ptrdiff_t row_bytes, ptrdiff_t b, const uint8_t *next,
                       const uint8_t *blk[ROWS], head h[ROWS], rows_f32 *d, rows_f32 *m) {
    UNROLL for (int r = 0; r < ROWS; r++) {
        blk[r] = w + r * row_bytes + b * t->bytes;
        if (next)
            UNROLL for (int o = 0; o < t->bytes; o += 64) __builtin_prefetch(next + r * row_bytes + b * t->bytes + o);
        h[r] = (head){.m = 0};
        t->head(blk[r], &h[r]);
        (*d)[r] = h[r].d, (*m)[r] = h[r].m;
    }
}

#if ROWS == 16
typedef rows_i32 rows_scale;         /* a sub-block's integer scale a row a lane: int32 (vpdpbusd's sums) */
#else
typedef rows_i16 rows_scale;         /* ... or in both int16 of each row's lane (pmaddwd's pairs) */
#endif

/* 32 weights' codes q of ROWS rows (rows_codes) times nt tokens' 32 codes acts[i].q + at, added to s[i] (lane
   r: row r's integer sum), each sub-block of 16 scaled by sc[0], sc[1] (K types; 0: a 32-weight block, its
   scale 1). AVX-512: a scale's PIECES summed by vpdpbusd in int32, then scaled; AVX2: min(PIECES, SUMS16)
   pmaddubsw results added as int16 (exact), then scaled by pmaddwd, four tokens at a time in registers. */
INLINE void rows_dot_pieces(const type_info *t, const rows_u8 q[8], const act_view *acts, ptrdiff_t at, int nt,
                            const rows_scale *sc, rows_i32 s[]) {
    const int sign = t->off == SIGNED;
#if ROWS == 16
    if (!sc) {                                           /* the tokens' sums side by side (measured fastest) */
        UNROLL for (int k = 0; k < 8; k++) UNROLL for (int i = 0; i < nt; i++)
            s[i] = dpbusd(s[i], q[k], (rows_i8)broadcast4(acts[i].q + at + 4 * k), sign);
        return;
    }
    UNROLL for (int i = 0; i < nt; i++) {                /* a token at a time (K types: faster so) */
        rows_i32 a = {0};
        UNROLL for (int k = 0; k < 8; k++) {
            a = dpbusd(a, q[k], (rows_i8)broadcast4(acts[i].q + at + 4 * k), sign);
            if (k % t->pieces == t->pieces - 1) s[i] += a * sc[k / 4], a = (rows_i32){0};
        }
    }
#else
    const i16x16 ones = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    const int span = t->sums16 < t->pieces ? t->sums16 : t->pieces;
    UNROLL for (int i0 = 0; i0 < nt; i0 += TILE) {
        i16x16 p[TILE];
        UNROLL for (int k = 0; k < 8; k++) UNROLL for (int i = i0; i < i0 + TILE; i++) {
            const i16x16 m = maddubs(q[k], (i8x32)broadcast4(acts[i].q + at + 4 * k), sign);
            p[i - i0] = k % span ? p[i - i0] + m : m;
            if (k % span == span - 1) s[i] += madd(p[i - i0], sc ? sc[k / 4] : ones);
        }
    }
#endif
}

/* block_dot's float steps for a 32-weight block b, ROWS rows a lane, nt tokens: into acc[i] */
INLINE void rows_block_32(const type_info *t, const rows_u8 q[8], rows_f32 dw, rows_f32 mw, const act_view *acts,
                          ptrdiff_t b, int nt, rows_f32 acc[]) {
    rows_i32 s[MAX_TILE];
    UNROLL for (int i = 0; i < nt; i++) s[i] = (rows_i32){0};
    rows_dot_pieces(t, q, acts, b * QK, nt, 0, s);
    UNROLL for (int i = 0; i < nt; i++) {
        rows_f32 v = (dw * acts[i].d[b]) * __builtin_convertvector(s[i] - offset_sum(t, 0, &acts[i], b), rows_f32);
        if (t->mins) v += mw * acts[i].s[b];
        acc[i] += v;
    }
}

/* ROWS rows of a 32-weight type (row_bytes apart from w) times nt <= TOKEN_TILE tokens (a multiple of TILE)
   into y[i * ldy + r]: block b in running sum b % LANES, then lane_sum's order; each block read and transposed
   once for the nt tokens, MAX_TILE at a time */
INLINE void rows_dot_32(const type_info *t, const uint8_t *w, ptrdiff_t row_bytes, ptrdiff_t nb, const act_view *acts,
                        int nt, float *y, ptrdiff_t ldy, const uint8_t *next) {
    rows_f32 acc[LANES][TOKEN_TILE];
    UNROLL for (int k = 0; k < LANES; k++) for (int i = 0; i < nt; i++) acc[k][i] = (rows_f32){0};
    for (ptrdiff_t b4 = 0; b4 < nb; b4 += LANES) UNROLL for (int k = 0; k < LANES; k++) {
        const ptrdiff_t b = b4 + k;
        if (b >= nb) break;
        const uint8_t *blk[ROWS];
        head h[ROWS];
        rows_f32 dw, mw;
        rows_heads(t, w, row_bytes, b, next, blk, h, &dw, &mw);
        rows_u8 q[1][8];
        rows_codes(t, blk, q);
        for (int i = 0; i < nt; i += MAX_TILE)
            if (nt - i >= MAX_TILE) rows_block_32(t, q[0], dw, mw, acts + i, b, MAX_TILE, acc[k] + i);
            else rows_block_32(t, q[0], dw, mw, acts + i, b, TILE, acc[k] + i);
    }
    for (int i = 0; i < nt; i++) {
        const rows_f32 sum = (acc[0][i] + acc[1][i]) + (acc[2][i] + acc[3][i]);
        __builtin_memcpy(y + i * ldy, &sum, sizeof sum);
    }
}

/* ROWS rows' 16 sub-block scales (or mins: `mins`) in pairs: out[p] lane r = h[r]'s values 2p, 2p + 1 */
INLINE void rows_pairs(const head h[ROWS], int mins, rows_i16 out[8]) {
    u32x4 lo[ROWS], hi[ROWS];
    UNROLL for (int r = 0; r < ROWS; r++) {
        const i16x16 v = mins ? h[r].mins : h[r].sc;
        __builtin_memcpy(&lo[r], &v, 16);
        __builtin_memcpy(&hi[r], (const int16_t *)&v + 8, 16);
    }
    transpose_rows(lo, (rows_u32 *)out);
    transpose_rows(hi, (rows_u32 *)out + 4);
}

/* lane r: sum over j of v[r][j] * x[j] for rows_pairs' pairs of v and 16 int16 x (a token's bsums) */
INLINE rows_i32 pairs_dot(const rows_i16 pairs[8], const int16_t *x) {
    rows_i32 s = {0};
#if ROWS == 16
    UNROLL for (int p = 0; p < 8; p++) s = dpwssd(s, pairs[p], (rows_i16)broadcast4(x + 2 * p));
#else
    UNROLL for (int p = 0; p < 8; p++) s += madd(pairs[p], (rows_i16)broadcast4(x + 2 * p));
#endif
    return s;
}

/* block_dot's integers and float steps for a K type's block b, ROWS rows a lane, nt tokens: into acc[i] (sc:
   each sub-block's scales, scp and minp: the scales and mins in pairs, rows_pairs) */
INLINE void rows_block_k(const type_info *t, const rows_u8 q[][8], const rows_scale sc[QK_K / 16],
                         const rows_i16 scp[8], const rows_i16 minp[8], rows_f32 dw, rows_f32 mw,
                         const act_view *acts, ptrdiff_t b, int nt, rows_f32 acc[]) {
    rows_i32 s[MAX_TILE];
    UNROLL for (int i = 0; i < nt; i++) s[i] = (rows_i32){0};
    UNROLL for (int g = 0; g < QK_K / 32; g++) rows_dot_pieces(t, q[g], acts, b * QK_K + 32 * g, nt, sc + 2 * g, s);
    UNROLL for (int i = 0; i < nt; i++) {
        const int16_t *bsum = acts[i].bsum + b * (QK_K / 16);
        if (t->off > 0) s[i] -= t->off * pairs_dot(scp, bsum);          /* offset_sum's */
        const float dx = acts[i].d[b];
        rows_f32 v = (dw * dx) * __builtin_convertvector(s[i], rows_f32);
        if (t->mins) v -= (mw * dx) * __builtin_convertvector(pairs_dot(minp, bsum), rows_f32);
        acc[i] += v;
    }
}

/* ROWS rows of a K type times nt <= TOKEN_TILE tokens (a multiple of TILE) into y[i * ldy + r], in block order;
   each block's codes and scales transposed once for the nt tokens */
INLINE void rows_dot_k(const type_info *t, const uint8_t *w, ptrdiff_t row_bytes, ptrdiff_t nb, const act_view *acts,
                       int nt, float *y, ptrdiff_t ldy, const uint8_t *next) {
    rows_f32 acc[TOKEN_TILE];
    for (int i = 0; i < nt; i++) acc[i] = (rows_f32){0};
    for (ptrdiff_t b = 0; b < nb; b++) {
        const uint8_t *blk[ROWS];
        head h[ROWS];
        rows_f32 dw, mw;
        rows_heads(t, w, row_bytes, b, next, blk, h, &dw, &mw);
        rows_i16 scp[8], minp[8];
        rows_scale sc[QK_K / 16];
        rows_pairs(h, 0, scp);
        UNROLL for (int p = 0; p < 8; p++) {                /* each of a pair's scales, sign extended */
            const rows_i32 lo = ((rows_i32)scp[p] << 16) >> 16, hi = (rows_i32)scp[p] >> 16;
#if ROWS == 16
            sc[2 * p] = lo, sc[2 * p + 1] = hi;
#else
            sc[2 * p] = (rows_i16)(lo << 16 | (lo & 0xffff)), sc[2 * p + 1] = (rows_i16)(hi << 16 | (hi & 0xffff));
#endif
        }
        if (t->mins) rows_pairs(h, 1, minp);
        rows_u8 q[QK_K / 32][8];
        rows_codes(t, blk, q);
        for (int i = 0; i < nt; i += MAX_TILE)
            if (nt - i >= MAX_TILE) rows_block_k(t, q, sc, scp, minp, dw, mw, acts + i, b, MAX_TILE, acc + i);
            else rows_block_k(t, q, sc, scp, minp, dw, mw, acts + i, b, TILE, acc + i);
    }
    for (int i = 0; i < nt; i++) __builtin_memcpy(y + i * ldy, &acc[i], sizeof acc[i]);
}
#endif

/* rows times a tile of nt tokens with the tile's columns (the 32-weight types, and the K types' tiles of
   KTILE: COLS blocks at a time, each row's sum carried in y), or else one row at a time (row_dot) */
INLINE void rows_tile(const type_info *t, const uint8_t *w, ptrdiff_t rows, ptrdiff_t nb, const act_view *acts,
                      int nt, float *y, ptrdiff_t ldy) {
    const ptrdiff_t row_bytes = nb * t->bytes;
    if ((t->qk == QK && nb > COLS) || (t->qk == QK_K && nt != KTILE)) {
        for (ptrdiff_t r = 0; r < rows; r++) row_dot(t, w + r * row_bytes, nb, acts, nt, y + r, ldy);
        return;
    }
    tile_cols c;
    for (ptrdiff_t b0 = 0; rows && b0 < nb; b0 += COLS) {
        const ptrdiff_t b1 = b0 + COLS < nb ? b0 + COLS : nb;
        fill_cols(t, acts, nt, b0, b1, &c);
        for (ptrdiff_t r = 0; r < rows; r++)
            if (t->qk == QK_K) row_dot_k_tile(t, w + r * row_bytes, b0, b1, acts, &c, b0 == 0, y + r, ldy);
            else row_dot_32_tile(t, w + r * row_bytes, nb, acts, &c, nt, y + r, ldy);
    }
}

/* rows times nt tokens (a multiple of TILE) in tiles of MAX_TILE (x86) and TILE tokens. On x86 ROWS rows at a
   time (rows_dot_32, rows_dot_k), each group over all nt tokens while its blocks are in cache, the next group
   fetched meanwhile; the rows past them by rows_tile. */
INLINE void tiles(const type_info *t, const uint8_t *w, ptrdiff_t rows, ptrdiff_t nb, const act_view *acts, int nt,
                  float *y, ptrdiff_t ldy) {
#if WIDE_TILE
    const ptrdiff_t row_bytes = nb * t->bytes, grouped = rows - rows % ROWS;
    for (ptrdiff_t r = 0; r < grouped; r += ROWS) {
        const uint8_t *wr = w + r * row_bytes, *next = r + ROWS < grouped ? wr + ROWS * row_bytes : 0;
        if (t->qk == QK_K) rows_dot_k(t, wr, row_bytes, nb, acts, nt, y + r, ldy, next);
        else rows_dot_32(t, wr, row_bytes, nb, acts, nt, y + r, ldy, next);
    }
    w += grouped * row_bytes, y += grouped, rows -= grouped;
#endif
    int i = 0;
    if (WIDE_TILE)
        for (; i + MAX_TILE <= nt; i += MAX_TILE) rows_tile(t, w, rows, nb, acts + i, MAX_TILE, y + i * ldy, ldy);
    for (; i < nt; i += TILE) rows_tile(t, w, rows, nb, acts + i, TILE, y + i * ldy, ldy);
}

/* y (T, ldy) [:, :rows] = W (rows, n) x^T for one type, a row at a time (the weights read in the order
   they lie: memory's fastest). A prompt: TOKEN_TILE tokens' codes kept in cache while the rows pass in tiles
   (tiles), the tokens past the last tile one at a time. */
INLINE void mul_mat_type(const type_info *t, const uint8_t *w, ptrdiff_t rows, ptrdiff_t n, uint8_t *act,
                         ptrdiff_t tokens, float *y, ptrdiff_t ldy) {
    const ptrdiff_t nb = n / t->qk, rec = act_bytes(t->act, n), row_bytes = nb * t->bytes;
    for (ptrdiff_t t0 = 0; t0 < tokens; t0 += TOKEN_TILE) {
        const int nt = (int)(t0 + TOKEN_TILE < tokens ? TOKEN_TILE : tokens - t0), tiled = nt - nt % TILE;
        act_view a[TOKEN_TILE];
        for (int i = 0; i < nt; i++) a[i] = act_at(t->act, act + (t0 + i) * rec, n);
        if (tiled) tiles(t, w, rows, nb, a, tiled, y + t0 * ldy, ldy);
        for (int i = tiled; i < nt; i++)
            for (ptrdiff_t r = 0; r < rows; r++) {
                if (SUMS4 && t->qk == QK) row_dot_32(t, w + r * row_bytes, nb, &a[i], y + (t0 + i) * ldy + r);
                else row_dot(t, w + r * row_bytes, nb, &a[i], 1, y + (t0 + i) * ldy + r, ldy);
            }
    }
}

/* one copy of the loops a type, its head_ and sub_ inlined */
#define MUL_MAT(name, T, qk, block, act, mins, off, pieces, sums16)                                      \
    static void mul_mat_##name(const uint8_t *w, ptrdiff_t rows, ptrdiff_t n, uint8_t *x, ptrdiff_t tokens,   \
                               float *y, ptrdiff_t ldy) {                                                  \
        static const type_info t = TYPE_INFO(name, T, qk, block, act, mins, off, pieces, sums16);        \
        mul_mat_type(&t, w, rows, n, x, tokens, y, ldy);                                                 \
    }
WEIGHT_TYPES(MUL_MAT)

/* ---- the library's functions (ctypes) ----
 * Counts are int (32-bit: a wasm32 call passes them as they are, with no 64-bit conversion); the byte
 * offsets they imply are computed in 64 bits. Each returns a negative number for arguments it refuses. */

#define EXPORT __attribute__((visibility("default")))
#define MAX_N (1 << 26)      /* weights in a row: more than any model has, and 2n bytes fit an int */

EXPORT int pe_version(void) { return 6; }

/* bytes of one activation code in a record: 1 (x86) or 2 (wasm, and the portable scalar build) */
EXPORT int pe_code_bytes(void) { return CODE_BYTES; }

/* bytes of one token's activation record for rows of n weights of the weight type `type`, or an error */
EXPORT int pe_act_bytes(int type, int n) {
    const type_info *t = type_of(type);
    if (!t) return E_TYPE;
    if (n <= 0 || n % t->qk || n > MAX_N) return E_SIZE;
    return (int)act_bytes(t->act, n);
}

/* x (tokens, n) float32 rounded for weights of `type` into `tokens` records at act */
EXPORT int pe_quantize(int type, const float *x, int n, int tokens, uint8_t *act) {
    const int rec = pe_act_bytes(type, n);
    if (rec < 0) return rec;
    if (tokens < 0) return E_SIZE;
    const int at = type_of(type)->act;
    for (ptrdiff_t i = 0; i < tokens; i++) quantize_row(at, x + i * n, n, act + i * rec);
    return 0;
}

/* y[t * ldy + r] = (row r of w) . (token t of x), for rows rows of n weights of `type` at w (rows of
   n / block_size blocks, one after the other) and tokens records at act (pe_quantize's) */
EXPORT int pe_mul_mat(int type, const uint8_t *w, int rows, int n, uint8_t *act, int tokens, float *y, int ldy) {
    const int rec = pe_act_bytes(type, n);
    if (rec < 0) return rec;
    if (rows < 0 || tokens < 0 || (tokens > 1 && ldy < rows)) return E_SIZE;
    if (!fp16_filled) fill_fp16();
#define CASE(name, T, qk_, block_, act_, mins_, off_, pieces_, sums16_) \
    case T: mul_mat_##name(w, rows, n, act, tokens, y, ldy); return 0;
    switch (type) { WEIGHT_TYPES(CASE) }
    return E_TYPE;
}

/* ---- attention's float32 products over the KV cache (ggml's mul_mat of F32 K and V), a KV head at a time.
 * A head's rows are contiguous (d or dv floats); heads lie k_head / v_head floats apart, as the cache holds
 * them (heads, capacity, d). Sums run in one order on every target (8 lanes, then hsum_f32; values in
 * key order), so the wasm and native builds give the same bits. */

#define MAX_ATTN (1 << 20)   /* queries, keys or head size at most: far past any context */

/* a . b over n floats: 8 lanes, then hsum_f32, then the tail */
INLINE float dot_f32(const float *a, const float *b, int n) {
    const int n8 = n - n % 8;
    f32x8 acc = {0};
    for (int c = 0; c < n8; c += 8) acc += load_f32x8(a + c) * load_f32x8(b + c);
    float y = hsum_f32(acc);
    for (int c = n8; c < n; c++) y += a[c] * b[c];
    return y;
}

/* scores[h, i, j] = q[h, i, :] . k[h, j, :] for hkv heads, m queries (hkv, m, d) and s keys: (hkv, m, s) */
EXPORT int pe_attn_scores(const float *q, int hkv, int m, int d, const float *k, int k_head, int s,
                          float *scores) {
    if (hkv < 0 || m < 0 || d <= 0 || s < 0 || hkv > MAX_ATTN || m > MAX_ATTN || d > MAX_ATTN || s > MAX_ATTN
        || (hkv > 1 && k_head < (ptrdiff_t)s * d))
        return E_SIZE;
    for (ptrdiff_t h = 0; h < hkv; h++)
        for (ptrdiff_t j = 0; j < s; j++) {
            const float *kj = k + h * k_head + j * d;
            for (ptrdiff_t i = 0; i < m; i++) scores[(h * m + i) * s + j] = dot_f32(q + (h * m + i) * d, kj, d);
        }
    return 0;
}

/* out[h, i, :] = sum over j of p[h, i, j] * v[h, j, :] for hkv heads, m rows of weights p (hkv, m, s) and
   s values of dv floats: (hkv, m, dv) */
EXPORT int pe_attn_values(const float *p, int hkv, int m, int s, const float *v, int v_head, int dv, float *out) {
    if (hkv < 0 || m < 0 || s < 0 || dv <= 0 || hkv > MAX_ATTN || m > MAX_ATTN || s > MAX_ATTN || dv > MAX_ATTN
        || (hkv > 1 && v_head < (ptrdiff_t)s * dv))
        return E_SIZE;
    for (ptrdiff_t h = 0; h < hkv; h++)
        for (ptrdiff_t i = 0; i < m; i++) {
            const float *pi = p + (h * m + i) * s, *vh = v + h * v_head;
            float *o = out + (h * m + i) * dv;
            int c = 0;
            for (; c + 32 <= dv; c += 32) {                   /* 32 outputs kept in registers over the keys */
                f32x8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
                for (ptrdiff_t j = 0; j < s; j++) {
                    const float *vj = vh + j * dv + c;
                    const float w = pi[j];
                    a0 += w * load_f32x8(vj);
                    a1 += w * load_f32x8(vj + 8);
                    a2 += w * load_f32x8(vj + 16);
                    a3 += w * load_f32x8(vj + 24);
                }
                __builtin_memcpy(o + c, &a0, 32);
                __builtin_memcpy(o + c + 8, &a1, 32);
                __builtin_memcpy(o + c + 16, &a2, 32);
                __builtin_memcpy(o + c + 24, &a3, 32);
            }
            for (; c < dv; c++) {
                float y = 0;
                for (ptrdiff_t j = 0; j < s; j++) y += pi[j] * vh[j * dv + c];
                o[c] = y;
            }
        }
    return 0;
}

/* ---- e^x and log(1 + e^x) in float32, the same bits on every target (ggml calls libm's expf and log1pf;
 * the wasm side module has no libm) ---- */

/* floor(v) for |v| < 2^31 */
INLINE float floor_f32(float v) {
    const float t = (float)(int32_t)v;
    return t > v ? t - 1.0f : t;
}

/* e^x within 2 ulp (cephes' expf): x = n ln2 + r with |r| <= ln2/2 (ln2 in two parts, Cody-Waite), e^r by
   a polynomial, then times 2^n as two normal powers of two (a result below 2^-126 is subnormal). Without
   branches (the ends and NaN are selects), so that a loop of them is vectorized. */
INLINE float exp_f32(float x) {
    const float xc = x == x ? (x > 88.7228394f ? 88.7228394f : x < -103.972084f ? -103.972084f : x) : 0.0f;
    const float n = floor_f32(xc * 1.44269504088896341f + 0.5f);
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const float y = p * (r * r) + r + 1.0f;
    const int32_t e = (int32_t)n, e1 = e < -126 ? -126 : e > 127 ? 127 : e;
    const float v = y * bits_f32((uint32_t)(e1 + 127) << 23) * bits_f32((uint32_t)(e - e1 + 127) << 23);
    return x != x ? x : x > 88.7228394f ? bits_f32(0x7f800000u) : x < -103.972084f ? 0.0f : v;
}

/* log(x) for a normal x > 0 (cephes' logf): x = m 2^e with m in [sqrt(1/2), sqrt(2)), log(m) by a polynomial
   in f = m - 1 */
static float log_f32(float x) {
    const uint32_t u = f32_bits(x);
    int e = (int)(u >> 23) - 127;
    float m = bits_f32((u & 0x007fffffu) | 0x3f800000u);          /* [1, 2) */
    if (m > 1.41421356f) {
        m *= 0.5f;
        e += 1;
    }
    const float f = m - 1.0f, z = f * f, fe = (float)e;
    float p = 7.0376836292e-2f;
    p = p * f - 1.1514610310e-1f;
    p = p * f + 1.1676998740e-1f;
    p = p * f - 1.2420140846e-1f;
    p = p * f + 1.4249322787e-1f;
    p = p * f - 1.6668057665e-1f;
    p = p * f + 2.0000714765e-1f;
    p = p * f - 2.4999993993e-1f;
    p = p * f + 3.3333331174e-1f;
    float y = f * z * p;
    y += -2.12194440e-4f * fe;
    y += -0.5f * z;
    return f + y + 0.693359375f * fe;
}

/* ggml's softplus: log(1 + e^x), x itself above 20; log1p(e^x) as log(u) * e^x / (u - 1) with u = 1 + e^x
   (u - 1 is exact: Kahan's log1p) */
static inline float softplus_f32(float x) {
    if (x > 20.0f) return x;
    const float ex = exp_f32(x), u = 1.0f + ex;
    return u == 1.0f ? ex : log_f32(u) * (ex / (u - 1.0f));
}

INLINE float silu_f32(float x) { return x / (1.0f + exp_f32(-x)); }

/* 1 / sqrt(mean(x²) + eps_n) over n floats (ggml rms_norm's scale; l2norm's with eps_n = eps / n) */
static inline float rms_scale(const float *x, int n, float eps_n) {
    float ms = dot_f32(x, x, n) / (float)n;
    ms += eps_n;
    return 1.0f / __builtin_sqrtf(ms);
}

/* One head of one token of the gated delta rule (ggml's gated_delta_net, one step), the state read once:
   for each row j of the head's state S (dv rows of dk) read from src and written to dst (the same rows, or
   where the new state goes),
     S[j] *= decay;  d = (v[j] - S[j] . k) * beta;  S[j] += d * k;  o[j] = S[j] . q */
static void delta_head(const float *src, float *dst, int dv, int dk, const float *q, const float *k, const float *v,
                       float decay, float beta, float *o) {
    for (ptrdiff_t j = 0; j < dv; j++) {
        float *row = dst + j * dk;
        for (int c = 0; c < dk; c++) row[c] = src[j * dk + c] * decay;
        const float d = (v[j] - dot_f32(row, k, dk)) * beta;
        for (int c = 0; c < dk; c++) row[c] += d * k[c];
        o[j] = dot_f32(row, q, dk);
    }
}

/* A Gated DeltaNet layer between its two products (qwen35; llama.cpp's build_layer_attn_linear: ssm_conv,
   silu, the l2 norms of q and k, the gates, gated_delta_net, the gated rms norm), T tokens in turn, for H
   value heads of size D reading Hk key heads (value head h reads key head key_of[h]) and K conv taps:
     proj (T, P): each token's qkv (C = 2 Hk D + H D: q of each key head, k of each, v of each value head),
       z (H D), b (H), a (H), P = C + H D + 2 H;  conv_t (K, C): ssm_conv1d's taps, tap by tap;
       gates: dt_bias (H) then ssm_a (H);  norm (D)
     window (K-1, C) -> window_out: the last K-1 inputs;  s (H, D, D) -> s_out;
     out (T, H D) = rmsnorm(o, norm) * silu(z);  work: C floats.
   dims = {T, H, Hk, D, K}. Per token: x = silu(conv(window, qkv)); q and k l2-normed per key head (q times
   1/sqrt(D)); g = softplus(a + dt_bias) * ssm_a; beta = sigmoid(b); the delta rule with decay e^g. */
EXPORT int pe_delta_net(const float *proj, const int32_t *dims, const float *conv_t, const float *window,
                        const float *s, const float *gates, const float *norm, const int32_t *key_of, float eps,
                        float *window_out, float *s_out, float *out, float *work) {
    const int t = dims[0], h = dims[1], hk = dims[2], d = dims[3], taps = dims[4];
    if (t < 0 || h <= 0 || hk <= 0 || d <= 0 || taps < 1 || t > MAX_ATTN || h > 4096 || hk > 4096 || d > 4096
        || taps > 64)
        return E_SIZE;
    for (int i = 0; i < h; i++)
        if (key_of[i] < 0 || key_of[i] >= hk) return E_SIZE;
    const ptrdiff_t nk = (ptrdiff_t)hk * d, nv = (ptrdiff_t)h * d, c = 2 * nk + nv, p = c + nv + 2 * h;
    const float *dt_bias = gates, *ssm_a = gates + h;
    const float l2_eps = (float)((double)eps / d), l2_scale = (float)(1.0 / __builtin_sqrt((double)d));
    __builtin_memcpy(window_out, window, sizeof(float) * (size_t)(taps - 1) * (size_t)c);
    if (t == 0) __builtin_memcpy(s_out, s, sizeof(float) * (size_t)nv * (size_t)d);
    for (ptrdiff_t i = 0; i < t; i++) {
        const float *x = proj + i * p, *z = x + c, *b = z + nv, *a = b + h;
        for (int j = 0; j < taps; j++) {                          /* ssm_conv: the window's rows, then x */
            const float *in = j < taps - 1 ? window_out + j * c : x, *w = conv_t + j * c;
            if (j == 0) for (ptrdiff_t ch = 0; ch < c; ch++) work[ch] = in[ch] * w[ch];
            else for (ptrdiff_t ch = 0; ch < c; ch++) work[ch] += in[ch] * w[ch];
        }
        for (ptrdiff_t ch = 0; ch < c; ch++) work[ch] = silu_f32(work[ch]);
        if (taps > 1) {                                           /* the window moves on by this token */
            __builtin_memmove(window_out, window_out + c, sizeof(float) * (size_t)(taps - 2) * (size_t)c);
            __builtin_memcpy(window_out + (taps - 2) * c, x, sizeof(float) * (size_t)c);
        }
        for (ptrdiff_t g = 0; g < 2 * hk; g++) {                  /* l2norm of each key head's q, then k */
            float *v = work + g * d;
            const float scale = rms_scale(v, d, l2_eps) * l2_scale;
            for (int j = 0; j < d; j++) v[j] = v[j] * scale * (g < hk ? l2_scale : 1.0f);
        }
        float *o = out + i * nv;
        for (ptrdiff_t hh = 0; hh < h; hh++) {
            const float g = softplus_f32(a[hh] + dt_bias[hh]) * ssm_a[hh];
            const float beta = 1.0f / (1.0f + exp_f32(-b[hh]));
            const float *q = work + key_of[hh] * d, *k = work + nk + key_of[hh] * d, *v = work + 2 * nk + hh * d;
            float *oh = o + hh * d;
            delta_head((i ? s_out : s) + hh * d * d, s_out + hh * d * d, d, d, q, k, v, exp_f32(g), beta, oh);
            const float scale = rms_scale(oh, d, eps);            /* ssm_norm, then times silu(z) */
            for (int j = 0; j < d; j++) oh[j] = oh[j] * scale * norm[j] * silu_f32(z[hh * d + j]);
        }
    }
    return 0;
}

/* for tests: the exact integer sums of one row of n weights with one token's codes, a sub-block of 16
   at a time, before any scale: out[j] = sum over sub-block j of code * xq (n / 16 of them) */
EXPORT int pe_block_sums(int type, const uint8_t *row, int n, uint8_t *act, int32_t *out) {
    const int rec = pe_act_bytes(type, n);
    if (rec < 0) return rec;
    const type_info *t = type_of(type);
    const act_view a = act_at(t->act, act, n);
    if (!fp16_filled) fill_fp16();
    for (ptrdiff_t b = 0; b < n / t->qk; b++) {
        const uint8_t *blk = row + b * t->bytes;
        for (int j = 0; j < t->qk / 16; j++) {
            /* the step that holds sub-block j (x86: j and its neighbour), times sub-block j's codes at their
               place in it and zeros elsewhere */
            code xq[48] = {0};
            __builtin_memcpy(xq + 16, a.q + b * t->qk + 16 * j, 16 * sizeof(code));
            const int32_t s = hsum_i32(products(t, codes_at(t, blk, j - j % SUBS, ONES), xq + 16 - 16 * (j % SUBS)));
            const int16_t off = OFFSET_BY_SUMS && t->off > 0 ? (int16_t)t->off : 0;
            out[b * (t->qk / 16) + j] = s - off * a.bsum[b * (t->qk / 16) + j];
        }
    }
    return 0;
}
