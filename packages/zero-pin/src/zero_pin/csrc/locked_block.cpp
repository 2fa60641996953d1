// Page-aligned host memory locked with mlock, for zero-pin's `native` backend.
//
// A LockedBlock exposes its memory through the buffer protocol; Python wraps it with
// torch.frombuffer, so every tensor (view, slice, .data redirect) made from it keeps
// the block alive. The memory is therefore freed only when the last view dies, and
// unlock() (munlock) can run at once without freeing anything still referenced.
// Python keeps a block whose views all died in a cache, still locked, for the next pin of
// its size. A large block may ask for transparent huge pages: it is aligned to the huge-page
// size and advised MADV_HUGEPAGE before mlock faults it in (a failed advice is ignored).
// Only pybind11 is included, not torch/extension.h: that keeps the first build fast.
#include <pybind11/pybind11.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <new>

namespace py = pybind11;

namespace {

// A failed system call; translated to OSError(errno, strerror, call) for Python.
struct SystemCallError : std::exception {
    SystemCallError(int err, const char* call) : err(err), call(call) {}
    int err;
    const char* call;
};

class LockedBlock {
public:
    // mlock locks whole pages: round up (at least one page) so the size we count is the kernel's.
    static size_t locked_size(size_t requested)
    {
        const size_t page = page_size();
        if (requested > SIZE_MAX - page) { throw std::bad_alloc(); }
        return std::max(page, (requested + page - 1) / page * page);
    }

    // alignment: 0 for page aligned; the huge-page size to ask for transparent huge pages.
    explicit LockedBlock(size_t requested, size_t alignment = 0) : size_(locked_size(requested))
    {
        if (int err = posix_memalign(&ptr_, std::max(page_size(), alignment), size_)) {
            throw SystemCallError(err, "posix_memalign");
        }
#ifdef MADV_HUGEPAGE
        // Before mlock, which faults every page in: then it faults huge pages where it can.
        if (alignment > page_size()) { huge_pages_ = madvise(ptr_, size_, MADV_HUGEPAGE) == 0; }
#endif
        if (mlock(ptr_, size_) != 0) {
            const int err = errno;
            std::free(ptr_);
            throw SystemCallError(err, "mlock");
        }
        locked_ = true;
    }

    LockedBlock(const LockedBlock&) = delete;
    LockedBlock& operator=(const LockedBlock&) = delete;

    ~LockedBlock()
    {
        unlock();
        std::free(ptr_);
    }

    // Release the lock but keep the memory: views of it may still be in use.
    bool unlock()
    {
        if (!locked_) { return false; }
        munlock(ptr_, size_);
        locked_ = false;
        return true;
    }

    void* data() const { return ptr_; }
    size_t size() const { return size_; }
    uintptr_t address() const { return reinterpret_cast<uintptr_t>(ptr_); }
    bool locked() const { return locked_; }
    bool huge_pages() const { return huge_pages_; }

private:
    static size_t page_size() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

    void* ptr_ = nullptr;
    size_t size_ = 0;
    bool locked_ = false;
    bool huge_pages_ = false;  // advised MADV_HUGEPAGE, and the kernel accepted the advice
};

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)
{
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) { std::rethrow_exception(p); }
        } catch (const SystemCallError& e) {
            errno = e.err;
            PyErr_SetFromErrnoWithFilename(PyExc_OSError, e.call);
        }
    });
    m.def("locked_size", &LockedBlock::locked_size, py::arg("nbytes"));
    py::class_<LockedBlock>(m, "LockedBlock", py::buffer_protocol())
        // mlock of a large block faults in every page: let other threads run meanwhile.
        .def(py::init<size_t, size_t>(), py::arg("nbytes"), py::arg("alignment") = 0,
             py::call_guard<py::gil_scoped_release>())
        .def("unlock", &LockedBlock::unlock)
        .def_property_readonly("address", &LockedBlock::address)
        .def_property_readonly("nbytes", &LockedBlock::size)
        .def_property_readonly("locked", &LockedBlock::locked)
        .def_property_readonly("huge_pages", &LockedBlock::huge_pages)
        .def_buffer([](LockedBlock& b) {
            return py::buffer_info(b.data(), 1, py::format_descriptor<uint8_t>::format(), 1,
                                   {static_cast<py::ssize_t>(b.size())}, {1});
        });
}
