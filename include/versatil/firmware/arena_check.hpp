// The check an exported header makes of the arena plan it states. Planning is search (several
// orders, a fallback: arena_planner.hpp), too costly for a compiler's constant-evaluation
// budget once a model has a hundred tensors or more (GCC allows 2^25 operations, Clang 2^20
// steps); checking a plan is one pass over the pairs of tensors. So the code generator plans,
// the header states the offsets, and the compiler proves them safe from the layers alone,
// without the planner's reasoning: two tensors alive at the same time never share a byte,
// unless
// - they are views of one tensor, at the same offset (the same bytes, read only); or
// - a layer writes its output over an input it is the last to read: at the same offset for an
//   elementwise layer of equal sizes, `lag` bytes lower for a windowed one (in_place.hpp).
// Lifetimes are as the planner counts them: from the layer that writes a tensor to the last
// that reads it (the model's output to the end); a layer's scratch lives during that layer.
#pragma once

#include <cstddef>
#include <span>

#include "versatil/firmware/arena_planner.hpp"
#include "versatil/firmware/layer.hpp"
#include "versatil/firmware/shape.hpp"

namespace versatil::firmware {

namespace detail {

constexpr bool share_bytes(const placement& a, std::size_t a_bytes, const placement& b, std::size_t b_bytes) noexcept {
    return a.external == b.external && a.offset < b.offset + b_bytes && b.offset < a.offset + a_bytes;
}

// Whether `later`, written by `writer`, may lie where it does over `earlier`, which it outlives.
constexpr bool written_in_place(const layer& writer, int later, int earlier, std::span<const planner_slot> slots,
                                std::span<const placement> at, std::span<const shape> tensors) noexcept {
    if (writer.output != later || slots[earlier].last != slots[later].first) return false;
    bool reads_earlier = false;
    for (int k = 0; k < writer.input_count(); ++k)
        reads_earlier = reads_earlier || slots[writer.inputs[k]].block == slots[earlier].block;
    if (!reads_earlier) return false;
    const auto to = static_cast<std::ptrdiff_t>(at[later].offset), from = static_cast<std::ptrdiff_t>(at[earlier].offset);
    if (writer.alias == aliasing::elementwise) return to == from && tensors[later].bytes() == tensors[earlier].bytes();
    return writer.alias == aliasing::windowed && writer.lag != not_in_place && to == from - writer.lag;
}

}  // namespace detail

// -1 when `at` is a safe placement of `tensors` for `layers` in an arena of `arena_bytes`
// (see above), else a tensor that is misplaced: outside its buffer, or on bytes of a tensor
// alive with it. `work` holds one slot per tensor.
constexpr int misplaced_tensor(std::span<const shape> tensors, std::span<const layer> layers, int input, int output,
                               std::span<const placement> at, std::size_t arena_bytes,
                               std::span<planner_slot> work) noexcept {
    const int count = static_cast<int>(tensors.size());
    // Lifetimes, and in `block` the tensor each view chain starts from.
    detail::count_lifetimes(tensors, layers, input, output, work);
    for (const layer& l : layers)
        if (l.alias == aliasing::view) work[l.output].block = work[l.inputs[0]].block;
    const std::size_t input_bytes = input >= 0 ? tensors[input].bytes() : 0;
    for (int a = 0; a < count; ++a) {
        const std::size_t room = at[a].external ? input_bytes : arena_bytes;
        const bool views_input = input >= 0 && work[a].block == work[input].block;
        if (at[a].external != views_input || at[a].offset + tensors[a].bytes() > room) return a;
        for (int b = a + 1; b < count; ++b) {
            if (!detail::overlaps(work[a].first, work[a].last, work[b].first, work[b].last) ||
                !detail::share_bytes(at[a], tensors[a].bytes(), at[b], tensors[b].bytes()))
                continue;
            if (work[a].block == work[b].block && at[a].offset == at[b].offset) continue;  // one tensor's views
            const bool b_later = work[b].first > work[a].first;
            const int later = b_later ? b : a, earlier = b_later ? a : b;
            if (work[later].first == work[earlier].first ||
                !detail::written_in_place(layers[work[later].first], later, earlier, work, at, tensors))
                return later;
        }
    }
    return -1;
}

// A plan the code generator states in an exported header (offsets and figures as literals),
// which the header checks with misplaced_tensor.
template <std::size_t Tensors>
constexpr int misplaced_tensor(const arena_plan<Tensors>& plan, const shape (&tensors)[Tensors],
                               std::span<const layer> layers, int input, int output) noexcept {
    std::array<planner_slot, Tensors> work{};
    return misplaced_tensor(std::span<const shape>(tensors), layers, input, output,
                            std::span<const placement>(plan.tensors), plan.figures.arena_bytes,
                            std::span<planner_slot>(work));
}

}  // namespace versatil::firmware
