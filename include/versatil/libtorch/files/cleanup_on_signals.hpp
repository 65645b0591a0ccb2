// SIGINT, SIGTERM or SIGHUP in the middle of a save would leave the staged temporary file
// behind. While a `cleanup_on_signals` lives, those signals first stop the child process
// checking a model file and remove every temporary (temporaries.hpp), then do what they did
// before the scope: with the default action the process still ends by the signal, so its
// parent sees the conventional status (130 for SIGINT in a shell, and a shell loop running it
// stops too); an application's own handler is called next (the staged files are gone, so the
// save it interrupted fails with an io_error); a signal ignored when the scope begins stays
// ignored. A program may name itself to have one line on standard error say what happened.
// The CLI holds one for its whole run; a library cannot decide for its host how signals are
// handled, so `quantize` and `save` install nothing themselves.
#pragma once

#include <signal.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <string_view>

#include "versatil/libtorch/files/temporaries.hpp"

namespace versatil::libtorch {

namespace detail {

inline constexpr std::array cleanup_signals{SIGINT, SIGTERM, SIGHUP};

// The disposition each signal had before the outermost scope; zero-initialized, so a handler
// never reads it unbuilt.
inline struct sigaction actions_before_cleanup[NSIG];
inline std::atomic<int> cleanup_scope_depth{0};

// The program the notice names (empty: no notice), and whether standard error is a terminal, where
// a progress bar may be half drawn, so the notice starts a line of its own. Set by the outermost
// scope, read by the handler.
inline std::string_view signal_notice_program{};
inline bool signal_notice_on_terminal = false;

inline std::string_view signal_name(int signal_number) noexcept {
    switch (signal_number) {
        case SIGINT: return "SIGINT";
        case SIGTERM: return "SIGTERM";
        case SIGHUP: return "SIGHUP";
        default: return "a signal";
    }
}

// "PROGRAM: stopped by SIGINT; ...", composed on the stack and written at once: memcpy and write
// are async-signal-safe, and one write keeps the line whole beside other threads' output.
inline void write_signal_notice(int signal_number) noexcept {
    if (signal_notice_program.empty()) return;
    char line[256];
    std::size_t length = 0;
    const auto append = [&](std::string_view text) {
        const std::size_t taken = std::min(text.size(), sizeof line - length);
        std::memcpy(line + length, text.data(), taken);
        length += taken;
    };
    if (signal_notice_on_terminal) append("\n");
    append(signal_notice_program);
    append(": stopped by ");
    append(signal_name(signal_number));
    append("; temporary files removed, no output half written\n");
    (void)!::write(STDERR_FILENO, line, length);
}

inline void remove_temporaries_then_resignal(int signal_number, siginfo_t* info, void* context) {
    temporary_files.remove_all_now();
    write_signal_notice(signal_number);
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
    // `program`: the name the notice on standard error starts with, a string that outlives the scope
    // (a literal); empty, no notice. The outermost scope's counts.
    explicit cleanup_on_signals(std::string_view program = {}) noexcept {
        // Nested scopes share the outermost one's handlers: a handler installed over itself
        // would restore itself and raise forever.
        if (detail::cleanup_scope_depth.fetch_add(1) != 0) return;
        detail::signal_notice_program = program;
        detail::signal_notice_on_terminal = ::isatty(STDERR_FILENO) == 1;
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
        for (const int number : detail::cleanup_signals)
            ::sigaction(number, &detail::actions_before_cleanup[number], nullptr);
        detail::signal_notice_program = {};  // once no handler of this scope can read it
    }
};

}  // namespace versatil::libtorch
