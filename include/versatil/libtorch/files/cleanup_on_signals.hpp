// SIGINT, SIGTERM or SIGHUP in the middle of a save would leave the staged temporary file
// behind. While a `cleanup_on_signals` lives, those signals first stop the child process
// checking a model file and remove every temporary (temporaries.hpp), then do what they did
// before the scope: with the default action the process still ends by the signal, so its
// parent sees the conventional status (130 for SIGINT in a shell); an application's own
// handler is called next (the staged files are gone, so the save it interrupted fails with
// an io_error); a signal ignored when the scope begins stays ignored. The CLI holds one for its whole run; a library cannot decide for its
// host how signals are handled, so `quantize` and `save` install nothing themselves.
#pragma once

#include <signal.h>

#include <array>
#include <atomic>

#include "versatil/libtorch/files/temporaries.hpp"

namespace versatil::libtorch {

namespace detail {

inline constexpr std::array cleanup_signals{SIGINT, SIGTERM, SIGHUP};

// The disposition each signal had before the outermost scope; zero-initialized, so a handler
// never reads it unbuilt.
inline struct sigaction actions_before_cleanup[NSIG];
inline std::atomic<int> cleanup_scope_depth{0};

inline void remove_temporaries_then_resignal(int signal_number, siginfo_t* info, void* context) {
    temporary_files.remove_all_now();
    const struct sigaction& before = actions_before_cleanup[signal_number];
    if (before.sa_flags & SA_SIGINFO) {
        before.sa_sigaction(signal_number, info, context);
    } else if (before.sa_handler == SIG_DFL) {
        // The signal is blocked while its handler runs: raised again, it is delivered under
        // the default action (ending the process) as soon as this returns.
        ::sigaction(signal_number, &before, nullptr);
        ::raise(signal_number);
    } else {
        before.sa_handler(signal_number);
    }
}

}  // namespace detail

class [[nodiscard("an unnamed scope uninstalls its handlers at once")]] cleanup_on_signals {
public:
    cleanup_on_signals() noexcept {
        // Nested scopes share the outermost one's handlers: a handler installed over itself
        // would restore itself and raise forever.
        if (detail::cleanup_scope_depth.fetch_add(1) != 0) return;
        struct sigaction action {};
        action.sa_sigaction = detail::remove_temporaries_then_resignal;
        action.sa_flags = SA_SIGINFO;
        ::sigemptyset(&action.sa_mask);
        for (const int number : detail::cleanup_signals) ::sigaddset(&action.sa_mask, number);  // one cleanup at a time
        for (const int number : detail::cleanup_signals) {
            struct sigaction& before = detail::actions_before_cleanup[number];
            ::sigaction(number, nullptr, &before);
            // An ignored signal stays ignored (SIGHUP under nohup, SIGINT in a background job).
            if (!(before.sa_flags & SA_SIGINFO) && before.sa_handler == SIG_IGN) continue;
            ::sigaction(number, &action, nullptr);
        }
    }
    cleanup_on_signals(const cleanup_on_signals&) = delete;
    cleanup_on_signals& operator=(const cleanup_on_signals&) = delete;
    ~cleanup_on_signals() {
        if (detail::cleanup_scope_depth.fetch_sub(1) != 1) return;
        for (const int number : detail::cleanup_signals) ::sigaction(number, &detail::actions_before_cleanup[number], nullptr);
    }
};

}  // namespace versatil::libtorch
