// Quantizer<Targets...>: the queries of a valid composition, all constant.
#include <array>
#include <string_view>

#include "versatil/backends/x86_inductor.hpp"
#include "versatil/backends/xnnpack.hpp"
#include "versatil/core/quantizer.hpp"

namespace {
using namespace versatil;

using mixed = Quantizer<Target<"encoder", XNNPACK<>>, Target<"head", X86Inductor<reduce_range>>,
                        Exclude<"encoder.norm">, Target<"decoder", X86Inductor<>>>;

static_assert(mixed::size == 4 && mixed::targets.size() == 4);
static_assert(mixed::backend_names == std::array<std::string_view, 3>{"xnnpack", "x86_inductor", "x86_inductor"});
static_assert(mixed::needs_calibration && !mixed::is_dynamic && !mixed::is_qat);
static_assert(mixed::supported_device_types == device_set{device_type::cpu});
static_assert(mixed::quantizers[0] == XNNPACK<>::create_quantizer("encoder"));
static_assert(mixed::quantizers[1] == X86Inductor<reduce_range>::create_quantizer("head"));
static_assert(mixed::quantizers[2] == X86Inductor<>::create_quantizer("decoder"));
static_assert(mixed::quantizer_for("encoder.layers.0.fc") == XNNPACK<>::create_quantizer("encoder"));
static_assert(!mixed::quantizer_for("encoder.norm") && !mixed::quantizer_for("encoder.norm.weight"));
static_assert(!mixed::quantizer_for("embedding"));
// X86Inductor's two variables once, though two targets use it
static_assert(mixed::environment.size() == 2 && mixed::environment[1].name == "TORCHINDUCTOR_FREEZING");

using whole_dynamic = Quantizer<Target<"", XNNPACK<dynamic, per_tensor>>>;
static_assert(whole_dynamic::is_dynamic && !whole_dynamic::needs_calibration);
static_assert(whole_dynamic::environment.empty());
static_assert(whole_dynamic::quantizer_for("any.module")->config().weight->qscheme == qscheme::per_tensor_symmetric);

using qat_model = Quantizer<Target<"features", XNNPACK<qat>>, Target<"classifier", X86Inductor<qat>>>;
static_assert(qat_model::is_qat && !qat_model::needs_calibration);
static_assert(qat_model::quantizer_for("features.0")->config().weight->is_fake_quantize);

constexpr int count_targets() {
    int count = 0;
    mixed::for_each_target([&count](auto) { ++count; });
    return count;
}
static_assert(count_targets() == 4);

// Target and Exclude expose their path and role.
static_assert(Target<"encoder.layers.0", XNNPACK<>>::path == "encoder.layers.0");
static_assert(Exclude<"head">::is_exclude && !Target<"head", XNNPACK<>>::is_exclude);
}  // namespace
