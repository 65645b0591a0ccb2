// Calibration across the processes of a world: each rank observes its shard of the batches
// (every size-th batch from its rank on, as torch's DistributedSampler deals samples), then the
// observers' statistics are merged (merge_observers.hpp) so every rank holds those of one
// process that observed all batches, before any qparams are computed.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "versatil/libtorch/distributed/merge_observers.hpp"
#include "versatil/libtorch/distributed/process_group.hpp"
#include "versatil/libtorch/stages/calibrate.hpp"

namespace versatil::libtorch {

// The batches rank `rank` of `size` observes: indices rank, rank + size, rank + 2 size, ...
inline std::vector<batch> shard_of(const std::vector<batch>& batches, int rank, int size) {
    std::vector<batch> shard;
    for (std::size_t i = static_cast<std::size_t>(rank); i < batches.size(); i += static_cast<std::size_t>(size))
        shard.push_back(batches[i]);
    return shard;
}

struct distributed_calibration {
    std::vector<std::int64_t> samples_per_rank;  // what each rank observed, indexed by rank
    double observe_seconds = 0.0;                // this rank's own batches
    double wait_seconds = 0.0;                   // for the slowest rank to finish its batches
    double merge_seconds = 0.0;                  // the exchanges of observer statistics
};

// Observes this rank's shard of `batches` (the same list on every rank), then merges.
inline distributed_calibration calibrate_distributed(prepared_model& prepared, const std::vector<batch>& batches,
                                                     process_group& group, const calibration_options& options = {}) {
    if (prepared.plan.quantizer.needs_calibration() && batches.size() < static_cast<std::size_t>(group.size()))
        throw error(error_kind::no_calibration_data,
                    "there are " + std::to_string(batches.size()) + " calibration batches for " +
                        std::to_string(group.size()) +
                        " processes; give at least one batch per process, or fewer processes");
    const std::vector<batch> shard = shard_of(batches, group.rank(), group.size());
    distributed_calibration result;
    const auto start = std::chrono::steady_clock::now();
    calibrate(prepared, shard, options);
    result.observe_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::int64_t samples = samples_in(shard);
    // The first exchange is also where fast ranks wait for slow ones: timed apart from the merge.
    const double before = group.communication_seconds();
    result.samples_per_rank = group.all_gather(samples, "calibration (waiting for the other ranks' batches)");
    const double arrived = group.communication_seconds();
    merge_observer_statistics(prepared.module, group);
    result.wait_seconds = arrived - before;
    result.merge_seconds = group.communication_seconds() - arrived;
    return result;
}

}  // namespace versatil::libtorch
