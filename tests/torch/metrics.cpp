// compare_outputs, on which most accuracy assertions and every report's SQNR rest, against
// figures worked by hand from its definition (torchscript/metrics.hpp): SQNR = 10 log10(sum ref^2 /
// sum (ref - actual)^2), and the largest and mean absolute differences. The tensors are small
// enough to check on paper; the expected values are written as the arithmetic, not as output.
#include "doctest_with_torch.hpp"

#include <cmath>
#include <limits>

#include "versatil/libtorch/torchscript/metrics.hpp"

using versatil::libtorch::compare_outputs;
using versatil::libtorch::model_outputs;

namespace {

at::Tensor tensor(std::initializer_list<float> values) { return at::tensor(std::vector<float>(values)); }

}  // namespace

TEST_CASE("compare_outputs on one tensor: SQNR, largest and mean difference by hand") {
    // reference (3, -4): signal 9 + 16 = 25; actual (3, -3): differences (0, 1), noise 1.
    const auto one = compare_outputs(tensor({3.f, -4.f}), tensor({3.f, -3.f}));
    CHECK(one.sqnr_db == doctest::Approx(10.0 * std::log10(25.0)).epsilon(1e-12));  // 13.979 dB
    CHECK(one.max_abs_diff == 1.0);
    CHECK(one.mean_abs_diff == 0.5);

    // reference (1, 2, 3, 4): signal 30; actual (1.5, 2, 2, 4): differences (0.5, 0, 1, 0), noise
    // 0.25 + 1 = 1.25, so 10 log10(24); mean 1.5 / 4.
    const auto two = compare_outputs(tensor({1.f, 2.f, 3.f, 4.f}), tensor({1.5f, 2.f, 2.f, 4.f}));
    CHECK(two.sqnr_db == doctest::Approx(10.0 * std::log10(24.0)).epsilon(1e-12));  // 13.802 dB
    CHECK(two.max_abs_diff == 1.0);
    CHECK(two.mean_abs_diff == 0.375);

    // The shape does not matter, only the values: the same four as a 2x2 matrix.
    const auto matrix = compare_outputs(tensor({1.f, 2.f, 3.f, 4.f}).view({2, 2}),
                                        tensor({1.5f, 2.f, 2.f, 4.f}).view({2, 2}));
    CHECK(matrix.sqnr_db == doctest::Approx(two.sqnr_db).epsilon(1e-12));

    // Noise of the signal's own power is 0 dB: (2, 0) against (0, 0) -> 10 log10(4 / 4).
    CHECK(compare_outputs(tensor({2.f, 0.f}), tensor({0.f, 0.f})).sqnr_db == doctest::Approx(0.0));
    // A tenth of the amplitude in error, everywhere, is 20 dB: (10, -10) against (9, -11).
    CHECK(compare_outputs(tensor({10.f, -10.f}), tensor({9.f, -11.f})).sqnr_db == doctest::Approx(20.0));
}

TEST_CASE("compare_outputs: identical outputs have an infinite SQNR and no difference") {
    const auto same = compare_outputs(tensor({0.25f, -7.f, 3.f}), tensor({0.25f, -7.f, 3.f}));
    CHECK(same.sqnr_db == std::numeric_limits<double>::infinity());
    CHECK(same.max_abs_diff == 0.0);
    CHECK(same.mean_abs_diff == 0.0);
}

TEST_CASE("compare_outputs over several outputs: each on its own, then all values as one signal") {
    model_outputs reference{{"logits", "box"}, {tensor({3.f, -4.f}), tensor({1.f, 2.f, 3.f, 4.f}).view({2, 2})}};
    model_outputs actual{{"logits", "box"}, {tensor({3.f, -3.f}), tensor({1.5f, 2.f, 2.f, 4.f}).view({2, 2})}};
    const auto all = compare_outputs(reference, actual);
    REQUIRE(all.outputs.size() == 2);
    CHECK(all.outputs[0].name == "logits");
    CHECK(all.outputs[1].name == "box");
    CHECK(all.outputs[0].sqnr_db == doctest::Approx(10.0 * std::log10(25.0)).epsilon(1e-12));
    CHECK(all.outputs[1].sqnr_db == doctest::Approx(10.0 * std::log10(24.0)).epsilon(1e-12));
    // Together: signal 25 + 30 = 55, noise 1 + 1.25 = 2.25; not the mean of the two SQNRs.
    CHECK(all.overall.sqnr_db == doctest::Approx(10.0 * std::log10(55.0 / 2.25)).epsilon(1e-12));
    CHECK(all.overall.max_abs_diff == 1.0);
    CHECK(all.overall.mean_abs_diff == doctest::Approx(2.5 / 6.0).epsilon(1e-12));  // (1 + 1.5) over 6 values
}

TEST_CASE("spread_of: p10 / median / p90 of timed runs, interpolated as numpy.percentile does, worked by hand") {
    using versatil::libtorch::spread_of;
    // Ten runs 1..10 ms given unsorted: rank p * (10 - 1) between sorted runs, so p10 at rank 0.9
    // is 1 + 0.9 * (2 - 1) = 1.9, the median at rank 4.5 is 5.5, p90 at rank 8.1 is 9.1; 9.1 / 1.9
    // is 4.8x, runs that disagree.
    const auto ten = spread_of({10.0, 1.0, 9.0, 2.0, 8.0, 3.0, 7.0, 4.0, 6.0, 5.0});
    CHECK(ten.p10_ms == doctest::Approx(1.9));
    CHECK(ten.median_ms == doctest::Approx(5.5));
    CHECK(ten.p90_ms == doctest::Approx(9.1));
    CHECK(ten.runs == 10);
    CHECK(ten.unsteady());
    // Two runs 2 and 3 ms: p10 2.1, median 2.5, p90 2.9; 2.9 / 2.1 = 1.38x, steady.
    const auto two = spread_of({3.0, 2.0});
    CHECK(two.p10_ms == doctest::Approx(2.1));
    CHECK(two.median_ms == doctest::Approx(2.5));
    CHECK(two.p90_ms == doctest::Approx(2.9));
    CHECK_FALSE(two.unsteady());
    // Exactly 2x is not more than 2x: runs 1, 1, 2, 2, 2, 2, 2, 2, 2, 2 have p10 at rank 0.9 = 1
    // and p90 at rank 8.1 = 2.
    const auto twice = spread_of({1.0, 1.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0});
    CHECK(twice.p10_ms == doctest::Approx(1.0));
    CHECK(twice.p90_ms == doctest::Approx(2.0));
    CHECK_FALSE(twice.unsteady());
    // One run is every percentile; none is no figure and no warning.
    const auto one = spread_of({4.0});
    CHECK((one.p10_ms == 4.0 && one.median_ms == 4.0 && one.p90_ms == 4.0));
    CHECK_FALSE(spread_of({}).unsteady());
    CHECK(spread_of({}).runs == 0);
}
