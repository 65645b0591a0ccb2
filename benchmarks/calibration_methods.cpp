// The calibration methods (the calibration option) on the benchmark models: output SQNR and top-1
// on the held-out images per method, and the quantize time each takes, for the static
// configurations of both backends (xnnpack also with per-tensor weights), each method alone and
// combined with the accuracy steps `cle`, `cle,bias_correction`, `gptq` and
// `cle,bias_correction,gptq` (issue 12's yardstick takes
// the best configuration per model). A combination the backend refuses is recorded with its
// error instead of figures.
//
//   calibration_methods OUT.json [--steps N] [--repeats N]
//
// As run for RESULTS.md, from the repository root (benchmarks/run's release build directory):
//   meson compile -C build-bench benchmarks/calibration_methods
//   build-bench/benchmarks/calibration_methods benchmarks/results/calibration_methods.json
//   /usr/bin/python3 benchmarks/calibration_methods.py   # the RESULTS.md section from the JSON
//
// The models are trained as torch_models and accuracy_steps train them (benchmark_models.hpp; one
// thread), with the same calibration and evaluation images, so the runtime section's PyTorch
// figures apply to the same weights (each model's float top-1 is recorded to check that).
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "benchmark_models.hpp"

using namespace versatil;
using namespace versatil::libtorch;
using namespace versatil::benchmarks;
using json = nlohmann::json;

int main(int argc, char** argv) {
    const std::optional<benchmark_arguments> arguments = parse_benchmark_arguments(argc, argv, 1);
    if (!arguments) return 2;
    const auto& [out, steps, repeats] = *arguments;
    const std::vector<std::string> bases{"x86_inductor", "xnnpack", "xnnpack:per_tensor"};
    // "" is the backend's default (histogram); naming histogram gives the same observers.
    const std::vector<std::string> methods{"", "minmax", "moving_minmax", "percentile", "entropy", "auto"};
    const std::vector<std::string> accuracy_steps{"", "cle", "cle,bias_correction", "gptq", "cle,bias_correction,gptq"};
    try {
        at::set_num_threads(1);
        const benchmark_data loaded = load_benchmark_data();
        const auto& [train, test, calibration, evaluation] = loaded;
        json results = {{"command", command_line("calibration_methods", argc, argv)},
                        {"date", utc_now()},
                        {"load_before", load_average()},
                        {"steps", steps},
                        {"repeats", repeats}};
        for (const model_entry& entry : benchmark_models()) {
            ::torch::jit::Module model = entry.build();
            (void)train_model(model, entry, train, steps);
            const model_outputs reference = run_batches(model, evaluation);
            json model_json = {{"float_top1", top1_accuracy(reference, test.labels)}};
            std::printf("%s (float top-1 %.2f %%)\n", entry.name.c_str(), 100 * model_json["float_top1"].get<double>());
            const quantize_data data{calibration, evaluation, test.labels};
            for (const std::string& base : bases)
                for (const std::string& added : accuracy_steps)
                    for (const std::string& method : methods) {
                        const std::string spec =
                            with_options(with_options(base, added), method.empty() ? "" : "calibration=" + method);
                        json run = {{"spec", spec},
                                    {"base", base},
                                    {"accuracy_steps", added},
                                    {"method", method.empty() ? "histogram (default)" : method}};
                        const auto backend = parse_backend_spec(spec);
                        if (!backend) {  // not offered by this backend: say so, measure nothing
                            run["error"] = backend.error().message;
                            std::printf("  %-64s refused: %s\n", spec.c_str(), backend.error().message.c_str());
                            model_json["runs"].push_back(run);
                            continue;
                        }
                        const auto [lowered, seconds] = quantize_timed(model, whole_model(spec), data, repeats);
                        const engine_scope engine(engine_settings{lowered.plan.engine, 1, std::nullopt});
                        const model_outputs quantized = run_batches(lowered.module.deepcopy(), evaluation);
                        run["sqnr_db"] = compare_outputs(reference, quantized).overall.sqnr_db;
                        run["quantized_top1"] = top1_accuracy(quantized, test.labels);
                        run["quantize_seconds"] = median(seconds);
                        std::printf("  %-64s SQNR %6.2f dB  top-1 %.2f %%  quantize %.3f s\n", spec.c_str(),
                                    run["sqnr_db"].get<double>(), 100 * run["quantized_top1"].get<double>(),
                                    run["quantize_seconds"].get<double>());
                        std::fflush(stdout);
                        model_json["runs"].push_back(run);
                    }
            results["models"][entry.name] = model_json;
        }
        results["load_after"] = load_average();
        std::ofstream(out) << results.dump(2) << '\n';
        return 0;
    } catch (const std::exception& failure) {
        std::fprintf(stderr, "calibration_methods: %s\n", failure.what());
        return 1;
    }
}
