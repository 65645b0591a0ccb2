// Distributed calibration against one process observing everything. tests/torch/run_ranks.py
// starts this binary once per rank (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set); every rank
// computes the one-process reference itself on the same data, so each compares locally.
#include "doctest_with_torch.hpp"
#include "torch_test_helpers.hpp"
#include "versatil/libtorch/distributed/calibration.hpp"
#include "versatil/libtorch/pipeline/convert.hpp"
#include "versatil/libtorch/pipeline/lower.hpp"
#include "versatil/libtorch/pipeline/measure.hpp"
#include "versatil/libtorch/demo/fashion_mnist.hpp"

#include <cstdlib>
#include <numeric>

using namespace versatil;
using namespace versatil::libtorch;

namespace {

// The world this process was started in; the driver always starts more than one process.
process_group& group() {
    static std::optional<process_group> joined = process_group::join(world_from({.timeout_seconds = 120.0}));
    REQUIRE_MESSAGE(joined.has_value(), "run through tests/torch/run_ranks.py with WORLD_SIZE of 2 or more");
    return *joined;
}

// Real images: Fashion-MNIST's first training images, in batches of 32 of varying content.
const std::vector<batch>& calibration_batches() {
    static const std::vector<batch> batches = [] {
        versatil::testing::require_fashion_mnist();
        const dataset train = load_fashion_mnist(fashion_mnist_split::train, 1024);
        return split_batches(train.images, 32);
    }();
    return batches;
}

quantization_spec spec_of(observer_kind kind) {
    quantization_spec spec{.dtype = dtype::uint8, .quant_min = 0, .quant_max = 255,
                           .qscheme = qscheme::per_tensor_affine, .observer = kind};
    if (kind == observer_kind::per_channel_min_max) {
        spec.dtype = dtype::int8;
        spec.quant_min = -128;
        spec.quant_max = 127;
        spec.qscheme = qscheme::per_channel_symmetric;
        spec.ch_axis = 1;
    }
    return spec;
}

// Values of varied range: the batches through a fixed random conv, so batches differ in range.
std::vector<at::Tensor> activations() {
    const at::Generator generator = at::detail::createCPUGenerator(3);
    const at::Tensor weight = at::randn({8, 1, 3, 3}, generator);
    std::vector<at::Tensor> values;
    for (const batch& inputs : calibration_batches()) values.push_back(at::conv2d(inputs.input(0), weight));
    return values;
}

::torch::jit::Module observed(observer_kind kind, const std::vector<at::Tensor>& values, int rank, int size) {
    ::torch::jit::Module observer = make_observer(spec_of(kind));
    for (std::size_t i = static_cast<std::size_t>(rank); i < values.size(); i += static_cast<std::size_t>(size))
        observer.forward({values[i]});
    return observer;
}

std::pair<at::Tensor, at::Tensor> qparams_of(::torch::jit::Module& observer) {
    const auto result = observer.run_method("calculate_qparams").toTuple();
    return {result->elements()[0].toTensor(), result->elements()[1].toTensor()};
}

// SQNR of `values` quantized per tensor with (scale, zero_point), uint8.
double sqnr_with(const std::vector<at::Tensor>& values, const std::pair<at::Tensor, at::Tensor>& qparams) {
    const at::Tensor all = at::cat([&] {
        std::vector<at::Tensor> flat;
        for (const at::Tensor& value : values) flat.push_back(value.flatten());
        return flat;
    }());
    const at::Tensor restored = at::fake_quantize_per_tensor_affine(
        all, qparams.first.item<double>(), qparams.second.item<std::int64_t>(), 0, 255);
    return 10.0 * std::log10(all.pow(2).sum().item<double>() / (all - restored).pow(2).sum().item<double>());
}

}  // namespace

// The driver's variables put aside, so the flags alone describe the world.
struct no_world_variables {
    versatil::testing::variable_fixture rank{"RANK", std::nullopt}, size{"WORLD_SIZE", std::nullopt},
        address{"MASTER_ADDR", std::nullopt}, port{"MASTER_PORT", std::nullopt};
};

TEST_CASE("a world of one process joins nothing") {
    const no_world_variables unset;
    CHECK_FALSE(world_from().is_distributed());
    CHECK_FALSE(process_group::join(world_config{}).has_value());
    CHECK_FALSE(process_group::join(world_from({.world_size = "1"})).has_value());
}

TEST_CASE("the world from flags: missing and malformed values are named") {
    const auto message_of = [](const world_flags& flags) {
        try {
            (void)world_from(flags);
        } catch (const error& failure) {
            return std::string(failure.what());
        }
        return std::string("no error");
    };
    const no_world_variables unset;
    CHECK(message_of({.world_size = "2", .master_addr = "127.0.0.1", .master_port = "1"}).find("RANK is not set") != std::string::npos);
    CHECK(message_of({.rank = "2", .world_size = "2", .master_addr = "h", .master_port = "1"}).find("RANK is '2'") != std::string::npos);
    CHECK(message_of({.rank = "0", .world_size = "2x", .master_addr = "h", .master_port = "1"}).find("WORLD_SIZE is '2x'") != std::string::npos);
    CHECK(message_of({.rank = "0", .world_size = "2", .master_addr = "h", .master_port = "70000"}).find("MASTER_PORT") != std::string::npos);
    const world_config world = world_from({.rank = "1", .world_size = "3", .master_addr = "h", .master_port = "29400"});
    CHECK(world.rank == 1);
    CHECK(world.size == 3);
    CHECK(world.master_port == 29400);
    CHECK_FALSE(world.writes_outputs());
    // The environment fills in what the flags leave out.
    const versatil::testing::variable_fixture size{"WORLD_SIZE", "4"}, rank{"RANK", "3"}, address{"MASTER_ADDR", "h"},
        port{"MASTER_PORT", "29401"};
    CHECK(world_from().rank == 3);
    CHECK(world_from({.rank = "2"}).rank == 2);
    CHECK(world_from().master_port == 29401);
}

TEST_CASE("shards deal every batch to exactly one rank") {
    const std::vector<batch> batches = versatil::testing::smooth_batches(7, 2, 1);
    std::int64_t dealt = 0;
    for (int rank = 0; rank < 3; ++rank) dealt += static_cast<std::int64_t>(shard_of(batches, rank, 3).size());
    CHECK(dealt == 7);
    CHECK(shard_of(batches, 2, 3).size() == 2);
    CHECK(at::equal(shard_of(batches, 1, 3)[1].input(0), batches[4].input(0)));
}

TEST_CASE("min-max observers merged across ranks equal one process bit for bit") {
    process_group& world = group();
    const std::vector<at::Tensor> values = activations();
    for (const observer_kind kind : {observer_kind::min_max, observer_kind::per_channel_min_max}) {
        CAPTURE(to_string(kind));
        ::torch::jit::Module reference = observed(kind, values, 0, 1);
        ::torch::jit::Module merged = observed(kind, values, world.rank(), world.size());
        // Each rank alone saw a narrower range than all data (else the test could not fail).
        merge_observer_statistics(merged, world);
        CHECK(at::equal(merged.attr("min_val").toTensor(), reference.attr("min_val").toTensor()));
        CHECK(at::equal(merged.attr("max_val").toTensor(), reference.attr("max_val").toTensor()));
        const auto [scale, zero_point] = qparams_of(merged);
        const auto [reference_scale, reference_zero_point] = qparams_of(reference);
        CHECK(at::equal(scale, reference_scale));
        CHECK(at::equal(zero_point, reference_zero_point));
    }
}

TEST_CASE("a rank's own min-max observer differs from all data's, so the merge is what makes them equal") {
    process_group& world = group();
    const std::vector<at::Tensor> values = activations();
    ::torch::jit::Module reference = observed(observer_kind::min_max, values, 0, 1);
    const std::vector<std::int64_t> differs = world.all_gather(
        !at::equal(observed(observer_kind::min_max, values, world.rank(), world.size()).attr("max_val").toTensor(),
                   reference.attr("max_val").toTensor()) ||
            !at::equal(observed(observer_kind::min_max, values, world.rank(), world.size()).attr("min_val").toTensor(),
                       reference.attr("min_val").toTensor()),
        "checking the shards differ");
    CHECK(std::accumulate(differs.begin(), differs.end(), std::int64_t{0}) > 0);
}

// One process's histogram observer is itself order-dependent: each batch that widens the range
// resamples the histogram built so far onto a coarser grid, and the L2 range search then moves
// by whole bins. On these activations, reordering the same batches moves one process's SQNR by
// about 0.7 dB (40.3 to 41.0 dB), so no merge can be within 0.1 dB of every order. The merge is
// held to what is well defined: the merged SQNR is within 0.1 dB of the range one process
// reaches over several orders of the same batches (natural, reversed, and rank by rank as 2, 3,
// 4 and 8 processes deal them); the model-level test below compares with the natural order.
// The percentile and entropy observers keep the same histogram and choose another range from
// it, so they merge the same way and are held to the same bound.
TEST_CASE("histogram observers merged across ranks give qparams within 0.1 dB SQNR of one process's") {
    process_group& world = group();
    const std::vector<at::Tensor> values = activations();
    for (const observer_kind kind :
         {observer_kind::histogram, observer_kind::histogram_percentile, observer_kind::histogram_entropy}) {
        INFO("observer ", observer_detail::class_name(kind));
        ::torch::jit::Module reference = observed(kind, values, 0, 1);
        ::torch::jit::Module merged = observed(kind, values, world.rank(), world.size());
        merge_observer_statistics(merged, world);
        CHECK(at::equal(merged.attr("min_val").toTensor(), reference.attr("min_val").toTensor()));
        // Every sample counted once: the merged histogram holds as many as one process's.
        CHECK(merged.attr("histogram").toTensor().sum().item<double>() ==
              doctest::Approx(reference.attr("histogram").toTensor().sum().item<double>()).epsilon(1e-6));
        const double merged_sqnr = sqnr_with(values, qparams_of(merged));
        std::vector<double> one_process{sqnr_with(values, qparams_of(reference))};
        std::vector<at::Tensor> reversed(values.rbegin(), values.rend());
        ::torch::jit::Module reversed_observer = observed(kind, reversed, 0, 1);
        one_process.push_back(sqnr_with(values, qparams_of(reversed_observer)));
        for (const std::size_t ranks : {2, 3, 4, 8}) {
            std::vector<at::Tensor> rank_by_rank;
            for (std::size_t rank = 0; rank < ranks; ++rank)
                for (std::size_t i = rank; i < values.size(); i += ranks) rank_by_rank.push_back(values[i]);
            ::torch::jit::Module observer = observed(kind, rank_by_rank, 0, 1);
            one_process.push_back(sqnr_with(values, qparams_of(observer)));
        }
        const auto [lowest, highest] = std::minmax_element(one_process.begin(), one_process.end());
        MESSAGE("merged across ", world.size(), " ranks: SQNR ", merged_sqnr, " dB; one process, by batch order: ", *lowest,
                " to ", *highest, " dB (natural order ", one_process.front(), " dB)");
        CHECK(merged_sqnr >= *lowest - 0.1);
        CHECK(merged_sqnr <= *highest + 0.1);
    }
}

TEST_CASE("the auto observer is refused across ranks: its candidates depend on each rank's own values") {
    process_group& world = group();
    ::torch::jit::Module observer = observed(observer_kind::histogram_auto, activations(), world.rank(), world.size());
    // Every rank refuses before its first exchange, so none waits for another.
    std::string message = "no error";
    try {
        merge_observer_statistics(observer, world);
    } catch (const error& failure) {
        message = failure.what();
    }
    CHECK(message.find("HistogramAutoObserver") != std::string::npos);
    CHECK(message.find("has no merge across processes") != std::string::npos);
}

TEST_CASE("a whole model calibrated across ranks quantizes as one process does (x86_inductor, histograms)") {
    process_group& world = group();
    const ::torch::jit::Module model = mobilenet_cnn(0);
    auto quantizer = runtime_quantizer::compose({{"", *parse_backend_spec("x86_inductor")}});
    const quantization_plan plan = plan_for(*quantizer);
    const std::vector<batch>& batches = calibration_batches();

    prepared_model reference = prepare(model, plan);
    calibrate(reference, batches, {.progress = false});
    prepared_model merged = prepare(model, plan);
    const distributed_calibration done = calibrate_distributed(merged, batches, world, {.progress = false});
    CHECK(done.samples_per_rank.size() == static_cast<std::size_t>(world.size()));
    CHECK(std::accumulate(done.samples_per_rank.begin(), done.samples_per_rank.end(), std::int64_t{0}) == 1024);
    CHECK(done.samples_per_rank[static_cast<std::size_t>(world.rank())] ==
          32 * static_cast<std::int64_t>(shard_of(batches, world.rank(), world.size()).size()));

    const auto sqnr_of = [&](prepared_model& prepared) {
        const lowered_model lowered = lower(convert(prepared), {.sample = batches.front(), .threads = 1});
        const engine_scope engine(engine_settings{lowered.plan.engine, 1, std::nullopt});
        ::torch::jit::Module float_model = model.clone();
        float_model.eval();
        const model_outputs expected = run_batches(float_model, batches);
        return compare_outputs(expected, run_batches(lowered.module.deepcopy(), batches)).overall.sqnr_db;
    };
    const double reference_sqnr = sqnr_of(reference);
    const double merged_sqnr = sqnr_of(merged);
    MESSAGE("model SQNR ", merged_sqnr, " dB across ", world.size(), " ranks vs one process ", reference_sqnr, " dB");
    CHECK(std::abs(merged_sqnr - reference_sqnr) < 0.1);
}
