// The parts of versatil-quantize's --help that the catalogue knows: the backends and the options each
// takes come from builtin_backends, so a backend or option added there shows here without an edit.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "versatil/backends/catalogue.hpp"
#include "versatil/core/calibration.hpp"

namespace versatil_quantize {

// What an option does, for the lines of --help; an option the catalogue gains without a line here is
// listed bare (the README's options table explains each).
struct option_meaning {
    std::string_view option;
    std::string_view meaning;
};
inline constexpr option_meaning option_meanings[] = {
    {"dynamic", "weights int8 ahead, activations at run time, no calibration"},
    {"qat", "quantization-aware training first (the data file's train_inputs, train_labels)"},
    {"reduce_range", "7-bit activations"},
    {"per_tensor", "one weight scale per tensor instead of per channel"},
    {"calibration=METHOD", "how static activations get their range"},
    {"cle", "cross-layer equalization"},
    {"bias_correction", "correct the shift quantization adds to each layer's output"},
    {"gptq", "GPTQ weight rounding"},
    {"adaround", "AdaRound weight rounding (learned up or down per weight)"},
};

inline std::string target_help() {
    std::string text = "where to quantize with what, PATH=BACKEND[:OPT[,OPT]] (PATH empty: the whole model; "
                       "BACKEND none: keep PATH float; default =x86_inductor). Backends: " +
                       versatil::backend_names_shown() + ". Options:";
    std::vector<std::string> names;
    for (const versatil::backend_descriptor* backend : versatil::builtin_backends)
        if (std::ranges::find(names, backend->name) == names.end()) names.emplace_back(backend->name);
    for (const std::string& name : names) text += " " + name + ": " + versatil::backend_options_shown(name) + ";";
    text += " METHOD: " + std::string(versatil::calibration_method_names) + ".";
    for (const option_meaning& meaning : option_meanings)
        for (const std::string& name : names)
            if (versatil::backend_options_shown(name).find(meaning.option) != std::string::npos) {
                text += " " + std::string(meaning.option) + ": " + std::string(meaning.meaning) + ".";
                break;
            }
    return text;
}

// Two commands a new user starts from: a model and its data to a saved model and report, and parts of
// a model aimed at different backends.
inline constexpr std::string_view help_examples =
    "Examples:\n"
    "  versatil-quantize --model model.pt --data data.pt --out model.q.pt --report report.json\n"
    "  versatil-quantize --model model.pt --data data.pt --target features=xnnpack "
    "--target classifier=xnnpack:per_tensor --target classifier.fc2=none\n";

}  // namespace versatil_quantize
