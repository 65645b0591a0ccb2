// The spec invariants: each rule with a spec that breaks it and one that keeps it.
#include "versatil/core/quantization_config.hpp"

namespace {
using namespace versatil;
using enum spec_rule;

constexpr quantization_spec valid{};  // uint8 0..255 per-tensor affine min-max
static_assert(is_valid(valid) && checked(valid) == valid);

constexpr quantization_spec with(quantization_spec spec, auto change) {
    change(spec);
    return spec;
}

static_assert(first_violated_rule(with(valid, [](auto& s) { s.quant_min = 255; })) ==
              quant_min_must_be_below_quant_max);
static_assert(first_violated_rule(with(valid, [](auto& s) { s.quant_max = 256; })) == range_must_fit_dtype);
static_assert(first_violated_rule(with(valid, [](auto& s) { s.quant_min = -1; })) == range_must_fit_dtype);
static_assert(first_violated_rule(with(valid, [](auto& s) { s.dtype = dtype::int8; })) == range_must_fit_dtype);
static_assert(first_violated_rule(with(valid, [](auto& s) { s.dtype = dtype::float32; })) == dtype_must_be_quantized);
static_assert(first_violated_rule(with(valid, [](auto& s) { s.ch_axis = 0; })) == ch_axis_only_for_per_channel);
static_assert(first_violated_rule(with(valid, [](auto& s) {
                  s.qscheme = qscheme::per_channel_affine;
                  s.observer = observer_kind::per_channel_min_max;
              })) == per_channel_needs_ch_axis);
static_assert(first_violated_rule(with(valid, [](auto& s) {
                  s.qscheme = qscheme::per_channel_affine;
                  s.ch_axis = 1;
              })) == observer_must_match_qscheme);
static_assert(first_violated_rule(with(valid, [](auto& s) { s.observer = observer_kind::per_channel_min_max; })) ==
              observer_must_match_qscheme);
static_assert(first_violated_rule(with(valid, [](auto& s) { s.observer = observer_kind::placeholder; })) ==
              placeholder_only_for_dynamic);
static_assert(first_violated_rule(with(valid, [](auto& s) { s.is_dynamic = true; })) == placeholder_only_for_dynamic);
static_assert(first_violated_rule(with(valid, [](auto& s) { s.eps = 0.0F; })) == eps_must_be_positive);
static_assert(first_violated_rule(with(valid, [](auto& s) { s.averaging_constant = 0.0F; })) ==
              averaging_constant_must_be_in_0_1);
static_assert(first_violated_rule(with(valid, [](auto& s) { s.observer = observer_kind::derived; })) ==
              derived_only_for_int32);

// The kept side of each rule.
static_assert(is_valid(with(valid, [](auto& s) {
    s.qscheme = qscheme::per_channel_symmetric;
    s.ch_axis = 0;
    s.observer = observer_kind::per_channel_min_max;
})));
static_assert(is_valid(with(valid, [](auto& s) {
    s.is_dynamic = true;
    s.observer = observer_kind::placeholder;
})));
static_assert(is_valid(with(valid, [](auto& s) {  // torchao's dynamic QAT activation
    s.is_dynamic = true;
    s.is_fake_quantize = true;
    s.observer = observer_kind::moving_average_min_max;
    s.averaging_constant = 1.0F;
})));
static_assert(is_valid(quantization_spec{.dtype = dtype::int32, .quant_min = -(1 << 30), .quant_max = 1 << 30}));
static_assert(is_valid(quantization_spec{.dtype = dtype::int32, .quant_min = INT32_MIN, .quant_max = INT32_MAX,
                                         .qscheme = qscheme::per_channel_symmetric, .ch_axis = 0,
                                         .observer = observer_kind::derived}));  // a per-channel int32 bias

// Specs and configs compare by value.
static_assert(with(valid, [](auto& s) { s.eps = 0.5F; }) != valid);
static_assert(quantization_config{valid, valid, std::nullopt, std::nullopt, false} ==
              quantization_config{valid, valid, std::nullopt, std::nullopt, false});
static_assert(quantization_config{valid, valid, std::nullopt, std::nullopt, false} !=
              quantization_config{valid, std::nullopt, std::nullopt, std::nullopt, false});
static_assert(!is_valid(quantization_config{with(valid, [](auto& s) { s.eps = -1.0F; }), {}, {}, {}, false}));
static_assert(is_dynamic(quantization_config{with(valid,
                                                  [](auto& s) {
                                                      s.is_dynamic = true;
                                                      s.observer = observer_kind::placeholder;
                                                  }),
                                             {}, {}, {}, false}));
}  // namespace
