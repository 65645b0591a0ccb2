// The thread-safety contract of scoped environments on the process environment: two threads
// opening and closing scopes, on the same variables or on different ones and in any order,
// leave every variable as it was once both are done.
#include <doctest/doctest.h>

#include <array>
#include <atomic>
#include <barrier>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>

#include "environment_helpers.hpp"
#include "versatil/backends/x86_inductor.hpp"
#include "versatil/environment/process_environment.hpp"
#include "versatil/environment/scoped_environment.hpp"

using namespace versatil;
using testing::read_variable;
using testing::variable_fixture;

namespace {

constexpr std::array<environment_assignment, 1> first_value{{{"VERSATIL_TEST_SHARED", "first"}}};
constexpr std::array<environment_assignment, 1> second_value{{{"VERSATIL_TEST_SHARED", "second"}}};

}  // namespace

TEST_CASE("two threads whose scopes on one variable close out of order leave it as it was") {
    // Deterministic interleaving: A opens, B opens, A closes, B closes. Saving "the value
    // on entry" and writing it back on exit would end with A's value ("first") left behind.
    for (const std::optional<std::string>& original :
         {std::optional<std::string>("original"), std::optional<std::string>()}) {
        CAPTURE(original.value_or("(unset)"));
        const variable_fixture shared("VERSATIL_TEST_SHARED", original);
        std::barrier step(2);
        std::optional<std::string> seen_by_a_after_b_opened, seen_by_b_after_a_closed;
        std::thread a([&] {
            {
                const scoped_environment<process_environment, 1> scope(first_value);
                step.arrive_and_wait();  // 1: A is open
                step.arrive_and_wait();  // 2: B is open
                seen_by_a_after_b_opened = process_environment::get("VERSATIL_TEST_SHARED");
            }
            step.arrive_and_wait();  // 3: A is closed
            step.arrive_and_wait();  // 4: B is closed
        });
        std::thread b([&] {
            step.arrive_and_wait();  // 1
            {
                const scoped_environment<process_environment, 1> scope(second_value);
                step.arrive_and_wait();  // 2
                step.arrive_and_wait();  // 3
                seen_by_b_after_a_closed = process_environment::get("VERSATIL_TEST_SHARED");
            }
            step.arrive_and_wait();  // 4
        });
        a.join();
        b.join();
        CHECK(seen_by_a_after_b_opened == "second");  // the latest open scope's value
        CHECK(seen_by_b_after_a_closed == "second");  // A's end does not undo B's value
        CHECK(read_variable("VERSATIL_TEST_SHARED") == original);
    }
}

TEST_CASE("two threads entering and leaving scopes at random leave the process unchanged") {
    const variable_fixture shared("VERSATIL_TEST_SHARED", "original");
    const variable_fixture own_a("VERSATIL_TEST_OWN_A", std::nullopt);
    const variable_fixture own_b("VERSATIL_TEST_OWN_B", "b");
    const variable_fixture cuda("CUDA_VISIBLE_DEVICES", "0");
    const variable_fixture freezing("TORCHINDUCTOR_FREEZING", std::nullopt);
    constexpr std::array<environment_assignment, 2> a_values{
        {{"VERSATIL_TEST_SHARED", "from-a"}, {"VERSATIL_TEST_OWN_A", "a"}}};
    constexpr std::array<environment_assignment, 2> b_values{
        {{"VERSATIL_TEST_OWN_B", "from-b"}, {"VERSATIL_TEST_SHARED", "from-b"}}};
    std::atomic<int> wrong_values{0};
    const auto work = [&](std::span<const environment_assignment, 2> values, const char* own, const char* own_value,
                          unsigned seed) {
        std::mt19937 random(seed);
        for (int i = 0; i < 2000; ++i) {
            const scoped_environment<process_environment, 2> scope(values);
            // Inside its scope a thread always sees its own private variable.
            if (process_environment::get(own) != own_value) ++wrong_values;
            if (random() % 3 == 0) {  // sometimes nested, sometimes a backend's environment
                const auto inner = X86Inductor<>::environment_context();
                if (random() % 2 == 0) std::this_thread::yield();
            }
            if (random() % 2 == 0) std::this_thread::yield();
        }
    };
    std::thread a(work, std::span<const environment_assignment, 2>(a_values), "VERSATIL_TEST_OWN_A", "a", 1U);
    std::thread b(work, std::span<const environment_assignment, 2>(b_values), "VERSATIL_TEST_OWN_B", "from-b", 2U);
    a.join();
    b.join();
    CHECK(wrong_values == 0);
    CHECK(read_variable("VERSATIL_TEST_SHARED") == "original");
    CHECK_FALSE(read_variable("VERSATIL_TEST_OWN_A").has_value());
    CHECK(read_variable("VERSATIL_TEST_OWN_B") == "b");
    CHECK(read_variable("CUDA_VISIBLE_DEVICES") == "0");
    CHECK_FALSE(read_variable("TORCHINDUCTOR_FREEZING").has_value());
}

TEST_CASE("an exception inside nested scopes on two threads restores every variable") {
    const variable_fixture shared("VERSATIL_TEST_SHARED", "original");
    const auto failing = [] {
        const scoped_environment<process_environment, 1> outer(first_value);
        const scoped_environment<process_environment, 1> inner(second_value);
        throw std::runtime_error("fault inside the scope");
    };
    std::atomic<int> caught{0};
    const auto work = [&] {
        for (int i = 0; i < 500; ++i) {
            try {
                failing();
            } catch (const std::runtime_error&) {
                ++caught;
            }
        }
    };
    std::thread a(work), b(work);
    a.join();
    b.join();
    CHECK(caught == 1000);
    CHECK(read_variable("VERSATIL_TEST_SHARED") == "original");
}
