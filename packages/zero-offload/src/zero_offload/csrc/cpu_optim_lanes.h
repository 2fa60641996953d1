// The lane types the fused CPU optimizer kernels (cpu_optim.cpp) are written in: Scalar, one
// float, everywhere; and one SIMD type for the build machine, AVX-512 or AVX2 (with FMA and
// F16C), named Lanes, where ZERO_CPU_OPTIM_SIMD is defined. Every operation rounds alike in both
// (fma only where asked for, sqrt and division correctly rounded), so an element's result does not
// depend on which of them stepped it: not on the thread split, nor on where a tensor was cut.
//
// Intrinsics, not auto-vectorized loops: GCC's vector code for these loops reads an input from L1
// once per use (the grad three times), and on one thread those extra loads cost 15% of a step
// that is bound by memory: they take load-queue entries that the cache misses need.
//
// Params and grads are read and written as fp32, bf16 or fp16 (load / store, load_bf16 ...);
// bf16 is rounded to nearest even and NaN made quiet (0x7FC0), as c10::BFloat16 rounds, and fp16
// by the CPU's conversion, to nearest even, as c10::Half's.
#pragma once

#include <torch/headeronly/util/Half.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__) && defined(__F16C__))
#include <immintrin.h>
#define ZERO_CPU_OPTIM_SIMD 1
#endif

namespace zero_cpu_optim {

inline float bf16_to_f32(uint16_t bits)
{
    const uint32_t widened = uint32_t(bits) << 16;
    float value;
    std::memcpy(&value, &widened, sizeof(value));
    return value;
}

inline uint16_t f32_to_bf16(float value)
{
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof(bits));
    const uint16_t rounded = uint16_t((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
    return value != value ? uint16_t(0x7FC0) : rounded;
}

struct Scalar {
    static constexpr int64_t lanes = 1;
    float x;

    static Scalar all(float value) { return {value}; }
    static Scalar load(const float* from) { return {*from}; }
    static Scalar load_bf16(const uint16_t* from) { return {bf16_to_f32(*from)}; }
    static Scalar load_f16(const uint16_t* from) { return {c10::detail::fp16_ieee_to_fp32_value(*from)}; }
    void store(float* to) const { *to = x; }
    void store_bf16(uint16_t* to) const { *to = f32_to_bf16(x); }
    void store_f16(uint16_t* to) const { *to = c10::detail::fp16_ieee_from_fp32_value(x); }
};

inline Scalar operator+(Scalar a, Scalar b) { return {a.x + b.x}; }
inline Scalar operator-(Scalar a, Scalar b) { return {a.x - b.x}; }
inline Scalar operator*(Scalar a, Scalar b) { return {a.x * b.x}; }
inline Scalar operator/(Scalar a, Scalar b) { return {a.x / b.x}; }
inline Scalar mul_add(Scalar a, Scalar b, Scalar c) { return {std::fma(a.x, b.x, c.x)}; }  // a * b + c, one rounding
inline Scalar square_root(Scalar a) { return {std::sqrt(a.x)}; }
inline Scalar greater_of(Scalar a, Scalar b) { return {a.x > b.x ? a.x : b.x}; }  // b where either is NaN
inline Scalar sign_of(Scalar a) { return {a.x > 0.0f ? 1.0f : (a.x < 0.0f ? -1.0f : a.x)}; }  // 0 and NaN kept

#if defined(ZERO_CPU_OPTIM_SIMD)
// A loaded vector, kept in a register: GCC would otherwise fold the load into every instruction
// that uses the value (Adam's exp_avg, read twice by the lerp, came from L1 twice).
template <class Vector>
inline Vector in_register(Vector value)
{
    asm("" : "+v"(value));
    return value;
}
#endif

#if defined(__AVX512F__)

struct Lanes {
    static constexpr int64_t lanes = 16;
    __m512 x;

    static Lanes all(float value) { return {_mm512_set1_ps(value)}; }
    static Lanes load(const float* from) { return {in_register(_mm512_loadu_ps(from))}; }
    static Lanes load_bf16(const uint16_t* from)
    {
        const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(from)));
        return {_mm512_castsi512_ps(_mm512_slli_epi32(wide, 16))};
    }
    static Lanes load_f16(const uint16_t* from)
    {
        return {_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(from)))};
    }
    void store(float* to) const { _mm512_storeu_ps(to, x); }
    void store_bf16(uint16_t* to) const
    {
        const __m512i bits = _mm512_castps_si512(x);
        const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
        __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF))), 16);
        rounded = _mm512_mask_mov_epi32(rounded, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), _mm512_set1_epi32(0x7FC0));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(to), _mm512_cvtepi32_epi16(rounded));
    }
    void store_f16(uint16_t* to) const
    {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(to),
                            _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
};

inline Lanes operator+(Lanes a, Lanes b) { return {_mm512_add_ps(a.x, b.x)}; }
inline Lanes operator-(Lanes a, Lanes b) { return {_mm512_sub_ps(a.x, b.x)}; }
inline Lanes operator*(Lanes a, Lanes b) { return {_mm512_mul_ps(a.x, b.x)}; }
inline Lanes operator/(Lanes a, Lanes b) { return {_mm512_div_ps(a.x, b.x)}; }
inline Lanes mul_add(Lanes a, Lanes b, Lanes c) { return {_mm512_fmadd_ps(a.x, b.x, c.x)}; }
inline Lanes square_root(Lanes a) { return {_mm512_sqrt_ps(a.x)}; }
inline Lanes greater_of(Lanes a, Lanes b) { return {_mm512_max_ps(a.x, b.x)}; }
inline Lanes sign_of(Lanes a)
{
    const __m512 zero = _mm512_setzero_ps();
    const __m512 negative = _mm512_mask_mov_ps(a.x, _mm512_cmp_ps_mask(a.x, zero, _CMP_LT_OQ), _mm512_set1_ps(-1.0f));
    return {_mm512_mask_mov_ps(negative, _mm512_cmp_ps_mask(a.x, zero, _CMP_GT_OQ), _mm512_set1_ps(1.0f))};
}

#elif defined(ZERO_CPU_OPTIM_SIMD)

struct Lanes {
    static constexpr int64_t lanes = 8;
    __m256 x;

    static Lanes all(float value) { return {_mm256_set1_ps(value)}; }
    static Lanes load(const float* from) { return {in_register(_mm256_loadu_ps(from))}; }
    static Lanes load_bf16(const uint16_t* from)
    {
        const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(from)));
        return {_mm256_castsi256_ps(_mm256_slli_epi32(wide, 16))};
    }
    static Lanes load_f16(const uint16_t* from)
    {
        return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(from)))};
    }
    void store(float* to) const { _mm256_storeu_ps(to, x); }
    void store_bf16(uint16_t* to) const
    {
        const __m256i bits = _mm256_castps_si256(x);
        const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
        __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7FFF))), 16);
        const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
        rounded = _mm256_blendv_epi8(rounded, _mm256_set1_epi32(0x7FC0), nan);
        // Every value fits 16 bits, so the saturating pack only narrows.
        _mm_storeu_si128(reinterpret_cast<__m128i*>(to),
                         _mm_packus_epi32(_mm256_castsi256_si128(rounded), _mm256_extracti128_si256(rounded, 1)));
    }
    void store_f16(uint16_t* to) const
    {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(to), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
    }
};

inline Lanes operator+(Lanes a, Lanes b) { return {_mm256_add_ps(a.x, b.x)}; }
inline Lanes operator-(Lanes a, Lanes b) { return {_mm256_sub_ps(a.x, b.x)}; }
inline Lanes operator*(Lanes a, Lanes b) { return {_mm256_mul_ps(a.x, b.x)}; }
inline Lanes operator/(Lanes a, Lanes b) { return {_mm256_div_ps(a.x, b.x)}; }
inline Lanes mul_add(Lanes a, Lanes b, Lanes c) { return {_mm256_fmadd_ps(a.x, b.x, c.x)}; }
inline Lanes square_root(Lanes a) { return {_mm256_sqrt_ps(a.x)}; }
inline Lanes greater_of(Lanes a, Lanes b) { return {_mm256_max_ps(a.x, b.x)}; }
inline Lanes sign_of(Lanes a)
{
    const __m256 zero = _mm256_setzero_ps();
    const __m256 negative = _mm256_blendv_ps(a.x, _mm256_set1_ps(-1.0f), _mm256_cmp_ps(a.x, zero, _CMP_LT_OQ));
    return {_mm256_blendv_ps(negative, _mm256_set1_ps(1.0f), _mm256_cmp_ps(a.x, zero, _CMP_GT_OQ))};
}

#endif

// How far ahead of the loop each array is prefetched, in elements. The hardware prefetchers stop at
// every 4 KiB page; a software prefetch a little ahead keeps the next page's lines coming. Measured
// on the 2-core development VM (AVX-512), one thread, against none: Adam 8% faster in fp32 and 17%
// in bf16, Adagrad 16% in bf16, Lion 5% in bf16, 1-3% either way elsewhere; 32, 64, 128 and 256
// ahead did worse overall (256: Adagrad and Lion 12-18% slower).
constexpr int64_t kPrefetchAhead = 96;

// Calls body(V{}, i) for i = 0, V::lanes, ... up to n: SIMD lanes while a whole vector fits, then
// one element at a time (a loop the compiler may still vectorize where there is no SIMD type).
// `streams` are the arrays the body walks, prefetched kPrefetchAhead elements ahead.
template <class Body, class... Streams>
inline void for_lanes(int64_t n, const Body& body, const Streams*... streams)
{
    int64_t i = 0;
#if defined(ZERO_CPU_OPTIM_SIMD)
    for (; i + Lanes::lanes <= n; i += Lanes::lanes) {
        // A prefetch past the end of an array is harmless: it never faults.
        (_mm_prefetch(reinterpret_cast<const char*>(streams + i + kPrefetchAhead), _MM_HINT_T0), ...);
        body(Lanes{}, i);
    }
#else
    ((void)streams, ...);
#endif
#pragma omp simd
    for (int64_t j = i; j < n; ++j) body(Scalar{}, j);
}

}  // namespace zero_cpu_optim
