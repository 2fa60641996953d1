// Fused one-pass steps of zero_offload's CPU optimizers: Adam/AdamW (amsgrad, bias correction on
// or off), Adagrad and Lion, over fp32, bf16 or fp16 params and grads with fp32 states.
//
// A step reads param, grad and states once and writes them once, so it is bound by memory
// bandwidth: the update is plain arithmetic in `omp simd` loops that the compiler vectorizes for
// the build machine (-march=native, see zero_offload/optim/_native.py), and the elements of every
// param of a call are handed to torch's OpenMP team in contiguous chunks (so torch.set_num_threads
// applies). 16-bit params are stepped in fp32 and rounded back once, to nearest even as torch's
// .to() rounds.
// The arithmetic follows torch's fused CPU kernels operation by operation, fmas included, so
// results match them to the last bit or so.
//
// Only pybind11 and ATen/Parallel.h (the thread count) are included, not torch/extension.h, for a
// fast build: Python hands over data pointers and sizes after checking dtypes, shapes and contiguity.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <ATen/Parallel.h>
#include <torch/headeronly/util/Half.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__F16C__)
#include <immintrin.h>
#endif
#include <sys/mman.h>

namespace py = pybind11;

namespace {

// Elements of an fp16 param widened at a time: two 2 KiB fp32 scratch blocks, which stay in L1.
constexpr int64_t kBlock = 512;
// Elements the threads take at a time: 256 KiB of each fp32 array, long runs for the prefetchers,
// and a call over fewer runs on the calling thread (a fork would cost more than it saves).
constexpr int64_t kChunk = 1 << 16;

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

// How an update reads and writes params and grads: fp32 as they are, bf16 widened and rounded
// back in registers (plain bit operations, which vectorize).
struct F32 {
    using T = float;
    static float load(const T* from, int64_t i) { return from[i]; }
    static void store(T* to, int64_t i, float value) { to[i] = value; }
};

struct BF16 {
    using T = uint16_t;
    static float load(const T* from, int64_t i) { return bf16_to_f32(from[i]); }
    static void store(T* to, int64_t i, float value) { to[i] = f32_to_bf16(value); }
};

// fp16 goes through fp32 scratch instead: GCC vectorizes no fp16 conversion, so F16C's 8-wide
// instructions do it where the CPU has them.
void widen_f16(const uint16_t* from, float* to, int64_t n)
{
    int64_t i = 0;
#if defined(__F16C__)
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(to + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(from + i))));
#endif
    for (; i < n; ++i) to[i] = c10::detail::fp16_ieee_to_fp32_value(from[i]);
}

void narrow_f16(const float* from, uint16_t* to, int64_t n)
{
    int64_t i = 0;
#if defined(__F16C__)
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(to + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(from + i), _MM_FROUND_TO_NEAREST_INT));
#endif
    for (; i < n; ++i) to[i] = c10::detail::fp16_ieee_from_fp32_value(from[i]);
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

// Each update type below steps `n` elements in place with
//   template <class Io>
//   void run(const float* coefficient, Io::T* param, const Io::T* grad, float* const* state, int64_t n)
// where `coefficient` is the segment's and `state` its state arrays, offset to the first element.
template <class Update>
void step_range(const Segment& segment, Storage storage, const Update& update, int64_t from, int64_t to)
{
    float* state[3];
    for (int k = 0; k < 3; ++k) state[k] = segment.state[k] ? segment.state[k] + from : nullptr;
    if (storage == Storage::f32) {
        update.template run<F32>(segment.coefficient, static_cast<float*>(segment.param) + from,
                                 static_cast<const float*>(segment.grad) + from, state, to - from);
        return;
    }
    uint16_t* param_bits = static_cast<uint16_t*>(segment.param) + from;
    const uint16_t* grad_bits = static_cast<const uint16_t*>(segment.grad) + from;
    if (storage == Storage::bf16) {
        update.template run<BF16>(segment.coefficient, param_bits, grad_bits, state, to - from);
        return;
    }
    alignas(64) float param[kBlock];
    alignas(64) float grad[kBlock];
    for (int64_t done = 0; done < to - from; done += kBlock) {
        const int64_t n = std::min(kBlock, to - from - done);
        widen_f16(param_bits + done, param, n);
        widen_f16(grad_bits + done, grad, n);
        float* block_state[3];
        for (int k = 0; k < 3; ++k) block_state[k] = state[k] ? state[k] + done : nullptr;
        update.template run<F32>(segment.coefficient, param, grad, block_state, n);
        narrow_f16(param, param_bits + done, n);
    }
}

// Every segment's elements, numbered one after the other, in contiguous chunks of kChunk that the
// threads take one at a time. Not one range per thread fixed up front: on a loaded machine the OS
// deschedules a thread now and then, and the others then take its share instead of waiting.
template <class Update>
void step_all(const std::vector<Segment>& segments, Storage storage, const Update& update)
{
    std::vector<int64_t> starts(segments.size() + 1, 0);
    for (size_t s = 0; s < segments.size(); ++s) starts[s + 1] = starts[s] + segments[s].numel;
    const int64_t total = starts.back();
    auto step_elements = [&](int64_t begin, int64_t end) {
        size_t s = size_t(std::upper_bound(starts.begin(), starts.end(), begin) - starts.begin()) - 1;
        for (; s < segments.size() && starts[s] < end; ++s) {
            const int64_t from = std::max(begin, starts[s]) - starts[s];
            const int64_t to = std::min(end, starts[s + 1]) - starts[s];
            if (from < to) step_range(segments[s], storage, update, from, to);
        }
    };
    py::gil_scoped_release released;  // other Python threads (swap I/O, say) run meanwhile
    const int64_t chunks = (total + kChunk - 1) / kChunk;
    if (chunks <= 1 || at::get_num_threads() <= 1 || at::in_parallel_region()) {
        step_elements(0, total);
        return;
    }
    std::atomic<int64_t> next{0};
    // torch's own team (the same libgomp), sized by torch.set_num_threads / OMP_NUM_THREADS.
#pragma omp parallel
    for (int64_t chunk = next.fetch_add(1); chunk < chunks; chunk = next.fetch_add(1))
        step_elements(chunk * kChunk, std::min(total, (chunk + 1) * kChunk));
}

// torch.lerp(start, end, weight)'s vectorized form: an fma from the nearer end, so that weight 1
// gives `end` exactly. The end is the same for every element, so it is chosen once per call.
struct Lerp {
    float coefficient;  // weight from the start, weight - 1 from the end
    bool from_start;

    explicit Lerp(float weight) : coefficient(weight < 0.5f ? weight : weight - 1.0f), from_start(weight < 0.5f) {}

    float operator()(float start, float end) const
    {
        return std::fma(coefficient, end - start, from_start ? start : end);
    }
};

// Each loop below copies what it reads of its update into locals first: the compiler cannot tell
// that the stores through the float pointers leave the update's own members alone, and would
// otherwise load them again for every vector.

// The fmas are where torch's fused kernels have them once GCC contracts their vector code (its
// default): the same results as torch's, but for the bias correction (see below).
template <bool kAdamW, bool kAmsgrad>
struct AdamUpdate {
    Lerp moment;  // exp_avg.lerp_(grad, 1 - beta1)
    float beta2, grad_weight2, eps, weight_decay, decay;  // grad_weight2: 1 - beta2

    template <class Io>
    void run(const float* coefficient, typename Io::T* __restrict param, const typename Io::T* __restrict grad,
             float* const* state, int64_t n) const
    {
        float* __restrict exp_avg = state[0];
        float* __restrict exp_avg_sq = state[1];
        float* __restrict max_exp_avg_sq = state[2];
        const float step_size = coefficient[0], inverse_bias_correction2_sqrt = coefficient[1];
        const Lerp lerp = moment;
        const float b2 = beta2, w2 = grad_weight2, e = eps, wd = weight_decay, d = decay;
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) {
            float p = Io::load(param, i);
            float g = Io::load(grad, i);
            if constexpr (kAdamW) {
                p = p * d;
            } else {
                g = std::fma(p, wd, g);
            }
            const float m = lerp(exp_avg[i], g);
            float v = std::fma(w2 * g, g, exp_avg_sq[i] * b2);
            exp_avg[i] = m;
            exp_avg_sq[i] = v;
            if constexpr (kAmsgrad) {
                v = std::max(max_exp_avg_sq[i], v);
                max_exp_avg_sq[i] = v;
            }
            // torch divides by the bias correction: a multiplication saves a division per element (3%
            // of a memory-bound step on one thread) and moves the update by an ulp at most.
            Io::store(param, i, p - step_size * m / std::fma(std::sqrt(v), inverse_bias_correction2_sqrt, e));
        }
    }
};

struct AdagradUpdate {
    float lr, eps, weight_decay;

    template <class Io>
    void run(const float*, typename Io::T* __restrict param, const typename Io::T* __restrict grad,
             float* const* state, int64_t n) const
    {
        float* __restrict sum = state[0];
        const float l = lr, e = eps, wd = weight_decay;
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) {
            const float p = Io::load(param, i);
            const float g = std::fma(p, wd, Io::load(grad, i));
            const float s = std::fma(g, g, sum[i]);
            sum[i] = s;
            Io::store(param, i, p - l * g / (std::sqrt(s) + e));
        }
    }
};

struct LionUpdate {
    Lerp direction, moment;  // lerp(m, g, 1 - beta1) and lerp(m, g, 1 - beta2)
    float lr, decay;

    template <class Io>
    void run(const float*, typename Io::T* __restrict param, const typename Io::T* __restrict grad,
             float* const* state, int64_t n) const
    {
        float* __restrict exp_avg = state[0];
        const Lerp lerp1 = direction, lerp2 = moment;
        const float l = lr, d = decay;
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) {
            const float g = Io::load(grad, i);
            const float m = exp_avg[i];
            const float c = lerp1(m, g);
            // sign(c), with sign(0) = 0 as in the paper (and NaN passed on)
            const float sign = c > 0.0f ? 1.0f : (c < 0.0f ? -1.0f : c);
            Io::store(param, i, Io::load(param, i) * d - l * sign);
            exp_avg[i] = lerp2(m, g);
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
               const std::vector<double>& step_sizes, const std::vector<double>& inverse_bias_correction2_sqrts,
               double lr, double beta1, double beta2, double eps, double weight_decay, bool adamw, bool amsgrad)
{
    std::vector<Segment> segments = segments_of(pointers, numels, amsgrad ? 3 : 2);
    if (step_sizes.size() != numels.size() || inverse_bias_correction2_sqrts.size() != numels.size())
        throw std::invalid_argument("adam_step needs one step size and bias correction per param");
    for (size_t i = 0; i < segments.size(); ++i) {
        segments[i].coefficient[0] = float(step_sizes[i]);
        segments[i].coefficient[1] = float(inverse_bias_correction2_sqrts[i]);
    }
    // The coefficients are rounded to fp32 once, from double, as torch's kernel rounds them.
    const Lerp moment(float(1 - beta1));
    const float b2 = float(beta2), w2 = float(1 - beta2);
    const float e = float(eps), wd = float(weight_decay), decay = float(1 - lr * weight_decay);
    const Storage kind = storage_of(storage);
    if (adamw && amsgrad) step_all(segments, kind, AdamUpdate<true, true>{moment, b2, w2, e, wd, decay});
    else if (adamw) step_all(segments, kind, AdamUpdate<true, false>{moment, b2, w2, e, wd, decay});
    else if (amsgrad) step_all(segments, kind, AdamUpdate<false, true>{moment, b2, w2, e, wd, decay});
    else step_all(segments, kind, AdamUpdate<false, false>{moment, b2, w2, e, wd, decay});
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
             LionUpdate{Lerp(float(1 - beta1)), Lerp(float(1 - beta2)), float(lr), float(1 - lr * weight_decay)});
}

// Transparent huge pages for the whole huge pages inside [address, address + bytes), asked for
// before the memory is first touched: a step streams through several arrays, and in a VM each TLB
// miss costs a two-level page walk (Adam on 33.5M params, one thread: 15% faster with the states
// in huge pages). False where the advice is unknown or refused; the memory is usable either way.
bool advise_huge_pages(uintptr_t address, int64_t bytes, int64_t page)
{
#if defined(MADV_HUGEPAGE)
    const uintptr_t mask = ~uintptr_t(page - 1);
    const uintptr_t begin = (address + uintptr_t(page) - 1) & mask;
    const uintptr_t end = (address + uintptr_t(bytes)) & mask;
    return end > begin && madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE) == 0;
#else
    return false;
#endif
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)
{
    m.doc() = "Fused one-pass CPU optimizer steps over data pointers (zero_offload.optim).";
    m.def("adam_step", &adam_step, "Adam/AdamW over params, grads, exp_avg, exp_avg_sq[, max_exp_avg_sq]");
    m.def("adagrad_step", &adagrad_step, "Adagrad over params, grads, sum");
    m.def("lion_step", &lion_step, "Lion over params, grads, exp_avg");
    m.def("advise_huge_pages", &advise_huge_pages, "madvise(MADV_HUGEPAGE) over the huge pages inside a range");
}
