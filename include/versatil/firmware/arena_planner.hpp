// The activation memory plan: every tensor an offset in one arena, computed while compiling
// (the exported header calls plan_arena in a constant expression) and by the code generator
// on the host (the same function over vectors), so the figures it reports are the header's.
//
// 1. Lifetimes: a tensor lives from the layer that writes it to the last layer that reads it
//    (the model's output to the end). The model's input stays in the caller's buffer: it and
//    its views are outside the arena, and never written over.
// 2. Blocks: tensors that share bytes. A view joins its input's block. An elementwise or
//    windowed layer joins an input's block when everything in that block dies at this layer
//    (its output then starts `lag` levels before that input: in_place.hpp).
// 3. Placement: tensors alive at the same time get disjoint bytes; a block keeps its
//    tensors' relative offsets and goes to the lowest offset that fits, in three orders
//    (largest first, as TFLite Micro's greedy planner; by first use; by lifetime), and the
//    smallest arena wins.
//
// 4. Fallback: where no order with the in-place blocks beats TFLite Micro's greedy planner,
//    the same three orders without in-place layers; the smallest arena of all wins, so the
//    arena never exceeds the greedy figure.
//
// A layer's scratch (a kernel's working memory) is a tensor alive during that layer only.
//
// Figures: the arena; the live-set lower bound, the largest sum over blocks of the bytes of
// their tensors alive during one layer with the in-place layers (no placement, with them or
// without, needs less); and what TFLite Micro's greedy-by-size planner needs for the same graph without
// in-place layers (views alias there too, and the input is outside both).
#pragma once

#include <array>
#include <cstddef>
#include <span>

#include "versatil/firmware/layer.hpp"
#include "versatil/firmware/shape.hpp"

namespace versatil::firmware {

struct placement {
    bool external = false;   // in the caller's input buffer, offset from its start
    std::size_t offset = 0;  // bytes from the start of the arena (or of the input)
};

struct plan_figures {
    std::size_t arena_bytes = 0;
    std::size_t lower_bound_bytes = 0;
    std::size_t greedy_bytes = 0;
};

// Working storage, one per tensor (the caller provides it: no heap).
struct planner_slot {
    std::size_t bytes = 0;
    int first = 0, last = 0;   // the layers that write it and read it last (-1: the input)
    int block = 0;             // the tensor whose block it is in
    std::ptrdiff_t relative = 0;  // its offset inside the block, before normalizing
    // Per block, kept in the slot of the block's tensor:
    std::ptrdiff_t block_begin = 0, block_end = 0;
    int block_first = 0, block_last = 0;
    std::size_t block_offset = 0;
    bool placed = false;
    int order = 0;  // placement order: the i-th block to place is slots[i].order
    // Lists threaded through the slots, so that placement visits a block's tensors and the
    // placed ones only (in a constant expression every step counts against the compiler's
    // limit): the block's first member (kept in the block's slot), the next member of the
    // same block, the next tensor placed before this one (-1 ends a list).
    int first_member = -1, next_member = -1, next_placed = -1;
    int next_conflict = -1;  // while a block is placed: the next placed tensor alive during its lifetime
};

namespace detail {

constexpr bool overlaps(int first_a, int last_a, int first_b, int last_b) noexcept {
    return first_a <= last_b && first_b <= last_a;
}

// Step 1: each slot's bytes and lifetime, every tensor in a block of its own.
constexpr void count_lifetimes(std::span<const shape> tensors, std::span<const layer> layers, int input, int output,
                               std::span<planner_slot> slots) noexcept {
    const int count = static_cast<int>(tensors.size()), steps = static_cast<int>(layers.size());
    for (int t = 0; t < count; ++t) slots[t] = {tensors[t].bytes(), -1, -1, t, 0};
    for (int i = 0; i < steps; ++i) {
        const layer& l = layers[i];
        slots[l.output].first = slots[l.output].last = i;
        if (l.scratch >= 0) slots[l.scratch].first = slots[l.scratch].last = i;
        for (int k = 0; k < l.input_count(); ++k)
            if (slots[l.inputs[k]].last < i) slots[l.inputs[k]].last = i;
    }
    if (output >= 0 && output != input) slots[output].last = steps;  // read by the final copy
}

// Lifetimes and blocks (steps 1 and 2), and each block's extent and lifetime.
constexpr void form_blocks(std::span<const shape> tensors, std::span<const layer> layers, int input, int output,
                           bool in_place, std::span<planner_slot> slots) noexcept {
    const int count = static_cast<int>(tensors.size()), steps = static_cast<int>(layers.size());
    count_lifetimes(tensors, layers, input, output, slots);
    // While blocks form, each tensor is the one member of its own until a layer joins it to another.
    for (int t = 0; t < count; ++t) slots[t].first_member = t;
    const auto join = [&](int t, int block) {
        slots[t].block = block;
        slots[t].next_member = slots[block].first_member;
        slots[block].first_member = t;
    };
    const auto dies_here = [&](int block, int step) {
        for (int t = slots[block].first_member; t >= 0; t = slots[t].next_member)
            if (slots[t].first <= step && slots[t].last > step) return false;
        return true;
    };
    const int external = input >= 0 ? input : -1;
    for (int i = 0; i < steps; ++i) {
        const layer& l = layers[i];
        planner_slot& out = slots[l.output];
        if (l.alias == aliasing::view) {
            join(l.output, slots[l.inputs[0]].block);
            out.relative = slots[l.inputs[0]].relative;
            continue;
        }
        if (!in_place || l.alias == aliasing::none || (l.alias == aliasing::windowed && l.lag == not_in_place)) continue;
        const int candidates = l.alias == aliasing::elementwise ? l.input_count() : 1;
        for (int k = 0; k < candidates; ++k) {
            const planner_slot& in = slots[l.inputs[k]];
            // A broadcast input (mul's per-channel gate) is smaller than the output it would hold.
            const bool broadcast = l.alias == aliasing::elementwise && !(l.input_shapes[k] == l.output_shape);
            if (in.block == external || broadcast || !dies_here(in.block, i)) continue;
            out.relative = in.relative - (l.alias == aliasing::windowed ? l.lag : 0);
            join(l.output, in.block);
            break;
        }
    }
    for (int t = 0; t < count; ++t) {  // a block's own tensor sits at its relative 0
        if (slots[t].block != t) continue;
        slots[t].block_begin = 0;
        slots[t].block_end = static_cast<std::ptrdiff_t>(slots[t].bytes);
        slots[t].block_first = slots[t].first;
        slots[t].block_last = slots[t].last;
    }
    for (int t = 0; t < count; ++t) slots[t].first_member = slots[t].next_member = -1;  // in tensor order below
    for (int t = count - 1; t >= 0; --t) {
        planner_slot& b = slots[slots[t].block];
        slots[t].next_member = b.first_member;
        b.first_member = t;
    }
    for (int t = 0; t < count; ++t) {
        planner_slot& b = slots[slots[t].block];
        const std::ptrdiff_t begin = slots[t].relative, end = begin + static_cast<std::ptrdiff_t>(slots[t].bytes);
        if (begin < b.block_begin) b.block_begin = begin;
        if (end > b.block_end) b.block_end = end;
        if (slots[t].first < b.block_first) b.block_first = slots[t].first;
        if (slots[t].last > b.block_last) b.block_last = slots[t].last;
    }
}

constexpr bool in_arena(std::span<const planner_slot> slots, int t, int input) noexcept {
    return slots[t].block == t && (input < 0 || slots[input].block != t);
}

constexpr std::size_t block_size(const planner_slot& b) noexcept {
    return static_cast<std::size_t>(b.block_end - b.block_begin);
}

// Where tensor t lies once its block is placed: block_offset is where the block's lowest
// byte goes.
constexpr std::size_t address(std::span<const planner_slot> slots, int t) noexcept {
    const planner_slot& b = slots[slots[t].block];
    return b.block_offset + static_cast<std::size_t>(slots[t].relative - b.block_begin);
}

// Step 3 for one order. A block is rigid (its tensors keep their relative offsets) but only
// its tensors alive at a time take bytes then: each block goes to the lowest offset where no
// tensor of it meets, in time and in bytes, a tensor of a block placed before it. The
// candidates are 0 and the offsets that put one of its tensors just above a placed tensor.
// Returns the arena's size.
constexpr std::size_t place(std::span<planner_slot> slots, int blocks) noexcept {
    for (auto& s : slots) s.placed = false;
    int placed = -1;  // the list of placed tensors
    std::size_t arena = 0;
    for (int n = 0; n < blocks; ++n) {
        const int b = slots[n].order;
        // Only placed tensors alive during the block's lifetime can be in its way.
        int conflicts = -1;
        for (int p = placed; p >= 0; p = slots[p].next_placed) {
            if (!overlaps(slots[b].block_first, slots[b].block_last, slots[p].first, slots[p].last)) continue;
            slots[p].next_conflict = conflicts;
            conflicts = p;
        }
        const auto fits = [&](std::size_t offset) {
            for (int m = slots[b].first_member; m >= 0; m = slots[m].next_member) {
                const std::size_t begin = offset + static_cast<std::size_t>(slots[m].relative - slots[b].block_begin);
                for (int p = conflicts; p >= 0; p = slots[p].next_conflict) {
                    if (!overlaps(slots[m].first, slots[m].last, slots[p].first, slots[p].last)) continue;
                    const std::size_t other = address(slots, p);
                    if (begin < other + slots[p].bytes && other < begin + slots[m].bytes) return false;
                }
            }
            return true;
        };
        // The lowest offset that fits is 0 or puts a member just above a placed tensor alive with
        // it (any lower and they would meet): only those pairs are candidates, which keeps a
        // hundred-tensor model's plan within the compiler's constant-evaluation budget.
        std::size_t best = 0;
        bool found = fits(0);
        for (int p = conflicts; p >= 0; p = slots[p].next_conflict) {
            const std::size_t above = address(slots, p) + slots[p].bytes;
            for (int m = slots[b].first_member; m >= 0; m = slots[m].next_member) {
                if (!overlaps(slots[m].first, slots[m].last, slots[p].first, slots[p].last)) continue;
                const auto lift = static_cast<std::size_t>(slots[m].relative - slots[b].block_begin);
                if (above < lift) continue;
                const std::size_t candidate = above - lift;
                if ((!found || candidate < best) && fits(candidate)) {
                    best = candidate;
                    found = true;
                }
            }
        }
        slots[b].block_offset = best;
        slots[b].placed = true;
        for (int m = slots[b].first_member; m >= 0; m = slots[m].next_member) {
            slots[m].next_placed = placed;
            placed = m;
        }
        if (best + block_size(slots[b]) > arena) arena = best + block_size(slots[b]);
    }
    return arena;
}

enum class block_order { largest_first, first_use, longest_life };

constexpr bool before(const planner_slot& a, const planner_slot& b, block_order order) noexcept {
    const std::size_t size_a = block_size(a), size_b = block_size(b);
    switch (order) {
        case block_order::largest_first:
            return size_a != size_b ? size_a > size_b : a.block_first < b.block_first;
        case block_order::first_use:
            return a.block_first != b.block_first ? a.block_first < b.block_first : size_a > size_b;
        case block_order::longest_life:
            return a.block_last - a.block_first != b.block_last - b.block_first
                       ? a.block_last - a.block_first > b.block_last - b.block_first
                       : size_a > size_b;
    }
    return false;
}

// Lists the arena's blocks in slots[0..n).order, sorted (insertion sort: a few dozen blocks).
constexpr int order_blocks(std::span<planner_slot> slots, int input, block_order order) noexcept {
    int n = 0;
    for (int t = 0; t < static_cast<int>(slots.size()); ++t) {
        if (!in_arena(slots, t, input)) continue;
        int at = n++;
        while (at > 0 && before(slots[t], slots[slots[at - 1].order], order)) {
            slots[at].order = slots[at - 1].order;
            --at;
        }
        slots[at].order = t;
    }
    return n;
}

constexpr std::size_t live_set_bound(std::span<planner_slot> slots, int input, int steps) noexcept {
    std::size_t bound = 0;
    for (int i = 0; i < steps; ++i) {
        std::size_t live = 0;
        for (int b = 0; b < static_cast<int>(slots.size()); ++b) {
            if (!in_arena(slots, b, input) || slots[b].block_first > i || slots[b].block_last < i) continue;
            std::ptrdiff_t begin = 0, end = 0;
            bool any = false;
            for (int m = slots[b].first_member; m >= 0; m = slots[m].next_member) {  // the block's tensors
                const planner_slot& t = slots[m];
                if (t.first > i || t.last < i) continue;
                const std::ptrdiff_t t_end = t.relative + static_cast<std::ptrdiff_t>(t.bytes);
                if (!any || t.relative < begin) begin = t.relative;
                if (!any || t_end > end) end = t_end;
                any = true;
            }
            if (any) live += static_cast<std::size_t>(end - begin);
        }
        if (live > bound) bound = live;
    }
    return bound;
}

}  // namespace detail

// Plans `tensors` (indexed as the layers index them) for `layers` in execution order: writes
// each tensor's placement and returns the figures. `work` holds one slot per tensor.
constexpr plan_figures plan_arena(std::span<const shape> tensors, std::span<const layer> layers, int input, int output,
                                  std::span<placement> placements, std::span<planner_slot> work) noexcept {
    using namespace detail;
    plan_figures figures;
    const int steps = static_cast<int>(layers.size());

    // TFLite Micro's greedy planner: no in-place layers, largest first.
    form_blocks(tensors, layers, input, output, false, work);
    figures.greedy_bytes = place(work, order_blocks(work, input, block_order::largest_first));

    // With the in-place layers, in three orders; and without them, where sharing bytes made
    // the placement worse than the greedy planner's (rigid blocks can fit badly): the
    // smallest wins, so the arena is never above the greedy planner's figure.
    form_blocks(tensors, layers, input, output, true, work);
    figures.lower_bound_bytes = live_set_bound(work, input, steps);
    block_order best_order = block_order::largest_first;
    bool best_in_place = true;
    std::size_t best = ~std::size_t{0};
    for (bool in_place : {true, false}) {
        if (!in_place) {
            if (best <= figures.greedy_bytes) break;
            form_blocks(tensors, layers, input, output, false, work);
        }
        for (block_order order : {block_order::largest_first, block_order::first_use, block_order::longest_life}) {
            const std::size_t arena = place(work, order_blocks(work, input, order));
            if (arena < best) {
                best = arena;
                best_order = order;
                best_in_place = in_place;
            }
            if (best == figures.lower_bound_bytes) break;
        }
    }
    form_blocks(tensors, layers, input, output, best_in_place, work);
    figures.arena_bytes = place(work, order_blocks(work, input, best_order));
    for (int t = 0; t < static_cast<int>(tensors.size()); ++t) {
        const bool external = input >= 0 && work[t].block == work[input].block;
        placements[t] = {external, external ? static_cast<std::size_t>(work[t].relative - work[work[t].block].block_begin)
                                            : address(work, t)};
    }
    return figures;
}

// The plan of a model whose tensor and layer counts are known while compiling.
template <std::size_t Tensors>
struct arena_plan {
    std::array<placement, Tensors> tensors{};
    plan_figures figures;
};

template <std::size_t Tensors, std::size_t Layers>
constexpr arena_plan<Tensors> plan_arena(const shape (&tensors)[Tensors], const layer (&layers)[Layers], int input,
                                         int output) noexcept {
    arena_plan<Tensors> plan;
    std::array<planner_slot, Tensors> work{};
    plan.figures = plan_arena(std::span<const shape>(tensors), std::span<const layer>(layers), input, output,
                              std::span<placement>(plan.tensors), std::span<planner_slot>(work));
    return plan;
}

}  // namespace versatil::firmware
