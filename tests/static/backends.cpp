// Backend traits and configs. The expected configs are written out from torchao's factories
// (get_default_x86_inductor_quantization_config, get_symmetric_quantization_config) and, for
// cortex_m, from TFLite Micro's int8 scheme, for every option combination, independently of
// the headers' code.
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>

#include "versatil/backends/cortex_m.hpp"
#include "versatil/backends/x86_inductor.hpp"
#include "versatil/backends/xnnpack.hpp"
#include "versatil/core/backend.hpp"

namespace {
using namespace versatil;
using enum observer_kind;

// --- The concept: models and non-models, one negative case per member -------------------
static_assert(Backend<X86Inductor<>> && Backend<X86Inductor<dynamic, qat, reduce_range>>);
static_assert(Backend<XNNPACK<>> && Backend<XNNPACK<per_tensor, dynamic>>);
static_assert(Backend<CortexM<>> && Backend<CortexM<per_tensor, qat>>);

struct complete {
    static constexpr std::string_view name = "complete";
    static constexpr bool is_dynamic = false;
    static constexpr bool is_qat = false;
    static constexpr device_set supported_device_types{device_type::cuda};
    static constexpr std::array<environment_assignment, 0> environment{};
    static constexpr quantization_config config{};
    static constexpr std::string_view options{};
};
struct user_backend : complete, backend_policy<user_backend> {};
static_assert(Backend<user_backend>);

struct no_name : backend_policy<no_name> {
    static constexpr bool is_dynamic = false, is_qat = false;
    static constexpr device_set supported_device_types{device_type::cpu};
};
struct runtime_name : user_backend {
    static inline std::string_view name = "not constexpr";  // must be a constant
};
struct bool_devices : user_backend {
    static constexpr bool supported_device_types = true;  // wrong type
};
struct no_functions : complete {};
static_assert(!Backend<no_name> && !detail::backend_declares_name<no_name>);
static_assert(!Backend<runtime_name> && !detail::backend_declares_name<runtime_name>);
static_assert(!Backend<bool_devices> && !detail::backend_declares_supported_device_types<bool_devices>);
static_assert(!Backend<no_functions> && !detail::backend_declares_create_quantizer<no_functions> &&
              !detail::backend_declares_environment_context<no_functions> &&
              !detail::backend_declares_activate_environment<no_functions>);
static_assert(!Backend<int>);

// --- Traits --------------------------------------------------------------------------------
static_assert(X86Inductor<>::name == "x86_inductor" && XNNPACK<>::name == "xnnpack");
static_assert(!X86Inductor<>::is_dynamic && !X86Inductor<>::is_qat && !X86Inductor<>::reduce_range);
static_assert(X86Inductor<dynamic>::is_dynamic && X86Inductor<qat>::is_qat && X86Inductor<reduce_range>::reduce_range);
static_assert(XNNPACK<>::is_per_channel && !XNNPACK<per_tensor>::is_per_channel);
static_assert(X86Inductor<>::supported_device_types == device_set{device_type::cpu});
static_assert(XNNPACK<>::supported_device_types == device_set{device_type::cpu});
static_assert(X86Inductor<>::environment.size() == 2 &&
              X86Inductor<>::environment[0] == environment_assignment{"CUDA_VISIBLE_DEVICES", ""} &&
              X86Inductor<>::environment[1] == environment_assignment{"TORCHINDUCTOR_FREEZING", "1"});
static_assert(XNNPACK<>::environment.empty());

// Options are order-free: both orders are one configuration, one spelling.
static_assert(X86Inductor<dynamic, reduce_range>::config == X86Inductor<reduce_range, dynamic>::config);
static_assert(X86Inductor<dynamic, reduce_range>::options == "dynamic,reduce_range");
static_assert(X86Inductor<reduce_range, dynamic>::options == "dynamic,reduce_range");
static_assert(XNNPACK<per_tensor, qat, dynamic>::options == "dynamic,qat,per_tensor");
static_assert(XNNPACK<>::options.empty());

// create_quantizer is constexpr for a constant path and carries the backend's config.
constexpr backend_quantizer encoder = XNNPACK<per_tensor>::create_quantizer("encoder");
static_assert(encoder.module_path == "encoder" && encoder.backend_name() == "xnnpack");
static_assert(encoder.config() == XNNPACK<per_tensor>::config);
static_assert(encoder == XNNPACK<per_tensor>::create_quantizer("encoder"));
static_assert(!(encoder == XNNPACK<>::create_quantizer("encoder")));
static_assert(!(encoder == XNNPACK<per_tensor>::create_quantizer("decoder")));

// --- torchao's configs, every option combination -------------------------------------------
constexpr float eps = 1.0F / 4096.0F;

constexpr quantization_spec x86_activation(bool dynamic, bool qat, bool reduce_range) {
    quantization_spec spec{dtype::uint8, 0, reduce_range ? 127 : 255, qscheme::per_tensor_affine, -1,
                           qat ? moving_average_min_max : dynamic ? placeholder : histogram, eps, qat, 0.01F, dynamic};
    if (qat && dynamic) spec.averaging_constant = 1.0F;  // MovingAverageMinMaxObserver.with_args(averaging_constant=1)
    return spec;
}
constexpr quantization_spec x86_weight(bool qat) {
    return {dtype::int8, -128, 127, qscheme::per_channel_symmetric, 0,
            qat ? moving_average_per_channel_min_max : per_channel_min_max, eps, qat, 0.01F, false};
}

template <bool Dynamic, bool Qat, bool ReduceRange, class Policy>
constexpr bool x86_matches_torchao() {
    static_assert(Policy::is_dynamic == Dynamic && Policy::is_qat == Qat);
    const quantization_spec activation = x86_activation(Dynamic, Qat, ReduceRange);
    const quantization_config expected{activation, activation, x86_weight(Qat), std::nullopt, Qat};
    return Policy::config == expected && is_valid(Policy::config);
}
static_assert(x86_matches_torchao<false, false, false, X86Inductor<>>());
static_assert(x86_matches_torchao<true, false, false, X86Inductor<dynamic>>());
static_assert(x86_matches_torchao<false, true, false, X86Inductor<qat>>());
static_assert(x86_matches_torchao<false, false, true, X86Inductor<reduce_range>>());
static_assert(x86_matches_torchao<true, true, false, X86Inductor<qat, dynamic>>());
static_assert(x86_matches_torchao<true, false, true, X86Inductor<reduce_range, dynamic>>());
static_assert(x86_matches_torchao<false, true, true, X86Inductor<qat, reduce_range>>());
static_assert(x86_matches_torchao<true, true, true, X86Inductor<dynamic, qat, reduce_range>>());

constexpr quantization_spec xnnpack_activation(bool dynamic, bool qat) {
    return {dtype::int8, -128, 127, qscheme::per_tensor_affine, -1,
            qat ? moving_average_min_max : dynamic ? placeholder : histogram, eps, qat,
            qat && dynamic ? 1.0F : 0.01F, dynamic};
}
constexpr quantization_spec xnnpack_weight(bool qat, bool per_channel) {
    const observer_kind observer = qat ? (per_channel ? moving_average_per_channel_min_max : moving_average_min_max)
                                       : (per_channel ? per_channel_min_max : min_max);
    return {dtype::int8, -127, 127, per_channel ? qscheme::per_channel_symmetric : qscheme::per_tensor_symmetric,
            per_channel ? 0 : -1, observer, eps, qat, 0.01F, false};
}

template <bool Dynamic, bool Qat, bool PerChannel, class Policy>
constexpr bool xnnpack_matches_torchao() {
    static_assert(Policy::is_dynamic == Dynamic && Policy::is_qat == Qat && Policy::is_per_channel == PerChannel);
    const quantization_spec activation = xnnpack_activation(Dynamic, Qat);
    // Dynamic: no output activation spec (outputs stay float).
    const std::optional<quantization_spec> output = Dynamic ? std::nullopt : std::optional{activation};
    const quantization_config expected{activation, output, xnnpack_weight(Qat, PerChannel), std::nullopt, Qat};
    return Policy::config == expected && is_valid(Policy::config);
}
static_assert(xnnpack_matches_torchao<false, false, true, XNNPACK<>>());
static_assert(xnnpack_matches_torchao<true, false, true, XNNPACK<dynamic>>());
static_assert(xnnpack_matches_torchao<false, true, true, XNNPACK<qat>>());
static_assert(xnnpack_matches_torchao<false, false, false, XNNPACK<per_tensor>>());
static_assert(xnnpack_matches_torchao<true, true, true, XNNPACK<qat, dynamic>>());
static_assert(xnnpack_matches_torchao<true, false, false, XNNPACK<per_tensor, dynamic>>());
static_assert(xnnpack_matches_torchao<false, true, false, XNNPACK<qat, per_tensor>>());
static_assert(xnnpack_matches_torchao<true, true, false, XNNPACK<dynamic, qat, per_tensor>>());

// Options change what the quantizer does, not just a flag.
static_assert(X86Inductor<reduce_range>::config.input_activation->quant_max == 127);
static_assert(XNNPACK<qat>::config.weight->is_fake_quantize && !XNNPACK<>::config.weight->is_fake_quantize);
static_assert(XNNPACK<dynamic>::config.input_activation->observer == placeholder);

// --- The accuracy steps: cle, bias_correction and gptq switch on a step and change nothing else -
template <class With, class Without>
constexpr bool only_steps_differ(bool cle, bool bias_correction, bool gptq = false) {
    quantization_config expected = Without::config;
    expected.cross_layer_equalization = cle;
    expected.bias_correction = bias_correction;
    expected.gptq = gptq;
    return With::config == expected && !(With::config == Without::config);
}
static_assert(only_steps_differ<XNNPACK<per_tensor, cle>, XNNPACK<per_tensor>>(true, false));
static_assert(only_steps_differ<XNNPACK<bias_correction>, XNNPACK<>>(false, true));
static_assert(only_steps_differ<X86Inductor<cle, bias_correction>, X86Inductor<>>(true, true));
static_assert(only_steps_differ<X86Inductor<reduce_range, cle>, X86Inductor<reduce_range>>(true, false));
// cle is data-free and exact in float, so it also goes with dynamic quantization and QAT.
static_assert(only_steps_differ<XNNPACK<dynamic, per_tensor, cle>, XNNPACK<dynamic, per_tensor>>(true, false));
static_assert(only_steps_differ<X86Inductor<qat, cle>, X86Inductor<qat>>(true, false));
static_assert(only_steps_differ<X86Inductor<gptq>, X86Inductor<>>(false, false, true));
static_assert(only_steps_differ<XNNPACK<per_tensor, gptq, cle>, XNNPACK<per_tensor>>(true, false, true));
static_assert(only_steps_differ<X86Inductor<bias_correction, reduce_range, gptq, cle>, X86Inductor<reduce_range>>(
    true, true, true));
static_assert(!X86Inductor<>::config.cross_layer_equalization && !X86Inductor<>::config.bias_correction &&
              !X86Inductor<>::config.gptq);
static_assert(X86Inductor<gptq, cle, bias_correction>::options == "cle,bias_correction,gptq");
static_assert(XNNPACK<bias_correction, cle, per_tensor>::options == "per_tensor,cle,bias_correction");
// bias_correction is post-training and static: with dynamic or qat it does not compile
// (compile_fail/option_bias_correction_*.cpp), and the catalogue leaves those out.
static_assert(options_combine<cle, bias_correction, per_tensor> && options_combine<dynamic, cle> &&
              options_combine<qat, cle>);
static_assert(!options_combine<dynamic, bias_correction> && !options_combine<bias_correction, qat>);
// So is gptq (compile_fail/option_gptq_*.cpp).
static_assert(options_combine<gptq, cle, bias_correction, per_tensor> && !options_combine<gptq, dynamic> &&
              !options_combine<qat, gptq>);
// And adaround, which chooses the same rounding as gptq (compile_fail/option_adaround_gptq.cpp).
static_assert(options_combine<adaround, cle, bias_correction, per_tensor> && !options_combine<adaround, gptq> &&
              !options_combine<adaround, dynamic> && !options_combine<qat, adaround>);
static_assert(X86Inductor<adaround>::config.adaround && !X86Inductor<adaround>::config.gptq &&
              !X86Inductor<gptq>::config.adaround);

// --- Calibration methods: each changes the static activations' observer and nothing else ----
template <class With, class Without>
constexpr bool only_activation_observers_differ(observer_kind observer) {
    quantization_config expected = Without::config;
    expected.input_activation->observer = observer;
    expected.output_activation->observer = observer;
    return With::config == expected;
}
using cm = calibration_method;
static_assert(only_activation_observers_differ<XNNPACK<calibration<cm::minmax>>, XNNPACK<>>(observer_kind::min_max));
static_assert(only_activation_observers_differ<XNNPACK<per_tensor, calibration<cm::moving_minmax>>,
                                               XNNPACK<per_tensor>>(observer_kind::moving_average_min_max));
static_assert(only_activation_observers_differ<X86Inductor<calibration<cm::percentile>>, X86Inductor<>>(
    observer_kind::histogram_percentile));
static_assert(only_activation_observers_differ<X86Inductor<reduce_range, calibration<cm::entropy>>,
                                               X86Inductor<reduce_range>>(observer_kind::histogram_entropy));
static_assert(only_activation_observers_differ<XNNPACK<calibration<cm::automatic>, cle>, XNNPACK<cle>>(
    observer_kind::histogram_auto));
// histogram is the backends' own default: naming it changes the spelling, not the config.
static_assert(XNNPACK<calibration<cm::histogram>>::config == XNNPACK<>::config);
static_assert(calibration_of(XNNPACK<>::config) == cm::histogram &&
              calibration_of(X86Inductor<>::config) == cm::histogram);
static_assert(!calibration_of(XNNPACK<dynamic>::config) && !calibration_of(X86Inductor<qat>::config));
static_assert(X86Inductor<calibration<cm::automatic>, bias_correction, cle>::options ==
              "cle,bias_correction,calibration=auto");
// At most one method, and only where activations are calibrated (compile_fail/option_calibration_*.cpp).
static_assert(options_combine<calibration<cm::entropy>, cle, bias_correction, per_tensor>);
static_assert(!options_combine<calibration<cm::entropy>, calibration<cm::minmax>> &&
              !options_combine<dynamic, calibration<cm::minmax>> && !options_combine<qat, calibration<cm::automatic>>);
static_assert(parse_calibration_method("auto") == cm::automatic && !parse_calibration_method("kl"));
// cortex_m calibrates on the host like xnnpack (its activation scheme): the same methods, the
// same default, the same refusals (compile_fail/cortex_m_calibration_qat.cpp).
static_assert(
    only_activation_observers_differ<CortexM<calibration<cm::entropy>>, CortexM<>>(observer_kind::histogram_entropy));
static_assert(only_activation_observers_differ<CortexM<per_tensor, calibration<cm::minmax>>, CortexM<per_tensor>>(
    observer_kind::min_max));
static_assert(CortexM<calibration<cm::histogram>>::config == CortexM<>::config);
static_assert(calibration_of(CortexM<>::config) == cm::histogram && !calibration_of(CortexM<qat>::config));
static_assert(CortexM<calibration<cm::automatic>, per_tensor>::options == "per_tensor,calibration=auto");

// --- cortex_m: TFLite Micro's int8 scheme (int8 asymmetric activations, int8 symmetric
// weights -127..127 with zero point 0, int32 biases at input_scale * weight_scale) ----------
static_assert(CortexM<>::name == "cortex_m");
static_assert(!CortexM<>::is_dynamic && !CortexM<>::is_qat && CortexM<qat>::is_qat);
static_assert(CortexM<>::is_per_channel && !CortexM<per_tensor>::is_per_channel);
// A microcontroller, not the CPU: composing with a CPU backend has no device in common.
static_assert(CortexM<>::supported_device_types == device_set{device_type::mcu});
static_assert((CortexM<>::supported_device_types & XNNPACK<>::supported_device_types).empty());
static_assert(CortexM<>::environment.empty());
static_assert(CortexM<per_tensor, qat>::options == "qat,per_tensor" &&
              CortexM<qat, per_tensor>::options == "qat,per_tensor");
static_assert(CortexM<per_tensor, qat>::config == CortexM<qat, per_tensor>::config);

constexpr quantization_spec cortex_m_activation(bool qat) {
    return {dtype::int8, -128, 127, qscheme::per_tensor_affine, -1, qat ? moving_average_min_max : histogram, eps, qat,
            0.01F, false};
}
constexpr quantization_spec cortex_m_weight(bool qat, bool per_channel) {
    const observer_kind observer = qat ? (per_channel ? moving_average_per_channel_min_max : moving_average_min_max)
                                       : (per_channel ? per_channel_min_max : min_max);
    return {dtype::int8, -127, 127, per_channel ? qscheme::per_channel_symmetric : qscheme::per_tensor_symmetric,
            per_channel ? 0 : -1, observer, eps, qat, 0.01F, false};
}
constexpr quantization_spec cortex_m_bias(bool per_channel) {  // never fake-quantized: derived from the others
    return {dtype::int32, std::numeric_limits<std::int32_t>::min(), std::numeric_limits<std::int32_t>::max(),
            per_channel ? qscheme::per_channel_symmetric : qscheme::per_tensor_symmetric, per_channel ? 0 : -1,
            derived, eps, false, 0.01F, false};
}

template <bool Qat, bool PerChannel, class Policy>
constexpr bool cortex_m_matches_tflite_micro() {
    static_assert(Policy::is_qat == Qat && Policy::is_per_channel == PerChannel && !Policy::is_dynamic);
    const quantization_config expected{cortex_m_activation(Qat), cortex_m_activation(Qat),
                                       cortex_m_weight(Qat, PerChannel), cortex_m_bias(PerChannel), Qat};
    return Policy::config == expected && is_valid(Policy::config);
}
static_assert(cortex_m_matches_tflite_micro<false, true, CortexM<>>());
static_assert(cortex_m_matches_tflite_micro<true, true, CortexM<qat>>());
static_assert(cortex_m_matches_tflite_micro<false, false, CortexM<per_tensor>>());
static_assert(cortex_m_matches_tflite_micro<true, false, CortexM<per_tensor, qat>>());
// Zero point 0 and a range symmetric about it: -127, not -128 (so -w is always representable).
static_assert(CortexM<>::config.weight->quant_min == -CortexM<>::config.weight->quant_max);

// --- Families: every configuration of a policy template is one family, told apart by identity,
// not by name; a policy that is no template of options has none.
static_assert(descriptor_of<X86Inductor<>>.family == &family_of<X86Inductor>);
static_assert(descriptor_of<X86Inductor<dynamic, qat, reduce_range>>.family == &family_of<X86Inductor>);
static_assert(descriptor_of<XNNPACK<per_tensor>>.family == &family_of<XNNPACK>);
static_assert(&family_of<XNNPACK> != &family_of<X86Inductor>);
static_assert(descriptor_of<CortexM<per_tensor, qat>>.family == &family_of<CortexM> &&
              &family_of<CortexM> != &family_of<XNNPACK> && family_of<CortexM>.name == "cortex_m");
static_assert(family_of<XNNPACK>.name == "xnnpack" && family_of<X86Inductor>.name == "x86_inductor");
static_assert(descriptor_of<user_backend>.family == nullptr);

}  // namespace
