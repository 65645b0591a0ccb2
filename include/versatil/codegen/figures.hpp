// The arena plan of a lowered graph on the host, by the firmware's own planner (the function
// an exported header calls while compiling), and the figures of a graph: arena, live-set
// lower bound, TFLite-Micro-style greedy planner, parameter bytes. summarize's arena_bytes
// is the header's model::arena_bytes.
#pragma once

#include <cstddef>
#include <vector>

#include "versatil/codegen/integer_graph.hpp"
#include "versatil/codegen/lower.hpp"
#include "versatil/firmware/arena_planner.hpp"

namespace versatil::codegen {

struct host_plan {
    std::vector<firmware::placement> tensors;
    firmware::plan_figures figures;
};

inline host_plan plan_arena(const lowered_graph& g) {
    const std::vector<firmware::layer> layers = planner_layers(g);
    host_plan plan{std::vector<firmware::placement>(g.tensors.size()), {}};
    std::vector<firmware::planner_slot> work(g.tensors.size());
    plan.figures = firmware::plan_arena(g.tensors, layers, g.input, g.output, plan.tensors, work);
    return plan;
}

struct firmware_figures {
    std::size_t arena_bytes = 0;              // the header's model::arena_bytes
    std::size_t arena_lower_bound_bytes = 0;  // the largest set of tensors alive at once, in-place aliasing counted
    std::size_t greedy_planner_bytes = 0;     // TFLite Micro's greedy-by-size planner, no in-place layers
    std::size_t parameter_bytes = 0;          // weights, biases, multipliers and shifts

    friend bool operator==(const firmware_figures&, const firmware_figures&) = default;
};

inline firmware_figures summarize(const lowered_graph& g) {
    const firmware::plan_figures f = plan_arena(g).figures;
    return {f.arena_bytes, f.lower_bound_bytes, f.greedy_bytes, parameter_bytes(g)};
}

inline firmware_figures summarize(const integer_graph& graph) { return summarize(lower(graph)); }

}  // namespace versatil::codegen
