// Calibration across processes against one process (RESULTS.md, "Scale out"): every rank runs
// this with RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT set (benchmarks/scale_out.py starts
// them); without WORLD_SIZE it is the one-process baseline. The model is mobilenet_cnn (demo
// models) for x86_inductor (histogram activations), calibrated on real Fashion-MNIST images.
// Rank 0 prints one JSON line: the calibration's wall time (observing the shard, waiting for
// the slowest rank, merging) with each part, and start-up (loading, joining) apart.
//
//   scale_out [--images N] [--batch B] [--threads T]
#include <torch/script.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "versatil/libtorch.hpp"
#include "versatil/libtorch/demo/fashion_mnist.hpp"
#include "versatil/libtorch/demo/models.hpp"
#include "versatil/libtorch/distributed/calibration.hpp"

using namespace versatil;
using namespace versatil::libtorch;

namespace {
double since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}
}  // namespace

int main(int argc, char** argv) {
    std::int64_t images = 8192, batch_rows = 64;
    int threads = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string flag = argv[i];
        if (flag == "--images") images = std::atoll(argv[i + 1]);
        else if (flag == "--batch") batch_rows = std::atoll(argv[i + 1]);
        else if (flag == "--threads") threads = std::atoi(argv[i + 1]);
        else { std::fprintf(stderr, "usage: scale_out [--images N] [--batch B] [--threads T]\n"); return 2; }
    }
    try {
        const auto start = std::chrono::steady_clock::now();
        at::set_num_threads(threads);
        const world_config world = world_from({.timeout_seconds = 600.0});
        const dataset train = load_fashion_mnist(fashion_mnist_split::train, images);
        const std::vector<batch> batches = split_batches(train.images, batch_rows);
        const ::torch::jit::Module model = mobilenet_cnn(0);
        auto quantizer = runtime_quantizer::compose({{"", *parse_backend_spec("x86_inductor")}});
        prepared_model prepared = prepare(model, plan_for(*quantizer));
        std::optional<process_group> group = process_group::join(world);
        if (group) group->barrier("starting together");
        const double startup = since(start);

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
