// The calibration methods that read a histogram (core/calibration.hpp) as compiled LibTorch
// operators, next to PyTorch's L2 search in observer_ops.hpp: percentile (the quantiles that
// leave 0.01 % of the values out at each end, TensorRT's 99.99), entropy (TensorRT's KL
// divergence search) and auto (per tensor, the candidate range with the lowest squared
// quantization error on a sample of the observed values). The observers of these kinds
// (observers.hpp) keep the histogram exactly as HistogramObserver does; only the range chosen
// from it differs.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>
#include <torch/script.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>
#include <vector>

#include "versatil/libtorch/pipeline/observer_ops.hpp"

namespace versatil::libtorch {

namespace observer_ops {

// A histogram of `counts.size()` equal bins over [min, max].
struct histogram_data {
    std::vector<double> counts;
    double min = 0.0;
    double max = 0.0;
    double total = 0.0;

    histogram_data(const at::Tensor& histogram, float min_val, float max_val) : min(min_val), max(max_val) {
        const at::Tensor values = histogram.to(at::kDouble).contiguous();
        counts.assign(values.data_ptr<double>(), values.data_ptr<double>() + values.numel());
        for (const double count : counts) total += count;
    }
    [[nodiscard]] std::int64_t bins() const { return static_cast<std::int64_t>(counts.size()); }
    [[nodiscard]] double width() const { return (max - min) / static_cast<double>(counts.size()); }
};

struct value_range {
    double min;
    double max;
};

// The quantiles `fraction` and 1 - fraction, on bin edges: the lowest edge below which at most
// `fraction` of the values lie, the highest above which at most `fraction` lie.
inline value_range percentile_range(const histogram_data& h, double fraction = 1e-4) {
    const double tail = fraction * h.total;
    double below = 0.0;
    std::int64_t low = 0;
    while (low < h.bins() - 1 && below + h.counts[static_cast<std::size_t>(low)] <= tail)
        below += h.counts[static_cast<std::size_t>(low++)];
    double above = 0.0;
    std::int64_t high = h.bins() - 1;
    while (high > low && above + h.counts[static_cast<std::size_t>(high)] <= tail)
        above += h.counts[static_cast<std::size_t>(high--)];
    return {h.min + h.width() * static_cast<double>(low), h.min + h.width() * static_cast<double>(high + 1)};
}

// The histogram of |x|: `bins` bins over [0, max |x|], each source bin's count spread over the
// bins its |x| interval covers in proportion to the overlap (values uniform within a bin).
inline std::vector<double> absolute_histogram(const histogram_data& h, double amax) {
    const std::int64_t bins = h.bins();
    std::vector<double> folded(static_cast<std::size_t>(bins), 0.0);
    const double width = amax / static_cast<double>(bins);
    const auto spread = [&](double begin, double end, double count) {  // 0 <= begin < end <= amax
        const auto first = std::min(bins - 1, static_cast<std::int64_t>(begin / width));
        for (std::int64_t b = first; b < bins; ++b) {
            const double lo = std::max(begin, width * static_cast<double>(b));
            const double hi = std::min(end, width * static_cast<double>(b + 1));
            if (hi <= lo && b > first) break;
            folded[static_cast<std::size_t>(b)] += count * std::max(0.0, hi - lo) / (end - begin);
        }
    };
    for (std::int64_t k = 0; k < bins; ++k) {
        const double count = h.counts[static_cast<std::size_t>(k)];
        if (count == 0.0) continue;
        const double begin = h.min + h.width() * static_cast<double>(k);
        const double end = begin + h.width();
        if (begin >= 0.0)
            spread(begin, end, count);
        else if (end <= 0.0)
            spread(-end, -begin, count);
        else {  // straddles zero: each side its share
            spread(0.0, end, count * end / (end - begin));
            spread(0.0, -begin, count * -begin / (end - begin));
        }
    }
    return folded;
}

// TensorRT's entropy calibration (pytorch-quantization's _compute_amax_entropy, stride 1): on
// the histogram of |x|, for each candidate clip bin i from `levels` on, the reference P is the
// first i bins with everything beyond added to the last, Q is P's first i bins merged into
// `levels` levels and spread back over their non-empty bins; the clip with the smallest KL(P||Q)
// wins (the last one on ties). `levels` is the quantized levels on one side of zero: half the
// range when values of both signs are seen, all of it for a one-signed tensor. Like TensorRT, the
// first bin's count is replaced by the second's, so a spike of zeros (ReLU) does not drive the
// choice. The range is [-amax, amax] within [min, max].
inline value_range entropy_range(const histogram_data& h, std::int64_t quant_levels) {
    const double amax_seen = std::max(std::abs(h.min), std::abs(h.max));
    const bool two_sided = h.min < 0.0 && h.max > 0.0;
    const std::int64_t levels = std::max<std::int64_t>(2, two_sided ? quant_levels / 2 : quant_levels);
    std::vector<double> bins = absolute_histogram(h, amax_seen);
    const auto count = static_cast<std::int64_t>(bins.size());
    if (count <= levels || amax_seen == 0.0) return {h.min, h.max};
    bins[0] = bins[1];
    std::vector<double> suffix(static_cast<std::size_t>(count) + 1, 0.0);  // sum of bins[i:]
    for (std::int64_t i = count - 1; i >= 0; --i)
        suffix[static_cast<std::size_t>(i)] = suffix[static_cast<std::size_t>(i + 1)] + bins[static_cast<std::size_t>(i)];
    double best = std::numeric_limits<double>::infinity();
    std::int64_t best_i = count;
    std::vector<double> level_sum(static_cast<std::size_t>(levels));
    std::vector<std::int64_t> level_nonzero(static_cast<std::size_t>(levels));
    std::vector<std::int64_t> level_of(static_cast<std::size_t>(count));
    for (std::int64_t i = levels; i <= count; ++i) {
        std::fill(level_sum.begin(), level_sum.end(), 0.0);
        std::fill(level_nonzero.begin(), level_nonzero.end(), 0);
        // np.digitize(range(i), linspace(0, i, levels + 1)) - 1: bin j's level.
        for (std::int64_t j = 0; j < i; ++j) {
            const std::int64_t level = std::min(levels - 1, j * levels / i);
            level_of[static_cast<std::size_t>(j)] = level;
            if (bins[static_cast<std::size_t>(j)] != 0.0) {
                level_sum[static_cast<std::size_t>(level)] += bins[static_cast<std::size_t>(j)];
                ++level_nonzero[static_cast<std::size_t>(level)];
            }
        }
        const double outliers = suffix[static_cast<std::size_t>(i)];
        double q_total = 0.0;
        for (std::int64_t j = 0; j < i; ++j)
            if (bins[static_cast<std::size_t>(j)] != 0.0) {
                const auto level = static_cast<std::size_t>(level_of[static_cast<std::size_t>(j)]);
                q_total += level_sum[level] / static_cast<double>(level_nonzero[level]);
            }
        const double p_total = suffix[0];
        double divergence = 0.0;
        for (std::int64_t j = 0; j < i && std::isfinite(divergence); ++j) {
            const double p = bins[static_cast<std::size_t>(j)] + (j == i - 1 ? outliers : 0.0);
            if (p == 0.0) continue;
            double q = 0.0;
            if (bins[static_cast<std::size_t>(j)] != 0.0) {
                const auto level = static_cast<std::size_t>(level_of[static_cast<std::size_t>(j)]);
                q = level_sum[level] / static_cast<double>(level_nonzero[level]);
            }
            if (q == 0.0) {
                divergence = std::numeric_limits<double>::infinity();
                break;
            }
            const double p_norm = p / p_total;
            divergence += p_norm * std::log(p_norm / (q / q_total));
        }
        if (divergence <= best) {  // the last minimum, as TensorRT takes it
            best = divergence;
            best_i = i;
        }
    }
    const double amax = amax_seen * static_cast<double>(best_i) / static_cast<double>(count);
    return {std::max(h.min, -amax), std::min(h.max, amax)};
}

// What auto measures its candidates' errors on: a sample of the observed values (all of them
// while they fit), and, exactly, the `extreme_count` lowest and highest values with the count of
// all values. A sample alone misjudges clipping, whose error comes from a few values at the ends
// (1 in 25000 on a ReLU of the tests' CNN), and the histogram does too: its tails are resampled
// each time the range grows (by a quarter to four times the true count there, measured).
struct observed_values {
    at::Tensor samples;      // float32, 1-d
    std::int64_t rate = 1;   // one value in `rate` sampled; 1: all of them
    at::Tensor lowest;       // float32, 1-d, up to extreme_count values
    at::Tensor highest;
    std::int64_t count = 0;  // values seen
};

inline constexpr std::int64_t extreme_count = 8192;

// The mean squared error of quantizing the observed values with (scale, zero_point): on every
// value when all were sampled; else exactly on the lowest and highest values, and on the sample's
// values between them, weighed by how many values lie between.
inline double quantization_error(const observed_values& observed, float scale, std::int64_t zero_point,
                                 std::int64_t quant_min, std::int64_t quant_max) {
    const auto squared_error = [&](double x) {
        const double q = std::clamp(std::nearbyint(x / scale) + static_cast<double>(zero_point),
                                    static_cast<double>(quant_min), static_cast<double>(quant_max));
        const double difference = x - (q - static_cast<double>(zero_point)) * scale;
        return difference * difference;
    };
    const auto sum = [&](const at::Tensor& values, double low, double high, std::int64_t* counted) {
        const at::Tensor contiguous = values.contiguous();
        const float* data = contiguous.data_ptr<float>();
        double total = 0.0;
        for (std::int64_t i = 0; i < contiguous.numel(); ++i) {
            if (data[i] < low || data[i] > high) continue;
            total += squared_error(data[i]);
            ++*counted;
        }
        return total;
    };
    constexpr double infinity = std::numeric_limits<double>::infinity();
    std::int64_t counted = 0;
    if (observed.rate == 1)
        return sum(observed.samples, -infinity, infinity, &counted) / static_cast<double>(std::max<std::int64_t>(counted, 1));
    std::int64_t ends = 0;
    const double extremes = sum(observed.lowest, -infinity, infinity, &ends) + sum(observed.highest, -infinity, infinity, &ends);
    const double low = observed.lowest.numel() ? observed.lowest.max().item<double>() : -infinity;
    const double high = observed.highest.numel() ? observed.highest.min().item<double>() : infinity;
    const double middle = sum(observed.samples, low, high, &counted);
    const auto between = static_cast<double>(std::max<std::int64_t>(observed.count - ends, 0));
    return (extremes + (counted ? middle / static_cast<double>(counted) * between : 0.0)) /
           static_cast<double>(std::max<std::int64_t>(observed.count, 1));
}

// At most this many observed values (1 MiB) are kept for auto's error measure: every value
// while they fit, so that small tensors are measured exactly.
inline constexpr std::int64_t auto_sample_capacity = std::int64_t{1} << 18;

// A sample of everything observed, one value in `rate` of each batch: all of them at rate 1,
// else drawn at random positions (a fixed seed, so a calibration repeats; random, because a
// stride would pick the same pixels of every channel plane). Before the sample would outgrow its
// capacity, a random half of it is dropped and the rate doubles, so every batch is sampled alike.
inline tensor_pair add_to_sample(const at::Tensor& x, const at::Tensor& samples, const at::Tensor& rate) {
    std::int64_t step = std::max<std::int64_t>(1, rate.item<std::int64_t>());
    const at::Tensor values = x.detach().to(at::kFloat).reshape({-1});
    const std::int64_t size = values.numel();
    auto generator = at::make_generator<at::CPUGeneratorImpl>(0x5eed0000ULL + static_cast<std::uint64_t>(samples.numel()));
    at::Tensor kept = samples;
    while (kept.numel() + (size + step - 1) / step > auto_sample_capacity) {
        kept = kept.index_select(0, at::randperm(kept.numel(), generator, at::kLong).slice(0, 0, kept.numel() / 2));
        step *= 2;
    }
    const at::Tensor drawn =
        step == 1 ? values : values.index_select(0, at::randint(size, {(size + step - 1) / step}, generator, at::kLong));
    return {at::cat({kept, drawn}).contiguous(), at::full({}, step, at::kLong)};
}

// The methods a histogram observer can choose a range with (method argument of the operators).
enum class histogram_method : std::int64_t { percentile = 0, entropy = 1 };

inline tensor_pair range_tensors(value_range range) {
    return {at::full({}, static_cast<float>(range.min), at::kFloat), at::full({}, static_cast<float>(range.max), at::kFloat)};
}

// Nothing to search: unobserved, one value seen, or a range too wide for float32 bins; the
// same answers as histogram_qparams.
inline bool nothing_to_search(const at::Tensor& min_val, const at::Tensor& max_val) {
    const float min_f = min_val.item<float>();
    const float max_f = max_val.item<float>();
    return is_unobserved(min_val, max_val) || min_f == max_f || std::isinf(max_f - min_f);
}

inline tensor_pair unsearched_qparams(const at::Tensor& min_val, const at::Tensor& max_val, std::int64_t quant_min,
                                      std::int64_t quant_max, bool symmetric, bool unsigned_dtype, double eps) {
    if (is_unobserved(min_val, max_val)) return {at::ones({1}, at::kFloat), at::zeros({1}, at::kLong)};
    return choose_qparams(min_val, max_val, quant_min, quant_max, symmetric, unsigned_dtype, eps);
}

// calculate_qparams of the percentile and entropy observers.
inline tensor_pair histogram_method_qparams(const at::Tensor& min_val, const at::Tensor& max_val,
                                            const at::Tensor& histogram, std::int64_t method, std::int64_t quant_min,
                                            std::int64_t quant_max, bool symmetric, bool unsigned_dtype, double eps) {
    if (nothing_to_search(min_val, max_val))
        return unsearched_qparams(min_val, max_val, quant_min, quant_max, symmetric, unsigned_dtype, eps);
    const histogram_data h(histogram, min_val.item<float>(), max_val.item<float>());
    const value_range range = method == static_cast<std::int64_t>(histogram_method::percentile)
                                  ? percentile_range(h)
                                  : entropy_range(h, quant_max - quant_min + 1);
    auto [new_min, new_max] = range_tensors(range);
    return choose_qparams(new_min, new_max, quant_min, quant_max, symmetric, unsigned_dtype, eps);
}

// The auto observer's candidates, each as qparams, in the order auto prefers them on equal
// error: the histogram search (the backends' default), min-max, the moving average, percentile,
// entropy. An unobserved moving average (no batch seen) is left out.
struct candidate {
    const char* method;
    at::Tensor scale;
    at::Tensor zero_point;
    double error;
};

inline std::vector<candidate> auto_candidates(const at::Tensor& min_val, const at::Tensor& max_val,
                                              const at::Tensor& histogram, const at::Tensor& seen_min,
                                              const at::Tensor& seen_max, const at::Tensor& moving_min,
                                              const at::Tensor& moving_max, const observed_values& observed,
                                              std::int64_t dst_nbins,
                                              std::int64_t quant_min, std::int64_t quant_max, bool symmetric,
                                              bool unsigned_dtype, double eps) {
    const histogram_data h(histogram, min_val.item<float>(), max_val.item<float>());
    std::vector<candidate> candidates;
    const auto add = [&](const char* method, const at::Tensor& low, const at::Tensor& high) {
        auto [scale, zero_point] = choose_qparams(low, high, quant_min, quant_max, symmetric, unsigned_dtype, eps);
        const double error =
            quantization_error(observed, scale.item<float>(), zero_point.item<std::int64_t>(), quant_min, quant_max);
        candidates.push_back({method, scale, zero_point, error});
    };
    auto [searched_min, searched_max] = histogram_range(min_val, max_val, histogram, dst_nbins);
    add("histogram", searched_min, searched_max);
    add("minmax", seen_min, seen_max);  // min_val/max_val: the histogram's grid, widened at the max
    if (!is_unobserved(moving_min, moving_max)) add("moving_minmax", moving_min, moving_max);
    auto [percentile_min, percentile_max] = range_tensors(percentile_range(h));
    add("percentile", percentile_min, percentile_max);
    auto [entropy_min, entropy_max] = range_tensors(entropy_range(h, quant_max - quant_min + 1));
    add("entropy", entropy_min, entropy_max);
    return candidates;
}

// calculate_qparams of the auto observer: the candidate with the lowest error (the first on ties).
inline tensor_pair histogram_auto_qparams(const at::Tensor& min_val, const at::Tensor& max_val,
                                          const at::Tensor& histogram, const at::Tensor& seen_min, const at::Tensor& seen_max,
                                          const at::Tensor& moving_min, const at::Tensor& moving_max, const at::Tensor& samples,
                                          const at::Tensor& sample_rate, const at::Tensor& lowest, const at::Tensor& highest,
                                          const at::Tensor& seen_count, std::int64_t dst_nbins, std::int64_t quant_min,
                                          std::int64_t quant_max, bool symmetric, bool unsigned_dtype, double eps) {
    if (nothing_to_search(min_val, max_val))
        return unsearched_qparams(min_val, max_val, quant_min, quant_max, symmetric, unsigned_dtype, eps);
    const observed_values observed{samples, sample_rate.item<std::int64_t>(), lowest, highest,
                                   seen_count.item<std::int64_t>()};
    const std::vector<candidate> candidates =
        auto_candidates(min_val, max_val, histogram, seen_min, seen_max, moving_min, moving_max, observed, dst_nbins,
                        quant_min, quant_max, symmetric, unsigned_dtype, eps);
    const auto best = std::ranges::min_element(candidates, {}, &candidate::error);
    return {best->scale, best->zero_point};
}

// The `extreme_count` lowest (`largest` false) or highest values of `kept` and `values`.
inline at::Tensor extremes(const at::Tensor& kept, const at::Tensor& values, bool largest) {
    const at::Tensor all = at::cat({kept, values});
    return std::get<0>(at::topk(all, std::min(extreme_count, all.numel()), 0, largest, /*sorted=*/false)).contiguous();
}

// The auto observer's statistics: HistogramObserver's; beside them the ranges the histogram
// cannot give, MinMaxObserver's (the histogram's max is widened to its grid) and
// MovingAverageMinMaxObserver's (it depends on the batches, not only the values); and what its
// errors are measured on (observed_values). Returns each state tensor updated, in argument order.
using auto_state = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                              at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
inline auto_state observe_histogram_auto(const at::Tensor& x, const at::Tensor& min_val, const at::Tensor& max_val,
                                         const at::Tensor& histogram, std::int64_t upsample_rate,
                                         const at::Tensor& seen_min, const at::Tensor& seen_max,
                                         const at::Tensor& moving_min, const at::Tensor& moving_max,
                                         double averaging_constant, const at::Tensor& samples,
                                         const at::Tensor& sample_rate, const at::Tensor& lowest,
                                         const at::Tensor& highest, const at::Tensor& seen_count) {
    if (x.numel() == 0)
        return {min_val, max_val, histogram, seen_min, seen_max, moving_min, moving_max, samples, sample_rate,
                lowest, highest, seen_count};
    auto [new_min, new_max, new_histogram] = observe_histogram(x, min_val, max_val, histogram, upsample_rate);
    auto [new_seen_min, new_seen_max] = observe_min_max(x, seen_min, seen_max, -1);
    auto [new_moving_min, new_moving_max] = observe_moving_average(x, moving_min, moving_max, -1, averaging_constant);
    auto [new_samples, new_rate] = add_to_sample(x, samples, sample_rate);
    const at::Tensor values = x.detach().to(at::kFloat).reshape({-1});
    return {new_min,        new_max,        new_histogram, new_seen_min,
            new_seen_max,   new_moving_min, new_moving_max, new_samples,
            new_rate,       extremes(lowest, values, false), extremes(highest, values, true),
            at::full({}, seen_count.item<std::int64_t>() + x.numel(), at::kLong)};
}

}  // namespace observer_ops

// Registers these operators once per process, as register_observer_ops does its own.
inline void register_histogram_range_ops() {
    static const bool registered = [] {
        if (c10::Dispatcher::singleton().findSchema({"versatil::histogram_auto_qparams", ""})) return true;
        auto* library = new ::torch::Library(::torch::Library::FRAGMENT, "versatil", c10::nullopt, __FILE__, __LINE__);
        const auto def = [library](const char* schema, auto function) {
            library->def(::torch::schema(schema, c10::AliasAnalysisKind::CONSERVATIVE), function);
        };
        def("histogram_method_qparams(Tensor min_val, Tensor max_val, Tensor histogram, int method, int quant_min, "
            "int quant_max, bool symmetric, bool unsigned_dtype, float eps) -> (Tensor, Tensor)",
            &observer_ops::histogram_method_qparams);
        def("histogram_auto_qparams(Tensor min_val, Tensor max_val, Tensor histogram, Tensor seen_min, "
            "Tensor seen_max, Tensor moving_min, Tensor moving_max, Tensor samples, Tensor sample_rate, Tensor lowest, "
            "Tensor highest, Tensor seen_count, int dst_nbins, int quant_min, "
            "int quant_max, bool symmetric, bool unsigned_dtype, float eps) -> (Tensor, Tensor)",
            &observer_ops::histogram_auto_qparams);
        def("observe_histogram_auto(Tensor x, Tensor min_val, Tensor max_val, Tensor histogram, int upsample_rate, "
            "Tensor seen_min, Tensor seen_max, Tensor moving_min, Tensor moving_max, float averaging_constant, "
            "Tensor samples, Tensor sample_rate, Tensor lowest, Tensor highest, Tensor seen_count) "
            "-> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)",
            &observer_ops::observe_histogram_auto);
        return true;
    }();
    (void)registered;
}

}  // namespace versatil::libtorch
