// The temporary files this process has open (staged outputs, the checked copy of a model
// file) and the child process checking a model file, kept where a signal handler can clean
// them up: fixed slots of plain characters and atomics, constant-initialized, so the handler
// (cleanup_on_signals.hpp) allocates nothing, takes no lock and calls only async-signal-safe
// functions (kill, waitpid, unlink).
#pragma once

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <climits>
#include <cstddef>
#include <cstring>
#include <filesystem>

namespace versatil::libtorch::detail {

class temporary_registry {
public:
    // More temporaries at once than this are still removed on every path but a signal.
    static constexpr std::size_t capacity = 32;

    // The slot now naming `path`, or `capacity` when none is free or the path is too long.
    std::size_t add(const std::filesystem::path& path) noexcept {
        const std::string& text = path.native();
        if (text.size() >= PATH_MAX) return capacity;
        for (std::size_t index = 0; index < capacity; ++index) {
            slot& candidate = slots_[index];
            if (candidate.taken.exchange(true)) continue;
            std::memcpy(candidate.path, text.c_str(), text.size() + 1);
            candidate.named.store(true);
            return index;
        }
        return capacity;
    }

    void remove(std::size_t index) noexcept {
        if (index >= capacity) return;
        slots_[index].named.store(false);
        slots_[index].taken.store(false);
    }

    void set_checking_child(pid_t child) noexcept { checking_child_.store(child); }

    // For a signal handler: stops the checking child (it may be writing a temporary) and waits
    // for it, then unlinks every named temporary.
    void remove_all_now() noexcept {
        if (const pid_t child = checking_child_.exchange(0); child > 0) {
            ::kill(child, SIGKILL);
            ::waitpid(child, nullptr, 0);
        }
        for (slot& entry : slots_)
            if (entry.named.load()) ::unlink(entry.path);
    }

private:
    struct slot {
        std::atomic<bool> taken{false};
        std::atomic<bool> named{false};  // set once `path` is complete
        char path[PATH_MAX]{};
    };
    static_assert(std::atomic<bool>::is_always_lock_free && std::atomic<pid_t>::is_always_lock_free,
                  "a signal handler may only touch lock-free atomics");
    std::array<slot, capacity> slots_{};
    std::atomic<pid_t> checking_child_{0};
};

// Constant-initialized: there is no moment at which a signal handler could see it unbuilt.
inline constinit temporary_registry temporary_files{};

// Names a temporary file in the registry for as long as it lives.
class registered_temporary {
public:
    explicit registered_temporary(const std::filesystem::path& path) noexcept : slot_(temporary_files.add(path)) {}
    registered_temporary(const registered_temporary&) = delete;
    registered_temporary& operator=(const registered_temporary&) = delete;
    ~registered_temporary() { temporary_files.remove(slot_); }

private:
    std::size_t slot_;
};

}  // namespace versatil::libtorch::detail
