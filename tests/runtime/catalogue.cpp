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
    CHECK(builtin_backends.size() == 8 + 8 + 4);  // x86_inductor and xnnpack: 3 options; cortex_m: 2
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
    // The descriptor carries the policy's real config: options change what happens.
    CHECK((*parse_backend_spec("x86_inductor:reduce_range"))->config.input_activation->quant_max == 127);
}

TEST_CASE("bad specs are rejected with what is wrong and what would be right") {
    CHECK(parse_error("tensorrt") == "unknown backend 'tensorrt' (known: x86_inductor, xnnpack, cortex_m)");
    CHECK(parse_error("") == "unknown backend '' (known: x86_inductor, xnnpack, cortex_m)");
    // No dynamic cortex_m: the device computes no scale at run time.
    CHECK(parse_error("cortex_m:dynamic") ==
          "unknown option 'dynamic' for backend 'cortex_m' (cortex_m accepts: qat per_tensor)");
    CHECK(parse_error("xnnpack:reduce_range") ==
          "unknown option 'reduce_range' for backend 'xnnpack' (xnnpack accepts: dynamic qat per_tensor)");
    CHECK(parse_error("x86_inductor:per_tensor").find("x86_inductor accepts: dynamic qat reduce_range") !=
          std::string::npos);
    CHECK(parse_error("xnnpack:dynamic,dynamic") == "option 'dynamic' given twice in 'xnnpack:dynamic,dynamic'");
    CHECK(parse_error("xnnpack:").find("has ':' but no option") != std::string::npos);
    CHECK(parse_error("xnnpack:dynamic,").find("empty option") != std::string::npos);
    CHECK(parse_error("xnnpack:,dynamic").find("empty option") != std::string::npos);
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
