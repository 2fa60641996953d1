// An exact count of torch's CPU allocator: the bytes of every CPU storage allocated since install().
//
// install() puts a thin allocator in front of c10's CPU allocator (c10::SetCPUAllocator). Each
// allocation is handed to the allocator it replaced and recorded (address -> size) before it is
// returned; its deleter removes the record and hands the memory back. Every thread is counted
// (gloo's workers too), and a storage resized in place is counted as the new allocation it is.
// Storages allocated before install() keep their own deleter and are never counted, neither
// alive nor freed. The cost is one lock and one hash-map update per allocation and per free.
// Only pybind11 and c10's allocator header are included, not torch/extension.h: a fast build.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <unordered_map>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace {

struct Counts {
    std::mutex lock;
    std::unordered_map<void*, size_t> live;  // address -> bytes, of every counted allocation alive
    size_t current = 0;
    size_t peak = 0;
    uint64_t allocations = 0;
};

Counts& counts()
{
    static Counts* instance = new Counts();  // never destroyed: frees can run during interpreter exit
    return *instance;
}

c10::DeleterFnPtr inner_deleter = nullptr;

void counted_delete(void* ptr)
{
    if (ptr != nullptr) {
        Counts& c = counts();
        std::lock_guard<std::mutex> guard(c.lock);
        auto found = c.live.find(ptr);
        if (found != c.live.end()) {
            c.current -= found->second;
            c.live.erase(found);
        }
    }
    inner_deleter(ptr);
}

class CountingAllocator final : public c10::Allocator {
public:
    explicit CountingAllocator(c10::Allocator* inner) : inner_(inner) {}

    c10::DataPtr allocate(size_t nbytes) override
    {
        c10::DataPtr taken = inner_->allocate(nbytes);
        void* data = taken.get();
        if (data == nullptr) { return taken; }  // zero bytes: nothing to count
        if (taken.get_context() != data || taken.get_deleter() != inner_deleter) {
            // The allocator we wrap hands out a simple pointer with its raw deleter (checked at install);
            // anything else cannot be counted by address, and passing it on uncounted would be a silent gap.
            throw std::runtime_error("zero-pin counting allocator: the CPU allocator returned a pointer it "
                                     "does not free with its raw deleter; the count would be wrong");
        }
        taken.release_context();
        {
            Counts& c = counts();
            std::lock_guard<std::mutex> guard(c.lock);
            c.live[data] = nbytes;
            c.current += nbytes;
            c.peak = std::max(c.peak, c.current);
            c.allocations += 1;
        }
        return {data, data, &counted_delete, taken.device()};
    }

    c10::DeleterFnPtr raw_deleter() const override { return &counted_delete; }

    void copy_data(void* dest, const void* src, std::size_t count) const override
    {
        default_copy_data(dest, src, count);
    }

private:
    c10::Allocator* inner_;
};

CountingAllocator* installed = nullptr;

void install()
{
    if (installed != nullptr) { return; }
    c10::Allocator* inner = c10::GetCPUAllocator();
    inner_deleter = inner->raw_deleter();
    if (inner_deleter == nullptr) {
        throw std::runtime_error("zero-pin counting allocator: the CPU allocator in use has no raw deleter, "
                                 "so its allocations cannot be counted by address");
    }
    installed = new CountingAllocator(inner);  // lives as long as the process: storages keep its deleter
    // The highest priority: a later registration at a lower one cannot displace the count.
    c10::SetCPUAllocator(installed, UINT8_MAX);
}

py::dict stats()
{
    Counts& c = counts();
    std::lock_guard<std::mutex> guard(c.lock);
    py::dict out;
    out["current"] = c.current;
    out["peak"] = c.peak;
    out["allocations"] = c.allocations;
    out["live_blocks"] = c.live.size();
    return out;
}

void reset_peak()
{
    Counts& c = counts();
    std::lock_guard<std::mutex> guard(c.lock);
    c.peak = c.current;
}

size_t counted_bytes(uintptr_t address)
{
    Counts& c = counts();
    std::lock_guard<std::mutex> guard(c.lock);
    auto found = c.live.find(reinterpret_cast<void*>(address));
    return found == c.live.end() ? 0 : found->second;
}

std::vector<std::pair<uintptr_t, size_t>> live_blocks()
{
    Counts& c = counts();
    std::lock_guard<std::mutex> guard(c.lock);
    std::vector<std::pair<uintptr_t, size_t>> out;
    out.reserve(c.live.size());
    for (const auto& [ptr, nbytes] : c.live) { out.emplace_back(reinterpret_cast<uintptr_t>(ptr), nbytes); }
    return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)
{
    m.def("install", &install, "count every later CPU allocation (idempotent)");
    m.def("installed", [] { return installed != nullptr; });
    m.def("stats", &stats, "current, peak, allocations and live_blocks since install");
    m.def("reset_peak", &reset_peak);
    m.def("counted_bytes", &counted_bytes, "the bytes of the counted allocation starting at an address, else 0");
    m.def("live_blocks", &live_blocks, "(address, bytes) of every counted allocation alive");
}
