// Calibration across processes against one process (RESULTS.md, "Scale out"): every rank runs
// this with RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT set (benchmarks/scale_out.py starts
// them); without WORLD_SIZE it is the one-process baseline. The model is mobilenet_cnn (demo
// models) for x86_inductor (histogram activations), calibrated on real Fashion-MNIST images.
// Rank 0 prints one JSON line: the calibration's wall time (observing the shard, waiting for
// the slowest rank, merging) with each part, and start-up (loading, joining) apart.
//
// With --qat-steps S it trains instead (x86_inductor:qat, Adam, distributed/qat.hpp) for S steps
// on a global batch of --batch examples split evenly across the processes (the same work, and
// the same model up to rounding, whatever the number of processes), and prints the time a step
// takes with its communication apart: the gradient exchange (which includes waiting for the
// slowest rank's forward and backward) and the range merge.
//
//   scale_out [--images N] [--batch B] [--threads T] [--qat-steps S]
#include <torch/script.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "versatil/libtorch.hpp"
#include "versatil/libtorch/demo/fashion_mnist.hpp"
#include "versatil/libtorch/demo/models.hpp"
#include "versatil/libtorch/distributed/calibrate_distributed.hpp"
#include "versatil/libtorch/distributed/qat.hpp"

using namespace versatil;
using namespace versatil::libtorch;

namespace {
double since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}
// QAT steps on one process or across the world; rank 0 prints the JSON line.
int train_steps(prepared_model& prepared, const dataset& data, std::optional<process_group>& group, const world_config& world,
          int threads, std::int64_t global_batch, std::int64_t steps, double startup) {
    const int size = group ? group->size() : 1;
    if (global_batch % size != 0) throw std::invalid_argument("--batch must divide by the number of processes");
    qat_options options;
    options.training.steps = steps;
    options.training.batch_size = global_batch / size;
    options.progress = false;
    const auto training_start = std::chrono::steady_clock::now();
    const std::clock_t cpu_start = std::clock();
    distributed_qat done;
    if (group) done = train_qat_distributed(prepared, data.images, data.labels, *group, options);
    else done.training = train_qat(prepared, data.images, data.labels, options);
    const double wall = since(training_start);
    const double cpu = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
    std::vector<std::int64_t> cpu_ms{static_cast<std::int64_t>(cpu * 1000)};
    if (group) cpu_ms = group->all_gather(cpu_ms.front(), "gathering CPU times");
    if (!world.writes_outputs()) return 0;
    const double per_step = 1000.0 / static_cast<double>(steps);
    std::printf("{\"mode\": \"qat\", \"world_size\": %d, \"threads\": %d, \"images\": %lld, \"batch\": %lld, "
                "\"steps\": %lld, \"startup_s\": %.4f, \"training_s\": %.4f, \"step_ms\": %.3f, \"gradient_exchange_ms\": %.3f, "
                "\"range_merge_ms\": %.3f, \"start_exchange_s\": %.4f, \"max_rank_cpu_step_ms\": %.3f, \"final_loss\": %.5f}\n",
                size, threads, static_cast<long long>(data.images.size(0)), static_cast<long long>(global_batch),
                static_cast<long long>(steps), startup, wall, wall * per_step, done.gradient_seconds * per_step,
                done.range_seconds * per_step, done.start_seconds,
                static_cast<double>(*std::max_element(cpu_ms.begin(), cpu_ms.end())) * per_step / 1000.0,
                done.training.training.final_loss);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    std::int64_t images = 8192, batch_rows = 64;
    int threads = 1;
    std::int64_t qat_steps = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string flag = argv[i];
        if (flag == "--images") images = std::atoll(argv[i + 1]);
        else if (flag == "--batch") batch_rows = std::atoll(argv[i + 1]);
        else if (flag == "--threads") threads = std::atoi(argv[i + 1]);
        else if (flag == "--qat-steps") qat_steps = std::atoll(argv[i + 1]);
        else { std::fprintf(stderr, "usage: scale_out [--images N] [--batch B] [--threads T] [--qat-steps S]\n"); return 2; }
    }
    try {
        const auto start = std::chrono::steady_clock::now();
        at::set_num_threads(threads);
        const world_config world = world_from({.timeout_seconds = 600.0});
        const dataset train = load_fashion_mnist(fashion_mnist_split::train, images);
        const std::vector<batch> batches = split_batches(train.images, batch_rows);
        const ::torch::jit::Module model = mobilenet_cnn(0);
        auto quantizer = runtime_quantizer::compose({{"", *parse_backend_spec(qat_steps > 0 ? "x86_inductor:qat" : "x86_inductor")}});
        prepared_model prepared = prepare(model, plan_for(*quantizer));
        std::optional<process_group> group = process_group::join(world);
        if (group) group->barrier("starting together");
        const double startup = since(start);
        if (qat_steps > 0) return train_steps(prepared, train, group, world, threads, batch_rows, qat_steps, startup);

        const auto calibration_start = std::chrono::steady_clock::now();
        const std::clock_t cpu_start = std::clock();
        distributed_calibration done;
        if (group) {
            done = calibrate_distributed(prepared, batches, *group, {.progress = false});
        } else {
            calibrate(prepared, batches, {.progress = false});
            done.observe_seconds = since(calibration_start);
        }
        const double calibration = since(calibration_start);
        // The CPU time this rank spent: the work each rank does, whatever else loads the machine.
        const double cpu = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
        std::vector<std::int64_t> cpu_ms{static_cast<std::int64_t>(cpu * 1000)};
        if (group) cpu_ms = group->all_gather(cpu_ms.front(), "gathering CPU times");
        if (!world.writes_outputs()) return 0;
        std::printf("{\"world_size\": %d, \"threads\": %d, \"images\": %lld, \"batch\": %lld, \"startup_s\": %.4f, "
                    "\"calibration_s\": %.4f, \"observe_s\": %.4f, \"wait_s\": %.4f, \"merge_s\": %.4f, "
                    "\"max_rank_cpu_s\": %.4f}\n",
                    world.size, threads, static_cast<long long>(images), static_cast<long long>(batch_rows), startup,
                    calibration, done.observe_seconds, done.wait_seconds, done.merge_seconds,
                    static_cast<double>(*std::max_element(cpu_ms.begin(), cpu_ms.end())) / 1000.0);
        return 0;
    } catch (const std::exception& failure) {
        std::fprintf(stderr, "scale_out: %s\n", libtorch::detail::first_line(failure.what()).c_str());
        return 1;
    }
}
