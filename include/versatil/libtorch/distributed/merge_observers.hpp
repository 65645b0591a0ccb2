// Observer statistics merged across the processes of a world, so that qparams computed after
// it are those of one process that observed every rank's data:
//
// - MinMaxObserver and PerChannelMinMaxObserver: the running min / max all-reduced with MIN /
//   MAX. Min and max are exact and order-free, so the result is bit for bit that of one process.
// - HistogramObserver, and the percentile observer, which keeps the same histogram and chooses
//   another range from it, in two phases: first the ranks agree on the global range (MIN of the
//   mins, MAX of the maxes), then each rank spreads its histogram over the common bins of that
//   range and the bins are summed. Spreading assumes values are uniform inside a bin, which is
//   what one process's observer assumes too each time a batch widens its range (it resamples its
//   old histogram onto the wider grid). Counts are summed in float64 and rounded once to float32.
// - The entropy observer, in the same two phases: its histogram has bins of a power-of-two width
//   anchored at 0 that depend only on the range seen (entropy_histogram.hpp), so each rank rebins
//   its counts exactly to the bins of the global range (whole bins summed) and the counts are
//   summed: one process's histogram and clip bit for bit, whatever the ranks saw.
// - Moving-average observers depend on the order batches arrive in, so no merge equals one
//   process: refused, naming the observer. So is the auto observer, whose candidates include a
//   moving-average range and whose errors are measured on a sample of each rank's own values.
//
// Every rank must call this on a model prepared the same way (same observers in the same
// order), after observing its own batches. Observers that saw nothing on a rank (inf / -inf,
// or an empty per-channel range) contribute nothing.
#pragma once

#include <torch/script.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "versatil/libtorch/distributed/process_group.hpp"
#include "versatil/libtorch/torchscript/layer_graph.hpp"
#include "versatil/libtorch/observers/observers.hpp"

namespace versatil::libtorch {

namespace detail {

// Kinds whose statistics are a range and HistogramObserver's histogram over it.
constexpr bool merges_as_histogram(observer_kind kind) {
    return observer_state::histogram_of(kind) == observer_state::histogram_layout::over_range;
}

// The entropy observer's bins on the global range [low, high], as one process that saw
// everything has them (entropy_histogram.hpp); none where no rank saw anything.
inline observer_ops::entropy_grid global_entropy_grid(float low, float high) {
    if (!(low <= high)) return {};
    return observer_ops::entropy_grid_of(low, high);
}

struct found_observer {
    std::string path;
    ::torch::jit::Module module;
    observer_kind kind;
};

// The model's observers in module order, which is the same on every rank.
inline std::vector<found_observer> observers_of(const ::torch::jit::Module& model) {
    using enum observer_kind;
    std::vector<found_observer> found;
    for (const auto& item : model.named_modules()) {
        const std::string name = plain_class_name(item.value);
        if (!name.starts_with("__torch__.versatil.observers.")) continue;
        bool known = false;
        for (const observer_kind kind : {min_max, moving_average_min_max, per_channel_min_max,
                                         moving_average_per_channel_min_max, histogram, histogram_percentile,
                                         histogram_entropy, placeholder}) {
            if (name != detail::class_name(kind)) continue;
            if (kind == moving_average_min_max || kind == moving_average_per_channel_min_max)
                throw error(error_kind::invalid_argument,
                            "observer " + item.name + " is a moving-average observer, whose range depends on the order "
                            "batches arrive in, so no merge across processes equals one process; calibrate it with one "
                            "process (WORLD_SIZE=1)");
            if (observer_state::has_range(kind)) found.push_back({item.name, item.value, kind});
            known = true;
        }
        if (!known)
            throw error(error_kind::invalid_argument, "observer " + item.name + " (" + name +
                                                          ") has no merge across processes; calibrate it with one "
                                                          "process (WORLD_SIZE=1)");
    }
    return found;
}

inline at::Tensor buffer(const ::torch::jit::Module& module, const char* name) {
    return module.attr(name).toTensor();
}

// The counts of `local` (bins over [local_min, local_max]) spread over `bins` bins over
// [global_min, global_max], added to `out` (float64). A local range of one value is a point.
inline void spread_histogram(const at::Tensor& local, double local_min, double local_max, double global_min,
                             double global_max, double* out, std::int64_t bins) {
    const at::Tensor counts = local.to(at::kDouble).contiguous();
    const double* count = counts.data_ptr<double>();
    const std::int64_t local_bins = counts.numel();
    const double global_width = (global_max - global_min) / static_cast<double>(bins);
    const auto bin_of = [&](double value) {
        const auto index = static_cast<std::int64_t>(std::floor((value - global_min) / global_width));
        return std::clamp<std::int64_t>(index, 0, bins - 1);
    };
    if (!(local_max > local_min)) {
        out[bin_of(local_min)] += counts.sum().item<double>();
        return;
    }
    const double local_width = (local_max - local_min) / static_cast<double>(local_bins);
    for (std::int64_t i = 0; i < local_bins; ++i) {
        if (count[i] == 0.0) continue;
        const double begin = local_min + local_width * static_cast<double>(i);
        const double end = i + 1 == local_bins ? local_max : local_min + local_width * static_cast<double>(i + 1);
        const std::int64_t first = bin_of(begin);
        const std::int64_t last = bin_of(end);
        if (first == last) {
            out[first] += count[i];
            continue;
        }
        const double density = count[i] / (end - begin);
        for (std::int64_t b = first; b <= last; ++b) {
            const double low = b == first ? begin : global_min + global_width * static_cast<double>(b);
            const double high = b == last ? end : global_min + global_width * static_cast<double>(b + 1);
            out[b] += density * std::max(0.0, high - low);
        }
    }
}

}  // namespace detail

// Merges the statistics of every observer of `model` across `group` (see above).
inline void merge_observer_statistics(::torch::jit::Module& model, process_group& group) {
    using observer_state::histogram_of;
    using enum observer_state::histogram_layout;
    using detail::buffer;
    const std::vector<detail::found_observer> observers = detail::observers_of(model);
    const float inf = std::numeric_limits<float>::infinity();

    // The observer set must be the same everywhere, or every exchange below would pair wrong
    // buffers: compare counts first.
    const std::vector<std::int64_t> counts =
        group.all_gather(static_cast<std::int64_t>(observers.size()), "comparing observer counts");
    for (const std::int64_t count : counts)
        if (count != static_cast<std::int64_t>(observers.size()))
            throw error(error_kind::invalid_argument,
                        describe(group.world()) + ": the ranks' prepared models differ (" +
                            std::to_string(observers.size()) + " observers here, " + std::to_string(count) +
                            " on another rank); every rank must run the "
                            "same model and targets");

    // Per-channel observers that saw nothing here have no channel count: agree on it first.
    std::vector<std::int64_t> channels;
    for (const auto& observer : observers) channels.push_back(buffer(observer.module, observer_state::min_val).numel());
    at::Tensor channel_counts = at::tensor(channels, at::kLong);
    if (!observers.empty()) group.all_reduce(channel_counts, c10d::ReduceOp::MAX, "agreeing on observer shapes");

    // Phase 1: every range (min-max and histogram alike) as one MIN and one MAX exchange.
    std::vector<at::Tensor> mins, maxs;
    for (std::size_t i = 0; i < observers.size(); ++i) {
        at::Tensor min_val = buffer(observers[i].module, observer_state::min_val).to(at::kFloat).reshape({-1});
        at::Tensor max_val = buffer(observers[i].module, observer_state::max_val).to(at::kFloat).reshape({-1});
        const std::int64_t agreed = channel_counts.data_ptr<std::int64_t>()[i];
        if (min_val.numel() != agreed) {
            if (min_val.numel() != 0)
                throw error(error_kind::invalid_argument, "observer " + observers[i].path + " has " +
                                                              std::to_string(min_val.numel()) + " channels here and " +
                                                              std::to_string(agreed) + " on another rank");
            min_val = at::full({agreed}, inf);
            max_val = at::full({agreed}, -inf);
        }
        mins.push_back(min_val);
        maxs.push_back(max_val);
    }
    if (observers.empty()) return;
    at::Tensor all_mins = at::cat(mins);
    at::Tensor all_maxs = at::cat(maxs);
    group.all_reduce(all_mins, c10d::ReduceOp::MIN, "merging observer minimums");
    group.all_reduce(all_maxs, c10d::ReduceOp::MAX, "merging observer maximums");

    // Phase 2: histograms on the agreed ranges, summed.
    std::vector<std::int64_t> histogram_offsets;
    std::vector<observer_ops::entropy_grid> entropy_grids(observers.size());
    std::int64_t histogram_total = 0;
    for (std::size_t i = 0, offset = 0; i < observers.size(); ++i) {
        histogram_offsets.push_back(histogram_total);
        if (detail::merges_as_histogram(observers[i].kind)) {
            histogram_total += buffer(observers[i].module, observer_state::histogram).numel();
        } else if (histogram_of(observers[i].kind) == entropy_grid) {
            entropy_grids[i] = detail::global_entropy_grid(all_mins[static_cast<std::int64_t>(offset)].item<float>(),
                                                           all_maxs[static_cast<std::int64_t>(offset)].item<float>());
            histogram_total += entropy_grids[i].bins;
        }
        offset += static_cast<std::size_t>(channel_counts.data_ptr<std::int64_t>()[i]);
    }
    histogram_offsets.push_back(histogram_total);
    at::Tensor histograms = at::zeros({histogram_total}, at::kDouble);
    std::int64_t offset = 0;
    for (std::size_t i = 0; i < observers.size(); ++i) {
        const std::int64_t size = channel_counts.data_ptr<std::int64_t>()[i];
        const at::Tensor global_min = all_mins.slice(0, offset, offset + size);
        const at::Tensor global_max = all_maxs.slice(0, offset, offset + size);
        offset += size;
        if (histogram_of(observers[i].kind) == entropy_grid) {
            // Nothing seen here, or a range without bins anywhere: nothing to add.
            if (mins[i].item<float>() > maxs[i].item<float>() || entropy_grids[i].bins == 0) continue;
            const std::vector<double> rebinned = observer_ops::rebin(
                observer_ops::histogram_counts(buffer(observers[i].module, observer_state::histogram)),
                observer_ops::entropy_grid_of(mins[i].item<double>(), maxs[i].item<double>()), entropy_grids[i]);
            std::copy(rebinned.begin(), rebinned.end(), histograms.data_ptr<double>() + histogram_offsets[i]);
            continue;
        }
        if (!detail::merges_as_histogram(observers[i].kind)) continue;
        const float low = global_min.item<float>();
        const float high = global_max.item<float>();
        const float local_low = mins[i].item<float>();
        const float local_high = maxs[i].item<float>();
        const at::Tensor local = buffer(observers[i].module, observer_state::histogram);
        if (local_low > local_high || !(high > low) || std::isinf(high - low)) continue;
        detail::spread_histogram(local, local_low, local_high, low, high,
                                       histograms.data_ptr<double>() + histogram_offsets[i], local.numel());
    }
    if (histogram_total > 0) group.all_reduce(histograms, c10d::ReduceOp::SUM, "summing observer histograms");

    // The merged statistics back into the observers, in their own shapes.
    offset = 0;
    for (std::size_t i = 0; i < observers.size(); ++i) {
        ::torch::jit::Module module = observers[i].module;
        const std::int64_t size = channel_counts.data_ptr<std::int64_t>()[i];
        const at::Tensor old_min = buffer(module, observer_state::min_val);
        at::Tensor min_val = all_mins.slice(0, offset, offset + size).clone();
        at::Tensor max_val = all_maxs.slice(0, offset, offset + size).clone();
        offset += size;
        const bool per_tensor = observers[i].kind != observer_kind::per_channel_min_max;
        if (per_tensor) {
            min_val = min_val.reshape({});
            max_val = max_val.reshape({});
        }
        if (detail::merges_as_histogram(observers[i].kind)) {
            const float low = min_val.item<float>();
            const float high = max_val.item<float>();
            // One value everywhere, or nothing anywhere: the observer keeps its own histogram,
            // which its qparams do not read then (histogram_qparams).
            if (high > low && !std::isinf(high - low)) {
                const std::int64_t bins = buffer(module, observer_state::histogram).numel();
                module.setattr(
                    observer_state::histogram,
                    histograms.slice(0, histogram_offsets[i], histogram_offsets[i] + bins).to(at::kFloat).contiguous());
            }
        }
        // Nothing anywhere, or no finite range: the observer keeps its own, as one process.
        if (histogram_of(observers[i].kind) == entropy_grid && entropy_grids[i].bins > 0)
            module.setattr(observer_state::histogram,
                           histograms.slice(0, histogram_offsets[i], histogram_offsets[i + 1]).clone());
        if (size == 0 && !per_tensor) continue;  // a per-channel observer no rank saw anything with
        module.setattr(observer_state::min_val, min_val.to(old_min.scalar_type()));
        module.setattr(observer_state::max_val, max_val.to(old_min.scalar_type()));
    }
}

}  // namespace versatil::libtorch
