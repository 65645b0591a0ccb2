// Fuzzes the checks that run before LibTorch reads a file: the zip layout and the pickle
// scan, in memory. Whatever the layout accepts must lie inside the input (each record's
// bytes, a stored record's declared size); every stored pickle record, and the input itself
// read as one pickle, are scanned. Seeds: the model-file corpus (real PyTorch archives).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_check.hpp"
#include "versatil/libtorch/files/pickle_scan.hpp"
#include "versatil/libtorch/files/zip_layout.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace versatil::libtorch;
    const std::string_view bytes(reinterpret_cast<const char*>(data), size);
    (void)pickle::find_problem(bytes);
    const zip::layout layout = zip::read_layout(zip::memory_bytes(bytes));
    VERSATIL_FUZZ_CHECK(layout.ok() || !layout.problem.empty());
    if (!layout.ok()) return 0;
    for (const zip::record& record : layout.records) {
        VERSATIL_FUZZ_CHECK(record.data_offset <= size && record.compressed_size <= size - record.data_offset);
        VERSATIL_FUZZ_CHECK(record.method == 0 || record.method == 8);
        if (record.method != 0) continue;
        VERSATIL_FUZZ_CHECK(record.size == record.compressed_size);
        if (record.name.ends_with("pkl")) (void)pickle::find_problem(bytes.substr(record.data_offset, record.size));
    }
    return 0;
}
