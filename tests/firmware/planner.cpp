// The arena planner and the in-place rule. (1) in_place_lag against an element-by-element
// simulation of the kernels' order of work, on every geometry of a grid: the lag is safe and
// one level less is not. (2) On thousands of random graphs: tensors alive at the same layer
// never share a byte unless the layer runs in place on them by the rule (or one is a view of
// the other), the arena is at least the live-set bound, and running the real kernels at the
// planned offsets gives the bytes that separate buffers give. (3) Known cases: chains reach
// the bound, in-place depthwise/clamp/add, the input stays outside the arena.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "versatil/firmware/firmware.hpp"

namespace {

namespace fw = versatil::firmware;

// True when writing output element after element (channel, row, column), output at
// input - lag, never overwrites an input level a later element still reads.
bool safe_by_simulation(fw::shape in, fw::shape out, fw::window w, std::ptrdiff_t lag) {
    // last_read[address] = the step (output element, in order) that reads it last.
    std::vector<long> last_read(static_cast<std::size_t>(in.elements()), -1);
    long step = 0;
    for (int c = 0; c < out.channels; ++c)
        for (int oy = 0; oy < out.height; ++oy)
            for (int ox = 0; ox < out.width; ++ox, ++step)
                for (int ky = 0; ky < w.kernel_h; ++ky)
                    for (int kx = 0; kx < w.kernel_w; ++kx) {
                        const int y = oy * w.stride_h - w.padding_h + ky * w.dilation_h;
                        const int x = ox * w.stride_w - w.padding_w + kx * w.dilation_w;
                        if (y >= 0 && x >= 0 && y < in.height && x < in.width)
                            last_read[static_cast<std::size_t>((c * in.height + y) * in.width + x)] = step;
                    }
    step = 0;
    for (int c = 0; c < out.channels; ++c)
        for (int k = 0; k < out.plane(); ++k, ++step) {
            const std::ptrdiff_t address = c * out.plane() + k - lag;  // relative to the input's start
            if (address >= 0 && address < in.elements() && last_read[static_cast<std::size_t>(address)] > step)
                return false;
        }
    return true;
}

}  // namespace

TEST_CASE("in_place_lag is safe and tight on every geometry of a grid") {
    int geometries = 0, in_place = 0, tight = 0;
    for (int h = 1; h <= 7; ++h)
        for (int w = 1; w <= 7; w += 2)
            for (int k = 1; k <= 3; ++k)
                for (int s = 1; s <= 2; ++s)
                    for (int p = 0; p <= 2; ++p)
                        for (int d = 1; d <= 2; ++d) {
                            const fw::shape in{2, h, w};
                            const fw::window win{k, k, s, s, p, std::max(0, p - 1), d, 1};
                            const fw::shape out = fw::output_shape(in, win, 2);
                            if (out.elements() <= 0) continue;
                            ++geometries;
                            const std::ptrdiff_t lag = fw::in_place_lag(in, out, win);
                            if (lag == fw::not_in_place) {
                                CHECK(out.plane() > in.plane());
                                continue;
                            }
                            ++in_place;
                            CAPTURE(h); CAPTURE(w); CAPTURE(k); CAPTURE(s); CAPTURE(p); CAPTURE(d);
                            CHECK(safe_by_simulation(in, out, win, lag));
                            if (lag > 0) {
                                CHECK_FALSE(safe_by_simulation(in, out, win, lag - 1));
                                ++tight;
                            }
                        }
    MESSAGE(geometries << " geometries, " << in_place << " in place, " << tight << " with a positive lag");
    CHECK(tight > 100);
    // 3x3, stride 1, padding 1: W + 1 levels before the input.
    CHECK(fw::in_place_lag({8, 14, 14}, {8, 14, 14}, {3, 3, 1, 1, 1, 1, 1, 1}) == 15);
    CHECK(fw::in_place_lag({8, 28, 28}, {8, 14, 14}, {2, 2, 2, 2, 0, 0, 1, 1}) == 0);
}

namespace {

struct random_graph {
    std::vector<fw::shape> tensors;
    std::vector<fw::layer> layers;
    std::vector<fw::conv2d_params> convs;  // kept alive: layers hold only shapes
};

// A random graph: a chain of windowed, dense, elementwise and view layers with skips back to
// earlier tensors of the same shape (residual adds) and extra readers (clamps that leave an
// input alive).
random_graph make_graph(std::mt19937& random) {
    random_graph g;
    std::uniform_int_distribution<int> pick(0, 1 << 20);
    const auto between = [&](int lo, int hi) { return lo + pick(random) % (hi - lo + 1); };
    g.tensors.push_back({between(1, 4), between(4, 12), between(4, 12)});
    const int layers = between(3, 16);
    for (int i = 0; i < layers; ++i) {
        const int from = between(0, 3) == 0 ? between(0, static_cast<int>(g.tensors.size()) - 1)
                                            : static_cast<int>(g.tensors.size()) - 1;
        const fw::shape in = g.tensors[static_cast<std::size_t>(from)];
        const int out = static_cast<int>(g.tensors.size());
        const int kind = between(0, 6);
        if (kind == 0 || kind == 1) {  // convolution, depthwise or not
            fw::conv2d_params p;
            p.input = in;
            p.win = {between(1, 3), between(1, 3), between(1, 2), between(1, 2), between(0, 1), between(0, 1), 1, 1};
            p.groups = kind == 0 ? in.channels : 1;
            p.output = fw::output_shape(in, p.win, kind == 0 ? in.channels : between(1, 6));
            if (p.output.elements() <= 0) continue;
            g.tensors.push_back(p.output);
            g.layers.push_back(fw::layer_of(p, from, out));
        } else if (kind == 2) {  // max pooling
            const fw::window w{2, 2, 2, 2};
            const fw::shape o = fw::output_shape(in, w, in.channels);
            if (o.elements() <= 0) continue;
            g.tensors.push_back(o);
            g.layers.push_back(fw::layer_of(fw::max_pool2d_params{in, o, w, {}}, from, out));
        } else if (kind == 3) {  // clamp
            g.tensors.push_back(in);
            g.layers.push_back(fw::layer_of(fw::clamp_params{in.elements(), 0, 0, {}, {}}, in, from, out));
        } else if (kind == 4) {  // add with an earlier tensor of the same shape, if any
            int other = -1;
            for (int t = 0; t < static_cast<int>(g.tensors.size()); ++t)
                if (t != from && g.tensors[static_cast<std::size_t>(t)] == in && between(0, 1) == 0) other = t;
            if (other < 0) continue;
            g.tensors.push_back(in);
            g.layers.push_back(
                fw::layer_of(fw::add_params{in.elements(), 0, 0, 0, 0, 0, 13, {}}, in, from, other, out));
        } else if (kind == 5) {  // flatten
            g.tensors.push_back({in.elements(), 1, 1});
            g.layers.push_back(fw::flatten_layer(in, from, out));
        } else {  // average pooling, stride 1
            const fw::window w{3, 3, 1, 1, 1, 1};
            const fw::shape o = fw::output_shape(in, w, in.channels);
            g.tensors.push_back(o);
            g.layers.push_back(fw::layer_of(fw::avg_pool2d_params{in, o, w, true, 0, {}}, from, out));
        }
    }
    return g;
}

// Some of the convolutions given a scratch tensor (a kernel's working memory, alive during
// its layer only), appended after every other tensor.
void add_scratch(random_graph& g, std::mt19937& random) {
    for (fw::layer& l : g.layers) {
        if (l.kind != fw::layer_kind::conv2d || random() % 2 == 0) continue;
        const int bytes = 1 + static_cast<int>(random() % 400);
        g.tensors.push_back({bytes, 1, 1});
        l = fw::with_scratch(l, static_cast<int>(g.tensors.size()) - 1, static_cast<std::size_t>(bytes));
    }
}

// A convolution's geometry (no arrays: the planner needs shapes only).
fw::conv2d_params conv(fw::shape in, fw::shape out, fw::window w = {}, int groups = 1) {
    fw::conv2d_params p;
    p.input = in;
    p.output = out;
    p.win = w;
    p.groups = groups;
    return p;
}

struct planned {
    std::vector<fw::placement> at;
    fw::plan_figures figures;
};

planned plan(const random_graph& g, int output) {
    planned p{std::vector<fw::placement>(g.tensors.size()), {}};
    std::vector<fw::planner_slot> work(g.tensors.size());
    p.figures = fw::plan_arena(g.tensors, g.layers, 0, output, p.at, work);
    return p;
}

// The tensor a chain of views starts from.
int view_root(const random_graph& g, int t) {
    for (const fw::layer& l : g.layers)
        if (l.output == t && l.alias == fw::aliasing::view) return view_root(g, l.inputs[0]);
    return t;
}

// Each tensor's first and last layer, counted here rather than by the planner: written by one
// layer, read by others, a scratch tensor during its layer, the output to the end.
struct lifetime_table {
    std::vector<int> first, last;
};

lifetime_table lifetimes(const random_graph& g, int output) {
    lifetime_table t{std::vector<int>(g.tensors.size(), -1), std::vector<int>(g.tensors.size(), -1)};
    for (int i = 0; i < static_cast<int>(g.layers.size()); ++i) {
        const fw::layer& l = g.layers[static_cast<std::size_t>(i)];
        t.first[static_cast<std::size_t>(l.output)] = t.last[static_cast<std::size_t>(l.output)] = i;
        if (l.scratch >= 0)
            t.first[static_cast<std::size_t>(l.scratch)] = t.last[static_cast<std::size_t>(l.scratch)] = i;
        for (int k = 0; k < l.input_count(); ++k)
            t.last[static_cast<std::size_t>(l.inputs[k])] = std::max(t.last[static_cast<std::size_t>(l.inputs[k])], i);
    }
    t.last[static_cast<std::size_t>(output)] = static_cast<int>(g.layers.size());
    return t;
}

}  // namespace

TEST_CASE(
    "random graphs: live tensors never share bytes except by the in-place rule; live-set bound <= arena <= greedy") {
    std::mt19937 random(21);
    int graphs = 0, at_bound = 0, below_greedy = 0, in_place_layers = 0, with_scratch = 0;
    for (int n = 0; n < 3000; ++n) {
        random_graph g = make_graph(random);
        if (g.layers.empty()) continue;
        ++graphs;
        const int output = static_cast<int>(g.tensors.size()) - 1;
        if (n % 2 == 1) add_scratch(g, random);
        with_scratch += static_cast<int>(g.tensors.size()) - 1 > output ? 1 : 0;
        const planned p = plan(g, output);
        const int count = static_cast<int>(g.tensors.size());
        const auto [first, last] = lifetimes(g, output);
        CHECK(p.at[0].external);
        CHECK(p.figures.arena_bytes >= p.figures.lower_bound_bytes);
        CHECK(p.figures.arena_bytes <= p.figures.greedy_bytes);  // the fallback to no in-place layers
        CHECK(p.figures.greedy_bytes >= p.figures.lower_bound_bytes);
        for (int a = 0; a < count; ++a) {
            const fw::placement pa = p.at[static_cast<std::size_t>(a)];
            if (!pa.external)
                CHECK(pa.offset + g.tensors[static_cast<std::size_t>(a)].bytes() <= p.figures.arena_bytes);
            for (int b = a + 1; b < count; ++b) {
                const fw::placement pb = p.at[static_cast<std::size_t>(b)];
                const bool together = first[static_cast<std::size_t>(a)] <= last[static_cast<std::size_t>(b)] &&
                                      first[static_cast<std::size_t>(b)] <= last[static_cast<std::size_t>(a)];
                const bool share = pa.external == pb.external &&
                                   pa.offset < pb.offset + g.tensors[static_cast<std::size_t>(b)].bytes() &&
                                   pb.offset < pa.offset + g.tensors[static_cast<std::size_t>(a)].bytes();
                if (!together || !share) continue;
                if (view_root(g, a) == view_root(g, b) && pa.offset == pb.offset)
                    continue;  // the same bytes, read only
                // Otherwise b must be written in place over a by the layer that writes b, which is a's last.
                const fw::layer& l = g.layers[static_cast<std::size_t>(first[static_cast<std::size_t>(b)])];
                CAPTURE(n); CAPTURE(a); CAPTURE(b);
                REQUIRE(last[static_cast<std::size_t>(a)] == first[static_cast<std::size_t>(b)]);
                bool reads_a = false;
                for (int k = 0; k < l.input_count(); ++k)
                    reads_a = reads_a || view_root(g, l.inputs[k]) == view_root(g, a);
                REQUIRE(reads_a);
                if (l.alias == fw::aliasing::elementwise) {
                    REQUIRE(pa.offset == pb.offset);
                } else {
                    REQUIRE(l.alias == fw::aliasing::windowed);
                    REQUIRE(l.lag != fw::not_in_place);
                    REQUIRE(static_cast<std::ptrdiff_t>(pb.offset) == static_cast<std::ptrdiff_t>(pa.offset) - l.lag);
                }
                ++in_place_layers;
            }
        }
        at_bound += p.figures.arena_bytes == p.figures.lower_bound_bytes ? 1 : 0;
        below_greedy += p.figures.arena_bytes < p.figures.greedy_bytes ? 1 : 0;
    }
    MESSAGE(graphs << " graphs (" << with_scratch << " with scratch): arena at the live-set bound in " << at_bound
                   << ", below the greedy planner in " << below_greedy << "; " << in_place_layers
                   << " tensor pairs written in place");
    CHECK(with_scratch > graphs / 4);
    CHECK(at_bound > graphs * 8 / 10);
    CHECK(in_place_layers > 500);
}

// What an exported header checks of the plan it states (arena_check.hpp): every plan the planner
// makes passes; a tensor moved onto the bytes of another one alive with it, outside any in-place
// pair, or past the end of the arena, is named.
TEST_CASE("random graphs: the header's plan check accepts the planner's plans and names a misplaced tensor") {
    std::mt19937 random(23);
    int graphs = 0, moved = 0, named = 0;
    for (int n = 0; n < 2000; ++n) {
        random_graph g = make_graph(random);
        if (g.layers.empty()) continue;
        ++graphs;
        const int output = static_cast<int>(g.tensors.size()) - 1;
        if (n % 2 == 1) add_scratch(g, random);
        planned p = plan(g, output);
        const int count = static_cast<int>(g.tensors.size());
        std::vector<fw::planner_slot> work(g.tensors.size());
        const auto check = [&] {
            return fw::misplaced_tensor(g.tensors, g.layers, 0, output, p.at, p.figures.arena_bytes, work);
        };
        CAPTURE(n);
        REQUIRE(check() == -1);
        const auto [first, last] = lifetimes(g, output);
        const int b = static_cast<int>(random() % static_cast<unsigned>(count));
        if (p.at[static_cast<std::size_t>(b)].external) continue;
        const fw::placement kept = p.at[static_cast<std::size_t>(b)];
        const std::size_t b_bytes = g.tensors[static_cast<std::size_t>(b)].bytes();
        p.at[static_cast<std::size_t>(b)].offset = p.figures.arena_bytes - b_bytes + 1;
        CHECK(check() >= 0);  // one byte past the arena
        p.at[static_cast<std::size_t>(b)] = kept;
        for (int a = 0; a < count; ++a) {
            const std::size_t ua = static_cast<std::size_t>(a), ub = static_cast<std::size_t>(b);
            const bool together = first[ua] <= last[ub] && first[ub] <= last[ua];
            const bool handover = last[ua] == first[ub] || last[ub] == first[ua];  // could be in place
            if (a == b || p.at[ua].external || !together || handover || view_root(g, a) == view_root(g, b)) continue;
            p.at[ub].offset = p.at[ua].offset;
            ++moved;
            named += check() >= 0 ? 1 : 0;
            p.at[ub] = kept;
            break;
        }
    }
    MESSAGE(graphs << " graphs; " << moved << " plans with a tensor moved onto a live one");
    CHECK(moved > graphs / 4);
    CHECK(named == moved);
}

TEST_CASE("random graphs: the kernels at the planned offsets give what separate buffers give") {
    std::mt19937 random(22);
    // Enough for any layer make_graph builds (a flattened tensor can have thousands of channels).
    std::vector<std::int8_t> weights(1 << 16);
    for (std::size_t i = 0; i < weights.size(); ++i) weights[i] = static_cast<std::int8_t>(i * 37 % 255 - 127);
    const std::vector<std::int32_t> bias(1 << 12, 100);
    const std::vector<versatil::math::fixed_point_multiplier> multipliers(1 << 12,
                                                                          versatil::math::quantize_multiplier(0.013));
    for (int n = 0; n < 500; ++n) {
        random_graph g = make_graph(random);
        if (g.layers.empty()) continue;
        const int output = static_cast<int>(g.tensors.size()) - 1;
        const planned p = plan(g, output);
        std::vector<std::int8_t> input(g.tensors[0].bytes());
        for (auto& x : input) x = static_cast<std::int8_t>(random() % 256);
        std::vector<std::int8_t> arena(p.figures.arena_bytes);
        std::vector<std::vector<std::int8_t>> separate;
        for (const fw::shape& s : g.tensors) separate.emplace_back(s.bytes());
        separate[0] = input;
        // Each layer runs twice: at the planned offsets and on separate buffers.
        const auto run = [&](const fw::layer& l, const std::int8_t* a, const std::int8_t* b, std::int8_t* out) {
            switch (l.kind) {
                case fw::layer_kind::conv2d: {
                    fw::conv2d_params c{l.input_shapes[0], l.output_shape,    {}, 1, 3, -2, {}, weights.data(),
                                        bias.data(),       multipliers.data()};
                    // Recover the window from the shapes: the generator uses these few.
                    for (int kh = 1; kh <= 3; ++kh)
                        for (int kw = 1; kw <= 3; ++kw)
                            for (int sh = 1; sh <= 2; ++sh)
                                for (int sw = 1; sw <= 2; ++sw)
                                    for (int ph = 0; ph <= 1; ++ph)
                                        for (int pw = 0; pw <= 1; ++pw) {
                                            const fw::window w{kh, kw, sh, sw, ph, pw, 1, 1};
                                            if (fw::output_shape(l.input_shapes[0], w, l.output_shape.channels) ==
                                                    l.output_shape &&
                                                (l.alias != fw::aliasing::windowed ||
                                                 fw::in_place_lag(l.input_shapes[0], l.output_shape, w) == l.lag))
                                                c.win = w;
                                        }
                    c.groups = l.alias == fw::aliasing::windowed ? l.input_shapes[0].channels : 1;
                    fw::conv2d(c, a, out);
                    break;
                }
                case fw::layer_kind::max_pool2d:
                    fw::max_pool2d({l.input_shapes[0], l.output_shape, {2, 2, 2, 2}, {}}, a, out);
                    break;
                case fw::layer_kind::avg_pool2d:
                    fw::avg_pool2d({l.input_shapes[0], l.output_shape, {3, 3, 1, 1, 1, 1}, true, 0, {}}, a, out);
                    break;
                case fw::layer_kind::clamp:
                    fw::clamp({l.output_shape.elements(), 0, 0, versatil::math::quantize_multiplier(1.0), {-20, 90}}, a,
                              out);
                    break;
                case fw::layer_kind::add:
                    fw::add({l.output_shape.elements(), 1, -1, 0, 1 << 21, 1258291, 22, {}}, a, b, out);
                    break;
                default: break;  // flatten: a view
            }
        };
        const auto at = [&](int t) -> std::int8_t* {
            const fw::placement& pl = p.at[static_cast<std::size_t>(t)];
            return pl.external ? input.data() + pl.offset : arena.data() + pl.offset;
        };
        for (const fw::layer& l : g.layers) {
            const int second = l.input_count() == 2 ? l.inputs[1] : l.inputs[0];
            run(l, at(l.inputs[0]), at(second), at(l.output));
            if (l.kind == fw::layer_kind::flatten)
                separate[static_cast<std::size_t>(l.output)] = separate[static_cast<std::size_t>(l.inputs[0])];
            else
                run(l, separate[static_cast<std::size_t>(l.inputs[0])].data(),
                    separate[static_cast<std::size_t>(second)].data(),
                    separate[static_cast<std::size_t>(l.output)].data());
        }
        CAPTURE(n);
        REQUIRE(
            std::vector<std::int8_t>(at(output), at(output) + g.tensors[static_cast<std::size_t>(output)].bytes()) ==
            separate[static_cast<std::size_t>(output)]);
    }
}

TEST_CASE("known plans: chains reach the bound, in-place depthwise costs its lag, the input stays outside") {
    // conv 1->8 (28x28), depthwise 3x3 in place, clamp in place, pointwise 8->4.
    const fw::conv2d_params c0 = conv({1, 28, 28}, {8, 28, 28}, {3, 3, 1, 1, 1, 1, 1, 1});
    const fw::conv2d_params dw = conv({8, 28, 28}, {8, 28, 28}, {3, 3, 1, 1, 1, 1, 1, 1}, 8);
    const fw::conv2d_params pw = conv({8, 28, 28}, {4, 28, 28});
    const fw::shape tensors[] = {{1, 28, 28}, {8, 28, 28}, {8, 28, 28}, {8, 28, 28}, {4, 28, 28}};
    const fw::layer layers[] = {fw::layer_of(c0, 0, 1), fw::layer_of(dw, 1, 2),
                                fw::layer_of(fw::clamp_params{8 * 784, 0, 0, {}, {}}, tensors[2], 2, 3),
                                fw::layer_of(pw, 3, 4)};
    const auto plan = fw::plan_arena(tensors, layers, 0, 4);
    CHECK(plan.tensors[0].external);
    CHECK(plan.figures.lower_bound_bytes == 8 * 784 + 4 * 784);  // the pointwise layer: its input and output
    CHECK(plan.figures.arena_bytes == plan.figures.lower_bound_bytes);
    CHECK(plan.tensors[2].offset + 29 ==
          plan.tensors[1].offset);  // depthwise output W + 1 = 29 levels before its input
    CHECK(plan.tensors[3].offset == plan.tensors[2].offset);       // the clamp over the depthwise output
    CHECK(plan.figures.greedy_bytes == 2 * 8 * 784);                // no in-place: two 8x28x28 tensors at once

    // A residual add: the skip stays alive, so the depthwise cannot overwrite it; the add
    // writes over the input that dies there.
    const fw::shape skip_tensors[] = {{1, 8, 8}, {4, 8, 8}, {4, 8, 8}, {4, 8, 8}};
    const fw::conv2d_params a = conv({1, 8, 8}, {4, 8, 8}, {3, 3, 1, 1, 1, 1, 1, 1});
    const fw::conv2d_params b = conv({4, 8, 8}, {4, 8, 8}, {3, 3, 1, 1, 1, 1, 1, 1}, 4);
    const fw::layer skip_layers[] = {
        fw::layer_of(a, 0, 1), fw::layer_of(b, 1, 2),
        fw::layer_of(fw::add_params{256, 0, 0, 0, 0, 0, 13, {}}, skip_tensors[1], 2, 1, 3)};
    const auto skip = fw::plan_arena(skip_tensors, skip_layers, 0, 3);
    CHECK(skip.tensors[1].offset != skip.tensors[2].offset);
    CHECK(skip.tensors[3].offset == skip.tensors[2].offset);  // into the first input, which dies at the add
    CHECK(skip.figures.arena_bytes == 512);
    CHECK(skip.figures.lower_bound_bytes == 512);
}
