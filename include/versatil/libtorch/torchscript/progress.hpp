// A one-line progress bar on standard error, drawn only when standard error is a terminal
// (so logs and CI output stay clean).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

namespace versatil::libtorch {

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
