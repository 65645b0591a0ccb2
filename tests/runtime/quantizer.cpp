// Quantizer<...> at run time: its one environment scope covers every backend.
#include <doctest/doctest.h>

#include "environment_helpers.hpp"
#include "versatil/backends/x86_inductor.hpp"
#include "versatil/backends/xnnpack.hpp"
#include "versatil/core/quantizer.hpp"

using namespace versatil;

TEST_CASE("a composed quantizer's scope applies every distinct backend environment and restores them") {
    using composed = Quantizer<Target<"features", XNNPACK<>>, Target<"classifier", X86Inductor<>>,
                               Target<"head", X86Inductor<reduce_range>>>;
    const testing::variable_fixture cuda("CUDA_VISIBLE_DEVICES", "3");
    const testing::variable_fixture freezing("TORCHINDUCTOR_FREEZING", std::nullopt);
    {
        const auto scope = composed::environment_context();
        CHECK(scope.size() == 2);
        CHECK(testing::read_variable("CUDA_VISIBLE_DEVICES") == "");
        CHECK(testing::read_variable("TORCHINDUCTOR_FREEZING") == "1");
    }
    CHECK(testing::read_variable("CUDA_VISIBLE_DEVICES") == "3");
    CHECK_FALSE(testing::read_variable("TORCHINDUCTOR_FREEZING").has_value());
}

TEST_CASE("activate_environment leaves the variables set") {
    using composed = Quantizer<Target<"", X86Inductor<dynamic>>>;
    const testing::variable_fixture freezing("TORCHINDUCTOR_FREEZING", std::nullopt);
    CHECK(composed::activate_environment());
    CHECK(testing::read_variable("TORCHINDUCTOR_FREEZING") == "1");
}
