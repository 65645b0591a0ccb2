// A consumer's core translation unit: a Quantizer checked while compiling, then asked at run
// time. Built by every consumer path in tests/consumers/ against an installed versatil.
#include <cstdio>

#include "versatil/versatil.hpp"

using namespace versatil;

using model_quantizer = Quantizer<Target<"features", XNNPACK<>>, Target<"classifier", X86Inductor<reduce_range>>,
                                  Exclude<"features.0">>;

static_assert(model_quantizer::backend_names[0] == "xnnpack");
static_assert(model_quantizer::backend_names[1] == "x86_inductor");
static_assert(!model_quantizer::quantizer_for("features.0"));  // excluded: stays float

int main() {
    const auto features = model_quantizer::quantizer_for("features.3.conv");
    const auto classifier = model_quantizer::quantizer_for("classifier.fc1");
    if (!features || !classifier || features->backend_name() != "xnnpack") return 1;
    std::printf("versatil %.*s core: features.3.conv -> %.*s, classifier.fc1 -> %.*s (activations up to %d)\n",
                static_cast<int>(version.size()), version.data(), static_cast<int>(features->backend_name().size()),
                features->backend_name().data(), static_cast<int>(classifier->backend_name().size()),
                classifier->backend_name().data(), classifier->config().input_activation->quant_max);
    return 0;
}
