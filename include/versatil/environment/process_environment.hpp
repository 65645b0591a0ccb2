// The process environment (getenv / setenv / unsetenv) as an EnvironmentStore.
//
// Thread safety: POSIX leaves concurrent setenv/getenv undefined, so every access made
// through this store holds one process-wide lock. Code that calls setenv directly from
// another thread while a scope is open is outside that contract.
#pragma once

#if defined(__unix__) || defined(__APPLE__)
#define VERSATIL_HAS_PROCESS_ENVIRONMENT 1

#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

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

    // The lock every access through this store takes; a caller that must read or write
    // several variables atomically may hold it too (it is recursive).
    static std::recursive_mutex& mutex() {
        static std::recursive_mutex instance;
        return instance;
    }
};

}  // namespace versatil

#else
#define VERSATIL_HAS_PROCESS_ENVIRONMENT 0
#endif
