// Scoped environments restore the exact previous state: values, unset variables, nesting,
// and a constructor or a body that throws.
#include <doctest/doctest.h>

#include <array>
#include <map>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "environment_helpers.hpp"
#include "versatil/backends/x86_inductor.hpp"
#include "versatil/backends/xnnpack.hpp"
#include "versatil/environment/null_environment.hpp"
#include "versatil/environment/scoped_environment.hpp"

using namespace versatil;
using testing::read_variable;
using testing::variable_fixture;

namespace {

// A store in memory that can be told to fail: the n-th set throws (as an allocation would).
struct recording_store {
    static inline std::map<std::string, std::string, std::less<>> variables;
    static inline int sets_before_throw = -1;
    static inline std::vector<std::string> log;

    static std::optional<std::string> get(std::string_view name) {
        const auto found = variables.find(name);
        return found == variables.end() ? std::nullopt : std::optional<std::string>(found->second);
    }
    static bool set(std::string_view name, std::string_view value) {
        if (sets_before_throw == 0) {
            sets_before_throw = -1;  // fail once, as an allocation would; restoring then succeeds
            throw std::runtime_error("store failure");
        }
        if (sets_before_throw > 0) --sets_before_throw;
        log.push_back("set " + std::string(name) + "=" + std::string(value));
        variables[std::string(name)] = std::string(value);
        return true;
    }
    static bool unset(std::string_view name) {
        log.push_back("unset " + std::string(name));
        variables.erase(std::string(name));
        return true;
    }
    static void reset() {
        variables.clear();
        log.clear();
        sets_before_throw = -1;
    }
};
static_assert(EnvironmentStore<recording_store> && EnvironmentStore<null_environment> &&
              EnvironmentStore<default_environment>);

constexpr std::array<environment_assignment, 2> two{{{"VERSATIL_TEST_A", "1"}, {"VERSATIL_TEST_B", "2"}}};

}  // namespace

static_assert(!std::is_copy_constructible_v<scoped_environment<>> &&
              !std::is_move_constructible_v<scoped_environment<>>);
static_assert(!std::is_copy_assignable_v<scoped_environment<null_environment, 2>>);

TEST_CASE("a scope sets each variable and restores the previous value when it ends") {
    const variable_fixture a("VERSATIL_TEST_A", "before");
    const variable_fixture b("VERSATIL_TEST_B", std::nullopt);
    {
        const scoped_environment<process_environment, 2> scope(two);
        CHECK(scope.applied());
        CHECK(scope.size() == 2);
        CHECK(read_variable("VERSATIL_TEST_A") == "1");
        CHECK(read_variable("VERSATIL_TEST_B") == "2");
    }
    CHECK(read_variable("VERSATIL_TEST_A") == "before");
    CHECK_FALSE(read_variable("VERSATIL_TEST_B").has_value());  // unset again, not set to ""
}

TEST_CASE("a variable set to the empty string is restored as empty, not unset") {
    const variable_fixture a("VERSATIL_TEST_A", "");
    { const scoped_environment<process_environment, 2> scope(two); }
    CHECK(read_variable("VERSATIL_TEST_A") == "");
}

TEST_CASE("x86_inductor's environment hides CUDA and enables freezing, then restores both") {
    const variable_fixture cuda("CUDA_VISIBLE_DEVICES", "0,1");
    const variable_fixture freezing("TORCHINDUCTOR_FREEZING", std::nullopt);
    {
        const auto scope = X86Inductor<>::environment_context();
        CHECK(read_variable("CUDA_VISIBLE_DEVICES") == "");
        CHECK(read_variable("TORCHINDUCTOR_FREEZING") == "1");
    }
    CHECK(read_variable("CUDA_VISIBLE_DEVICES") == "0,1");
    CHECK_FALSE(read_variable("TORCHINDUCTOR_FREEZING").has_value());
}

TEST_CASE("xnnpack changes no variable") {
    recording_store::reset();
    { const auto scope = XNNPACK<>::environment_context<recording_store>(); }
    CHECK(recording_store::log.empty());
}

TEST_CASE("nested scopes restore in LIFO order") {
    recording_store::reset();
    recording_store::variables["VERSATIL_TEST_A"] = "outer-before";
    constexpr std::array<environment_assignment, 1> outer{{{"VERSATIL_TEST_A", "outer"}}};
    constexpr std::array<environment_assignment, 1> inner{{{"VERSATIL_TEST_A", "inner"}}};
    {
        const scoped_environment<recording_store, 1> first(outer);
        {
            const scoped_environment<recording_store, 1> second(inner);
            CHECK(recording_store::variables["VERSATIL_TEST_A"] == "inner");
        }
        CHECK(recording_store::variables["VERSATIL_TEST_A"] == "outer");
    }
    CHECK(recording_store::variables["VERSATIL_TEST_A"] == "outer-before");
    CHECK(recording_store::log == std::vector<std::string>{"set VERSATIL_TEST_A=outer", "set VERSATIL_TEST_A=inner",
                                                           "set VERSATIL_TEST_A=outer",
                                                           "set VERSATIL_TEST_A=outer-before"});
}

TEST_CASE("within one scope, variables are restored last-set-first") {
    recording_store::reset();
    { const scoped_environment<recording_store> scope(two); }
    CHECK(recording_store::log == std::vector<std::string>{"set VERSATIL_TEST_A=1", "set VERSATIL_TEST_B=2",
                                                           "unset VERSATIL_TEST_B", "unset VERSATIL_TEST_A"});
}

TEST_CASE("an exception inside the scope still restores the environment") {
    const variable_fixture a("VERSATIL_TEST_A", "kept");
    const variable_fixture b("VERSATIL_TEST_B", std::nullopt);
    const auto failing_work = [] {
        const scoped_environment<process_environment, 2> scope(two);
        throw std::runtime_error("lowering failed");
    };
    CHECK_THROWS_AS(failing_work(), std::runtime_error);
    CHECK(read_variable("VERSATIL_TEST_A") == "kept");
    CHECK_FALSE(read_variable("VERSATIL_TEST_B").has_value());
}

TEST_CASE("a constructor that fails half-way undoes what it had already set") {
    recording_store::reset();
    recording_store::variables["VERSATIL_TEST_A"] = "original";
    recording_store::sets_before_throw = 1;  // the first set succeeds, the second throws
    using scope = scoped_environment<recording_store, 2>;
    CHECK_THROWS_AS(scope{two}, std::runtime_error);
    CHECK(recording_store::variables["VERSATIL_TEST_A"] == "original");
    CHECK(recording_store::variables.count("VERSATIL_TEST_B") == 0);
}

TEST_CASE("activate sets variables for good") {
    const variable_fixture a("VERSATIL_TEST_A", std::nullopt);
    const variable_fixture freezing("TORCHINDUCTOR_FREEZING", "0");
    CHECK(activate<process_environment>(std::span<const environment_assignment>(two).first(1)));
    CHECK(read_variable("VERSATIL_TEST_A") == "1");
    CHECK(X86Inductor<>::activate_environment());
    CHECK(read_variable("TORCHINDUCTOR_FREEZING") == "1");
}

TEST_CASE("the null store changes nothing") {
    const variable_fixture a("VERSATIL_TEST_A", "untouched");
    {
        const scoped_environment<null_environment, 2> scope(two);
        CHECK(scope.applied());
        CHECK(read_variable("VERSATIL_TEST_A") == "untouched");
    }
    CHECK(read_variable("VERSATIL_TEST_A") == "untouched");
}

TEST_CASE("a refused variable is reported and the rest still restored") {
    const variable_fixture a("VERSATIL_TEST_A", "kept");
    constexpr std::array<environment_assignment, 2> bad{{{"VERSATIL_TEST_A", "1"}, {"BAD=NAME", "x"}}};
    {
        const scoped_environment<process_environment, 2> scope(bad);
        CHECK_FALSE(scope.applied());  // setenv rejects a name holding '='
        CHECK(read_variable("VERSATIL_TEST_A") == "1");
    }
    CHECK(read_variable("VERSATIL_TEST_A") == "kept");
}
