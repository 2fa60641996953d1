// Fused one-pass steps of zero_offload's CPU optimizers: Adam/AdamW (amsgrad, bias correction on
// or off), Adagrad and Lion, over fp32, bf16 or fp16 params and grads with fp32 states.
//
// A step reads param, grad and states once and writes them once, so it is bound by memory
// bandwidth: the update is plain arithmetic in `omp simd` loops that the compiler vectorizes for
// the build machine (-march=native, see zero_offload/optim/_native.py), and the elements of every
// param of a call are split into one contiguous range per thread (torch's OpenMP team, so
// torch.set_num_threads applies). 16-bit params are widened a block at a time into fp32 scratch
// that stays in L1, stepped there and rounded back once, to nearest even as torch's .to() rounds.
// The arithmetic follows torch's fused CPU kernels operation by operation, fmas included, so
// results match them to the last bit or so.
//
// Only pybind11 and ATen's parallel_for are included, not torch/extension.h, for a fast build:
// Python hands over data pointers and sizes after checking dtypes, shapes and contiguity.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <ATen/Parallel.h>
#include <torch/headeronly/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace py = pybind11;

namespace {

// Elements of a 16-bit param widened at a time: two 2 KiB fp32 scratch blocks, which stay in L1.
constexpr int64_t kBlock = 512;
// A call over fewer elements runs on the calling thread: a fork costs more than it saves.
constexpr int64_t kGrain = 1 << 15;

enum class Storage { f32 = 0, bf16 = 1, f16 = 2 };

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
    // Round to nearest even on the 16 dropped bits; NaN stays a quiet NaN, as c10::BFloat16 does.
    const uint16_t rounded = uint16_t((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
    return value != value ? uint16_t(0x7FC0) : rounded;
}

void widen(Storage storage, const void* from, float* to, int64_t n)
{
    const uint16_t* bits = static_cast<const uint16_t*>(from);
    int64_t i = 0;
    if (storage == Storage::bf16) {
#pragma omp simd
        for (i = 0; i < n; ++i) to[i] = bf16_to_f32(bits[i]);
        return;
    }
#if defined(__F16C__)
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(to + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bits + i))));
#endif
    for (; i < n; ++i) to[i] = c10::detail::fp16_ieee_to_fp32_value(bits[i]);
}

void narrow(Storage storage, const float* from, void* to, int64_t n)
{
    uint16_t* bits = static_cast<uint16_t*>(to);
    int64_t i = 0;
    if (storage == Storage::bf16) {
#pragma omp simd
        for (i = 0; i < n; ++i) bits[i] = f32_to_bf16(from[i]);
        return;
    }
#if defined(__F16C__)
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(bits + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(from + i), _MM_FROUND_TO_NEAREST_INT));
#endif
    for (; i < n; ++i) bits[i] = c10::detail::fp16_ieee_from_fp32_value(from[i]);
}

// One param of a call: its data, its grad, up to three fp32 states, and two per-param
// coefficients (Adam's step size and bias correction, which depend on the param's step count).
struct Segment {
    void* param;
    const void* grad;
    float* state[3];
    int64_t numel;
    float coefficient[2];
};

// The update of `n` fp32 elements, in place; `coefficient` and `state` are the segment's, offset.
// Each update type below is a functor with this signature:
//   void operator()(const float* coefficient, float* param, const float* grad, float* const* state, int64_t n)

template <class Update>
void step_range(const Segment& segment, Storage storage, const Update& update, int64_t from, int64_t to)
{
    float* state[3];
    for (int k = 0; k < 3; ++k) state[k] = segment.state[k] ? segment.state[k] + from : nullptr;
    if (storage == Storage::f32) {
        update(segment.coefficient, static_cast<float*>(segment.param) + from,
               static_cast<const float*>(segment.grad) + from, state, to - from);
        return;
    }
    alignas(64) float param[kBlock];
    alignas(64) float grad[kBlock];
    uint16_t* param_bits = static_cast<uint16_t*>(segment.param) + from;
    const uint16_t* grad_bits = static_cast<const uint16_t*>(segment.grad) + from;
    for (int64_t done = 0; done < to - from; done += kBlock) {
        const int64_t n = std::min(kBlock, to - from - done);
        widen(storage, param_bits + done, param, n);
        widen(storage, grad_bits + done, grad, n);
        float* block_state[3];
        for (int k = 0; k < 3; ++k) block_state[k] = state[k] ? state[k] + done : nullptr;
        update(segment.coefficient, param, grad, block_state, n);
        narrow(storage, param, param_bits + done, n);
    }
}

// Every segment's elements, numbered one after the other, cut into one contiguous range per thread.
template <class Update>
void step_all(const std::vector<Segment>& segments, Storage storage, const Update& update)
{
    std::vector<int64_t> starts(segments.size() + 1, 0);
    for (size_t s = 0; s < segments.size(); ++s) starts[s + 1] = starts[s] + segments[s].numel;
    py::gil_scoped_release released;  // other Python threads (swap I/O, say) run meanwhile
    at::parallel_for(0, starts.back(), kGrain, [&](int64_t begin, int64_t end) {
        size_t s = size_t(std::upper_bound(starts.begin(), starts.end(), begin) - starts.begin()) - 1;
        for (; s < segments.size() && starts[s] < end; ++s) {
            const int64_t from = std::max(begin, starts[s]) - starts[s];
            const int64_t to = std::min(end, starts[s + 1]) - starts[s];
            if (from < to) step_range(segments[s], storage, update, from, to);
        }
    });
}

// torch.lerp's vectorized form: an fma from the nearer end, so that weight 1 gives `end` exactly.
inline float lerp(float start, float end, float weight)
{
    return weight < 0.5f ? std::fma(weight, end - start, start) : std::fma(weight - 1.0f, end - start, end);
}

// The fmas are where torch's fused kernels have them once GCC contracts their vector code (its
// default): bit for bit the same results as torch's, for every element of a vector loop.
template <bool kAdamW, bool kAmsgrad>
struct AdamUpdate {
    float beta2, grad_weight1, grad_weight2, eps, weight_decay, decay;  // grad_weight: 1 - beta

    void operator()(const float* coefficient, float* __restrict param, const float* __restrict grad,
                    float* const* state, int64_t n) const
    {
        float* __restrict exp_avg = state[0];
        float* __restrict exp_avg_sq = state[1];
        float* __restrict max_exp_avg_sq = state[2];
        const float step_size = coefficient[0];
        const float bias_correction2_sqrt = coefficient[1];
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) {
            float p = param[i];
            float g = grad[i];
            if constexpr (kAdamW) {
                p = p * decay;
            } else {
                g = std::fma(p, weight_decay, g);
            }
            const float m = lerp(exp_avg[i], g, grad_weight1);
            float v = std::fma(grad_weight2 * g, g, exp_avg_sq[i] * beta2);
            exp_avg[i] = m;
            exp_avg_sq[i] = v;
            if constexpr (kAmsgrad) {
                v = std::max(max_exp_avg_sq[i], v);
                max_exp_avg_sq[i] = v;
            }
            param[i] = p - step_size * m / (std::sqrt(v) / bias_correction2_sqrt + eps);
        }
    }
};

struct AdagradUpdate {
    float lr, eps, weight_decay;

    void operator()(const float*, float* __restrict param, const float* __restrict grad, float* const* state,
                    int64_t n) const
    {
        float* __restrict sum = state[0];
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) {
            const float p = param[i];
            const float g = std::fma(p, weight_decay, grad[i]);
            const float s = std::fma(g, g, sum[i]);
            sum[i] = s;
            param[i] = p - lr * g / (std::sqrt(s) + eps);
        }
    }
};

struct LionUpdate {
    float lr, weight1, weight2, decay;  // the lerp weights 1 - beta1 and 1 - beta2

    void operator()(const float*, float* __restrict param, const float* __restrict grad, float* const* state,
                    int64_t n) const
    {
        float* __restrict exp_avg = state[0];
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) {
            const float g = grad[i];
            const float m = exp_avg[i];
            const float c = lerp(m, g, weight1);
            // sign(c), with sign(0) = 0 as in the paper (and NaN passed on)
            const float direction = c > 0.0f ? 1.0f : (c < 0.0f ? -1.0f : c);
            param[i] = param[i] * decay - lr * direction;
            exp_avg[i] = lerp(m, g, weight2);
        }
    }
};

using Pointers = std::vector<std::vector<uintptr_t>>;

// The segments of a call: pointers[0] params, [1] grads, [2...] one list per state.
std::vector<Segment> segments_of(const Pointers& pointers, const std::vector<int64_t>& numels, size_t states)
{
    if (pointers.size() != 2 + states)
        throw std::invalid_argument("expected " + std::to_string(2 + states) + " pointer lists, got " +
                                    std::to_string(pointers.size()));
    for (const auto& list : pointers)
        if (list.size() != numels.size())
            throw std::invalid_argument("every pointer list must have one entry per numel");
    std::vector<Segment> segments(numels.size());
    for (size_t i = 0; i < numels.size(); ++i) {
        Segment& segment = segments[i];
        segment.param = reinterpret_cast<void*>(pointers[0][i]);
        segment.grad = reinterpret_cast<const void*>(pointers[1][i]);
        for (size_t k = 0; k < 3; ++k)
            segment.state[k] = k < states ? reinterpret_cast<float*>(pointers[2 + k][i]) : nullptr;
        segment.numel = numels[i];
        segment.coefficient[0] = segment.coefficient[1] = 0.0f;
    }
    return segments;
}

Storage storage_of(int code)
{
    if (code < 0 || code > 2) throw std::invalid_argument("storage must be 0 (fp32), 1 (bf16) or 2 (fp16)");
    return Storage(code);
}

void adam_step(int storage, const Pointers& pointers, const std::vector<int64_t>& numels,
               const std::vector<double>& step_sizes, const std::vector<double>& bias_correction2_sqrts,
               double lr, double beta1, double beta2, double eps, double weight_decay, bool adamw, bool amsgrad)
{
    std::vector<Segment> segments = segments_of(pointers, numels, amsgrad ? 3 : 2);
    if (step_sizes.size() != numels.size() || bias_correction2_sqrts.size() != numels.size())
        throw std::invalid_argument("adam_step needs one step size and bias correction per param");
    for (size_t i = 0; i < segments.size(); ++i) {
        segments[i].coefficient[0] = float(step_sizes[i]);
        segments[i].coefficient[1] = float(bias_correction2_sqrts[i]);
    }
    // The coefficients are rounded to fp32 once, from double, as torch's kernel rounds them.
    const float b2 = float(beta2), w1 = float(1 - beta1), w2 = float(1 - beta2);
    const float e = float(eps), wd = float(weight_decay), decay = float(1 - lr * weight_decay);
    const Storage kind = storage_of(storage);
    if (adamw && amsgrad) step_all(segments, kind, AdamUpdate<true, true>{b2, w1, w2, e, wd, decay});
    else if (adamw) step_all(segments, kind, AdamUpdate<true, false>{b2, w1, w2, e, wd, decay});
    else if (amsgrad) step_all(segments, kind, AdamUpdate<false, true>{b2, w1, w2, e, wd, decay});
    else step_all(segments, kind, AdamUpdate<false, false>{b2, w1, w2, e, wd, decay});
}

void adagrad_step(int storage, const Pointers& pointers, const std::vector<int64_t>& numels, double lr, double eps,
                  double weight_decay)
{
    step_all(segments_of(pointers, numels, 1), storage_of(storage),
             AdagradUpdate{float(lr), float(eps), float(weight_decay)});
}

void lion_step(int storage, const Pointers& pointers, const std::vector<int64_t>& numels, double lr, double beta1,
               double beta2, double weight_decay)
{
    step_all(segments_of(pointers, numels, 1), storage_of(storage),
             LionUpdate{float(lr), float(1 - beta1), float(1 - beta2), float(1 - lr * weight_decay)});
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)
{
    m.doc() = "Fused one-pass CPU optimizer steps over data pointers (zero_offload.optim).";
    m.def("adam_step", &adam_step, "Adam/AdamW over params, grads, exp_avg, exp_avg_sq[, max_exp_avg_sq]");
    m.def("adagrad_step", &adagrad_step, "Adagrad over params, grads, sum");
    m.def("lion_step", &lion_step, "Lion over params, grads, exp_avg");
}
