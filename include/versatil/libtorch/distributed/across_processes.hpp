// The stage sequence's calibration policy for a distributed run (stages/sequence.hpp): each
// process calibrates its shard of the batches (calibrate_distributed.hpp) or trains its QAT
// targets on a slice of every batch (qat.hpp), and the observers' statistics or the gradients are
// merged across the group. Given to quantize(), quantize_to_target() or calibrate_only() in
// place of this_process; what each process contributed stays here for the report.
#pragma once

#include <torch/script.h>

#include <cstdint>
#include <vector>

#include "versatil/libtorch/distributed/calibrate_distributed.hpp"
#include "versatil/libtorch/distributed/process_group.hpp"
#include "versatil/libtorch/distributed/qat.hpp"
#include "versatil/libtorch/stages/sequence.hpp"

namespace versatil::libtorch {

struct across_processes {
    process_group& group;
    bool draws_progress = true;  // false on the processes that do not write, so one terminal shows one bar
    distributed_calibration calibrated{};
    distributed_qat trained{};

    void calibrate(prepared_model& prepared, const std::vector<batch>& batches, bool progress) {
        calibrated = calibrate_distributed(prepared, batches, group, {.progress = progress && draws_progress});
    }
    qat_result train(prepared_model& prepared, const at::Tensor& images, const at::Tensor& labels, qat_options qat) {
        qat.progress = qat.progress && draws_progress;
        trained = train_qat_distributed(prepared, images, labels, group, qat);
        return trained.training;
    }
    // The samples each process calibrated (or trained) on, indexed by rank.
    const std::vector<std::int64_t>& samples_per_rank(bool qat) const {
        return qat ? trained.samples_per_rank : calibrated.samples_per_rank;
    }
};
static_assert(calibration_policy<across_processes>);

}  // namespace versatil::libtorch
