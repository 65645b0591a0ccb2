// Linked into the executables of an AddressSanitizer build that compute with LibTorch (the
// LibTorch tests, the CLI, the Fashion-MNIST export example; tests/sanitizer/meson.build), never
// into a plain build or the library.
//
// Why: AddressSanitizer's allocator maps every block over 128 KiB afresh and unmaps it when it
// leaves quarantine, and LibTorch allocates nearly every tensor at that size. Each new mapping
// is page-faulted in one page at a time, and in a virtual machine a page fault is dear: half of
// a sanitized LibTorch test's time went to the kernel's page-fault path, mmap, munmap and
// shadow memsets (perf, accuracy_steps.cpp's "the caller's model is left as it was": 65 s
// against 3.6 s in the plain build; 16 s with this cache). Other files gain less, those whose
// time is small allocations (TorchScript graphs) nothing: docs/reliability.md has the figures.
//
// What: LibTorch's CPU allocator is replaced by one that keeps large blocks for reuse, and keeps
// what AddressSanitizer would have told about them. A freed block is poisoned at once, so
// reading a tensor's data after its storage is gone is still reported (as use-after-poison
// rather than use-after-free), and it then waits in a first-in first-out quarantine of
// `quarantine_bytes`, as AddressSanitizer's own freed blocks do, before it may be handed out
// again; an out-of-bounds access hits the poisoned tail past each tensor's bytes or
// AddressSanitizer's redzone. Blocks under `smallest_cached_bytes` go straight to
// AddressSanitizer's allocator, whose size classes already reuse them.
#if defined(__SANITIZE_ADDRESS__)

#include <c10/core/CPUAllocator.h>
#include <sanitizer/asan_interface.h>

#include <cstddef>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <new>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace {

constexpr std::size_t smallest_cached_bytes = std::size_t{128} << 10;  // AddressSanitizer's largest size class
constexpr std::size_t quarantine_bytes = std::size_t{256} << 20;       // AddressSanitizer's default quarantine
constexpr std::size_t kept_bytes_at_most = std::size_t{2} << 30;       // free blocks waiting for reuse
constexpr std::size_t alignment = 64;                                  // c10's own CPU alignment
constexpr std::size_t page = 4096;

// A block of AddressSanitizer's allocator, aligned as c10 aligns tensor data.
void* aligned_block(std::size_t bytes) {
    void* data = nullptr;
    if (posix_memalign(&data, alignment, bytes == 0 ? 1 : bytes) != 0) throw std::bad_alloc();
    return data;
}

struct freed_block {
    void* data;
    std::size_t bytes;  // rounded up to a page: the size class the block is reused for
};

class block_cache {
public:
    void* take(std::size_t requested) {
        const std::size_t bytes = rounded(requested);
        void* data = nullptr;
        {
            const std::lock_guard lock(mutex_);
            if (auto found = free_.find(bytes); found != free_.end() && !found->second.empty()) {
                data = found->second.back();
                found->second.pop_back();
                kept_bytes_ -= bytes;
            }
        }
        if (data == nullptr) data = aligned_block(bytes);
        // The requested bytes are usable; the rest of the rounded block stays poisoned, so a
        // read or write past the tensor's end is still reported.
        ASAN_POISON_MEMORY_REGION(data, bytes);
        ASAN_UNPOISON_MEMORY_REGION(data, requested);
        const std::lock_guard lock(mutex_);
        live_.emplace(data, bytes);
        return data;
    }

    // False for a block this cache did not hand out (a small one).
    bool give_back(void* data) {
        std::vector<freed_block> released;  // freed outside the lock
        {
            const std::lock_guard lock(mutex_);
            const auto found = live_.find(data);
            if (found == live_.end()) return false;
            const std::size_t bytes = found->second;
            live_.erase(found);
            ASAN_POISON_MEMORY_REGION(data, bytes);
            quarantine_.push_back({data, bytes});
            quarantined_bytes_ += bytes;
            while (quarantined_bytes_ > quarantine_bytes) {
                const freed_block oldest = quarantine_.front();
                quarantine_.pop_front();
                quarantined_bytes_ -= oldest.bytes;
                if (kept_bytes_ + oldest.bytes <= kept_bytes_at_most) {
                    free_[oldest.bytes].push_back(oldest.data);
                    kept_bytes_ += oldest.bytes;
                } else {
                    released.push_back(oldest);
                }
            }
        }
        for (const freed_block& block : released) release(block);
        return true;
    }

private:
    static std::size_t rounded(std::size_t bytes) { return (bytes + page - 1) / page * page; }
    // The block goes back to AddressSanitizer's allocator, which wants it unpoisoned.
    static void release(const freed_block& block) {
        ASAN_UNPOISON_MEMORY_REGION(block.data, block.bytes);
        std::free(block.data);
    }

    std::mutex mutex_;
    std::unordered_map<void*, std::size_t> live_;
    std::deque<freed_block> quarantine_;
    std::size_t quarantined_bytes_ = 0;
    std::unordered_map<std::size_t, std::vector<void*>> free_;
    std::size_t kept_bytes_ = 0;
};

// Never destroyed: tensors held by static objects are freed after main returns.
block_cache& cache() {
    static block_cache* const instance = new block_cache;
    return *instance;
}

// One deleter for both kinds of block, as raw_deallocate (oneDNN's scratch memory) gives only the pointer.
void delete_block(void* data) {
    if (!cache().give_back(data)) std::free(data);
}

class caching_cpu_allocator final : public c10::Allocator {
public:
    c10::DataPtr allocate(std::size_t bytes) const override {
        const c10::Device cpu(c10::DeviceType::CPU);
        void* data = bytes < smallest_cached_bytes ? aligned_block(bytes) : cache().take(bytes);
        return {data, data, &delete_block, cpu};
    }
    c10::DeleterFnPtr raw_deleter() const override { return &delete_block; }
};

caching_cpu_allocator allocator;
// Above c10's default (priority 0), set while this executable's static objects are built, after
// LibTorch's libraries have registered theirs. VERSATIL_TENSOR_BLOCK_CACHE=0 leaves LibTorch's
// allocator in place: AddressSanitizer's own reports (heap-use-after-free rather than
// use-after-poison, with the stack that freed the block) at its own cost.
bool install() {
    const char* setting = std::getenv("VERSATIL_TENSOR_BLOCK_CACHE");
    if (setting != nullptr && std::string_view(setting) == "0") return false;
    c10::SetCPUAllocator(&allocator, 1);
    return true;
}
const bool installed = install();

}  // namespace

#endif
