// The observers' statistics as compiled code: LibTorch operators (versatil::observe_min_max,
// versatil::observe_moving_average, versatil::observe_histogram, versatil::choose_qparams,
// versatil::histogram_qparams) that the observers' TorchScript calls, so each observed value
// costs one operator call instead of a few dozen interpreted ones, and the histogram's range
// search runs as a loop instead of up to 10^5 interpreted iterations. Observers stay modules
// (observers.hpp), and convert removes them, so no saved model refers to these operators.
//
// The numbers are those of the TorchScript port of PyTorch 1.13's observers they replace, bit
// for bit: where that port called an ATen op on tensors, these call the same op; where it did
// float32 arithmetic on 0-d tensors or elementwise, these do the same IEEE operations in the
// same order (each product rounded on its own, as ATen rounds after every op), and reductions
// go through ATen's own kernels. tests/torch/observers.cpp compares both on real data.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>
#include <torch/script.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>
#include <vector>

#include "versatil/math/qparams.hpp"

#ifdef __FAST_MATH__
#error "versatil's observers reproduce PyTorch's float32 arithmetic bit for bit; build without -ffast-math"
#endif

namespace versatil::libtorch {

namespace observer_ops {

using tensor_pair = std::tuple<at::Tensor, at::Tensor>;

// `value` rounded to its type here: the compiler may not fuse it into a following add as one
// fused multiply-add, which rounds once where ATen rounds twice.
template <class Float>
inline Float rounded(Float value) {
#if defined(__GNUC__) && defined(__x86_64__)
    __asm__("" : "+x"(value));
#elif defined(__GNUC__) && defined(__aarch64__)
    __asm__("" : "+w"(value));
#else
    volatile Float kept = value;
    value = kept;
#endif
    return value;
}

inline bool is_unobserved(const at::Tensor& min_val, const at::Tensor& max_val) {
    return min_val.item<float>() == std::numeric_limits<float>::infinity() &&
           max_val.item<float>() == -std::numeric_limits<float>::infinity();
}

// The batch's range: per tensor (ch_axis < 0) as 0-d tensors, per channel (ch_axis moved to
// the front, the rest flattened, as PyTorch's per-channel observers do) as 1-d ones.
inline tensor_pair batch_range(const at::Tensor& x, std::int64_t ch_axis) {
    const at::Tensor values = x.detach().to(at::kFloat);
    if (ch_axis < 0) return at::aminmax(values);
    return at::aminmax(at::flatten(values.transpose(ch_axis, 0), 1), 1);
}

// Nothing seen yet: inf / -inf per tensor (reset_min_max_vals), empty per channel.
inline bool first_batch(const at::Tensor& min_val, const at::Tensor& max_val, std::int64_t ch_axis) {
    return ch_axis < 0 ? is_unobserved(min_val, max_val) : min_val.numel() == 0;
}

// MinMaxObserver: the range of everything seen.
inline tensor_pair observe_min_max(const at::Tensor& x, const at::Tensor& min_val, const at::Tensor& max_val,
                                   std::int64_t ch_axis) {
    if (x.numel() == 0) return {min_val, max_val};
    auto [current_min, current_max] = batch_range(x, ch_axis);
    if (first_batch(min_val, max_val, ch_axis)) return {current_min, current_max};
    return {at::minimum(current_min, min_val), at::maximum(current_max, max_val)};
}

using observed_range = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// MinMaxObserver as its module calls it. A weight's observer sees the same parameter again on
// every calibration batch, and the range of a tensor already seen is already in min / max, so
// an observer of a parameter keeps the tensor it observed (a reference: its memory cannot go to
// another tensor meanwhile) and its version (every in-place write bumps it), and skips it while
// both match: the result is the same, without a pass over the weights per batch (10 % of an
// MLP's quantize time). Activations are new tensors every batch, and their observers keep none.
inline observed_range observe_min_max_once_per_version(const at::Tensor& x, const at::Tensor& min_val,
                                                       const at::Tensor& max_val, std::int64_t ch_axis,
                                                       bool observes_parameter, const at::Tensor& observed,
                                                       const at::Tensor& observed_version) {
    if (observes_parameter && x.is_same(observed) && x._version() == observed_version.item<std::int64_t>())
        return {min_val, max_val, observed, observed_version};
    auto [new_min, new_max] = observe_min_max(x, min_val, max_val, ch_axis);
    if (!observes_parameter) return {new_min, new_max, observed, observed_version};
    return {new_min, new_max, x, at::scalar_tensor(x._version(), at::kLong)};
}

// MovingAverageMinMaxObserver: the first batch sets the range, later ones move it by
// averaging_constant (float32 tensor arithmetic, as PyTorch's).
inline tensor_pair observe_moving_average(const at::Tensor& x, const at::Tensor& min_val, const at::Tensor& max_val,
                                          std::int64_t ch_axis, double averaging_constant) {
    if (x.numel() == 0) return {min_val, max_val};
    auto [current_min, current_max] = batch_range(x, ch_axis);
    if (first_batch(min_val, max_val, ch_axis)) return {current_min, current_max};
    return {at::add(min_val, at::mul(at::sub(current_min, min_val), averaging_constant)),
            at::add(max_val, at::mul(at::sub(current_max, max_val), averaging_constant))};
}

// versatil::math::choose_qparams, elementwise over 0-d (per tensor) or 1-d (per channel)
// min / max: 1-d float32 scales and int64 zero points, as PyTorch's calculate_qparams.
inline tensor_pair choose_qparams(const at::Tensor& min_val, const at::Tensor& max_val, std::int64_t quant_min,
                                  std::int64_t quant_max, bool symmetric, bool unsigned_dtype, double eps) {
    const at::Tensor mins = min_val.to(at::kFloat).contiguous().reshape({-1});
    const at::Tensor maxs = max_val.to(at::kFloat).contiguous().reshape({-1});
    const std::int64_t count = mins.numel();
    at::Tensor scale = at::empty({count}, at::kFloat);
    at::Tensor zero_point = at::empty({count}, at::kLong);
    const math::quant_range range{static_cast<std::int32_t>(quant_min), static_cast<std::int32_t>(quant_max)};
    for (std::int64_t i = 0; i < count; ++i) {
        const math::quantization_params params =
            math::choose_qparams(mins.data_ptr<float>()[i], maxs.data_ptr<float>()[i], range, symmetric, unsigned_dtype,
                                 static_cast<float>(eps));
        scale.data_ptr<float>()[i] = params.scale;
        zero_point.data_ptr<std::int64_t>()[i] = params.zero_point;
    }
    return {scale, zero_point};
}

// ---- HistogramObserver (PyTorch 1.13, with the histc range taken as floats, as PyTorch 2.0) ----

namespace detail {

// ATen's bin arithmetic for one value, on the grid of `bins` equal bins from leftmost to
// rightmost: (value - leftmost) * bins / width in float32, the last bin closed on the right.
// Values outside the grid (NaN included) get `bins`, a bin past the end that is not counted.
// Written so that a loop over values vectorizes even under the default -ftrapping-math, where
// GCC will not turn a float select (`?:`, std::min) into a blend: the choices are integer
// masks instead. The division per value is most of the cost; packed, it costs a fraction.
struct grid {
    float leftmost;
    float rightmost;
    float bin_count;
    std::int32_t bins;

#if defined(__GNUC__)
    __attribute__((always_inline))
#endif
    [[nodiscard]] std::int32_t bin_of(float value) const {
        const std::int32_t inside =
            static_cast<std::int32_t>(value >= leftmost) & static_cast<std::int32_t>(value <= rightmost);
        const std::int32_t keep = -inside;  // all ones where inside
        // Outside values are binned as leftmost, which keeps the conversion to int in range.
        const auto placed = std::bit_cast<float>((std::bit_cast<std::int32_t>(value) & keep) |
                                                 (std::bit_cast<std::int32_t>(leftmost) & ~keep));
        auto bin = static_cast<std::int32_t>((placed - leftmost) * bin_count / (rightmost - leftmost));
        bin -= static_cast<std::int32_t>(bin == bins);  // the last bin includes its right edge
        return bin + (bins - bin) * (1 - inside);
    }
};

inline constexpr std::int64_t block = 1024;  // values binned at a time: a fixed count the compiler vectorizes at -O2

// Bins every value of a full block into `out`; returns how many values are NaN (then the
// caller hands the whole input to ATen, which counts NaN its own way). The grid is a copy and
// the pointers restrict: the loop vectorizes only when the compiler needs no aliasing check.
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
inline int bin_block(const grid grid, const float* __restrict values, std::int32_t* __restrict out) {
    int nans = 0;
    for (std::int64_t i = 0; i < block; ++i) {
        nans += static_cast<int>(values[i] != values[i]);
        out[i] = grid.bin_of(values[i]);
    }
    return nans;
}

#if defined(__GNUC__) && defined(__x86_64__)
// The same loop compiled for AVX2 (8 values a step, not SSE2's 4), chosen at run time: on the
// benchmark machine histc takes 0.59 ns a value this way against 0.87 (a ReLU output of 400k
// values into 2048 bins). The bins are the same: AVX2 brings no fused multiply-add (that is the
// separate FMA feature), and packed division and truncation round as the scalar ones do.
__attribute__((target("avx2"))) inline int bin_block_avx2(const grid grid, const float* __restrict values,
                                                           std::int32_t* __restrict out) {
    return bin_block(grid, values, out);
}
#endif

inline int full_block_bins(const grid& grid, const float* values, std::array<std::int32_t, block>& out) {
#if defined(__GNUC__) && defined(__x86_64__)
    static const bool avx2 = __builtin_cpu_supports("avx2");
    if (avx2) return bin_block_avx2(grid, values, out.data());
#endif
    return bin_block(grid, values, out.data());
}

}  // namespace detail

// torch.histc(values, bins, min, max) for float32 values, as ATen's CPU kernel computes it
// (the same outer edges, the same float32 arithmetic per value, the same bin for every value)
// at a fraction of its time: ATen's general histogram kernel costs ~6 ns a value, which made
// it the observers' largest cost. Counted exactly in integers, which equals ATen's float32
// counts while no bin can pass 2^24 (fewer values than that); larger inputs, ranges ATen
// rejects and NaN (which 1.13's kernel counts in the first bin) go to ATen itself.
inline at::Tensor histc(const at::Tensor& values, std::int64_t bins, float min, float max) {
    double left = min;
    double right = max;
    if (left == right && values.numel() > 0) {
        auto [low, high] = at::aminmax(values);
        left = low.item<double>();
        right = high.item<double>();
    }
    if (left == right) {
        left -= 1;
        right += 1;
    }
    constexpr std::int64_t exact_float_counts = std::int64_t{1} << 24;
    // Where width * bins overflows float32, ATen's own arithmetic makes no bin (inf / inf).
    const float scaled_width = (static_cast<float>(right) - static_cast<float>(left)) * static_cast<float>(bins);
    if (!std::isfinite(scaled_width) || !(left < right) || values.numel() >= exact_float_counts ||
        values.scalar_type() != at::kFloat || bins >= std::numeric_limits<std::int32_t>::max())
        return at::histc(values, bins, min, max);
    // The edges are linspace(left, right, bins + 1) in float32: its ends are the ends exactly.
    const detail::grid grid{static_cast<float>(left), static_cast<float>(right), static_cast<float>(bins),
                                  static_cast<std::int32_t>(bins)};
    const at::Tensor contiguous = values.contiguous();
    const float* data = contiguous.data_ptr<float>();
    const std::int64_t size = contiguous.numel();
    // Counted exactly in int32 (fewer than 2^24 values); the extra last bin takes the values
    // outside the grid. Four sets of counters, one per value of every four, summed at the end:
    // with one set, a run of values in one bin (a ReLU's zeros, half of its output) is a chain of
    // increments of one counter, each waiting for the last. Measured on 800k ReLU outputs into
    // 2048 bins: 1.43 ns a value with one set, 0.73 with four (Gaussian values: 0.7 either way).
    constexpr std::size_t sets = 4;
    const std::size_t stride = static_cast<std::size_t>(bins) + 1;
    std::vector<std::int32_t> counts(sets * stride, 0);
    const auto count = [&](const std::array<std::int32_t, detail::block>& bins_of_values, std::int64_t n) {
        const auto bin = [&](std::int64_t i) {
            return static_cast<std::size_t>(bins_of_values[static_cast<std::size_t>(i)]);
        };
        std::int64_t i = 0;
        for (; i + static_cast<std::int64_t>(sets) <= n; i += static_cast<std::int64_t>(sets)) {
            ++counts[bin(i)];
            ++counts[stride + bin(i + 1)];
            ++counts[2 * stride + bin(i + 2)];
            ++counts[3 * stride + bin(i + 3)];
        }
        for (; i < n; ++i) ++counts[bin(i)];
    };
    std::array<std::int32_t, detail::block> bins_of_block{};
    std::int64_t start = 0;
    for (; start + detail::block <= size; start += detail::block) {
        if (detail::full_block_bins(grid, data + start, bins_of_block) > 0) return at::histc(values, bins, min, max);
        count(bins_of_block, detail::block);
    }
    for (std::int64_t i = start; i < size; ++i) {
        if (std::isnan(data[i])) return at::histc(values, bins, min, max);
        bins_of_block[static_cast<std::size_t>(i - start)] = grid.bin_of(data[i]);
    }
    count(bins_of_block, size - start);
    at::Tensor histogram = at::empty({bins}, at::kFloat);
    float* out = histogram.data_ptr<float>();
    for (std::size_t b = 0; b < static_cast<std::size_t>(bins); ++b)
        out[b] = static_cast<float>(counts[b] + counts[stride + b] + counts[2 * stride + b] + counts[3 * stride + b]);
    return histogram;
}

// `sum` + `value` added `times` times, one addition at a time in double as a cumulative sum
// does, or in one step where that gives the same double: when every partial sum is exact.
// They all are multiples of the lowest set bit of `sum` or of `value`, and are exact while
// below 2^53 of that unit (checked with a factor 2 to spare for the rounding of the check).
// Adding +0.0 changes no sum that is not -0.0, and a cumulative sum from +0.0 never is.
inline double add_repeatedly(double sum, double value, std::int64_t times) {
    if (value == 0.0 || times <= 0) return sum;
    const auto lowest_set_bit = [](double x) {
        int exponent = 0;
        const auto mantissa = static_cast<std::uint64_t>(std::ldexp(std::frexp(x < 0 ? -x : x, &exponent), 53));
        return exponent - 53 + std::countr_zero(mantissa);
    };
    if (std::isfinite(sum) && std::isfinite(value)) {
        const int unit = sum == 0.0 ? lowest_set_bit(value) : std::min(lowest_set_bit(sum), lowest_set_bit(value));
        const double bound = std::fabs(sum) + std::fabs(value) * static_cast<double>(times);
        if (bound < std::ldexp(1.0, 52 + unit)) return sum + value * static_cast<double>(times);
    }
    for (std::int64_t i = 0; i < times; ++i) sum += value;
    return sum;
}

// The old histogram placed on the combined range's grid (_combine_histograms): each old bin
// spread evenly over `upsample_rate` fine bins starting at fine bin `start_idx`, summed in
// double over every `downsample_rate` fine bins, and added to `histogram` (the batch's, on the
// combined range). PyTorch materialises the nbins * downsample_rate fine bins and takes a
// cumulative sum in double; that sum is sequential, so this adds the same values in the same
// order, a run of fine bins from one old bin at a time (add_repeatedly): 2048 x 128 dependent
// additions per call were most of an MLP's calibration.
inline at::Tensor combine_histograms(const at::Tensor& histogram, const at::Tensor& old_histogram,
                                     std::int64_t upsample_rate, std::int64_t downsample_rate, std::int64_t start_idx) {
    const std::int64_t bins = histogram.numel();
    TORCH_CHECK(start_idx >= 0 && start_idx + bins * upsample_rate <= bins * downsample_rate,
                "versatil::observe_histogram: the old histogram does not fit the combined range");
    const at::Tensor old = old_histogram.contiguous();
    const float* old_bins = old.data_ptr<float>();
    at::Tensor combined = histogram.clone();
    float* out = combined.data_ptr<float>();
    double sum = 0.0;
    double previous_integral = 0.0;
    std::int64_t next = start_idx;  // the first fine bin not yet added
    const std::int64_t filled_end = start_idx + bins * upsample_rate;
    for (std::int64_t bin = 0; bin < bins; ++bin) {
        // The cumulative sum at the last fine bin of this bin of the combined histogram.
        const std::int64_t last = std::min((bin + 1) * downsample_rate, filled_end);
        while (next < last) {
            const std::int64_t old_bin = (next - start_idx) / upsample_rate;
            const std::int64_t run_end = std::min(last, start_idx + (old_bin + 1) * upsample_rate);
            sum = add_repeatedly(sum, static_cast<double>(old_bins[old_bin]), run_end - next);
            next = run_end;
        }
        // shifted_integral_histogram holds the previous integral in float32.
        const double shifted = bin == 0 ? 0.0 : static_cast<double>(static_cast<float>(previous_integral));
        const double interpolated = (sum - shifted) / static_cast<double>(upsample_rate);
        out[bin] = out[bin] + static_cast<float>(interpolated);
        previous_integral = sum;
    }
    return combined;
}

inline tensor_pair histogram_range_first_batch(const at::Tensor& values, std::int64_t bins, at::Tensor& histogram) {
    auto [new_min, new_max] = at::aminmax(values);
    histogram = histc(values, bins, new_min.item<float>(), new_max.item<float>());
    return {new_min, new_max};
}

// HistogramObserver.forward: the running range and a histogram of `bins` bins over it. When a
// batch widens the range, the grid is widened (only at the max, so a one-sided distribution
// keeps its min) to a multiple of the old bin width and the old histogram is resampled on it.
inline std::tuple<at::Tensor, at::Tensor, at::Tensor> observe_histogram(const at::Tensor& x, const at::Tensor& min_val,
                                                                        const at::Tensor& max_val,
                                                                        const at::Tensor& histogram,
                                                                        std::int64_t upsample_rate) {
    if (x.numel() == 0) return {min_val, max_val, histogram};
    const at::Tensor values = x.detach().to(at::kFloat);
    const std::int64_t bins = histogram.numel();
    const float old_min = min_val.item<float>();
    const float old_max = max_val.item<float>();
    at::Tensor new_histogram;
    if (is_unobserved(min_val, max_val) || old_min == old_max) {
        auto [new_min, new_max] = histogram_range_first_batch(values, bins, new_histogram);
        return {new_min, new_max, new_histogram};
    }
    auto [batch_min, batch_max] = at::aminmax(values);
    const at::Tensor combined_min_t = at::minimum(batch_min, min_val);
    const at::Tensor combined_max_t = at::maximum(batch_max, max_val);
    const float combined_min = combined_min_t.item<float>();
    float combined_max = combined_max_t.item<float>();
    // The width overflows float32: no bin grid exists (PyTorch would compute NaN bins). Keep
    // the range; the qparams then use it as is.
    if (std::isinf(combined_max - combined_min)) return {combined_min_t, combined_max_t, histogram};
    // _adjust_min_max, in float32 like its 0-d tensors:
    // (combined_max - combined_min) / (downsample_rate * bins) = (max - min) / (upsample_rate * bins).
    const float hist_bin_width = (old_max - old_min) / static_cast<float>(bins * upsample_rate);
    const float grid = rounded(hist_bin_width * static_cast<float>(bins));
    const float combined_width = combined_max - combined_min;
    const auto downsample_rate = static_cast<std::int64_t>(std::ceil(combined_width / grid));
    const float extension = rounded(grid * static_cast<float>(downsample_rate)) - combined_width;
    combined_max = combined_max + extension;
    const auto start_idx = static_cast<std::int64_t>(std::nearbyint((old_min - combined_min) / hist_bin_width));
    new_histogram = histc(values, bins, combined_min, combined_max);
    if (combined_min == old_min && combined_max == old_max)
        new_histogram.add_(histogram);
    else
        new_histogram = combine_histograms(new_histogram, histogram, upsample_rate, downsample_rate, start_idx);
    return {combined_min_t, at::full({}, combined_max, at::kFloat), new_histogram};
}

// floor(a / b) as ATen computes torch.div(a, b, rounding_mode='floor') for floats.
inline float floor_divide(float a, float b) {
    if (b == 0.0F) return a / b;
    const float mod = std::fmod(a, b);
    float div = (a - mod) / b;
    if (mod != 0.0F && (b < 0.0F) != (mod < 0.0F)) div -= 1.0F;
    if (div == 0.0F) return std::copysign(0.0F, a / b);
    float floordiv = std::floor(div);
    if (div - floordiv > 0.5F) floordiv += 1.0F;
    return floordiv;
}

inline float clamp_bin(float value, float last_bin) {
    if (value < 0.0F) return 0.0F;
    return value > last_bin ? last_bin : value;
}

// clamp_bin(floor_divide(a, b)) for b > 0, with floor_divide's fmod only where it can matter.
// floor_divide gives the floor of the exact quotient. Rounding is monotonic and every integer
// up to 2^24 is a float, so a quotient strictly between two integers rounds to a float between
// or onto them: where the rounded quotient q is no integer, floor(q) is that floor. Only a q
// on an integer (a bin edge on a destination edge, or any q from 2^24 up) takes floor_divide
// itself. The search's per-bin errors were ~70 % fmod before.
inline float floor_bin(float a, float b, float last_bin) {
    const float q = a / b;
    const float below = std::floor(q);
    if (below != q) return clamp_bin(below, last_bin);
    return clamp_bin(floor_divide(a, b), last_bin);
}

// density * integral of x^2 from delta_begin to delta_end (_get_norm), in float32.
inline float cube_norm(float delta_begin, float delta_end, float density) {
    const float end_cube = rounded(rounded(delta_end * delta_end) * delta_end);
    const float begin_cube = rounded(rounded(delta_begin * delta_begin) * delta_begin);
    return rounded(density * ((end_cube - begin_cube) / 3.0F));
}

// The state of one _non_linear_param_search: the histogram, its cumulative counts and
// scratch space for the per-bin errors.
struct histogram_search {
    const float* histogram;
    std::int64_t bins;
    double min_val;
    double max_val;
    std::int64_t dst_nbins;
    at::Tensor norms;  // float32 [bins], summed by ATen as PyTorch sums it

    // _compute_quantization_error: the L2 error of quantizing the histogram's bins
    // [next_start_bin, next_end_bin] onto dst_nbins levels (float32 elementwise, then ATen's sum).
    double quantization_error(std::int64_t next_start_bin, std::int64_t next_end_bin) {
        const double bin_width = (max_val - min_val) / static_cast<double>(bins);
        const double dst_bin_width =
            bin_width * static_cast<double>(next_end_bin - next_start_bin + 1) / static_cast<double>(dst_nbins);
        if (dst_bin_width == 0.0) return 0.0;
        const auto bin_width_f = static_cast<float>(bin_width);
        const auto dst_bin_width_f = static_cast<float>(dst_bin_width);
        const auto half_dst_f = static_cast<float>(dst_bin_width / 2);
        const auto last_bin = static_cast<float>(dst_nbins - 1);
        // The middle bins' error, one 0-d tensor in PyTorch.
        const float middle_cube = rounded(rounded(half_dst_f * half_dst_f) * half_dst_f);
        const float minus_half = -half_dst_f;
        const float middle_begin_cube = rounded(rounded(minus_half * minus_half) * minus_half);
        const float middle = (middle_cube - middle_begin_cube) / 3.0F;
        float* norm = norms.data_ptr<float>();
        // An empty bin's error is density 0 times finite terms: +0 once summed into `value`
        // (0 + -0 is +0). Skipped, unless a term could be infinite (0 * inf is NaN in PyTorch):
        // every delta is within the histogram's span plus a destination bin, cubed below.
        const double reach = bin_width * static_cast<double>(bins + 1) + dst_bin_width;
        const bool empty_bins_are_zero = reach * reach * reach < 0x1p100;
        for (std::int64_t i = 0; i < bins; ++i) {
            if (empty_bins_are_zero && histogram[i] == 0.0F) {
                norm[i] = 0.0F;
                continue;
            }
            const float src_bin_begin = rounded(static_cast<float>(i - next_start_bin) * bin_width_f);
            const float src_bin_end = src_bin_begin + bin_width_f;
            const float dst_bin_of_begin = floor_bin(src_bin_begin, dst_bin_width_f, last_bin);
            const float dst_bin_of_begin_center = (dst_bin_of_begin + 0.5F) * dst_bin_width_f;
            const float dst_bin_of_end = floor_bin(src_bin_end, dst_bin_width_f, last_bin);
            const float density = histogram[i] / bin_width_f;
            float value = 0.0F + cube_norm(src_bin_begin - dst_bin_of_begin_center, half_dst_f, density);
            value = value + rounded((dst_bin_of_end - dst_bin_of_begin - 1.0F) * rounded(density * middle));
            const float dst_bin_of_end_center = rounded(dst_bin_of_end * dst_bin_width_f) + half_dst_f;
            value = value + cube_norm(minus_half, src_bin_end - dst_bin_of_end_center, density);
            norm[i] = value;
        }
        return static_cast<double>(norms.sum().item<float>());
    }
};

// _non_linear_param_search: narrows [min, max] from both ends by quantile steps while the L2
// quantization error of the histogram drops (caffe2's NormMinimization). Returns the range.
inline tensor_pair histogram_range(const at::Tensor& min_val, const at::Tensor& max_val, const at::Tensor& histogram,
                                   std::int64_t dst_nbins) {
    const at::Tensor counts = histogram.contiguous();
    const std::int64_t bins = counts.numel();
    const float min_f = min_val.item<float>();
    const float bin_width = (max_val.item<float>() - min_f) / static_cast<float>(bins);
    const auto total = static_cast<double>(counts.sum().item<float>());
    const at::Tensor cumulative_t = at::cumsum(counts, 0);
    const float* cumulative = cumulative_t.data_ptr<float>();
    histogram_search search{counts.data_ptr<float>(), bins, static_cast<double>(min_f),
                            static_cast<double>(max_val.item<float>()), dst_nbins, at::empty({bins}, at::kFloat)};
    constexpr double stepsize = 1e-5;
    double alpha = 0.0;
    double beta = 1.0;
    std::int64_t start_bin = 0;
    std::int64_t end_bin = bins - 1;
    double norm_min = std::numeric_limits<double>::infinity();
    while (alpha < beta) {
        const double next_alpha = alpha + stepsize;
        const double next_beta = beta - stepsize;
        // cumulative[l] < next_alpha * total compares in float32 (the scalar is cast).
        const auto alpha_count = static_cast<float>(next_alpha * total);
        const auto beta_count = static_cast<float>(next_beta * total);
        std::int64_t l = start_bin;
        std::int64_t r = end_bin;
        while (l < end_bin && cumulative[l] < alpha_count) ++l;
        while (r > start_bin && cumulative[r] > beta_count) --r;
        std::int64_t next_start_bin = start_bin;
        std::int64_t next_end_bin = end_bin;
        if ((l - start_bin) > (end_bin - r)) {
            next_start_bin = l;
            alpha = next_alpha;
        } else {
            next_end_bin = r;
            beta = next_beta;
        }
        if (next_start_bin == start_bin && next_end_bin == end_bin) continue;
        const double norm = search.quantization_error(next_start_bin, next_end_bin);
        if (norm > norm_min) break;
        norm_min = norm;
        start_bin = next_start_bin;
        end_bin = next_end_bin;
    }
    return {at::full({}, min_f + rounded(bin_width * static_cast<float>(start_bin)), at::kFloat),
            at::full({}, min_f + rounded(bin_width * static_cast<float>(end_bin + 1)), at::kFloat)};
}

// HistogramObserver.calculate_qparams: the searched range's qparams; the running range's when
// there is nothing to search (one value seen, or a width beyond float32).
inline tensor_pair histogram_qparams(const at::Tensor& min_val, const at::Tensor& max_val, const at::Tensor& histogram,
                                     std::int64_t dst_nbins, std::int64_t quant_min, std::int64_t quant_max,
                                     bool symmetric, bool unsigned_dtype, double eps) {
    if (is_unobserved(min_val, max_val)) return {at::ones({1}, at::kFloat), at::zeros({1}, at::kLong)};
    const float min_f = min_val.item<float>();
    const float max_f = max_val.item<float>();
    // One value seen: the search would walk all 10^5 steps with a zero-width bin and end at
    // [min, max] anyway.
    if (min_f == max_f || std::isinf(max_f - min_f))
        return choose_qparams(min_val, max_val, quant_min, quant_max, symmetric, unsigned_dtype, eps);
    auto [new_min, new_max] = histogram_range(min_val, max_val, histogram, dst_nbins);
    return choose_qparams(new_min, new_max, quant_min, quant_max, symmetric, unsigned_dtype, eps);
}

}  // namespace observer_ops

// Registers the operators with LibTorch, once per process, before the first observer class is
// compiled (observers.hpp calls it). A function-local static, so translation units that all
// include this header register once; a copy of it in another shared library finds the
// operators already there. The library object is never destroyed: the operators stay valid
// until the process ends, whatever order static destructors run in.
inline void register_observer_ops() {
    static const bool registered = [] {
        if (c10::Dispatcher::singleton().findSchema({"versatil::observe_histogram", ""})) return true;
        auto* library = new ::torch::Library(::torch::Library::FRAGMENT, "versatil", c10::nullopt, __FILE__, __LINE__);
        const auto def = [library](const char* schema, auto function) {
            library->def(::torch::schema(schema, c10::AliasAnalysisKind::CONSERVATIVE), function);
        };
        def("observe_min_max(Tensor x, Tensor min_val, Tensor max_val, int ch_axis, bool observes_parameter, "
            "Tensor observed, Tensor observed_version) -> (Tensor, Tensor, Tensor, Tensor)",
            &observer_ops::observe_min_max_once_per_version);
        def("observe_moving_average(Tensor x, Tensor min_val, Tensor max_val, int ch_axis, float averaging_constant) "
            "-> (Tensor, Tensor)",
            &observer_ops::observe_moving_average);
        def("observe_histogram(Tensor x, Tensor min_val, Tensor max_val, Tensor histogram, int upsample_rate) "
            "-> (Tensor, Tensor, Tensor)",
            &observer_ops::observe_histogram);
        def("choose_qparams(Tensor min_val, Tensor max_val, int quant_min, int quant_max, bool symmetric, "
            "bool unsigned_dtype, float eps) -> (Tensor, Tensor)",
            &observer_ops::choose_qparams);
        def("histogram_qparams(Tensor min_val, Tensor max_val, Tensor histogram, int dst_nbins, int quant_min, "
            "int quant_max, bool symmetric, bool unsigned_dtype, float eps) -> (Tensor, Tensor)",
            &observer_ops::histogram_qparams);
        return true;
    }();
    (void)registered;
}

}  // namespace versatil::libtorch
