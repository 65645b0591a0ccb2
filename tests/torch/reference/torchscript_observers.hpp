// The observers as they were before their statistics became compiled operators: PyTorch
// 1.13's observers ported line by line to TorchScript (the histogram with PyTorch 2.0's histc
// range). tests/torch/observers.cpp runs them beside make_observer's on the same data and
// requires the same statistics and qparams, bit for bit. Test-only: the library no longer uses
// this source.
#pragma once

#include <torch/script.h>

#include <string>
#include <string_view>

#include "versatil/libtorch/observers/observers.hpp"

namespace versatil::testing::reference_observers {

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
)JIT";

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

inline constexpr std::string_view min_max_update = R"JIT(        self.min_val = torch.min(current_min, self.min_val)
        self.max_val = torch.max(current_max, self.max_val)
    return x_orig

)JIT";

inline constexpr std::string_view moving_average_update =
    R"JIT(        self.min_val = self.min_val + self.averaging_constant * (current_min - self.min_val)
        self.max_val = self.max_val + self.averaging_constant * (current_max - self.max_val)
    return x_orig

)JIT";

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

inline std::string statistics_source(observer_kind kind) {
    std::string body;
    if (kind == observer_kind::histogram) body = std::string(histogram_source);
    else
        body = std::string(is_per_channel(kind) ? per_channel_head : per_tensor_head) +
               std::string(is_moving_average(kind) ? moving_average_update : min_max_update);
    // Reset, calculate_qparams and _unobserved_qparams are TorchScript in the library too.
    using namespace libtorch::detail;
    std::string source = std::string(qparams_source) + std::string(unobserved_qparams_source);
    if (kind != observer_kind::histogram)
        source += std::string(is_per_channel(kind) ? per_channel_range_source : per_tensor_range_source) +
                  std::string(reset_range_source);
    return source + "\ndef forward(self, x_orig: Tensor) -> Tensor:" + body;
}

// One compiled class per kind, as make_observer's, named __torch__.versatil.reference.<kind>.
inline ::torch::jit::Module compile_reference(observer_kind kind) {
    using namespace libtorch::detail;
    const std::string name = class_name(kind);
    ::torch::jit::Module observer =
        observer_with_state("__torch__.versatil.reference." + name.substr(name.rfind('.') + 1), kind);
    observer.define(statistics_source(kind));
    observer.eval();
    observer.run_method("reset_min_max_vals");
    return observer;
}

// The reference observer for a spec, configured as make_observer configures its own (the
// statistics kinds only: the dynamic placeholder has none).
inline ::torch::jit::Module make_reference_observer(const quantization_spec& spec) {
    using namespace libtorch::detail;
    using enum observer_kind;
    ::torch::jit::Module observer =
        prototype<compile_reference, min_max, moving_average_min_max, per_channel_min_max,
                  moving_average_per_channel_min_max, histogram>(spec.observer)
            .deepcopy();
    write_spec(observer, spec);
    if (spec.observer == observer_kind::histogram) observer.setattr("dst_nbins", destination_bins(spec.dtype));
    return observer;
}

}  // namespace versatil::testing::reference_observers
