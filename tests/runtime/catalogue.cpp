// Run-time backend specs ("xnnpack:per_tensor,dynamic") map onto the compile-time policies.
#include <doctest/doctest.h>

#include <string>

#include "versatil/backends/catalogue.hpp"
#include "versatil/core/runtime_quantizer.hpp"

using namespace versatil;

namespace {
std::string parse_error(std::string_view spec) {
    const auto parsed = parse_backend_spec(spec);
    REQUIRE_FALSE(parsed.has_value());
    return parsed.error().message;
}
}  // namespace

TEST_CASE("every configured policy is in the catalogue once") {
    // x86_inductor and xnnpack: seven options make 128 subsets. bias_correction, gptq and adaround
    // go with neither dynamic nor qat, and adaround not with gptq: the 32 static post-training
    // subsets of the other five options less the 8 with both gptq and adaround, and 4 subsets of
    // reduce_range / per_tensor and cle with each of dynamic, qat and both: 36 configurations each;
    // the 24 static ones again with each of the 7 calibration methods.
    // cortex_m: two options (4 subsets), and its 2 static subsets again with each method.
    CHECK(builtin_backends.size() == 36 + 36 + 2 * 24 * 7 + 4 + 2 * 7);
    for (std::size_t i = 0; i < builtin_backends.size(); ++i)
        for (std::size_t j = i + 1; j < builtin_backends.size(); ++j)
            CHECK_FALSE((builtin_backends[i]->name == builtin_backends[j]->name &&
                         builtin_backends[i]->options == builtin_backends[j]->options));
}

TEST_CASE("a spec names a backend and its options in any order") {
    CHECK(*parse_backend_spec("x86_inductor") == &descriptor_of<X86Inductor<>>);
    CHECK(*parse_backend_spec("xnnpack") == &descriptor_of<XNNPACK<>>);
    CHECK(*parse_backend_spec("xnnpack:per_tensor,dynamic") == &descriptor_of<XNNPACK<dynamic, per_tensor>>);
    CHECK(*parse_backend_spec("xnnpack:dynamic,per_tensor") == &descriptor_of<XNNPACK<dynamic, per_tensor>>);
    CHECK(*parse_backend_spec("x86_inductor:reduce_range,qat,dynamic") ==
          &descriptor_of<X86Inductor<dynamic, qat, reduce_range>>);
    CHECK(*parse_backend_spec("cortex_m") == &descriptor_of<CortexM<>>);
    CHECK(*parse_backend_spec("cortex_m:per_tensor") == &descriptor_of<CortexM<per_tensor>>);
    CHECK(*parse_backend_spec("cortex_m:qat") == &descriptor_of<CortexM<qat>>);
    CHECK(*parse_backend_spec("cortex_m:per_tensor,qat") == &descriptor_of<CortexM<qat, per_tensor>>);
    CHECK(*parse_backend_spec("cortex_m:calibration=entropy") ==
          &descriptor_of<CortexM<calibration<calibration_method::entropy>>>);
    CHECK(*parse_backend_spec("cortex_m:calibration=auto,per_tensor") ==
          &descriptor_of<CortexM<calibration<calibration_method::automatic>, per_tensor>>);
    // The descriptor carries the policy's real config: options change what happens.
    CHECK((*parse_backend_spec("x86_inductor:reduce_range"))->config.input_activation->quant_max == 127);
    CHECK(*parse_backend_spec("xnnpack:cle,per_tensor") == &descriptor_of<XNNPACK<per_tensor, cle>>);
    CHECK(*parse_backend_spec("x86_inductor:bias_correction,cle") == &descriptor_of<X86Inductor<cle, bias_correction>>);
    CHECK((*parse_backend_spec("xnnpack:per_tensor,cle"))->config.cross_layer_equalization);
    CHECK((*parse_backend_spec("xnnpack:bias_correction"))->config.bias_correction);
    CHECK(*parse_backend_spec("x86_inductor:gptq,calibration=minmax,cle") ==
          &descriptor_of<X86Inductor<calibration<calibration_method::minmax>, cle, gptq>>);
    CHECK((*parse_backend_spec("xnnpack:gptq"))->config.gptq);
    CHECK_FALSE((*parse_backend_spec("xnnpack:bias_correction"))->config.gptq);
    CHECK(*parse_backend_spec("x86_inductor:adaround,cle") == &descriptor_of<X86Inductor<cle, adaround>>);
    CHECK((*parse_backend_spec("xnnpack:per_tensor,adaround"))->config.adaround);
    CHECK_FALSE((*parse_backend_spec("xnnpack:gptq"))->config.adaround);
    CHECK_FALSE((*parse_backend_spec("xnnpack:per_tensor"))->config.cross_layer_equalization);
    CHECK(*parse_backend_spec("xnnpack:dynamic,cle") == &descriptor_of<XNNPACK<dynamic, cle>>);
}

TEST_CASE("bad specs are rejected with what is wrong and what would be right") {
    CHECK(parse_error("tensorrt") == "unknown backend 'tensorrt' (known: x86_inductor, xnnpack, cortex_m)");
    CHECK(parse_error("") == "unknown backend '' (known: x86_inductor, xnnpack, cortex_m)");
    // No dynamic cortex_m: the device computes no scale at run time.
    CHECK(parse_error("cortex_m:dynamic") ==
          "unknown option 'dynamic' for backend 'cortex_m' (cortex_m accepts: qat per_tensor calibration=METHOD)");
    CHECK(parse_error("cortex_m:qat,calibration=minmax").starts_with("options 'calibration' and 'qat' do not combine"));
    CHECK(parse_error("xnnpack:reduce_range") ==
          "unknown option 'reduce_range' for backend 'xnnpack' (xnnpack accepts: dynamic qat per_tensor cle "
          "bias_correction gptq adaround calibration=METHOD)");
    CHECK(parse_error("xnnpack:calibration=kl") ==
          "unknown calibration method 'kl' in 'xnnpack:calibration=kl' (methods: minmax, moving_minmax, histogram, "
          "percentile, entropy, auto, output)");
    CHECK(parse_error("xnnpack:cle,calibration") ==
          "option 'calibration' needs a method, calibration=METHOD in 'xnnpack:cle,calibration' (methods: minmax, "
          "moving_minmax, histogram, percentile, entropy, auto, output)");
    CHECK(parse_error("xnnpack:calibration=auto,calibration=auto").starts_with("more than one calibration method"));
    CHECK(parse_error("x86_inductor:qat,calibration=minmax")
              .starts_with("options 'calibration' and 'qat' do not combine"));
    CHECK(parse_error("x86_inductor:per_tensor")
              .find("x86_inductor accepts: dynamic qat reduce_range cle bias_correction") != std::string::npos);
    CHECK(parse_error("xnnpack:dynamic,dynamic") == "option 'dynamic' given twice in 'xnnpack:dynamic,dynamic'");
    CHECK(parse_error("xnnpack:").find("has ':' but no option") != std::string::npos);
    CHECK(parse_error("xnnpack:dynamic,").find("empty option") != std::string::npos);
    CHECK(parse_error("xnnpack:,dynamic").find("empty option") != std::string::npos);
}

TEST_CASE("bias correction with dynamic quantization or QAT is rejected with the rule") {
    CHECK(
        parse_error("xnnpack:dynamic,bias_correction") ==
        "options 'bias_correction' and 'dynamic' do not combine in 'xnnpack:dynamic,bias_correction': bias correction "
        "is measured on calibration data, and dynamic quantization takes none (its activation ranges are taken at "
        "run time)");
    CHECK(parse_error("x86_inductor:cle,qat,bias_correction")
              .starts_with(
                  "options 'bias_correction' and 'qat' do not combine in 'x86_inductor:cle,qat,bias_correction': "
                  "quantization-aware training learns its biases"));
}

TEST_CASE("gptq with dynamic quantization or QAT is rejected with the rule") {
    CHECK(parse_error("x86_inductor:gptq,dynamic") ==
          "options 'gptq' and 'dynamic' do not combine in 'x86_inductor:gptq,dynamic': GPTQ rounds weights against "
          "the layers' inputs on calibration data, and dynamic quantization takes none");
    CHECK(parse_error("xnnpack:qat,gptq").starts_with("options 'gptq' and 'qat' do not combine in 'xnnpack:qat,gptq': "
                                                      "quantization-aware training learns its weights"));
}

TEST_CASE("adaround with gptq, dynamic quantization or QAT is rejected with the rule") {
    CHECK(parse_error("x86_inductor:gptq,adaround") ==
          "options 'adaround' and 'gptq' do not combine in 'x86_inductor:gptq,adaround': both choose how the same "
          "weights are rounded; take one (docs/accuracy.md compares them)");
    CHECK(parse_error("xnnpack:adaround,dynamic").starts_with("options 'adaround' and 'dynamic' do not combine"));
    CHECK(parse_error("xnnpack:qat,adaround").starts_with("options 'adaround' and 'qat' do not combine"));
}

TEST_CASE("cortex_m composes with itself and excludes, and with no CPU backend") {
    const auto composed = runtime_quantizer::compose(
        {{"features", *parse_backend_spec("cortex_m")}, {"classifier", *parse_backend_spec("cortex_m:per_tensor")},
         {"features.0", nullptr}});
    REQUIRE(composed.has_value());
    CHECK(composed->supported_device_types() == device_set{device_type::mcu});
    CHECK(composed->quantizer_for("classifier")->config().weight->qscheme == qscheme::per_tensor_symmetric);
    const auto mixed = runtime_quantizer::compose(
        {{"features", *parse_backend_spec("cortex_m")}, {"classifier", *parse_backend_spec("xnnpack")}});
    REQUIRE_FALSE(mixed.has_value());
    CHECK(mixed.error().message.find("share no device type") != std::string::npos);
}
