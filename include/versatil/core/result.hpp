// A value or an error, without exceptions (the core builds with -fno-exceptions): what the
// run-time entry points return. Reading the wrong alternative is a precondition violation
// that stops the program, since there is no exception to throw.
#pragma once

#include <cstdlib>
#include <utility>
#include <variant>

namespace versatil {

template <class T, class E>
class [[nodiscard]] result {
public:
    result(T value) : state_(std::in_place_index<0>, std::move(value)) {}
    result(E error) : state_(std::in_place_index<1>, std::move(error)) {}

    bool has_value() const noexcept { return state_.index() == 0; }
    explicit operator bool() const noexcept { return has_value(); }

    T& value() & { return *get<0>(); }
    const T& value() const& { return *get<0>(); }
    T&& value() && { return std::move(*get<0>()); }
    T* operator->() { return get<0>(); }
    const T* operator->() const { return get<0>(); }
    T& operator*() & { return value(); }
    const T& operator*() const& { return value(); }

    const E& error() const& { return *get<1>(); }
    E&& error() && { return std::move(*get<1>()); }

private:
    template <std::size_t I>
    auto* get() const {
        auto* alternative = std::get_if<I>(&state_);
        if (alternative == nullptr) std::abort();
        return const_cast<std::variant_alternative_t<I, std::variant<T, E>>*>(alternative);
    }

    std::variant<T, E> state_;
};

}  // namespace versatil
