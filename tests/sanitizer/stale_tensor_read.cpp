// Reads a tensor's data the way a bug would, as argv[1] says: "after-free" (through a pointer kept
// after the tensor is gone), "past-end" (one element past the last), or "none" (the control,
// which must exit 0). Built in sanitizer builds only, with tensor_block_cache.cpp linked in as
// into every LibTorch executable there: check_stale_reads.py runs it and wants each bad read
// reported, so keeping LibTorch's freed blocks for reuse hides none of them.
#include <ATen/ATen.h>

#include <cstdint>
#include <cstdio>
#include <string>

int main(int argc, char** argv) {
    const std::string mode = argc > 1 ? argv[1] : "";
    // 4 MiB and 12 bytes: a block the cache keeps, and not a whole number of pages.
    constexpr std::int64_t elements = (std::int64_t{1} << 20) + 3;
    volatile float sink = 0;
    if (mode == "after-free") {
        const float* kept = nullptr;
        {
            const at::Tensor tensor = at::ones({elements});
            kept = tensor.data_ptr<float>();
        }
        sink = kept[0];
    } else if (mode == "past-end") {
        const at::Tensor tensor = at::ones({elements});
        sink = tensor.data_ptr<float>()[elements];
    } else if (mode == "none") {
        const at::Tensor tensor = at::ones({elements});
        sink = tensor.data_ptr<float>()[elements - 1];
    } else {
        std::fprintf(stderr, "usage: stale_tensor_read after-free|past-end|none\n");
        return 2;
    }
    std::printf("read %g\n", static_cast<double>(sink));
    return 0;
}
