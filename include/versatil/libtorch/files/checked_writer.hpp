// Writing bytes to a file descriptor so that a fault of the machine is a message, never a
// crash: every write(2) is checked where it happens, and the first failure is kept with its
// cause (no space left, a file-size limit) for the caller to report. Keeping it, rather than
// throwing, is what lets LibTorch's archive writer drive this: that writer throws from its
// destructor once a write comes up short, which ends the process (std::terminate), so its
// writes always "succeed" and the failure surfaces after it has finished.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <ctime>
#include <optional>
#include <string>

namespace versatil::libtorch {

namespace detail {

// What an errno from writing means, in the words a user acts on.
inline std::string write_failure_cause(int error_number) {
    switch (error_number) {
        case ENOSPC: return "no space left on device";
        case EDQUOT: return "disk quota exceeded";
        case EFBIG: {
            rlimit limit{};
            if (::getrlimit(RLIMIT_FSIZE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
                return "file size limit of " + std::to_string(limit.rlim_cur) +
                       " bytes reached (RLIMIT_FSIZE, `ulimit -f`)";
            return "file too large for its filesystem";
        }
        default: return std::strerror(error_number);
    }
}

// Holds SIGXFSZ on this thread for a scope. Past RLIMIT_FSIZE, write(2) raises SIGXFSZ, whose
// default action ends the process with a core dump; held, the signal only stays pending and the
// write returns EFBIG. A SIGXFSZ raised inside the scope is taken back before the mask is
// restored, so nothing is delivered late; one pending before the scope is left alone.
class file_size_signal_held {
public:
    file_size_signal_held() noexcept {
        ::sigemptyset(&held_);
        ::sigaddset(&held_, SIGXFSZ);
        ::pthread_sigmask(SIG_BLOCK, &held_, &previous_mask_);
        sigset_t pending;
        was_pending_ = ::sigpending(&pending) == 0 && ::sigismember(&pending, SIGXFSZ) == 1;
    }
    file_size_signal_held(const file_size_signal_held&) = delete;
    file_size_signal_held& operator=(const file_size_signal_held&) = delete;
    ~file_size_signal_held() {
        sigset_t pending;
        if (!was_pending_ && ::sigpending(&pending) == 0 && ::sigismember(&pending, SIGXFSZ) == 1) {
            const timespec no_wait{0, 0};
            ::sigtimedwait(&held_, nullptr, &no_wait);
        }
        ::pthread_sigmask(SIG_SETMASK, &previous_mask_, nullptr);
    }

private:
    sigset_t held_{};
    sigset_t previous_mask_{};
    bool was_pending_ = false;
};

}  // namespace detail

// Appends to an open file descriptor (which it does not own) and keeps the first failure.
class checked_writer {
public:
    explicit checked_writer(int descriptor) noexcept : descriptor_(descriptor) {}

    // Writes all `size` bytes unless an earlier write failed; never throws.
    void write(const void* data, std::size_t size) noexcept {
        if (failure_) return;
        const detail::file_size_signal_held held;
        const auto* bytes = static_cast<const char*>(data);
        while (size > 0) {
            const ssize_t written = ::write(descriptor_, bytes, size);
            if (written < 0 && errno == EINTR) continue;
            if (written <= 0) {
                // A zero-byte write of a non-empty buffer is a full device on some filesystems.
                fail_with(written < 0 ? errno : ENOSPC);
                return;
            }
            bytes += written;
            size -= static_cast<std::size_t>(written);
            written_ += static_cast<std::size_t>(written);
        }
    }

    // Flushes the bytes to the device: some filesystems (NFS, delayed allocation) report a full
    // disk only here.
    void sync() noexcept {
        if (!failure_ && ::fsync(descriptor_) != 0 && errno != EINVAL && errno != EROFS) fail_with(errno);
    }

    // Records a failure of a call around the writes (open, close) by its errno.
    void fail_with(int error_number) noexcept {
        if (failure_) return;
        error_number_ = error_number;
        failure_ = detail::write_failure_cause(error_number);
    }

    // Whether the first failure was a full device (no space, or a quota).
    bool out_of_space() const noexcept { return error_number_ == ENOSPC || error_number_ == EDQUOT; }

    // The first failure's cause, or nullopt while every write has succeeded.
    const std::optional<std::string>& failure() const noexcept { return failure_; }
    std::size_t bytes_written() const noexcept { return written_; }

private:
    int descriptor_;
    std::size_t written_ = 0;
    int error_number_ = 0;
    std::optional<std::string> failure_;
};

}  // namespace versatil::libtorch
