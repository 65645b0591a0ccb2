// A scope-bound environment: constructing it sets each variable, destroying it restores
// the exact previous state (a variable that was unset is unset again), last set first
// restored. It is neither copyable nor movable, so a scope cannot be restored twice or
// escape the block that owns it; functions return it by guaranteed copy elision. On a
// LayeredEnvironmentStore (the process environment) scopes are layers, so threads opening
// and closing scopes in any order leave every variable as it was once all are closed.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "versatil/environment/default_environment.hpp"
#include "versatil/environment/environment_assignment.hpp"
#include "versatil/environment/environment_store.hpp"

namespace versatil {

// Capacity of a scope whose number of variables is known only at run time.
inline constexpr std::size_t dynamic_capacity = static_cast<std::size_t>(-1);

namespace detail {

struct saved_variable {
    std::string_view name;
    std::optional<std::string> previous;
};

// Fixed storage for a scope whose variables are known while compiling: no allocation
// beyond what a saved value itself needs.
template <std::size_t Capacity>
class saved_variables {
public:
    void push(std::string_view name, std::optional<std::string> previous) {
        items_[count_++] = saved_variable{name, std::move(previous)};
    }
    std::size_t size() const noexcept { return count_; }
    saved_variable& operator[](std::size_t index) noexcept { return items_[index]; }

private:
    std::array<saved_variable, Capacity> items_{};
    std::size_t count_ = 0;
};

template <>
class saved_variables<dynamic_capacity> {
public:
    void push(std::string_view name, std::optional<std::string> previous) {
        items_.push_back(saved_variable{name, std::move(previous)});
    }
    std::size_t size() const noexcept { return items_.size(); }
    saved_variable& operator[](std::size_t index) noexcept { return items_[index]; }

private:
    std::vector<saved_variable> items_;
};

// Restores in its destructor, so a scope whose constructor stops half-way (an allocation
// that throws) still undoes the variables it had already set.
template <EnvironmentStore Store, std::size_t Capacity>
class restoring_variables : public saved_variables<Capacity> {
public:
    restoring_variables() = default;
    restoring_variables(const restoring_variables&) = delete;
    restoring_variables& operator=(const restoring_variables&) = delete;
    ~restoring_variables() {
        for (std::size_t i = this->size(); i-- > 0;) {
            saved_variable& saved = (*this)[i];
            if constexpr (LayeredEnvironmentStore<Store>)
                Store::pop_layer(saved.name, this);
            else if (saved.previous)
                Store::set(saved.name, *saved.previous);
            else
                Store::unset(saved.name);
        }
    }
};

}  // namespace detail

template <EnvironmentStore Store = default_environment, std::size_t Capacity = dynamic_capacity>
class [[nodiscard("an unnamed scope restores the environment at once")]] scoped_environment {
public:
    using span_type = std::span<const environment_assignment, Capacity == dynamic_capacity ? std::dynamic_extent
                                                                                          : Capacity>;

    explicit scoped_environment(span_type assignments) {
        for (const environment_assignment& assignment : assignments) {
            if constexpr (LayeredEnvironmentStore<Store>) {
                saved_.push(assignment.name, std::nullopt);  // first: a failed push_layer is then popped as a no-op
                applied_ = Store::push_layer(assignment.name, assignment.value, &saved_) && applied_;
            } else {
                saved_.push(assignment.name, Store::get(assignment.name));
                applied_ = Store::set(assignment.name, assignment.value) && applied_;
            }
        }
    }

    scoped_environment(const scoped_environment&) = delete;
    scoped_environment(scoped_environment&&) = delete;
    scoped_environment& operator=(const scoped_environment&) = delete;
    scoped_environment& operator=(scoped_environment&&) = delete;
    ~scoped_environment() = default;  // `saved_` restores

    // False when the store refused a variable (setenv failed); restoring still happens.
    bool applied() const noexcept { return applied_; }
    std::size_t size() const noexcept { return saved_.size(); }

private:
    detail::restoring_variables<Store, Capacity> saved_;
    bool applied_ = true;
};

// Sets the variables for good: no scope, nothing restored (the original's
// activate_environment, for work deferred past any scope).
template <EnvironmentStore Store = default_environment>
bool activate(std::span<const environment_assignment> assignments) {
    bool applied = true;
    for (const environment_assignment& assignment : assignments)
        applied = Store::set(assignment.name, assignment.value) && applied;
    return applied;
}

}  // namespace versatil
