// Describes a composed quantizer: for each target its backend, what it does to activations and
// weights, and the environment it sets. With no argument it describes a Quantizer composed at
// compile time; `PATH=BACKEND[:OPT[,OPT]]` arguments (PATH=none to exclude) compose one at
// run time under the same rules.
//
//   describe_quantizer
//   describe_quantizer encoder=xnnpack head=x86_inductor:reduce_range encoder.norm=none
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "versatil/versatil.hpp"

using namespace versatil;

namespace {

using example = Quantizer<Target<"features", XNNPACK<>>, Target<"classifier", XNNPACK<per_tensor>>,
                          Exclude<"features.0">>;
static_assert(example::needs_calibration && example::backend_names[1] == "xnnpack");

std::string describe(const std::optional<quantization_spec>& spec) {
    if (!spec) return "float";
    std::string text = std::string(to_string(spec->dtype)) + " [" + std::to_string(spec->quant_min) + ", " +
                       std::to_string(spec->quant_max) + "] " + std::string(to_string(spec->qscheme));
    if (spec->ch_axis != no_channel_axis) text += " axis " + std::to_string(spec->ch_axis);
    text += ", " + std::string(to_string(spec->observer)) + (spec->is_fake_quantize ? " fake-quantize" : "");
    return text;
}

void print(std::span<const target_info> targets, std::span<const environment_assignment> environment) {
    for (const target_info& target : targets) {
        const std::string path = target.path.empty() ? "(whole model)" : std::string(target.path);
        std::printf("%-20s %s\n", path.c_str(), backend_label(target.backend).c_str());
        if (target.is_exclude()) continue;
        const quantization_config& config = target.backend->config;
        std::printf("    activation  %s\n", describe(config.input_activation).c_str());
        std::printf("    weight      %s\n", describe(config.weight).c_str());
        std::printf("    bias        %s\n", describe(config.bias).c_str());
    }
    std::printf("environment:");
    for (const environment_assignment& a : environment)
        std::printf(" %.*s=\"%.*s\"", static_cast<int>(a.name.size()), a.name.data(), static_cast<int>(a.value.size()),
                    a.value.data());
    std::printf(environment.empty() ? " unchanged\n" : "\n");
}

}  // namespace

int main(int argc, char** argv) {
    if (argc == 1) {
        std::printf("compile-time Quantizer (needs calibration: %s)\n", example::needs_calibration ? "yes" : "no");
        print(example::targets, example::environment);
        return 0;
    }
    std::vector<runtime_target> targets;
    for (int i = 1; i < argc; ++i) {
        const std::string_view argument = argv[i];
        const std::size_t equals = argument.find('=');
        if (equals == std::string_view::npos) {
            std::fprintf(stderr, "error: '%s' is not PATH=BACKEND[:OPT[,OPT]] (PATH=none excludes)\n", argv[i]);
            return 2;
        }
        const std::string_view spec = argument.substr(equals + 1);
        const backend_descriptor* backend = nullptr;
        if (spec != "none") {
            auto parsed = parse_backend_spec(spec);
            if (!parsed) {
                std::fprintf(stderr, "error: %s\n", parsed.error().message.c_str());
                return 2;
            }
            backend = *parsed;
        }
        targets.push_back({std::string(argument.substr(0, equals)), backend});
    }
    auto composed = runtime_quantizer::compose(std::move(targets));
    if (!composed) {
        std::fprintf(stderr, "error: %s\n", composed.error().message.c_str());
        return 2;
    }
    std::printf("run-time quantizer (needs calibration: %s)\n", composed->needs_calibration() ? "yes" : "no");
    print(composed->target_infos(), composed->environment());
    return 0;
}
