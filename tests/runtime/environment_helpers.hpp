// Helpers for tests that touch the process environment: read a variable, and a scope that
// puts a variable back however the test leaves it.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace versatil::testing {

inline std::optional<std::string> read_variable(const char* name) {
    const char* value = std::getenv(name);
    return value ? std::optional<std::string>(value) : std::nullopt;
}

// Sets (or unsets, for nullopt) a variable for one test and restores the original after,
// written with raw setenv so it does not depend on the code under test.
class variable_fixture {
public:
    variable_fixture(const char* name, std::optional<std::string> value) : name_(name), original_(read_variable(name)) {
        apply(value);
    }
    variable_fixture(const variable_fixture&) = delete;
    variable_fixture& operator=(const variable_fixture&) = delete;
    ~variable_fixture() { apply(original_); }

private:
    void apply(const std::optional<std::string>& value) const {
        if (value)
            ::setenv(name_, value->c_str(), 1);
        else
            ::unsetenv(name_);
    }
    const char* name_;
    std::optional<std::string> original_;
};

}  // namespace versatil::testing
