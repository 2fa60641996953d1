// Fused one-pass steps of zero_offload's CPU optimizers: Adam/AdamW (amsgrad, bias correction on
// or off), Adagrad and Lion, over fp32, bf16 or fp16 params and grads with fp32 states.
//
// A step reads param, grad and states once and writes them once, so it is bound by memory
// bandwidth: each update is written once over a lane type (cpu_optim_lanes.h: AVX-512 or AVX2 for
// the build machine, -march=native, see zero_offload/optim/_native.py, and one float for the
// tails), and the elements of every param of a call are handed to torch's OpenMP team in
// contiguous chunks (so torch.set_num_threads applies). 16-bit params are stepped in fp32 and
// rounded back once, to nearest even as torch's .to() rounds. The arithmetic follows torch's fused
// CPU kernels operation by operation, fmas included, so results match them to an ulp or so.
//
// Only pybind11 and ATen/Parallel.h (the thread count) are included, not torch/extension.h, for a
// fast build: Python hands over data pointers and sizes after checking dtypes, shapes and contiguity.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu_optim_lanes.h"

namespace py = pybind11;

namespace {

using zero_cpu_optim::for_lanes;
using zero_cpu_optim::greater_of;
using zero_cpu_optim::mul_add;
using zero_cpu_optim::sign_of;
using zero_cpu_optim::square_root;

// Elements the threads take at a time: 256 KiB of each fp32 array, long runs for the prefetchers,
// and a call over fewer runs on the calling thread (a fork would cost more than it saves).
constexpr int64_t kChunk = 1 << 16;

enum class Storage { f32 = 0, bf16 = 1, f16 = 2 };

// How an update reads and writes params and grads, in any lane type V.
struct F32 {
    using T = float;
    template <class V> static V load(const T* from) { return V::load(from); }
    template <class V> static void store(T* to, V value) { value.store(to); }
};

struct BF16 {
    using T = uint16_t;
    template <class V> static V load(const T* from) { return V::load_bf16(from); }
    template <class V> static void store(T* to, V value) { value.store_bf16(to); }
};

struct F16 {
    using T = uint16_t;
    template <class V> static V load(const T* from) { return V::load_f16(from); }
    template <class V> static void store(T* to, V value) { value.store_f16(to); }
};

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
    uint16_t* param = static_cast<uint16_t*>(segment.param) + from;
    const uint16_t* grad = static_cast<const uint16_t*>(segment.grad) + from;
    if (storage == Storage::bf16) update.template run<BF16>(segment.coefficient, param, grad, state, to - from);
    else update.template run<F16>(segment.coefficient, param, grad, state, to - from);
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

    template <class V>
    V operator()(V start, V end) const
    {
        // A branch, not `from_start ? start : end`: selecting between the two vectors by value
        // makes GCC keep both in memory.
        if (from_start) return mul_add(V::all(coefficient), end - start, start);
        return mul_add(V::all(coefficient), end - start, end);
    }
};

// Each update copies its members into locals before the loop: the compiler cannot tell that the
// stores through the float pointers leave them alone, and would load them again for every vector.

// The fmas are where torch's fused kernels have them once GCC contracts their vector code (its
// default): the same results as torch's, but for the bias correction (see below).
template <bool kAdamW, bool kAmsgrad>
struct AdamUpdate {
    Lerp moment;  // exp_avg.lerp_(grad, 1 - beta1)
    float beta2, grad_weight2, eps, weight_decay, decay;  // grad_weight2: 1 - beta2

    template <class Io>
    void run(const float* coefficient, typename Io::T* param, const typename Io::T* grad, float* const* state,
             int64_t n) const
    {
        float* exp_avg = state[0];
        float* exp_avg_sq = state[1];
        float* max_exp_avg_sq = state[2];
        const float step_size = coefficient[0], inverse_bias_correction2_sqrt = coefficient[1];
        const Lerp lerp = moment;
        const float b2 = beta2, w2 = grad_weight2, e = eps, wd = weight_decay, d = decay;
        for_lanes(n, [&](auto lanes, int64_t i) {
            using V = decltype(lanes);
            V p = Io::template load<V>(param + i);
            V g = Io::template load<V>(grad + i);
            if constexpr (kAdamW) {
                p = p * V::all(d);
            } else {
                g = mul_add(p, V::all(wd), g);
            }
            const V m = lerp(V::load(exp_avg + i), g);
            V v = mul_add(V::all(w2) * g, g, V::load(exp_avg_sq + i) * V::all(b2));
            m.store(exp_avg + i);
            v.store(exp_avg_sq + i);
            if constexpr (kAmsgrad) {
                v = greater_of(v, V::load(max_exp_avg_sq + i));
                v.store(max_exp_avg_sq + i);
            }
            // torch divides by the bias correction: a multiplication saves a division per element (3%
            // of a memory-bound step on one thread) and moves the update by an ulp at most.
            const V denominator = mul_add(square_root(v), V::all(inverse_bias_correction2_sqrt), V::all(e));
            Io::store(param + i, p - V::all(step_size) * m / denominator);
        }, param, grad, exp_avg, exp_avg_sq);
    }
};

struct AdagradUpdate {
    float lr, eps, weight_decay;

    template <class Io>
    void run(const float*, typename Io::T* param, const typename Io::T* grad, float* const* state, int64_t n) const
    {
        float* sum = state[0];
        const float l = lr, e = eps, wd = weight_decay;
        for_lanes(n, [&](auto lanes, int64_t i) {
            using V = decltype(lanes);
            const V p = Io::template load<V>(param + i);
            const V g = mul_add(p, V::all(wd), Io::template load<V>(grad + i));
            const V s = mul_add(g, g, V::load(sum + i));
            s.store(sum + i);
            Io::store(param + i, p - V::all(l) * g / (square_root(s) + V::all(e)));
        }, param, grad, sum);
    }
};

struct LionUpdate {
    Lerp direction, moment;  // lerp(m, g, 1 - beta1) and lerp(m, g, 1 - beta2)
    float lr, decay;

    template <class Io>
    void run(const float*, typename Io::T* param, const typename Io::T* grad, float* const* state, int64_t n) const
    {
        float* exp_avg = state[0];
        const Lerp lerp1 = direction, lerp2 = moment;
        const float l = lr, d = decay;
        for_lanes(n, [&](auto lanes, int64_t i) {
            using V = decltype(lanes);
            const V g = Io::template load<V>(grad + i);
            const V m = V::load(exp_avg + i);
            // sign(0) = 0, as in the paper (and NaN passed on)
            const V sign = sign_of(lerp1(m, g));
            Io::store(param + i, Io::template load<V>(param + i) * V::all(d) - V::all(l) * sign);
            lerp2(m, g).store(exp_avg + i);
        }, param, grad, exp_avg);
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

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)
{
    m.doc() = "Fused one-pass CPU optimizer steps over data pointers (zero_offload.optim).";
    m.def("adam_step", &adam_step, "Adam/AdamW over params, grads, exp_avg, exp_avg_sq[, max_exp_avg_sq]");
    m.def("adagrad_step", &adagrad_step, "Adagrad over params, grads, sum");
    m.def("lion_step", &lion_step, "Lion over params, grads, exp_avg");
}
