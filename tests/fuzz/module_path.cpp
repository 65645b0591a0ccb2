// Fuzzes run-time module paths: check_module_path against an independent regular expression
// (module_path_grammar.hpp), and runtime_quantizer::compose over up to eight '\n'-separated
// paths, each given a backend (or none) by its first byte. Whatever compose accepts must be
// valid and answer queries consistently, also from a copy that outlives the original.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.hpp"
#include "module_path_grammar.hpp"
#include "versatil/backends/catalogue.hpp"
#include "versatil/core/module_path.hpp"
#include "versatil/core/runtime_quantizer.hpp"

namespace {

const versatil::backend_descriptor* backend_for(unsigned char selector) {
    static constexpr const char* specs[] = {"xnnpack", "xnnpack:per_tensor", "x86_inductor", "x86_inductor:dynamic",
                                            "xnnpack:dynamic", "x86_inductor:qat"};
    const unsigned index = selector % (std::size(specs) + 1);
    if (index == std::size(specs)) return nullptr;  // an exclude
    return *versatil::parse_backend_spec(specs[index]);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size > 512) return -1;  // long paths add nothing but time; keep them out of the corpus
    const std::string_view input(reinterpret_cast<const char*>(data), size);

    std::vector<versatil::runtime_target> targets;
    for (std::string_view rest = input; targets.size() < 8;) {
        const std::size_t newline = rest.find('\n');
        std::string_view line = rest.substr(0, newline);
        const unsigned char selector = line.empty() ? 0 : static_cast<unsigned char>(line.front());
        if (!line.empty()) line.remove_prefix(1);
        const std::string path(line);

        const versatil::path_check check = versatil::check_module_path(path);
        VERSATIL_FUZZ_CHECK(static_cast<bool>(check) == versatil_fuzz::valid_by_regex(path));
        VERSATIL_FUZZ_CHECK(check || check.position <= path.size());  // names where the bad component starts
        VERSATIL_FUZZ_CHECK(versatil::contains("", path) && versatil::contains(path, path));
        targets.push_back({path, backend_for(selector)});
        if (newline == std::string_view::npos) break;
        rest.remove_prefix(newline + 1);
    }

    const std::vector<versatil::runtime_target> given = targets;
    std::optional<versatil::runtime_quantizer> copy;
    {
        auto composed = versatil::runtime_quantizer::compose(std::move(targets));
        if (!composed) {
            VERSATIL_FUZZ_CHECK(!composed.error().message.empty());
            return 0;
        }
        copy.emplace(*composed);  // the original dies here: the copy's views must not dangle
    }
    VERSATIL_FUZZ_CHECK(copy->targets().size() == given.size());
    for (const versatil::runtime_target& target : given) {
        VERSATIL_FUZZ_CHECK(versatil::is_valid_module_path(target.path));
        const auto quantizer = copy->quantizer_for(target.path);
        VERSATIL_FUZZ_CHECK(static_cast<bool>(quantizer) == (target.backend != nullptr));
        if (quantizer) VERSATIL_FUZZ_CHECK(quantizer->backend_name() == target.backend->name);
    }
    (void)copy->environment();
    (void)copy->needs_calibration();
    return 0;
}
