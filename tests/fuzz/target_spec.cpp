// Fuzzes the command line's target syntax, PATH=BACKEND[:OPT[,OPT]] (parse_target, which the
// CLI calls): anything but a typed invalid_argument error naming the text is a finding, and a
// spec that parses names a catalogue entry that its own name and options parse back to.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_check.hpp"
#include "versatil/libtorch/plan/target_spec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size > 512) return -1;
    const std::string text(reinterpret_cast<const char*>(data), size);
    versatil::runtime_target target;
    try {
        target = versatil::libtorch::parse_target(text);
    } catch (const versatil::libtorch::error& failure) {
        VERSATIL_FUZZ_CHECK(failure.kind() == versatil::libtorch::error_kind::invalid_argument);
        // what() is a C string: it shows the text up to a NUL (an argv string has none)
        const std::string shown = text.substr(0, text.find('\0'));
        VERSATIL_FUZZ_CHECK(std::string_view(failure.what()).find(shown) != std::string_view::npos);
        return 0;
    }
    const std::size_t equals = text.find('=');
    VERSATIL_FUZZ_CHECK(equals != std::string::npos && target.path == text.substr(0, equals));
    if (target.backend == nullptr) {
        VERSATIL_FUZZ_CHECK(text.substr(equals + 1) == "none");
        return 0;
    }
    std::string canonical(target.backend->name);
    if (!target.backend->options.empty()) canonical += ":" + std::string(target.backend->options);
    const auto again = versatil::parse_backend_spec(canonical);
    VERSATIL_FUZZ_CHECK(again && *again == target.backend);
    // The path is checked with the composition, as the CLI does next.
    const auto composed = versatil::runtime_quantizer::compose({target});
    VERSATIL_FUZZ_CHECK(static_cast<bool>(composed) == versatil::is_valid_module_path(target.path));
    return 0;
}
