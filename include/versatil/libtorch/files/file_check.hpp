// Loading a TorchScript file that may be corrupt, without letting LibTorch crash or trust it.
// First the archive's layout (zip_layout.hpp), every record's CRC-32 (LibTorch checks none)
// and every pickle (pickle_scan.hpp), so no corrupt size or memo index becomes an allocation.
// Then the file's source is compiled only in a child process, which saves the module again:
// LibTorch's TorchScript compiler reads uninitialised memory on some source it does not expect
// (an unannotated class attribute), so it may crash or not, and this process loads only what
// torch::jit::save wrote. And every tensor must fit its storage, and every storage the bytes
// allocated for it, which LibTorch's unpickler never checks: a tensor reaching past its data
// reads other memory, and saving it copies that memory (the child checks before it saves;
// this process checks what it loads).
#pragma once

#include <caffe2/serialize/inline_container.h>
#include <fcntl.h>
#include <malloc.h>  // malloc_usable_size (glibc; jemalloc and tcmalloc provide it too)
#include <string.h>  // strsignal (POSIX)
#include <sys/wait.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/script.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "versatil/libtorch/error.hpp"
#include "versatil/libtorch/files/checked_writer.hpp"
#include "versatil/libtorch/files/pickle_scan.hpp"
#include "versatil/libtorch/files/temporaries.hpp"
#include "versatil/libtorch/files/zip_layout.hpp"
#include "versatil/libtorch/torchscript/engine.hpp"
#include "versatil/libtorch/torchscript/graph_walk.hpp"

namespace versatil::libtorch {

namespace detail {

inline std::uint32_t crc32_of(const void* data, std::uint64_t size, std::uint32_t crc = 0) {
    const auto* bytes = static_cast<const Bytef*>(data);
    for (std::uint64_t done = 0; done < size;) {
        const auto chunk = static_cast<uInt>(std::min<std::uint64_t>(size - done, 1U << 30));
        crc = static_cast<std::uint32_t>(::crc32(crc, bytes + done, chunk));
        done += chunk;
    }
    return crc;
}

// The CRC-32 of a stored record, read from the file in blocks rather than all at once.
inline std::uint32_t stored_crc32(const zip::file_bytes& bytes, const zip::record& record) {
    constexpr std::uint64_t block = 1 << 20;
    std::uint32_t crc = 0;
    for (std::uint64_t done = 0; done < record.size; done += block) {
        const std::optional<std::string> part =
            bytes.read(record.data_offset + done, static_cast<std::size_t>(std::min(block, record.size - done)));
        if (!part) return ~record.crc32;  // unreadable: a mismatch
        crc = crc32_of(part->data(), part->size(), crc);
    }
    return crc;
}

// The bytes a tensor reaches from the start of its storage (0 when it has no elements), or
// nullopt when a stride or offset is negative or the product overflows.
inline std::optional<std::uint64_t> reach_in_bytes(const at::Tensor& tensor) {
    if (tensor.storage_offset() < 0) return std::nullopt;
    std::uint64_t last = static_cast<std::uint64_t>(tensor.storage_offset());
    for (std::int64_t dim = 0; dim < tensor.dim(); ++dim) {
        if (tensor.size(dim) == 0) return 0;
        if (tensor.stride(dim) < 0) return std::nullopt;
        std::uint64_t step = 0;
        if (__builtin_mul_overflow(static_cast<std::uint64_t>(tensor.size(dim) - 1),
                                   static_cast<std::uint64_t>(tensor.stride(dim)), &step) ||
            __builtin_add_overflow(last, step, &last))
            return std::nullopt;
    }
    std::uint64_t bytes = 0;
    if (__builtin_mul_overflow(last + 1, tensor.element_size(), &bytes)) return std::nullopt;
    return bytes;
}

// The first tensor in `value` (or in the tuples, lists and dicts it holds) that reaches past
// its storage, described; nullopt when every one fits.
inline std::optional<std::string> find_past_storage(const c10::IValue& value, const std::string& name) {
    if (value.isTensor()) {
        const at::Tensor& tensor = value.toTensor();
        if (!tensor.defined() || !tensor.has_storage()) return std::nullopt;
        // LibTorch sizes a loaded storage by the element count its pickle names, not by the
        // bytes of its record: the allocation behind it is what it really holds.
        const std::size_t declared = tensor.storage().nbytes();
        if (const void* data = tensor.storage().data();
            data && declared > ::malloc_usable_size(const_cast<void*>(data)))
            return "tensor '" + name + "' declares a " + std::to_string(declared) + "-byte storage over " +
                   std::to_string(::malloc_usable_size(const_cast<void*>(data))) + " bytes of data";
        const std::optional<std::uint64_t> reach = reach_in_bytes(tensor);
        if (reach && *reach <= declared) return std::nullopt;
        return "tensor '" + name + "' (sizes " + c10::str(tensor.sizes()) + ", strides " + c10::str(tensor.strides()) +
               ") reaches past its " + std::to_string(declared) + "-byte storage";
    }
    const auto first_in = [&name](const auto& elements) -> std::optional<std::string> {
        for (const c10::IValue& element : elements)
            if (auto problem = find_past_storage(element, name)) return problem;
        return std::nullopt;
    };
    if (value.isTuple()) return first_in(value.toTupleRef().elements());
    if (value.isList()) return first_in(value.toListRef());
    if (value.isGenericDict())
        for (const auto& entry : value.toGenericDict())
            if (auto problem = find_past_storage(entry.value(), name)) return problem;
    return std::nullopt;
}

}  // namespace detail

// Throws error(kind) naming `path` and the first problem; `what` is "model file" or "data file".
// Returns the names of the archive's records, below its top folder.
inline std::vector<std::string> check_archive(const std::filesystem::path& path, error_kind kind,
                                              std::string_view what) {
    const auto fail = [&](const std::string& problem) {
        throw error(kind,
                    std::string(what) + " '" + path.string() + "' is not a readable TorchScript archive: " + problem);
    };
    if (!std::filesystem::is_regular_file(path))
        throw error(kind, std::string(what) + " '" + path.string() + "' does not exist");
    const zip::file_bytes bytes(path.string());
    if (!bytes.is_open()) fail("it cannot be opened");
    const zip::layout layout = zip::read_layout(bytes);
    if (!layout.ok()) fail(layout.problem);
    try {
        // The layout bounds every record's size by its bytes in the file, so reading records
        // (inflating the deflated ones) allocates no more than the file can justify.
        caffe2::serialize::PyTorchStreamReader reader(path.string());
        const std::string prefix = layout.records.empty() ? "" : layout.records.front().name.substr(
                                                                      0, layout.records.front().name.find('/') + 1);
        std::vector<std::string> names;
        for (const zip::record& record : layout.records) {
            const std::string name = record.name.substr(prefix.size());
            names.push_back(name);
            const bool is_pickle = name.ends_with("pkl");
            std::optional<std::tuple<at::DataPtr, std::size_t>> content;
            if (record.method != 0 || is_pickle) content = reader.getRecord(name);
            const std::uint32_t crc = content ? detail::crc32_of(std::get<0>(*content).get(), std::get<1>(*content))
                                              : detail::stored_crc32(bytes, record);
            if (crc != record.crc32)
                fail("record '" + name + "' fails its CRC-32 check: the file is damaged");
            if (!is_pickle) continue;
            const std::string_view pickle(static_cast<const char*>(std::get<0>(*content).get()), std::get<1>(*content));
            if (auto problem = pickle::find_problem(pickle)) fail("'" + name + "': " + *problem);
        }
        return names;
    } catch (const error&) {
        throw;
    } catch (const std::exception& failure) {
        fail(one_line(failure));
    }
    return {};  // not reached: fail throws
}

// Whether an archive's records (check_archive's answer) are what torch.save writes: one pickle
// of Python objects, data.pkl, with none of TorchScript's code or constants.
inline bool is_torch_save_archive(const std::vector<std::string>& records) {
    const auto holds = [&records](std::string_view wanted) {
        return std::ranges::any_of(records, [wanted](const std::string& name) { return name.starts_with(wanted); });
    };
    return holds("data.pkl") && !holds("constants.pkl") && !holds("code/");
}

// The first tensor attribute or graph constant of `module` or its submodules that reaches past
// its storage, or whose storage declares more than its allocation holds, described; nullopt
// when every one fits.
inline std::optional<std::string> find_tensor_past_storage(const ::torch::jit::Module& module) {
    for (const auto& attribute : module.named_attributes(/*recurse=*/true))
        if (auto problem = detail::find_past_storage(attribute.value, attribute.name)) return problem;
    const auto is_tensor_constant = [](const ::torch::jit::Node* n) {
        return n->kind() == c10::prim::Constant && n->output()->type()->kind() == c10::TypeKind::TensorType;
    };
    for (const ::torch::jit::Module& submodule : module.modules())
        for (const ::torch::jit::Method& method : submodule.get_methods())
            for (const ::torch::jit::Node* node : nodes_where(method.graph(), is_tensor_constant))
                if (const auto constant = ::torch::jit::toIValue(node->output()))
                    if (auto problem = detail::find_past_storage(*constant, "constant " + node->output()->debugName()))
                        return problem;
    return std::nullopt;
}

// Where a file's TorchScript source is first compiled.
enum class compile_source {
    // The default: in a child process, which saves the module again for this process to load.
    // A crash in LibTorch's compiler ends the child; the cost is a fork (it grows with this
    // process's resident memory) and a save (benchmarks/RESULTS.md, "Loading a file, checked").
    in_child_process,
    // For files this program wrote itself: no child. The archive, CRC, pickle and tensor checks
    // still run, so damage is still caught; source crafted to crash the compiler is not.
    in_process,
};

namespace detail {

// A file in the temporary directory, removed when this goes out of scope (or by a signal,
// under cleanup_on_signals).
struct temporary_file {
    std::filesystem::path path = next_path();
    registered_temporary registered{path};
    temporary_file() = default;
    temporary_file(const temporary_file&) = delete;
    temporary_file& operator=(const temporary_file&) = delete;
    ~temporary_file() { ::unlink(path.c_str()); }

private:
    static std::filesystem::path next_path() {
        static std::atomic<unsigned> counter{0};
        return std::filesystem::temp_directory_path() /
               ("versatil-load-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + ".pt");
    }
};

// Why the child checking a file did not succeed, and whose fault it was: only a problem of the
// file may blame the file. A full temporary directory, a file-size limit or the OOM killer is
// the machine's.
struct check_failure {
    bool file_is_at_fault;
    error_kind kind;  // invalid-file kind when the file is at fault; io_error or machine_fault else
    std::string message;
};

// The signals a crash inside LibTorch raises; any other signal came from outside (SIGKILL from
// the OOM killer, SIGXFSZ, SIGTERM).
inline bool is_crash_signal(int number) {
    for (const int crash : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL, SIGTRAP, SIGSYS})
        if (number == crash) return true;
    return false;
}

// The child's exit statuses: what it reports through the pipe is about the file, or about the
// machine (its copy could not be written, memory ran out).
inline constexpr int child_found_file_problem = 1, child_could_not_report = 2, child_hit_machine_fault = 3;

// How a checking child ended (its wait status and what it reported), as a check_failure, or
// nullopt when it succeeded.
inline std::optional<check_failure> describe_child_end(int status, const std::string& message, error_kind file_kind) {
    if (WIFSIGNALED(status)) {
        const int number = WTERMSIG(status);
        const std::string signal = "signal " + std::to_string(number) + ", " + ::strsignal(number);
        if (is_crash_signal(number))
            return check_failure{true, file_kind, "LibTorch crashed reading it (" + signal + ")"};
        return check_failure{false, error_kind::machine_fault,
                             "the process reading it was stopped from outside (" + signal +
                                 "), which is no fault of the file" +
                                 (number == SIGKILL ? ": out of memory (the OOM killer) or killed" : "")};
    }
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (code == 0) return std::nullopt;
    if (code == child_hit_machine_fault)
        return check_failure{
            false, message.find("cannot write") == 0 ? error_kind::io_error : error_kind::machine_fault, message};
    return check_failure{true, file_kind,
                         message.empty() ? "LibTorch stopped reading it (exit status " + std::to_string(code) + ")"
                                         : message};
}

// In the child: loads `path` and writes it to `copy` as torch::jit::save does, through a
// checked writer. Returns the exit status and the message for the parent.
inline std::pair<int, std::string> resave(const std::filesystem::path& path, const std::filesystem::path& copy) {
    try {
        const ::torch::jit::Module module = ::torch::jit::load(path.string());
        // Before saving: a save copies each storage as far as its tensors reach, past its end.
        if (const std::optional<std::string> problem = find_tensor_past_storage(module))
            return {child_found_file_problem, *problem};
        const int descriptor = ::open(copy.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        checked_writer writer(descriptor);
        if (descriptor < 0) writer.fail_with(errno);
        ::torch::jit::ExportModule(module, [&writer](const void* data, std::size_t size) {
            writer.write(data, size);
            return size;
        });
        if (descriptor >= 0 && ::close(descriptor) != 0) writer.fail_with(errno);
        if (writer.failure())
            return {child_hit_machine_fault,
                    "cannot write its checked copy '" + copy.string() + "' in the temporary directory: " +
                        *writer.failure() + (writer.out_of_space() ? " (set TMPDIR to a directory with space)" : "")};
        return {0, {}};
    } catch (const std::bad_alloc&) {
        return {child_hit_machine_fault, "the process reading it ran out of memory"};
    } catch (const std::exception& load_failure) {
        return {child_found_file_problem, "LibTorch cannot read it: " + one_line(load_failure)};
    } catch (...) {
        return {child_found_file_problem, "LibTorch cannot read it"};
    }
}

// Loads `path` in a child process and saves it to `copy` as torch::jit::save writes it;
// returns why that failed, or nullopt. The child restores default signal dispositions, so a
// crash ends it rather than running handlers it inherited, and reports through a pipe. (Under
// a sanitizer, a report from instrumented code still runs in the child and ends it:
// tests/fuzz/run_fuzzer.py lists those as contained.) The fork holds the LibTorch state lock:
// a child forked while another thread of this process is inside LibTorch could inherit one of
// its mutexes locked, and wait on it forever.
inline std::optional<check_failure> resave_in_child(const std::filesystem::path& path,
                                                    const std::filesystem::path& copy, error_kind file_kind) {
    const auto machine_fault = [](const char* what) {
        const int cause = errno;
        return check_failure{false, error_kind::machine_fault, std::string(what) + ": " + std::strerror(cause)};
    };
    const std::lock_guard serialized(libtorch_state_mutex());
    int ends[2];
    if (::pipe(ends) != 0) return machine_fault("cannot create a pipe to read it safely");
    std::fflush(nullptr);
    const pid_t child = ::fork();
    if (child < 0) {
        ::close(ends[0]);
        ::close(ends[1]);
        return machine_fault("cannot start a process to read it safely");
    }
    if (child == 0) {
        ::close(ends[0]);
        for (const int number : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL, SIGINT, SIGTERM, SIGHUP})
            std::signal(number, SIG_DFL);
        auto [status, message] = resave(path, copy);
        message = message.substr(0, 2000);  // below PIPE_BUF: one write, never blocking
        const bool reported = ::write(ends[1], message.data(), message.size()) == static_cast<ssize_t>(message.size());
        ::_exit(reported ? status : child_could_not_report);
    }
    temporary_files.set_checking_child(child);
    ::close(ends[1]);
    std::string message;
    char buffer[512];
    for (ssize_t count; (count = ::read(ends[0], buffer, sizeof buffer)) != 0;) {
        if (count > 0) message.append(buffer, static_cast<std::size_t>(count));
        else if (errno != EINTR) break;
    }
    ::close(ends[0]);
    int status = 0;
    while (::waitpid(child, &status, 0) < 0)
        if (errno != EINTR) return machine_fault("lost the process reading it");
    temporary_files.set_checking_child(0);
    return describe_child_end(status, message, file_kind);
}

// load_checked after check_archive(path) passed.
inline ::torch::jit::Module load_checked_archive(const std::filesystem::path& path, error_kind kind,
                                                 std::string_view what, compile_source where) {
    std::optional<detail::temporary_file> copy;
    if (where == compile_source::in_child_process) {
        copy.emplace();
        if (const std::optional<detail::check_failure> failure = detail::resave_in_child(path, copy->path, kind))
            throw failure->file_is_at_fault
                ? error(kind, std::string(what) + " '" + path.string() + "' is not a valid TorchScript file: " +
                                  failure->message)
                : error(failure->kind, "cannot check " + std::string(what) + " '" + path.string() + "': " +
                                           failure->message);
    }
    try {
        ::torch::jit::Module module = ::torch::jit::load(copy ? copy->path.string() : path.string());
        if (const std::optional<std::string> problem = find_tensor_past_storage(module))
            throw error(kind, std::string(what) + " '" + path.string() + "' is corrupt: " + *problem);
        return module;
    } catch (const error&) {
        throw;
    } catch (const std::exception& failure) {
        throw error(kind, std::string(what) + " '" + path.string() +
                              "' is not a valid TorchScript file (truncated or corrupt?): " + one_line(failure));
    }
}

}  // namespace detail

// torch::jit::load for a file that may be corrupt: every check above, and each failure an
// error(kind) naming the file and the problem.
inline ::torch::jit::Module load_checked(const std::filesystem::path& path, error_kind kind, std::string_view what,
                                         compile_source where = compile_source::in_child_process) {
    // LibTorch's own words for this file are "failed locating file constants.pkl".
    if (is_torch_save_archive(check_archive(path, kind, what)))
        throw error(kind,
                    std::string(what) + " '" + path.string() +
                        "' was written by torch.save (a pickled Python object), not as TorchScript: script it "
                        "with torch.jit.script (or trace it with torch.jit.trace) and save it with torch.jit.save");
    return detail::load_checked_archive(path, kind, what, where);
}

}  // namespace versatil::libtorch