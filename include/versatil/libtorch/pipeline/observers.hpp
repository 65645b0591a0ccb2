// Observers for LibTorch 1.13's graph-mode quantization passes, one per observer_kind of a
// quantization_spec. The passes (InsertObservers / InsertQuantDeQuant) need TorchScript
// modules, not C++ objects: they copy the observer into the model, call its `forward` while
// calibrating and its `calculate_qparams` when inserting quantize ops, and read the int
// attributes `dtype`, `qscheme` and `ch_axis`. So each observer is TorchScript defined from
// C++, compiled once per kind; make_observer deep-copies that prototype (same class type, no
// compilation) and writes the spec's values into it.
//
// The statistics follow torch.ao.quantization.observer (PyTorch 1.13). The qparams follow
// versatil::math::choose_qparams exactly, which is PyTorch's _calculate_qparams except that a
// range too wide for float32 gives the largest finite scale, not infinity.
#pragma once

#include <torch/script.h>

#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "versatil/core/quantization_spec.hpp"
#include "versatil/libtorch/error.hpp"

namespace versatil::libtorch {

namespace observer_detail {

// TorchScript `float(x)` for the constants below: the literal must parse back to the same
// double, and FLT_MAX's shortest round-trip form does.
static_assert(std::numeric_limits<float>::max() == 3.4028234663852886e+38);

// The qparams methods every class shares. _choose_qparams is versatil::math::choose_qparams,
// elementwise over 0-d (per tensor) or 1-d (per channel) min/max. Widths and scales are taken
// in double and rounded to float32 where the core rounds, so the result equals the core's bit
// for bit. Returns 1-d tensors, as PyTorch does. _unobserved_qparams is PyTorch's fallback for
// an observer that saw nothing (LibTorch asks anyway, e.g. for the activation observer of a
// dynamic model).
inline constexpr std::string_view qparams_source = R"JIT(
def _choose_qparams(self, min_val: Tensor, max_val: Tensor) -> Tuple[Tensor, Tensor]:
    largest = 3.4028234663852886e+38
    unobserved = (min_val > max_val) | torch.isnan(min_val) | torch.isnan(max_val)
    min_neg = torch.where(min_val < 0.0, min_val, torch.zeros_like(min_val))
    max_pos = torch.where(max_val > 0.0, max_val, torch.zeros_like(max_val))
    # The core converts the number of levels to float32 before dividing.
    levels = torch.full([1], float(self.quant_max - self.quant_min)).double()
    if self.symmetric:
        bound = torch.max(-min_neg, max_pos)
        scale = torch.clamp(bound.double() / (levels / 2.0), max=largest).float()
        scale = torch.clamp(scale, min=self.eps)
        zero_point_value = 0
        if self.unsigned_dtype:
            zero_point_value = (self.quant_min + self.quant_max) // 2
        zero_point = torch.zeros_like(scale).long() + zero_point_value
    else:
        width = max_pos.double() - min_neg.double()
        width = torch.where(width > largest, width, width.float().double())
        scale = torch.clamp(width / levels, max=largest).float()
        scale = torch.clamp(scale, min=self.eps)
        shifted = float(self.quant_min) - torch.round(min_neg / scale).double()
        zero_point = torch.clamp(shifted, float(self.quant_min), float(self.quant_max)).long()
    scale = torch.where(unobserved, torch.ones_like(scale), scale)
    zero_point = torch.where(unobserved, torch.zeros_like(zero_point), zero_point)
    return scale.reshape([-1]), zero_point.reshape([-1])

def _unobserved_qparams(self) -> Tuple[Tensor, Tensor]:
    return torch.ones([1]), torch.zeros([1]).long()
)JIT";

// What every per-tensor statistic shares: reset (min = inf and max = -inf, so min > max says
// "unobserved"), and qparams from the running min / max.
inline constexpr std::string_view per_tensor_range_source = R"JIT(
def reset_min_max_vals(self):
    self.min_val = torch.full([1], float("inf")).reshape([])
    self.max_val = torch.full([1], float("-inf")).reshape([])

def calculate_qparams(self) -> Tuple[Tensor, Tensor]:
    return self._choose_qparams(self.min_val, self.max_val)
)JIT";

// What every per-channel statistic shares: reset (empty min/max means nothing observed yet;
// the channel count comes with the first batch), and qparams from the running min / max.
inline constexpr std::string_view per_channel_range_source = R"JIT(
def reset_min_max_vals(self):
    self.min_val = torch.zeros([0])
    self.max_val = torch.zeros([0])

def calculate_qparams(self) -> Tuple[Tensor, Tensor]:
    if self.min_val.numel() == 0:
        return self._unobserved_qparams()
    return self._choose_qparams(self.min_val, self.max_val)
)JIT";

// The head of a min/max statistic, one per layout: the batch's range as current_min /
// current_max, which the first batch takes as it is; an `else:` branch follows (the update).
inline constexpr std::string_view per_tensor_head = R"JIT(
    if x_orig.numel() == 0:
        return x_orig
    x = x_orig.detach().float()
    current_min, current_max = torch.aminmax(x)
    if bool(self.min_val == float("inf")) and bool(self.max_val == float("-inf")):
        self.min_val = current_min
        self.max_val = current_max
    else:
)JIT";

// Per channel: move ch_axis to the front and flatten the rest (PyTorch permutes 0 and
// ch_axis, which is this transpose).
inline constexpr std::string_view per_channel_head = R"JIT(
    if x_orig.numel() == 0:
        return x_orig
    y = torch.flatten(x_orig.detach().float().transpose(self.ch_axis, 0), 1)
    current_min, current_max = torch.aminmax(y, dim=1)
    if self.min_val.numel() == 0:
        self.min_val = current_min
        self.max_val = current_max
    else:
)JIT";

// As MinMaxObserver: the range of everything seen. (Per tensor, taking the first batch as it
// is equals its min / max with the unobserved inf / -inf.)
inline constexpr std::string_view min_max_update = R"JIT(        self.min_val = torch.min(current_min, self.min_val)
        self.max_val = torch.max(current_max, self.max_val)
    return x_orig

)JIT";

// As MovingAverageMinMaxObserver: later batches move the range by averaging_constant
// (computed in float32, like PyTorch's tensor arithmetic).
inline constexpr std::string_view moving_average_update = R"JIT(        self.min_val = self.min_val + self.averaging_constant * (current_min - self.min_val)
        self.max_val = self.max_val + self.averaging_constant * (current_max - self.max_val)
    return x_orig

)JIT";

// A line-by-line port of PyTorch 1.13's HistogramObserver (same tensor ops, same float32 /
// double mix, so the same numbers) with one deliberate fix: 1.13 passes int(min_val) and
// int(max_val) as torch.histc's range, which truncates the range toward zero and drops
// every value outside it from the histogram while min_val/max_val keep the true range
// (fixed upstream in PyTorch 2.0, which passes the float bounds, as this port does).
inline constexpr std::string_view histogram_source = R"JIT(
    if x_orig.numel() == 0:
        return x_orig
    x = x_orig.detach().float()
    min_val = self.min_val
    max_val = self.max_val
    same_values = float(min_val) == float(max_val)
    is_uninitialized = bool(min_val == float("inf")) and bool(max_val == float("-inf"))
    if is_uninitialized or same_values:
        new_min, new_max = torch.aminmax(x)
        self.min_val = new_min
        self.max_val = new_max
        self.histogram = torch.histc(x, self.bins, min=float(new_min), max=float(new_max))
    else:
        new_min, new_max = torch.aminmax(x)
        combined_min = torch.min(new_min, min_val)
        combined_max = torch.max(new_max, max_val)
        if bool(torch.isinf(combined_max - combined_min)):
            # The width overflows float32: no bin grid exists (PyTorch would compute NaN
            # bins). Keep the range; calculate_qparams then uses it as is.
            self.min_val = combined_min
            self.max_val = combined_max
            return x_orig
        combined_min, combined_max, downsample_rate, start_idx = self._adjust_min_max(
            combined_min, combined_max, self.upsample_rate)
        combined_histogram = torch.histc(x, self.bins, min=float(combined_min), max=float(combined_max))
        if bool(combined_min == min_val) and bool(combined_max == max_val):
            combined_histogram += self.histogram
        else:
            combined_histogram = self._combine_histograms(
                combined_histogram, self.histogram, self.upsample_rate, downsample_rate, start_idx, self.bins)
        self.histogram = combined_histogram
        self.min_val = combined_min
        self.max_val = combined_max
    return x_orig

def _adjust_min_max(self, combined_min: Tensor, combined_max: Tensor,
                    upsample_rate: int) -> Tuple[Tensor, Tensor, int, int]:
    # (combined_max - combined_min) / (downsample_rate * bins) = (max - min) / (upsample_rate * bins):
    # a common grid on which the old histogram can be placed. Only the max is relaxed, so
    # a one-sided distribution keeps its min at zero.
    hist_bin_width = (self.max_val - self.min_val) / (self.bins * upsample_rate)
    downsample_rate = int(torch.ceil((combined_max - combined_min) / (hist_bin_width * self.bins)))
    e = (hist_bin_width * self.bins) * downsample_rate - (combined_max - combined_min)
    combined_max = combined_max + e
    start_idx = int(torch.round((self.min_val - combined_min) / hist_bin_width))
    return combined_min, combined_max, downsample_rate, start_idx

def _combine_histograms(self, orig_hist: Tensor, new_hist: Tensor, upsample_rate: int,
                        downsample_rate: int, start_idx: int, nbins: int) -> Tensor:
    # Upsample the old histogram to a piecewise-constant density, place it in the combined
    # range, integrate (in double, against overflow) and resample at the new bin edges.
    upsampled_histogram = new_hist.repeat_interleave(upsample_rate)
    histogram_with_output_range = torch.zeros([nbins * downsample_rate])
    histogram_with_output_range[start_idx : nbins * upsample_rate + start_idx] = upsampled_histogram
    integral_histogram = torch.cumsum(histogram_with_output_range, 0, dtype=7)[downsample_rate - 1 :: downsample_rate]
    shifted_integral_histogram = torch.zeros([nbins])
    shifted_integral_histogram[1:nbins] = integral_histogram[0:-1]
    interpolated_histogram = (integral_histogram - shifted_integral_histogram) / upsample_rate
    return orig_hist + interpolated_histogram.float()

def _get_norm(self, delta_begin: Tensor, delta_end: Tensor, density: Tensor) -> Tensor:
    # density * integral of x^2 from delta_begin to delta_end (the L2 norm)
    norm = (delta_end * delta_end * delta_end - delta_begin * delta_begin * delta_begin) / 3
    return density * norm

def _compute_quantization_error(self, next_start_bin: int, next_end_bin: int) -> float:
    bin_width = (float(self.max_val) - float(self.min_val)) / self.bins
    dst_bin_width = bin_width * (next_end_bin - next_start_bin + 1) / self.dst_nbins
    if dst_bin_width == 0.0:
        return 0.0
    src_bin = torch.arange(self.bins)
    src_bin_begin = (src_bin - next_start_bin) * bin_width
    src_bin_end = src_bin_begin + bin_width
    dst_bin_of_begin = torch.clamp(torch.div(src_bin_begin, dst_bin_width, rounding_mode='floor'),
                                   0, self.dst_nbins - 1)
    dst_bin_of_begin_center = (dst_bin_of_begin + 0.5) * dst_bin_width
    dst_bin_of_end = torch.clamp(torch.div(src_bin_end, dst_bin_width, rounding_mode='floor'),
                                 0, self.dst_nbins - 1)
    density = self.histogram / bin_width
    norm = torch.zeros([self.bins])
    delta_begin = src_bin_begin - dst_bin_of_begin_center
    delta_end = dst_bin_width / 2
    norm += self._get_norm(delta_begin, torch.ones([self.bins]) * delta_end, density)
    norm += (dst_bin_of_end - dst_bin_of_begin - 1) * self._get_norm(
        torch.tensor(-dst_bin_width / 2), torch.tensor(dst_bin_width / 2), density)
    dst_bin_of_end_center = dst_bin_of_end * dst_bin_width + dst_bin_width / 2
    last_delta_begin = -dst_bin_width / 2
    last_delta_end = src_bin_end - dst_bin_of_end_center
    norm += self._get_norm(torch.tensor(last_delta_begin), last_delta_end, density)
    return float(norm.sum())

def _non_linear_param_search(self) -> Tuple[Tensor, Tensor]:
    # Narrow [min, max] from both ends by quantile steps while the L2 quantization error
    # of the histogram drops (caffe2's NormMinimization::NonlinearQuantizationParamsSearch).
    bin_width = (self.max_val - self.min_val) / self.bins
    total = float(torch.sum(self.histogram))
    cumulative = torch.cumsum(self.histogram, dim=0)
    stepsize = 1e-5
    alpha = 0.0
    beta = 1.0
    start_bin = 0
    end_bin = self.bins - 1
    norm_min = float("inf")
    while alpha < beta:
        next_alpha = alpha + stepsize
        next_beta = beta - stepsize
        l = start_bin
        r = end_bin
        while l < end_bin and bool(cumulative[l] < next_alpha * total):
            l = l + 1
        while r > start_bin and bool(cumulative[r] > next_beta * total):
            r = r - 1
        next_start_bin = start_bin
        next_end_bin = end_bin
        if (l - start_bin) > (end_bin - r):
            next_start_bin = l
            alpha = next_alpha
        else:
            next_end_bin = r
            beta = next_beta
        if next_start_bin == start_bin and next_end_bin == end_bin:
            continue
        norm = self._compute_quantization_error(next_start_bin, next_end_bin)
        if norm > norm_min:
            break
        norm_min = norm
        start_bin = next_start_bin
        end_bin = next_end_bin
    new_min = self.min_val + bin_width * start_bin
    new_max = self.min_val + bin_width * (end_bin + 1)
    return new_min, new_max

def reset_min_max_vals(self):
    self.min_val = torch.full([1], float("inf")).reshape([])
    self.max_val = torch.full([1], float("-inf")).reshape([])
    self.histogram = torch.zeros([self.bins])

def calculate_qparams(self) -> Tuple[Tensor, Tensor]:
    if bool(self.min_val == float("inf")) and bool(self.max_val == float("-inf")):
        return self._unobserved_qparams()
    # One value seen: the search would walk all 10^5 steps with a zero-width bin and end
    # at min_val + 0 * bins, so its answer is [min, max] already.
    if float(self.min_val) == float(self.max_val):
        return self._choose_qparams(self.min_val, self.max_val)
    # A range whose width overflows float32 has no histogram to search (see forward).
    if bool(torch.isinf(self.max_val - self.min_val)):
        return self._choose_qparams(self.min_val, self.max_val)
    new_min, new_max = self._non_linear_param_search()
    return self._choose_qparams(new_min, new_max)
)JIT";

// Dynamic quantization takes the range at run time; the observer only carries dtype and
// qscheme for the passes.
inline constexpr std::string_view placeholder_source = R"JIT(
    return x_orig

def reset_min_max_vals(self):
    pass

def calculate_qparams(self) -> Tuple[Tensor, Tensor]:
    return self._unobserved_qparams()
)JIT";

inline constexpr int histogram_bins = 2048;
inline constexpr int histogram_upsample_rate = 128;

inline std::string class_name(observer_kind kind) {
    const auto base = [kind]() -> std::string_view {
        switch (kind) {
            case observer_kind::min_max: return "MinMaxObserver";
            case observer_kind::moving_average_min_max: return "MovingAverageMinMaxObserver";
            case observer_kind::per_channel_min_max: return "PerChannelMinMaxObserver";
            case observer_kind::moving_average_per_channel_min_max: return "MovingAveragePerChannelMinMaxObserver";
            case observer_kind::histogram: return "HistogramObserver";
            // Not "PlaceholderObserver": InsertQuantDeQuant treats any class whose name
            // contains that as PyTorch's fp16 placeholder and crashes on ours (SIGSEGV in
            // Graph::createGetAttr, seen with 1.13.1).
            case observer_kind::placeholder: return "DynamicQuantizationObserver";
            case observer_kind::derived: break;  // nothing to observe (see make_observer)
        }
        throw error(error_kind::invalid_argument, "make_observer: unknown observer kind");
    }();
    return "__torch__.versatil.observers." + std::string(base);
}

// The body of a kind's statistics method (what forward does with each observed value) and the
// methods that follow it.
inline std::string statistics_body(observer_kind kind) {
    if (kind == observer_kind::histogram) return std::string(histogram_source);
    if (kind == observer_kind::placeholder) return std::string(placeholder_source);
    return std::string(is_per_channel(kind) ? per_channel_head : per_tensor_head) +
           std::string(is_moving_average(kind) ? moving_average_update : min_max_update);
}

// The statistics as a method named `method`: forward for an observer, _observe for a
// fake-quantize module that calls it before quantizing (fake_quantize.hpp).
inline std::string statistics_source(observer_kind kind, std::string_view method) {
    return "\ndef " + std::string(method) + "(self, x_orig: Tensor) -> Tensor:" + statistics_body(kind);
}

// A module of class `name` with the attributes of the observer interface that a spec sets
// (write_spec), shared by observers and fake-quantize modules.
inline ::torch::jit::Module module_with_spec_attributes(const std::string& name, observer_kind kind) {
    ::torch::jit::Module module{c10::QualifiedName(name)};
    module.register_attribute("dtype", c10::IntType::get(), std::int64_t{0});
    module.register_attribute("qscheme", c10::IntType::get(), std::int64_t{0});
    module.register_attribute("ch_axis", c10::IntType::get(), std::int64_t{-1});
    module.register_attribute("quant_min", c10::IntType::get(), std::int64_t{0});
    module.register_attribute("quant_max", c10::IntType::get(), std::int64_t{255});
    module.register_attribute("eps", c10::FloatType::get(), double{default_eps});
    module.register_attribute("symmetric", c10::BoolType::get(), false);
    module.register_attribute("unsigned_dtype", c10::BoolType::get(), true);
    if (is_moving_average(kind))
        module.register_attribute("averaging_constant", c10::FloatType::get(), double{default_averaging_constant});
    return module;
}

// The reset and qparams methods a kind's statistics share with its siblings (the histogram
// and the placeholder define their own).
inline std::string_view range_source(observer_kind kind) {
    if (kind == observer_kind::histogram || kind == observer_kind::placeholder) return {};
    return is_per_channel(kind) ? per_channel_range_source : per_tensor_range_source;
}

// Compiles the class of one kind, with fresh statistics (reset_min_max_vals). The attribute
// values are overwritten per spec.
inline ::torch::jit::Module compile_prototype(observer_kind kind) {
    ::torch::jit::Module observer = module_with_spec_attributes(class_name(kind), kind);
    if (kind == observer_kind::histogram) {
        observer.register_attribute("bins", c10::IntType::get(), std::int64_t{histogram_bins});
        observer.register_attribute("upsample_rate", c10::IntType::get(), std::int64_t{histogram_upsample_rate});
        observer.register_attribute("dst_nbins", c10::IntType::get(), std::int64_t{256});
        observer.register_buffer("histogram", ::torch::zeros({histogram_bins}));
    }
    if (kind != observer_kind::placeholder) {
        observer.register_buffer("min_val", ::torch::zeros({0}));
        observer.register_buffer("max_val", ::torch::zeros({0}));
    }
    observer.define(std::string(qparams_source) + std::string(range_source(kind)) + statistics_source(kind, "forward"));
    observer.eval();
    observer.run_method("reset_min_max_vals");
    return observer;
}

// One compilation per class per process, for observers and fake-quantize modules alike: the
// prototypes of `kinds`, compiled on first use (a function-local static, so thread-safe), that
// make_observer and make_fake_quantize deep-copy (same class type, no compilation).
template <::torch::jit::Module (*compile)(observer_kind), observer_kind... kinds>
const ::torch::jit::Module& prototype(observer_kind kind) {
    static const std::array<::torch::jit::Module, sizeof...(kinds)> prototypes{compile(kinds)...};
    std::size_t index = 0;
    for (const observer_kind compiled : {kinds...}) {
        if (compiled == kind) return prototypes[index];
        ++index;
    }
    throw error(error_kind::invalid_argument, "make_observer: unknown observer kind");
}

inline c10::ScalarType quantized_scalar_type(dtype value) {
    switch (value) {
        case dtype::uint8: return c10::ScalarType::QUInt8;
        case dtype::int8: return c10::ScalarType::QInt8;
        case dtype::int32: return c10::ScalarType::QInt32;
        case dtype::float32: break;
    }
    throw error(error_kind::invalid_argument, "make_observer: float32 is not a quantized dtype");
}

inline c10::QScheme torch_qscheme(qscheme value) {
    switch (value) {
        case qscheme::per_tensor_affine: return c10::kPerTensorAffine;
        case qscheme::per_tensor_symmetric: return c10::kPerTensorSymmetric;
        case qscheme::per_channel_affine: return c10::kPerChannelAffine;
        case qscheme::per_channel_symmetric: return c10::kPerChannelSymmetric;
    }
    throw error(error_kind::invalid_argument, "make_observer: unknown qscheme");
}

// 2 ** bits of the dtype: the number of quantized levels HistogramObserver's error model
// spreads over the chosen range (PyTorch uses the dtype's width, not quant_min/quant_max).
inline std::int64_t destination_bins(dtype value) {
    return value == dtype::int32 ? std::int64_t{1} << 32 : std::int64_t{1} << 8;
}

// The spec's values into a module of the observer interface (shared with fake_quantize.hpp).
inline void write_spec(::torch::jit::Module& module, const quantization_spec& spec) {
    module.setattr("dtype", static_cast<std::int64_t>(quantized_scalar_type(spec.dtype)));
    module.setattr("qscheme", static_cast<std::int64_t>(torch_qscheme(spec.qscheme)));
    module.setattr("ch_axis", std::int64_t{is_per_channel(spec.qscheme) ? spec.ch_axis : -1});
    module.setattr("quant_min", std::int64_t{spec.quant_min});
    module.setattr("quant_max", std::int64_t{spec.quant_max});
    module.setattr("eps", double{spec.eps});
    module.setattr("symmetric", is_symmetric(spec.qscheme));
    module.setattr("unsigned_dtype", spec.dtype == dtype::uint8);
    if (is_moving_average(spec.observer)) module.setattr("averaging_constant", double{spec.averaging_constant});
}

}  // namespace observer_detail

// An observer module for one spec, in the form LibTorch 1.13's graph-mode passes expect:
// int attributes dtype (ScalarType code), qscheme (QScheme code), ch_axis, quant_min,
// quant_max; float eps; forward(x) records statistics and returns x itself;
// calculate_qparams() -> (scale float32, zero_point int64), both 1-d.
inline ::torch::jit::Module make_observer(const quantization_spec& spec) {
    if (const spec_rule rule = first_violated_rule(spec); rule != spec_rule::ok)
        throw error(error_kind::invalid_argument,
                    "make_observer: invalid quantization spec: " + std::string(to_string(rule)));
    if (spec.observer == observer_kind::derived)
        throw error(error_kind::invalid_argument,
                    "make_observer: a derived spec (an int32 bias) takes its scale from other tensors and has no observer");
    if (spec.is_fake_quantize)
        throw error(error_kind::invalid_argument,
                    "make_observer: the spec asks for fake quantization (QAT); observers here are for "
                    "post-training quantization, so use a spec with is_fake_quantize = false");

    using enum observer_kind;
    ::torch::jit::Module observer =
        observer_detail::prototype<observer_detail::compile_prototype, min_max, moving_average_min_max, per_channel_min_max,
                                   moving_average_per_channel_min_max, histogram, placeholder>(spec.observer)
            .deepcopy();
    observer_detail::write_spec(observer, spec);
    if (spec.observer == observer_kind::histogram)
        observer.setattr("dst_nbins", observer_detail::destination_bins(spec.dtype));
    return observer;
}

}  // namespace versatil::libtorch
