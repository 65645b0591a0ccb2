// An output file written whole or not at all. Bytes go to a temporary file beside the
// destination (the same directory, so the rename that publishes it is atomic), every write is
// checked where it happens (checked_writer.hpp), and nothing appears at the destination until
// the output is committed, synced first, so a crash right after cannot leave a torn file
// either. An output dropped uncommitted (an exception, a failed write) removes its temporary;
// a signal does under cleanup_on_signals. Several outputs commit as a set: all are synced
// before any is renamed, so a report never describes a model that could not be saved.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <string_view>
#include <system_error>

#include "versatil/libtorch/error.hpp"
#include "versatil/libtorch/files/checked_writer.hpp"
#include "versatil/libtorch/files/temporaries.hpp"

namespace versatil::libtorch {

namespace detail {
inline std::filesystem::path temporary_beside(const std::filesystem::path& output) {
    static std::atomic<unsigned> counter{0};
    const std::string name = "." + output.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-" +
                             std::to_string(counter++);
    return output.parent_path() / name;
}
}  // namespace detail

class output_file {
public:
    // Creates the temporary; an io_error names the destination when it cannot be written.
    explicit output_file(std::filesystem::path destination)
        : destination_(std::move(destination)),
          temporary_(detail::temporary_beside(destination_)),
          registered_(temporary_) {  // named before it exists, so no signal can miss it
        const std::filesystem::path directory =
            destination_.parent_path().empty() ? "." : destination_.parent_path();
        std::error_code status;
        if (!std::filesystem::is_directory(directory, status))
            fail("directory '" + directory.string() + "' does not exist");
        if (std::filesystem::is_directory(destination_, status)) fail("it is a directory");
        descriptor_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (descriptor_ < 0) fail(detail::write_failure_cause(errno));
        writer_ = checked_writer(descriptor_);
    }
    output_file(const output_file&) = delete;
    output_file& operator=(const output_file&) = delete;
    ~output_file() {
        if (descriptor_ >= 0) ::close(descriptor_);
        if (!published_) ::unlink(temporary_.c_str());
    }

    // Never throws: a failure is kept and reported by finish() or commit().
    void write(const void* data, std::size_t size) noexcept { writer_.write(data, size); }
    void write(std::string_view text) noexcept { write(text.data(), text.size()); }

    // Syncs and closes the temporary: an io_error naming the destination and the cause of the
    // first failed write (and the temporary removed), or the bytes are safely on the device.
    void finish() {
        if (descriptor_ < 0) return;
        writer_.sync();
        if (::close(descriptor_) != 0 && errno != EINTR) writer_.fail_with(errno);
        descriptor_ = -1;
        if (writer_.failure()) {
            ::unlink(temporary_.c_str());
            fail(*writer_.failure());
        }
    }

    // Finishes, then renames the temporary over the destination.
    void commit() {
        finish();
        if (::rename(temporary_.c_str(), destination_.c_str()) != 0) fail(std::strerror(errno));
        published_ = true;
    }

    const std::filesystem::path& destination() const noexcept { return destination_; }

private:
    [[noreturn]] void fail(const std::string& cause) const {
        throw error(error_kind::io_error, "cannot write '" + destination_.string() + "': " + cause);
    }

    std::filesystem::path destination_;
    std::filesystem::path temporary_;
    detail::registered_temporary registered_;
    int descriptor_ = -1;
    checked_writer writer_{-1};
    bool published_ = false;
};

// Commits outputs as a set (null entries skipped): each is synced before any is renamed, so a
// failure of one publishes none of them.
inline void commit_together(std::initializer_list<output_file*> outputs) {
    for (output_file* output : outputs)
        if (output) output->finish();
    for (output_file* output : outputs)
        if (output) output->commit();
}

}  // namespace versatil::libtorch
