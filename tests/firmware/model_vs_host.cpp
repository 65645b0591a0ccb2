// The compiled header of the synthetic graph (written at build time by
// write_synthetic_header) against run_on_host on the same graph: the same bytes for every
// input, and the same figures.
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "synthetic_graph.hpp"
#include "synthetic_model.hpp"
#include "versatil/codegen/figures.hpp"
#include "versatil/codegen/host_runner.hpp"

using model = synthetic_model::model;

// What a user writes: the model fits the device.
static_assert(model::arena_bytes <= 32 * 1024);
static_assert(model::input_size == 28 * 28 && model::output_size == 10);
static_assert(model::arena_bytes >= model::arena_lower_bound_bytes);

TEST_CASE("model::run equals run_on_host byte for byte") {
    const auto graph = synthetic::graph(SYNTHETIC_SEED);
    const auto lowered = versatil::codegen::lower(graph);
    std::mt19937 random(31);
    std::vector<std::byte> arena(model::arena_bytes);
    int differing_outputs = 0;
    std::vector<std::int8_t> previous;
    for (int n = 0; n < 300; ++n) {
        std::vector<std::int8_t> input(model::input_size), output(model::output_size);
        for (auto& x : input) x = static_cast<std::int8_t>(random() % 256);
        for (auto& b : arena) b = static_cast<std::byte>(random());  // whatever the arena held before
        model::run(input.data(), output.data(), arena.data());
        REQUIRE(output == versatil::codegen::run_on_host(lowered, input));
        differing_outputs += output != previous ? 1 : 0;
        previous = output;
    }
    CHECK(differing_outputs > 250);  // the outputs depend on the input: not a constant model
}

TEST_CASE("the header's figures are summarize's") {
    const auto figures = versatil::codegen::summarize(synthetic::graph(SYNTHETIC_SEED));
    CHECK(figures.arena_bytes == model::arena_bytes);
    CHECK(figures.arena_lower_bound_bytes == model::arena_lower_bound_bytes);
    CHECK(figures.greedy_planner_bytes == model::greedy_planner_bytes);
    CHECK(figures.parameter_bytes == model::parameter_bytes);
    CHECK(figures.arena_bytes == figures.arena_lower_bound_bytes);
    CHECK(figures.arena_bytes < figures.greedy_planner_bytes);
    MESSAGE("arena " << figures.arena_bytes << " B, live-set bound " << figures.arena_lower_bound_bytes
                     << " B, greedy planner " << figures.greedy_planner_bytes << " B, parameters "
                     << figures.parameter_bytes << " B");
}
