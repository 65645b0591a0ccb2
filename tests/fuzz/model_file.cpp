// Fuzzes model and data file loading: the bytes are written to a file and given to
// load_model, read_metadata and load_data_file. Each must return or throw the layer's typed
// error (invalid_model_file / invalid_data_file) naming the file; any other exception
// escapes to libFuzzer and any crash or sanitizer report stops the run, both findings.
//
// Built with GCC (LibTorch's headers need it) and linked with clang's libFuzzer runtime:
// with no compiler coverage, the target registers its own counters and bumps one per
// outcome (which loader, which error, which message), so inputs that reach new outcomes in
// LibTorch's reader are kept and mutated further.
//
// The loaders check every record's CRC-32, which would turn nearly every mutation into one
// outcome ("fails its CRC-32 check") before LibTorch sees it. So the target first rewrites
// each record's CRC to match its mutated bytes: the input is then a lie inside an intact
// archive, and the layers beyond the CRC check get fuzzed (the CRC check itself is tested in
// tests/runtime/file_checks.cpp and tests/torch/save_load.cpp).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include <zlib.h>

#include "../runtime/archive_surgery.hpp"
#include "fuzz_check.hpp"
#include "versatil/libtorch/files/data_file.hpp"
#include "versatil/libtorch/files/save.hpp"

extern "C" void __sanitizer_cov_8bit_counters_init(std::uint8_t* start, std::uint8_t* stop);

namespace {

std::uint8_t outcome_counters[1 << 14];
const bool counters_registered = [] {
    __sanitizer_cov_8bit_counters_init(outcome_counters, outcome_counters + sizeof outcome_counters);
    return true;
}();

// One file per process, removed when the run ends.
struct scratch {
    std::filesystem::path path =
        std::filesystem::temp_directory_path() / ("versatil-fuzz-" + std::to_string(::getpid()) + ".pt");
    ~scratch() {
        std::error_code ignored;
        std::filesystem::remove(path, ignored);
    }
};

const std::filesystem::path& scratch_file() {
    static const scratch file;
    return file.path;
}

void count_outcome(int loader, const std::string& outcome) {
    std::string text = outcome;
    for (std::size_t at = text.find(scratch_file().string()); at != std::string::npos;
         at = text.find(scratch_file().string()))
        text.erase(at, scratch_file().string().size());
    const std::size_t bucket = std::hash<std::string>{}(std::to_string(loader) + text.substr(0, 120));
    ++outcome_counters[bucket % sizeof outcome_counters];
}

template <class Load>
void expect_typed_error(int loader, Load load, versatil::libtorch::error_kind kind) {
    try {
        count_outcome(loader, load());
    } catch (const versatil::libtorch::error& failure) {
        VERSATIL_FUZZ_CHECK(failure.kind() == kind);
        VERSATIL_FUZZ_CHECK(std::string(failure.what()).find(scratch_file().string()) != std::string::npos);
        count_outcome(loader, failure.what());
    }
}

// The uncompressed bytes of a record, or nullopt when they do not inflate to its declared size.
std::optional<std::string> content_of(const std::string& archive, const versatil::libtorch::zip::record& record) {
    const std::string_view stored = std::string_view(archive).substr(record.data_offset, record.compressed_size);
    if (record.method == 0) return std::string(stored);
    if (record.size > (1U << 20)) return std::nullopt;
    std::string content(record.size, '\0');
    z_stream stream{};
    if (inflateInit2(&stream, -MAX_WBITS) != Z_OK) return std::nullopt;
    stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(stored.data()));
    stream.avail_in = static_cast<uInt>(stored.size());
    stream.next_out = reinterpret_cast<Bytef*>(content.data());
    stream.avail_out = static_cast<uInt>(content.size());
    const int status = inflate(&stream, Z_FINISH);
    inflateEnd(&stream);
    return status == Z_STREAM_END && stream.avail_out == 0 ? std::optional(content) : std::nullopt;
}

void refresh_crcs(std::string& archive) {
    const auto layout = versatil::libtorch::zip::read_layout(versatil::libtorch::zip::memory_bytes(archive));
    if (!layout.ok()) return;
    for (const auto& record : layout.records) {
        const std::optional<std::string> content = content_of(archive, record);
        if (!content) continue;
        versatil::testing::set_crc(archive, record, versatil::testing::crc32(*content));
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    VERSATIL_FUZZ_CHECK(counters_registered);
    if (size > 64 * 1024) return -1;
    std::string archive(reinterpret_cast<const char*>(data), size);
    refresh_crcs(archive);
    std::ofstream(scratch_file(), std::ios::binary | std::ios::trunc) << archive;
    using namespace versatil::libtorch;
    expect_typed_error(
        0, [] { return "loaded " + std::to_string(load_model(scratch_file()).parameters().size()); },
        error_kind::invalid_model_file);
    expect_typed_error(1, [] { return "metadata " + read_metadata(scratch_file()).dump().substr(0, 40); },
                       error_kind::invalid_model_file);
    expect_typed_error(
        2,
        [] {
            const data_file file = load_data_file(scratch_file());
            return std::string("data ") + (file.calibration.empty() ? "" : "c") + (file.evaluation.empty() ? "" : "t") +
                   (file.evaluation_labels ? "l" : "");
        },
        error_kind::invalid_data_file);
    return 0;
}
