// versatil-quantize: quantize a TorchScript model with versatil's backends, report what it
// did, save the result.
//
//   versatil-quantize [--model M.pt] [--data D.pt] [--target PATH=BACKEND[:OPT[,OPT]]]...
//                     [--out Q.pt] [--report R.json]
//                     [--export H.hpp [--export-namespace NAME] [--export-input-layout chw|hwc]]
//                     [--batch N] [--threads N]
//                     [--steps N] [--lr X] [--freeze-observers-after N] [--no-per-layer]
//                     [--per-layer-samples N] [--per-layer-top N]
//                     [--min-sqnr DB] [--max-accuracy-drop POINTS] [--verbose]
//                     [--RANK R --WORLD_SIZE N --MASTER_ADDR HOST --MASTER_PORT PORT [--dist-timeout S]]
//
// With a world size above one (flags, or torchrun's variables of the same names), every
// process runs the same command: each observes its share of the calibration batches, the
// observers' statistics are merged over LibTorch's c10d (Gloo), and rank 0 alone converts,
// measures and writes. QAT targets train as DistributedDataParallel does: each process takes
// its slice (--batch examples) of every global batch of --batch x WORLD_SIZE, gradients are
// averaged and fake-quantize ranges merged every step (libtorch/distributed/qat.hpp). A process
// that never joins or dies makes the others fail within the timeout, writing nothing.
//
// Without --model it quantizes an embedded default (a small CNN + MLP with synthetic data)
// and prints the report. Targets with the qat option are trained first (on the data file's
// train_inputs / train_labels). --export writes a model quantized for a microcontroller
// (cortex_m) as a C++ header for the firmware runtime, and adds the firmware section to the
// report. Exit status: 0 done, 2 bad arguments or input (a model
// LibTorch cannot quantize included) or a fault of the machine the message names (no space,
// a file-size limit, a killed process), 1 anything else, 128 + N when signal N stopped the
// run (temporary files removed, nothing half written); every error is one line (--verbose
// prints LibTorch's whole message for the unforeseen ones).
#include <CLI/CLI.hpp>
#include <torch/script.h>
#include <torch/version.h>

#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "versatil/libtorch.hpp"
#include "versatil/libtorch/export/firmware.hpp"
#include "versatil/libtorch/files/data_file.hpp"
#include "versatil/libtorch/demo/models.hpp"
#include "versatil/libtorch/plan/target_spec.hpp"
#include "versatil/libtorch/distributed/world.hpp"
#include "command_files.hpp"
#include "command_help.hpp"
#include "option_errors.hpp"
#ifdef USE_C10D_GLOO
#include "versatil/libtorch/distributed/across_processes.hpp"
#endif

namespace {

using namespace versatil;
using namespace versatil::libtorch;

struct inputs {
    ::torch::jit::Module model;
    quantize_data data;
};

inputs embedded_default() {
    // Synthetic but structured input: smooth images (low-frequency noise), so activations
    // have realistic ranges; calibration and evaluation draw from one distribution.
    const auto images = [](std::int64_t count, std::uint64_t seed) {
        const at::Generator generator = at::detail::createCPUGenerator(seed);
        const at::Tensor coarse = at::randn({count, 1, 7, 7}, generator);
        return at::upsample_bilinear2d(coarse, {28, 28}, false);
    };
    quantize_data data;
    data.calibration = split_batches(images(256, 1), default_batch_rows);
    data.evaluation = split_batches(images(128, 2), default_batch_rows);
    return {small_cnn_mlp(0), std::move(data)};
}

inputs from_files(const std::string& model_path, const std::optional<std::string>& data_path) {
    return {load_model(model_path), data_path ? batches_of(load_data_file(*data_path), default_batch_rows)
                                              : quantize_data{}};
}

// --version: this versatil, the LibTorch it was built with, and the quantized engines that
// LibTorch offers at run time (a backend whose engine is missing cannot lower; LibTorch also
// lists NoQEngine, which is none).
std::string version_text() {
    std::string text =
        "versatil " + std::string(versatil::version) + "\nLibTorch " TORCH_VERSION "\nquantized engines:";
    for (const at::QEngine engine : at::globalContext().supportedQEngines())
        if (engine != at::QEngine::NoQEngine) text += " " + engine_name(engine);
    return text;
}

// The header's namespace: the one given, or the header file's stem ("fm_cnn" for fm_cnn.hpp).
std::string export_namespace(const std::string& header_path, const std::optional<std::string>& given) {
    const std::string name = given ? *given : std::filesystem::path(header_path).stem().string();
    try {
        codegen::check_namespace(name);
    } catch (const std::invalid_argument& failure) {
        throw error(error_kind::invalid_argument,
                    std::string(failure.what()) + (given ? "" : "; name one with --export-namespace"));
    }
    return name;
}

// The processes of a distributed run, joined with Gloo, each calibrating (or training) its share:
// the sequence's calibration policy is across_processes then, this_process otherwise. Without
// Gloo, one process only.
struct world_run {
#ifdef USE_C10D_GLOO
    std::optional<process_group> group;
    std::optional<across_processes> shared;  // once joined; it keeps what each rank contributed

    // Rank 0 says where it listens before waiting (MASTER_PORT 0: the port the OS picked).
    explicit world_run(const world_config& world)
        : group(process_group::join(world, [&](std::uint16_t port) {
              std::fprintf(stderr, "versatil-quantize: %s listening at %s:%u\n", describe(world).c_str(),
                           world.master_addr.c_str(), static_cast<unsigned>(port));
              std::fflush(stderr);
          })) {
        if (!group) return;
        std::fprintf(stderr, "versatil-quantize: %s joined at %s:%u\n", describe(world).c_str(),
                     world.master_addr.c_str(), static_cast<unsigned>(group->world().master_port));
        shared.emplace(across_processes{.group = *group, .draws_progress = world.writes_outputs()});
    }
    std::vector<std::int64_t> samples_per_rank(bool qat) const {
        return shared ? shared->samples_per_rank(qat) : std::vector<std::int64_t>{};
    }
#else
    explicit world_run(const world_config& world) {
        if (world.is_distributed())
            throw error(error_kind::invalid_argument,
                        "this versatil-quantize was built without LibTorch's Gloo process group (libgloo-dev); "
                        "run it with WORLD_SIZE=1");
    }
    std::vector<std::int64_t> samples_per_rank(bool) const { return {}; }
#endif

    // `work(policy)` with the run's calibration policy.
    template <class Work>
    auto with_policy(Work&& work) {
#ifdef USE_C10D_GLOO
        if (shared) return work(*shared);
#endif
        this_process alone;
        return work(alone);
    }
};

// The outputs staged before the run, written and committed as a set: a report never describes a model
// that could not be saved, and a failure leaves none behind.
void commit_outputs(versatil_quantize::staged_outputs& outputs, const quantization_result& result,
                    const std::optional<firmware_export>& exported) {
    if (outputs.model) write_quantized(*outputs.model, result.model);
    if (outputs.report) outputs.report->write(to_json(result.report).dump(2) + "\n");
    if (outputs.header) outputs.header->write(exported->header);
    commit_together({outputs.model ? &*outputs.model : nullptr, outputs.report ? &*outputs.report : nullptr,
                     outputs.header ? &*outputs.header : nullptr});
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"Quantize a TorchScript model with versatil's backends (" + backend_names_shown() + ")"};
    app.footer(std::string(versatil_quantize::help_examples));
    std::optional<std::string> model_path, data_path, out_path, report_path, export_path, export_namespace_name;
    std::vector<std::string> target_texts;
    std::int64_t batch = 1;
    int threads = 1;
    bool no_per_layer = false;
    std::int64_t per_layer_samples = quantize_options{}.per_layer_samples;
    std::optional<std::int64_t> per_layer_top;
    bool verbose = false;
    qat_options qat;
    accuracy_target target;
    using versatil_quantize::above_zero, versatil_quantize::at_least;
    app.add_option("--model", model_path, "TorchScript model (default: an embedded small CNN + MLP)")
        ->type_name("FILE");
    app.add_option("--data", data_path, "data file: tensors calib, and optionally test and test_labels (calib_0, "
                                        "calib_1, ... and test_0, ... for a model with several inputs)")
        ->type_name("FILE");
    app.add_option("--target", target_texts, versatil_quantize::target_help())->type_name("PATH=BACKEND[:OPT,...]");
    app.add_option("--out", out_path, "where to save the quantized TorchScript model")->type_name("FILE");
    app.add_option("--report", report_path, "where to write the report as JSON")->type_name("FILE");
    app.add_option("--export", export_path,
                   "where to write the model as a C++ header for the firmware runtime (needs --target =cortex_m)")
        ->type_name("FILE");
    // Their need of --export is checked after parsing: CLI11's needs() garbles the help line.
    app.add_option("--export-namespace", export_namespace_name,
                   "with --export: the header's namespace (default: the header file's name without .hpp)")
        ->type_name("NAME");
    std::string export_input_layout = "chw";
    app.add_option("--export-input-layout", export_input_layout,
                   "with --export: the order of the header's input levels, chw (default) or hwc, channel-last as "
                   "cameras deliver them, read in place by the first convolution")
        ->type_name("chw|hwc")
        ->check(CLI::Validator(
            [](std::string& text) { return text == "chw" || text == "hwc" ? "" : "is chw or hwc, not '" + text + "'"; },
            ""));
    auto* batch_option =
        app.add_option("--batch", batch, "batch size for latency, and for QAT training (default 1; 64 with qat; per "
                                         "process across processes)")
            ->type_name("N")
            ->check(at_least(1));
    app.add_option("--threads", threads, "intra-op threads for lowering and latency (default 1)")
        ->type_name("N")
        ->check(at_least(1));
    app.add_flag("--no-per-layer", no_per_layer, "skip the per-layer SQNR analysis (one evaluation pass per layer)");
    app.add_option("--per-layer-top", per_layer_top,
                   "show only the N worst layers of the per-layer analysis in the table (the JSON report keeps all)")
        ->type_name("N")
        ->check(at_least(1));
    app.add_option("--per-layer-samples", per_layer_samples,
                   "evaluation samples the per-layer analysis runs each layer on (default: at least 128, and about one "
                   "evaluation pass in all; 0: all)")
        ->type_name("N")
        ->check(at_least(0));
    app.add_option("--min-sqnr", target.min_sqnr_db,
                   "accuracy target: keep layers in float one at a time, each step the one that gains most (greedy), "
                   "until the output SQNR is at least DB (exit 2, nothing written, if no step reaches it)")
        ->type_name("DB");
    app.add_option("--max-accuracy-drop", target.max_accuracy_drop,
                   "accuracy target: as --min-sqnr, until top-1 is at most POINTS below the float model's (needs "
                   "the data file's test and test_labels)")
        ->type_name("POINTS");
    app.add_option("--steps", qat.training.steps, "QAT: training steps (default 300)")
        ->type_name("N")
        ->check(at_least(1));
    app.add_option("--lr", qat.training.learning_rate, "QAT: Adam learning rate (default 1e-4)")
        ->type_name("X")
        ->check(above_zero());
    app.add_option("--freeze-observers-after", qat.freeze_observers_after,
                   "QAT: stop moving quantization ranges after this many steps (default: never)")
        ->type_name("N");
    world_flags world_given;
    app.add_option("--RANK", world_given.rank, "this process's rank, 0 to WORLD_SIZE - 1 (default: $RANK)")
        ->type_name("R");
    app.add_option(
           "--WORLD_SIZE", world_given.world_size,
           "processes calibrating or training together (default: $WORLD_SIZE, else 1); rank 0 writes the outputs")
        ->type_name("N");
    app.add_option("--MASTER_ADDR", world_given.master_addr,
                   "rank 0's host, where the processes meet (default: $MASTER_ADDR)")
        ->type_name("HOST");
    app.add_option("--MASTER_PORT", world_given.master_port,
                   "a free TCP port on rank 0's host, or 0 on rank 0 for one the OS picks, announced on stderr as "
                   "'listening at HOST:PORT' (default: $MASTER_PORT)")
        ->type_name("PORT");
    app.add_option("--dist-timeout", world_given.timeout_seconds,
                   "seconds to wait for the other processes to join or answer before failing (default 300)")
        ->type_name("S");
    app.add_flag("--verbose", verbose, "on an internal error, print LibTorch's whole message and backtrace");
    app.set_version_flag("--version", version_text, "print versatil's version, LibTorch's and its quantized engines");
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& help) {
        return app.exit(help);
    } catch (const CLI::CallForVersion& version) {
        return app.exit(version);
    } catch (const CLI::ParseError& failure) {
        std::fprintf(stderr, "versatil-quantize: error (invalid_argument): %s\n",
                     versatil_quantize::describe_parse_error(failure, argc, argv, app).c_str());
        return 2;
    }

    // SIGINT, SIGTERM or SIGHUP mid-run remove the temporary files, say so in one line, then end the
    // run as the signal does (status 130 for Ctrl-C in a shell).
    const cleanup_on_signals cleanup("versatil-quantize");
    try {
        std::vector<runtime_target> targets;
        for (const std::string& text : target_texts) targets.push_back(parse_target(text));
        if (targets.empty()) targets.push_back(parse_target("=x86_inductor"));
        auto quantizer = runtime_quantizer::compose(std::move(targets));
        if (!quantizer) throw error(error_kind::invalid_argument, quantizer.error().message);
        if (data_path && !model_path)
            throw error(error_kind::invalid_argument,
                        "--data needs --model (the embedded default brings its own data)");
        for (const char* option : {"--export-namespace", "--export-input-layout"})
            if (!export_path && app.count(option) > 0)
                throw error(error_kind::invalid_argument,
                            std::string(option) + " shapes the firmware header: it needs --export H.hpp");
        std::string namespace_name;
        if (export_path) {
            if (!quantizer->supported_device_types().contains(device_type::mcu))
                throw error(error_kind::invalid_argument,
                            "--export writes firmware for a microcontroller: quantize for one (--target =cortex_m)");
            namespace_name = export_namespace(*export_path, export_namespace_name);
        }

        const world_config world = world_from(world_given);
        if (world.is_distributed() && !target.empty())
            throw error(error_kind::invalid_argument,
                        "an accuracy target quantizes again per step, which the other processes do not take part in; "
                        "use it with one process (WORLD_SIZE=1)");

        // Every file is checked before any work, so a wrong output path fails now, not after the run.
        std::vector<versatil_quantize::named_file> input_files;
        if (model_path) input_files.push_back({"--model", *model_path});
        if (data_path) input_files.push_back({"--data", *data_path});
        for (const versatil_quantize::named_file& input : input_files)
            versatil_quantize::check_input(input, input.option == "--model" ? error_kind::invalid_model_file
                                                                             : error_kind::invalid_data_file);
        // Only the rank that writes stages the outputs; the others write nothing.
        const bool writes = world.writes_outputs();
        versatil_quantize::staged_outputs outputs(writes ? out_path : std::nullopt, writes ? report_path : std::nullopt,
                                                  writes ? export_path : std::nullopt, input_files);

        inputs in = model_path ? from_files(*model_path, data_path) : embedded_default();
        if (model_path && in.data.calibration.empty() && in.data.evaluation.empty())
            throw quantizer->needs_calibration()
                ? error(error_kind::no_calibration_data,
                        "no data: give --data with a 'calib' tensor (and 'test' to measure on held-out samples)")
                : error(error_kind::no_evaluation_data,
                        "no data: dynamic quantization needs no calibration, but the report measures the quantized "
                        "model against the float one: give --data with a 'test' tensor (samples batched along dim 0)");

        // QAT across processes: the batch is each process's slice, as DDP's, so the global batch
        // is this x WORLD_SIZE.
        if (quantizer->is_qat())
            qat.training.batch_size = batch_option->count() > 0 ? batch : qat_options{}.training.batch_size;
        if (quantizer->is_qat() && !model_path) {
            // The embedded default trains on its own synthetic task: labels from a fixed random
            // linear map of the inputs, which the float model can learn.
            const at::Tensor inputs = concatenate(in.data.calibration).front();
            const at::Generator generator = at::detail::createCPUGenerator(7);
            const at::Tensor projection = at::randn({inputs[0].numel(), 10}, generator);
            in.data.train_inputs = inputs;
            in.data.train_labels = inputs.flatten(1).matmul(projection).argmax(1);
        }
        const quantize_options options{.batch_size = batch, .threads = threads, .per_layer = !no_per_layer,
                                       .progress = true, .qat = qat, .per_layer_samples = per_layer_samples};
        world_run processes(world);
        if (!world.writes_outputs()) {
            processes.with_policy(
                [&](auto& policy) { calibrate_only(in.model, *quantizer, in.data, options, policy); });
            std::printf("versatil-quantize: %s %s %lld samples; rank 0 converts and writes\n", describe(world).c_str(),
                        quantizer->is_qat() ? "trained on" : "observed",
                        static_cast<long long>(
                            processes.samples_per_rank(quantizer->is_qat()).at(static_cast<std::size_t>(world.rank))));
            return 0;
        }
        quantization_result result = processes.with_policy(
            [&](auto& policy) { return quantize_to_target(in.model, *quantizer, in.data, target, options, policy); });
        if (world.is_distributed()) {
            result.report.world_size = world.size;
            result.report.samples_per_rank = processes.samples_per_rank(quantizer->is_qat());
        }
        std::optional<firmware_export> exported;
        if (export_path) {
            exported = export_firmware(in.model, result.model,
                                       in.data.evaluation.empty() ? in.data.calibration : in.data.evaluation,
                                       namespace_name,
                                       export_input_layout == "hwc" ? codegen::input_layout::hwc
                                                                    : codegen::input_layout::chw);
            result.report.firmware = exported->report;
        }
        if (model_path) result.report.model_path = *model_path;
        result.report.command_line.assign(argv, argv + argc);
        std::printf("versatil %.*s: %s\n", static_cast<int>(versatil::version.size()), versatil::version.data(),
                    model_path ? model_path->c_str() : "embedded default (small CNN + MLP, synthetic data)");
        // The table shows the worst rows only (per_layer is worst first); the JSON report keeps every row.
        quantization_report shown = result.report;
        const std::size_t all_rows = shown.per_layer.size();
        if (per_layer_top && all_rows > static_cast<std::size_t>(*per_layer_top))
            shown.per_layer.resize(static_cast<std::size_t>(*per_layer_top));
        std::fputs(format_table(shown).c_str(), stdout);
        if (shown.per_layer.size() < all_rows)
            std::printf("  (%zu more layers not shown: --per-layer-top %lld)\n", all_rows - shown.per_layer.size(),
                        static_cast<long long>(*per_layer_top));
        commit_outputs(outputs, result, exported);
        // A quantized model runs only on the engine its weights were packed for; Python's default may be another.
        if (out_path)
            std::printf("saved %s (to run it in Python, set torch.backends.quantized.engine = '%s' first)\n",
                        out_path->c_str(), result.report.engine.c_str());
        if (export_path) std::printf("exported %s (namespace %s)\n", export_path->c_str(), namespace_name.c_str());
        return 0;
    } catch (const error& failure) {
        std::fprintf(stderr, "versatil-quantize: error (%s): %s\n", std::string(to_string(failure.kind())).c_str(),
                     failure.what());
        const bool bad_input = failure.kind() != error_kind::lowering_failed;
        return bad_input ? 2 : 1;
    } catch (const std::exception& failure) {
        // Not a failure this layer foresaw: one line, the rest (LibTorch's backtrace) with --verbose.
        const std::string message = verbose ? failure.what() : one_line(failure);
        std::fprintf(stderr, "versatil-quantize: internal error: %s%s\n", message.c_str(),
                     verbose ? "" : " (--verbose shows LibTorch's full message)");
        return 1;
    }
}
