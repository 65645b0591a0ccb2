// The process environment (getenv / setenv / unsetenv) as an EnvironmentStore.
//
// Thread safety: POSIX leaves concurrent setenv/getenv undefined, so every access made
// through this store holds one process-wide lock. Scopes are layers (LayeredEnvironmentStore):
// a variable keeps its value from before the first open scope, each scope's value stacks on
// it, and closing a scope removes its own layer wherever it is. So threads may open and close
// scopes on the same variables in any interleaving; once all are closed, every variable is as
// it was. While scopes overlap, a variable holds the value of the latest scope still open.
// Code that calls setenv directly, from any thread, while a scope on that variable is open
// is outside this contract (the scope's end puts back the value from before the scope).
#pragma once

#if defined(__unix__) || defined(__APPLE__)
#define VERSATIL_HAS_PROCESS_ENVIRONMENT 1

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace versatil {

struct process_environment {
    static std::optional<std::string> get(std::string_view name) {
        const std::string key(name);
        const std::lock_guard lock(mutex());
        const char* value = std::getenv(key.c_str());
        return value ? std::optional<std::string>(value) : std::nullopt;
    }

    static bool set(std::string_view name, std::string_view value) {
        const std::string key(name), text(value);
        const std::lock_guard lock(mutex());
        return ::setenv(key.c_str(), text.c_str(), 1) == 0;
    }

    static bool unset(std::string_view name) {
        const std::string key(name);
        const std::lock_guard lock(mutex());
        return ::unsetenv(key.c_str()) == 0;
    }

    // Opens a scope's layer on `name`: its value from now until pop_layer.
    static bool push_layer(std::string_view name, std::string_view value, const void* owner) {
        const std::lock_guard lock(mutex());
        auto& variables = layered_variables();
        auto found = variables.find(name);
        if (found == variables.end()) {
            std::string key(name);
            const char* current = std::getenv(key.c_str());
            found = variables
                        .emplace(std::move(key), variable_layers{current ? std::optional<std::string>(current)
                                                                         : std::nullopt,
                                                                 {}})
                        .first;
        }
        try {
            found->second.layers.emplace_back(owner, std::string(value));
        } catch (...) {
            if (found->second.layers.empty()) variables.erase(found);
            throw;
        }
        return ::setenv(found->first.c_str(), found->second.layers.back().second.c_str(), 1) == 0;
    }

    // Closes `owner`'s latest layer on `name`: the variable takes the latest layer still
    // open, or its value from before any scope. False if there was no such layer.
    static bool pop_layer(std::string_view name, const void* owner) noexcept {
        const std::lock_guard lock(mutex());
        auto& variables = layered_variables();
        const auto found = variables.find(name);
        if (found == variables.end()) return false;
        auto& layers = found->second.layers;
        const auto mine = std::find_if(layers.rbegin(), layers.rend(),
                                       [owner](const auto& layer) { return layer.first == owner; });
        if (mine == layers.rend()) return false;
        layers.erase(std::next(mine).base());
        if (!layers.empty()) return ::setenv(found->first.c_str(), layers.back().second.c_str(), 1) == 0;
        const std::optional<std::string>& original = found->second.original;
        const bool restored = original ? ::setenv(found->first.c_str(), original->c_str(), 1) == 0
                                       : ::unsetenv(found->first.c_str()) == 0;
        variables.erase(found);
        return restored;
    }

    // The lock every access through this store takes; a caller that must read or write
    // several variables atomically may hold it too (it is recursive).
    static std::recursive_mutex& mutex() {
        static std::recursive_mutex instance;
        return instance;
    }

private:
    struct variable_layers {
        std::optional<std::string> original;                      // before the first open scope
        std::vector<std::pair<const void*, std::string>> layers;  // open scopes, oldest first
    };
    static std::map<std::string, variable_layers, std::less<>>& layered_variables() {
        static std::map<std::string, variable_layers, std::less<>> instance;
        return instance;
    }
};

}  // namespace versatil

#else
#define VERSATIL_HAS_PROCESS_ENVIRONMENT 0
#endif
