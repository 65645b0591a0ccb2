// Composition with paths known only at run time: same rules as Quantizer<...>, reported as
// errors that name the rule and the targets.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "environment_helpers.hpp"
#include "versatil/backends/catalogue.hpp"
#include "versatil/core/quantizer.hpp"
#include "versatil/core/runtime_quantizer.hpp"

using namespace versatil;

namespace {
const backend_descriptor* x86 = &descriptor_of<X86Inductor<>>;
const backend_descriptor* xnnpack = &descriptor_of<XNNPACK<>>;

composition_error compose_error(std::vector<runtime_target> targets) {
    auto composed = runtime_quantizer::compose(std::move(targets));
    REQUIRE_FALSE(composed.has_value());
    return composed.error();
}
}  // namespace

TEST_CASE("a valid run-time composition answers as the compile-time one does") {
    using compiled = Quantizer<Target<"encoder", XNNPACK<>>, Target<"head", X86Inductor<>>, Exclude<"encoder.norm">>;
    // Paths built at run time, as from a config file.
    std::string encoder = "enc";
    encoder += "oder";
    auto composed = runtime_quantizer::compose({{encoder, xnnpack}, {"head", x86}, {encoder + ".norm", nullptr}});
    REQUIRE(composed.has_value());
    const runtime_quantizer& quantizer = *composed;

    CHECK(quantizer.backend_names() == std::vector<std::string_view>(compiled::backend_names.begin(),
                                                                      compiled::backend_names.end()));
    CHECK(quantizer.needs_calibration() == compiled::needs_calibration);
    CHECK(quantizer.is_dynamic() == compiled::is_dynamic);
    CHECK(quantizer.is_qat() == compiled::is_qat);
    CHECK(quantizer.supported_device_types() == compiled::supported_device_types);
    const std::vector<backend_quantizer> quantizers = quantizer.quantizers();
    REQUIRE(quantizers.size() == compiled::quantizers.size());
    for (std::size_t i = 0; i < quantizers.size(); ++i) CHECK(quantizers[i] == compiled::quantizers[i]);
    for (const char* module : {"encoder.0", "encoder.norm", "head.fc", "embedding"})
        CHECK(quantizer.quantizer_for(module) == compiled::quantizer_for(module));
    CHECK(quantizer.environment().size() == compiled::environment.size());
}

TEST_CASE("copies and moves keep the paths they view valid") {
    auto composed = runtime_quantizer::compose({{"a_rather_long_module_path_beyond_small_string_storage", xnnpack},
                                                {"b", xnnpack}});
    REQUIRE(composed.has_value());
    runtime_quantizer original = *composed;
    const runtime_quantizer copy = original;
    const runtime_quantizer moved = std::move(original);
    for (const runtime_quantizer* q : {&copy, &moved}) {
        CHECK(q->quantizers()[0].module_path == "a_rather_long_module_path_beyond_small_string_storage");
        CHECK(q->quantizers()[1].module_path == "b");
        CHECK(q->target_infos()[1].path.data() == q->targets()[1].path.data());
    }
}

TEST_CASE("overlapping targets are rejected, naming both") {
    const composition_error error = compose_error({{"encoder", xnnpack}, {"encoder.block0", x86}});
    CHECK(error.rule == composition_rule::targets_must_not_overlap);
    CHECK(error.message.find("'encoder' (xnnpack)") != std::string::npos);
    CHECK(error.message.find("'encoder.block0' (x86_inductor)") != std::string::npos);
    CHECK(compose_error({{"", xnnpack}, {"head", xnnpack}}).rule == composition_rule::targets_must_not_overlap);
    CHECK(compose_error({{"a", xnnpack}, {"a", xnnpack}}).rule == composition_rule::targets_must_not_overlap);
}

TEST_CASE("invalid path syntax is rejected, naming the path and the problem") {
    const composition_error error = compose_error({{"encoder..0", xnnpack}});
    CHECK(error.rule == composition_rule::path_must_be_valid);
    CHECK(error.message.find("'encoder..0'") != std::string::npos);
    CHECK(error.message.find("empty") != std::string::npos);
    CHECK(compose_error({{"layers.0x", xnnpack}}).rule == composition_rule::path_must_be_valid);
    CHECK(compose_error({{"a b", xnnpack}}).rule == composition_rule::path_must_be_valid);
}

TEST_CASE("every other rule is enforced at run time too") {
    using enum composition_rule;
    CHECK(compose_error({}).rule == needs_a_quantizing_target);
    CHECK(compose_error({{"a", nullptr}}).rule == needs_a_quantizing_target);
    CHECK(compose_error({{"a", xnnpack}, {"b", nullptr}}).rule == exclude_must_sit_inside_a_target);
    const composition_error mixed = compose_error({{"a", xnnpack}, {"b", &descriptor_of<XNNPACK<dynamic>>}});
    CHECK(mixed.rule == static_and_dynamic_must_not_mix);
    CHECK(mixed.message.find("'b' (xnnpack:dynamic)") != std::string::npos);
    CHECK(compose_error({{"a", xnnpack}, {"b", &descriptor_of<XNNPACK<qat>>}}).rule == qat_and_ptq_must_not_mix);
}

TEST_CASE("a run-time quantizer's environment scope applies and restores every backend's variables") {
    const testing::variable_fixture freezing("TORCHINDUCTOR_FREEZING", std::nullopt);
    auto composed = runtime_quantizer::compose({{"a", xnnpack}, {"b", x86}, {"c", x86}});
    REQUIRE(composed.has_value());
    {
        const auto scope = composed->environment_context();
        CHECK(scope.size() == 2);
        CHECK(testing::read_variable("TORCHINDUCTOR_FREEZING") == "1");
    }
    CHECK_FALSE(testing::read_variable("TORCHINDUCTOR_FREEZING").has_value());
}
