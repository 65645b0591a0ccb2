// The calibration methods that read a histogram (core/calibration.hpp) as compiled LibTorch
// operators, next to PyTorch's L2 search in observer_ops.hpp: percentile (the quantiles that
// leave 0.01 % of the values out at each end, TensorRT's 99.99), entropy (TensorRT's KL
// divergence search) and auto (per tensor, the candidate range with the lowest squared
// quantization error on a sample of the observed values). The percentile and auto observers
// (observers.hpp) keep the histogram exactly as HistogramObserver does; only the range chosen
// from it differs. The entropy observer keeps a histogram as TensorRT does instead, of fixed-width
// bins (entropy_histogram.hpp).
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

#include "versatil/libtorch/observers/entropy_histogram.hpp"
#include "versatil/libtorch/observers/observer_ops.hpp"

namespace versatil::libtorch {

namespace observer_ops {

// A histogram of `counts.size()` equal bins over [min, max].
struct histogram_data {
    std::vector<double> counts;
    double min = 0.0;
    double max = 0.0;
    double total = 0.0;

    histogram_data(const at::Tensor& histogram, float min_val, float max_val)
        : counts(histogram_counts(histogram)), min(min_val), max(max_val) {
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

// Entropy's range within [min, max] seen, from the histogram of x on the grid of that range
// (entropy_histogram.hpp): the top clipped by TensorRT's unsigned search (all `quant_levels` of
// the affine grid) on the bins read from the lowest up, the coordinate x - lo of the affine
// grid; the bottom by the same search on the bins read from the highest down, hi - x. Each side
// is searched with the other at its extreme, as the grid spans both, and only among clips on its
// own side of 0 (the search starts at the bin of 0 when that is past TensorRT's bin 128): a
// clip across 0 would leave out the bulk of the values, and with it the bins the KL divergence
// is measured on. A one-signed tensor is clipped on its far side only: its near side is 0,
// which the grid holds anyway; for a ReLU output (lo = 0) that is TensorRT's unsigned
// calibration exactly.
inline value_range entropy_range(double min, double max, const at::Tensor& histogram, std::int64_t quant_levels) {
    const entropy_grid grid = entropy_grid_of(min, max);
    std::vector<double> counts = histogram_counts(histogram);
    if (grid.width == 0.0 || static_cast<std::int64_t>(counts.size()) != grid.bins) return {min, max};
    value_range range{min, max};
    if (max > 0.0) {
        const std::int64_t clip = entropy_clip_bins(counts, quant_levels, std::max(entropy_start_bin, -grid.first));
        range.max = std::min(max, grid.width * static_cast<double>(grid.first + clip));
    }
    if (min < 0.0) {
        std::reverse(counts.begin(), counts.end());
        const std::int64_t clip =
            entropy_clip_bins(counts, quant_levels, std::max(entropy_start_bin, grid.first + grid.bins));
        range.min = std::max(min, grid.width * static_cast<double>(grid.first + grid.bins - clip));
    }
    return range;
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
        return sum(observed.samples, -infinity, infinity, &counted) /
               static_cast<double>(std::max<std::int64_t>(counted, 1));
    std::int64_t ends = 0;
    const double extremes =
        sum(observed.lowest, -infinity, infinity, &ends) + sum(observed.highest, -infinity, infinity, &ends);
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
    auto generator =
        at::make_generator<at::CPUGeneratorImpl>(0x5eed0000ULL + static_cast<std::uint64_t>(samples.numel()));
    at::Tensor kept = samples;
    while (kept.numel() + (size + step - 1) / step > auto_sample_capacity) {
        kept = kept.index_select(0, at::randperm(kept.numel(), generator, at::kLong).slice(0, 0, kept.numel() / 2));
        step *= 2;
    }
    const at::Tensor drawn =
        step == 1 ? values
                  : values.index_select(0, at::randint(size, {(size + step - 1) / step}, generator, at::kLong));
    return {at::cat({kept, drawn}).contiguous(), at::full({}, step, at::kLong)};
}

inline tensor_pair range_tensors(value_range range) {
    return {at::full({}, static_cast<float>(range.min), at::kFloat),
            at::full({}, static_cast<float>(range.max), at::kFloat)};
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

// The qparams of the range `search()` chooses; of the range seen when there is nothing to search.
template <class Search>
tensor_pair searched_qparams(const at::Tensor& min_val, const at::Tensor& max_val, Search search,
                             std::int64_t quant_min, std::int64_t quant_max, bool symmetric, bool unsigned_dtype,
                             double eps) {
    if (nothing_to_search(min_val, max_val))
        return unsearched_qparams(min_val, max_val, quant_min, quant_max, symmetric, unsigned_dtype, eps);
    auto [new_min, new_max] = range_tensors(search());
    return choose_qparams(new_min, new_max, quant_min, quant_max, symmetric, unsigned_dtype, eps);
}

// calculate_qparams of the percentile observer (percentile_range) and of the entropy observer
// (entropy_range).
inline tensor_pair percentile_qparams(const at::Tensor& min_val, const at::Tensor& max_val, const at::Tensor& histogram,
                                      std::int64_t quant_min, std::int64_t quant_max, bool symmetric,
                                      bool unsigned_dtype, double eps) {
    const auto search = [&] {
        return percentile_range(histogram_data(histogram, min_val.item<float>(), max_val.item<float>()));
    };
    return searched_qparams(min_val, max_val, search, quant_min, quant_max, symmetric, unsigned_dtype, eps);
}

inline tensor_pair entropy_qparams(const at::Tensor& min_val, const at::Tensor& max_val, const at::Tensor& histogram,
                                   std::int64_t quant_min, std::int64_t quant_max, bool symmetric,
                                   bool unsigned_dtype, double eps) {
    const auto search = [&] {
        return entropy_range(min_val.item<double>(), max_val.item<double>(), histogram, quant_max - quant_min + 1);
    };
    return searched_qparams(min_val, max_val, search, quant_min, quant_max, symmetric, unsigned_dtype, eps);
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
                                              const at::Tensor& moving_max, const at::Tensor& entropy_histogram,
                                              const observed_values& observed,
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
    auto [entropy_min, entropy_max] = range_tensors(
        entropy_range(seen_min.item<double>(), seen_max.item<double>(), entropy_histogram, quant_max - quant_min + 1));
    add("entropy", entropy_min, entropy_max);
    return candidates;
}

// calculate_qparams of the auto observer: the candidate with the lowest error (the first on ties),
// or the qparams a step chose among them once calibrated (chosen_scale > 0).
inline tensor_pair histogram_auto_qparams(const at::Tensor& min_val, const at::Tensor& max_val,
                                          const at::Tensor& histogram, const at::Tensor& seen_min,
                                          const at::Tensor& seen_max, const at::Tensor& moving_min,
                                          const at::Tensor& moving_max, const at::Tensor& entropy_histogram,
                                          const at::Tensor& samples, const at::Tensor& sample_rate,
                                          const at::Tensor& lowest, const at::Tensor& highest,
                                          const at::Tensor& seen_count, std::int64_t dst_nbins, std::int64_t quant_min,
                                          std::int64_t quant_max, bool symmetric, bool unsigned_dtype, double eps,
                                          double chosen_scale, std::int64_t chosen_zero_point) {
    if (chosen_scale > 0.0)
        return {at::full({1}, chosen_scale, at::kFloat), at::full({1}, chosen_zero_point, at::kLong)};
    if (nothing_to_search(min_val, max_val))
        return unsearched_qparams(min_val, max_val, quant_min, quant_max, symmetric, unsigned_dtype, eps);
    const observed_values observed{samples, sample_rate.item<std::int64_t>(), lowest, highest,
                                   seen_count.item<std::int64_t>()};
    const std::vector<candidate> candidates =
        auto_candidates(min_val, max_val, histogram, seen_min, seen_max, moving_min, moving_max, entropy_histogram,
                        observed, dst_nbins,
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
// cannot give, MinMaxObserver's (the histogram's max is widened to its grid) with the entropy
// observer's histogram (entropy_histogram.hpp), and MovingAverageMinMaxObserver's (it
// depends on the batches, not only the values); and what its errors are measured on
// (observed_values). Returns each state tensor updated, in argument order.
using auto_state = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                              at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
inline auto_state observe_histogram_auto(const at::Tensor& x, const at::Tensor& min_val, const at::Tensor& max_val,
                                         const at::Tensor& histogram, std::int64_t upsample_rate,
                                         const at::Tensor& seen_min, const at::Tensor& seen_max,
                                         const at::Tensor& moving_min, const at::Tensor& moving_max,
                                         double averaging_constant, const at::Tensor& entropy_histogram,
                                         const at::Tensor& samples,
                                         const at::Tensor& sample_rate, const at::Tensor& lowest,
                                         const at::Tensor& highest, const at::Tensor& seen_count) {
    if (x.numel() == 0)
        return {min_val,           max_val, histogram,   seen_min, seen_max, moving_min, moving_max,
                entropy_histogram, samples, sample_rate, lowest,   highest,  seen_count};
    auto [new_min, new_max, new_histogram] = observe_histogram(x, min_val, max_val, histogram, upsample_rate);
    auto [new_seen_min, new_seen_max, new_entropy_histogram] =
        observe_entropy_histogram(x, seen_min, seen_max, entropy_histogram);
    auto [new_moving_min, new_moving_max] = observe_moving_average(x, moving_min, moving_max, -1, averaging_constant);
    auto [new_samples, new_rate] = add_to_sample(x, samples, sample_rate);
    const at::Tensor values = x.detach().to(at::kFloat).reshape({-1});
    return {new_min,
            new_max,
            new_histogram,
            new_seen_min,
            new_seen_max,
            new_moving_min,
            new_moving_max,
            new_entropy_histogram,
            new_samples,
            new_rate,
            extremes(lowest, values, false),
            extremes(highest, values, true),
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
        def("percentile_qparams(Tensor min_val, Tensor max_val, Tensor histogram, int quant_min, int quant_max, "
            "bool symmetric, bool unsigned_dtype, float eps) -> (Tensor, Tensor)",
            &observer_ops::percentile_qparams);
        def("entropy_qparams(Tensor min_val, Tensor max_val, Tensor histogram, int quant_min, int quant_max, "
            "bool symmetric, bool unsigned_dtype, float eps) -> (Tensor, Tensor)",
            &observer_ops::entropy_qparams);
        def("observe_entropy_histogram(Tensor x, Tensor min_val, Tensor max_val, Tensor histogram) "
            "-> (Tensor, Tensor, Tensor)",
            &observer_ops::observe_entropy_histogram);
        def("histogram_auto_qparams(Tensor min_val, Tensor max_val, Tensor histogram, Tensor seen_min, "
            "Tensor seen_max, Tensor moving_min, Tensor moving_max, Tensor entropy_histogram, "
            "Tensor samples, Tensor sample_rate, Tensor lowest, "
            "Tensor highest, Tensor seen_count, int dst_nbins, int quant_min, "
            "int quant_max, bool symmetric, bool unsigned_dtype, float eps, float chosen_scale, "
            "int chosen_zero_point) -> (Tensor, Tensor)",
            &observer_ops::histogram_auto_qparams);
        def("observe_histogram_auto(Tensor x, Tensor min_val, Tensor max_val, Tensor histogram, int upsample_rate, "
            "Tensor seen_min, Tensor seen_max, Tensor moving_min, Tensor moving_max, float averaging_constant, "
            "Tensor entropy_histogram, Tensor samples, Tensor sample_rate, Tensor lowest, Tensor highest, "
            "Tensor seen_count) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, "
            "Tensor, Tensor, Tensor)",
            &observer_ops::observe_histogram_auto);
        return true;
    }();
    (void)registered;
}

}  // namespace versatil::libtorch
