// A one-line progress bar on standard error, drawn only when standard error is a terminal
// (so logs and CI output stay clean). Every step it counts is also the run's cancellation point: a
// caller that installs a progress_watch (the Python binding, to honour Ctrl-C) sees each step and may
// stop the run there by throwing error_kind::cancelled, which unwinds before anything is written.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

namespace versatil::libtorch {

// Called with (label, done, total) at every step of the thread that installed it; it may throw.
using progress_watcher = std::function<void(std::string_view label, std::int64_t done, std::int64_t total)>;

namespace detail {
inline thread_local const progress_watcher* current_progress_watcher = nullptr;
}

// Installs `watcher` for the steps this thread counts while the scope lives (steps counted on worker
// threads are not seen); the previous one comes back after.
class progress_watch {
public:
    explicit progress_watch(progress_watcher watcher)
        : watcher_(std::move(watcher)), previous_(std::exchange(detail::current_progress_watcher, &watcher_)) {}
    progress_watch(const progress_watch&) = delete;
    progress_watch& operator=(const progress_watch&) = delete;
    ~progress_watch() { detail::current_progress_watcher = previous_; }

private:
    progress_watcher watcher_;
    const progress_watcher* previous_;
};

class progress_bar {
public:
    progress_bar(std::string label, std::int64_t total, bool enabled = true)
        : label_(std::move(label)), total_(total), enabled_(enabled && total >= 8 && ::isatty(STDERR_FILENO) == 1) {}
    progress_bar(const progress_bar&) = delete;
    progress_bar& operator=(const progress_bar&) = delete;
    ~progress_bar() {
        if (enabled_ && drawn_) std::fputc('\n', stderr);
    }

    void update(std::int64_t done, const std::string& suffix = {}) {
        if (detail::current_progress_watcher != nullptr) (*detail::current_progress_watcher)(label_, done, total_);
        if (!enabled_) return;
        constexpr int width = 30;
        const int filled = total_ > 0 ? static_cast<int>(width * done / total_) : width;
        std::string bar(static_cast<std::size_t>(filled), '=');
        bar.resize(width, ' ');
        std::fprintf(stderr, "\r%s [%s] %lld/%lld %s", label_.c_str(), bar.c_str(), static_cast<long long>(done),
                     static_cast<long long>(total_), suffix.c_str());
        std::fflush(stderr);
        drawn_ = true;
    }

private:
    std::string label_;
    std::int64_t total_;
    bool enabled_;
    bool drawn_ = false;
};

}  // namespace versatil::libtorch
