// Faults of the machine rather than of the input, through the library: a full device and a
// file-size limit are reported by the write that hit them (typed, with the path and the cause,
// the process alive, nothing left behind); outputs commit as a set; a signal removes staged
// files; a killed checking process does not blame the file; quantize() from two threads gives
// what it gives alone. tests/cli/check_faults.py makes the same faults for the CLI.
#include "doctest_with_torch.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <future>
#include <string>
#include <vector>

#include "../runtime/archive_surgery.hpp"
#include "torch_test_helpers.hpp"
#include "versatil/libtorch.hpp"
#include "versatil/libtorch/demo/models.hpp"

using namespace versatil;
using namespace versatil::libtorch;
namespace fs = std::filesystem;

namespace {

using versatil::testing::scratch_directory;

// RLIMIT_FSIZE lowered for a scope (the hard limit stays, so it can be raised back).
class file_size_limit {
public:
    explicit file_size_limit(rlim_t bytes) {
        REQUIRE(::getrlimit(RLIMIT_FSIZE, &previous_) == 0);
        const rlimit lowered{bytes, previous_.rlim_max};
        REQUIRE(::setrlimit(RLIMIT_FSIZE, &lowered) == 0);
    }
    ~file_size_limit() { ::setrlimit(RLIMIT_FSIZE, &previous_); }

private:
    rlimit previous_{};
};

lowered_model quantized_cnn(std::string_view spec) {
    return quantize_model(small_cnn_mlp(0), versatil::testing::whole_model(spec),
                          {versatil::testing::smooth_batches(4, 16, 1)});
}

std::string message_of(const std::function<void()>& action, error_kind expected_kind) {
    try {
        action();
    } catch (const error& failure) {
        CHECK(to_string(failure.kind()) == to_string(expected_kind));
        return failure.what();
    }
    FAIL("no error");
    return {};
}

// Runs `body` in a forked child and returns its wait status. The child does no LibTorch work.
int status_of_child(const std::function<void()>& body) {
    std::fflush(nullptr);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        const rlimit no_core{0, 0};  // a child ended by SIGSEGV leaves no core file behind
        ::setrlimit(RLIMIT_CORE, &no_core);
        // doctest's handlers report a signal as a crash of the test: the child's signals act
        // as they do in a program of its own.
        for (const int number : {SIGINT, SIGTERM, SIGHUP, SIGSEGV, SIGABRT, SIGFPE, SIGILL, SIGXFSZ})
            ::signal(number, SIG_DFL);
        body();
        ::_exit(0);
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    return status;
}

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("a full device is reported by the write that hit it, with its cause") {
    // /dev/full fails every write with ENOSPC, as a full filesystem does.
    const int descriptor = ::open("/dev/full", O_WRONLY | O_CLOEXEC);
    REQUIRE(descriptor >= 0);
    checked_writer writer(descriptor);
    const std::string bytes(4096, 'x');
    writer.write(bytes.data(), bytes.size());
    writer.write(bytes.data(), bytes.size());  // ignored: the first failure stays the one reported
    ::close(descriptor);
    REQUIRE(writer.failure().has_value());
    CHECK(*writer.failure() == "no space left on device");
    CHECK(writer.out_of_space());
    CHECK(writer.bytes_written() == 0);
}

TEST_CASE("past the file-size limit a save is an io_error naming the limit, and the process lives on") {
    const scratch_directory scratch("versatil-faults-");
    const lowered_model model = quantized_cnn("x86_inductor");
    const fs::path output = scratch.path / "q.pt";
    std::string message;
    {
        // Without the held SIGXFSZ, the first write past the limit would end this process.
        const file_size_limit limit(16 * 1024);
        message = message_of([&] { save(model, output); }, error_kind::io_error);
    }
    CAPTURE(message);
    CHECK(contains(message, "cannot write '" + output.string() + "'"));
    CHECK(contains(message, "file size limit of 16384 bytes"));
    CHECK(scratch.files().empty());  // no output, no temporary

    // A SIGXFSZ that was pending before is left for its owner; none is left by the save.
    sigset_t pending;
    REQUIRE(::sigpending(&pending) == 0);
    CHECK(::sigismember(&pending, SIGXFSZ) == 0);

    save(model, output);  // the same save fits without the limit
    CHECK(scratch.files() == std::vector<std::string>{"q.pt"});
}

TEST_CASE("outputs committed together: one that fails publishes none") {
    const scratch_directory scratch("versatil-faults-");
    const fs::path model_path = scratch.path / "q.pt", report_path = scratch.path / "r.json";
    const lowered_model model = quantized_cnn("xnnpack");
    const std::size_t model_bytes = serialized_bytes(model.module);
    std::string message;
    {
        // The model fits under the limit; a report larger than the limit does not.
        const file_size_limit limit(model_bytes + 4096);
        output_file model_file(model_path), report_file(report_path);
        write_quantized(model_file, model);
        report_file.write(std::string(model_bytes + 8192, ' '));
        message = message_of([&] { commit_together({&model_file, &report_file}); }, error_kind::io_error);
        CHECK(scratch.files().size() == 1);  // the model's finished temporary, not yet renamed
    }
    CHECK(contains(message, "cannot write '" + report_path.string() + "': file size limit"));
    CHECK(scratch.files().empty());

    output_file model_file(model_path), report_file(report_path);
    write_quantized(model_file, model);
    report_file.write("{}\n");
    commit_together({&model_file, nullptr, &report_file});
    save(model, scratch.path / "saved.pt");
    CHECK(scratch.files() == std::vector<std::string>{"q.pt", "r.json", "saved.pt"});
    CHECK(versatil::testing::read_bytes(model_path) ==
          versatil::testing::read_bytes(scratch.path / "saved.pt"));  // staged or saved: the same archive
}

TEST_CASE("a signal during a staged write removes the temporary under cleanup_on_signals, and only then") {
    const scratch_directory scratch("versatil-faults-");
    const auto interrupted_save = [&](bool with_cleanup) {
        return status_of_child([&] {
            const std::optional<cleanup_on_signals> cleanup =
                with_cleanup ? std::optional<cleanup_on_signals>(std::in_place) : std::nullopt;
            output_file output(scratch.path / "q.pt");
            output.write("half of a model");
            ::raise(SIGTERM);
        });
    };
    const int cleaned = interrupted_save(true);
    CHECK(WIFSIGNALED(cleaned));
    CHECK(WTERMSIG(cleaned) == SIGTERM);  // the conventional status: the signal still ends the process
    CHECK(scratch.files().empty());

    // Without the scope the temporary stays: what the scope is for (and proof this test sees it).
    const int uncleaned = interrupted_save(false);
    CHECK(WTERMSIG(uncleaned) == SIGTERM);
    REQUIRE(scratch.files().size() == 1);
    CHECK(scratch.files().front().starts_with(".q.pt.tmp-"));
}

TEST_CASE("cleanup_on_signals nests and puts back the handler it found") {
    static volatile sig_atomic_t received = 0;
    static void (*const own_handler)(int) = [](int) { received = 1; };
    struct sigaction own {};
    own.sa_handler = own_handler;
    struct sigaction before {};
    REQUIRE(::sigaction(SIGHUP, &own, &before) == 0);
    {
        const cleanup_on_signals outer;
        {
            const cleanup_on_signals inner;
        }
        const auto installed = [] {
            struct sigaction current {};
            ::sigaction(SIGHUP, nullptr, &current);
            return current.sa_handler != own_handler;
        };
        CHECK(installed());  // the inner scope left the outer's handlers in place
        // The application's handler still runs after the cleanup, and the cleanup stays.
        ::raise(SIGHUP);
        CHECK(received == 1);
        CHECK(installed());
    }
    struct sigaction after {};
    ::sigaction(SIGHUP, nullptr, &after);
    CHECK((after.sa_handler == own_handler));
    ::sigaction(SIGHUP, &before, nullptr);
}

TEST_CASE("a checking process stopped from outside is the machine's fault; a crash is the file's") {
    const auto failure_of = [](int status, const std::string& message) {
        return libtorch::detail::describe_child_end(status, message, error_kind::invalid_model_file);
    };
    CHECK_FALSE(failure_of(status_of_child([] {}), "").has_value());

    const auto killed = failure_of(status_of_child([] { ::raise(SIGKILL); }), "");
    REQUIRE(killed.has_value());
    CHECK_FALSE(killed->file_is_at_fault);
    CHECK(killed->kind == error_kind::machine_fault);
    CHECK(contains(killed->message, "signal 9"));

    for (const int outside : {SIGXFSZ, SIGTERM, SIGINT}) {
        CAPTURE(outside);
        const auto stopped = failure_of(status_of_child([outside] { ::raise(outside); }), "");
        REQUIRE(stopped.has_value());
        CHECK_FALSE(stopped->file_is_at_fault);
    }

    const auto crashed = failure_of(status_of_child([] { ::raise(SIGSEGV); }), "");
    REQUIRE(crashed.has_value());
    CHECK(crashed->file_is_at_fault);
    CHECK(crashed->kind == error_kind::invalid_model_file);
    CHECK(contains(crashed->message, "LibTorch crashed reading it"));

    const auto no_space = failure_of(status_of_child([] { ::_exit(libtorch::detail::child_hit_machine_fault); }),
                                     "cannot write its checked copy '/tmp/x.pt' in the temporary directory: no space");
    REQUIRE(no_space.has_value());
    CHECK_FALSE(no_space->file_is_at_fault);
    CHECK(no_space->kind == error_kind::io_error);

    const auto bad_file = failure_of(status_of_child([] { ::_exit(libtorch::detail::child_found_file_problem); }),
                                     "LibTorch cannot read it: bad source");
    REQUIRE(bad_file.has_value());
    CHECK(bad_file->file_is_at_fault);
}

TEST_CASE("a file-size limit while checking a model file blames the limit, not the file") {
    const scratch_directory scratch("versatil-faults-");
    const fs::path model = scratch.path / "model.pt";
    small_cnn_mlp(0).save(model.string());
    std::string message;
    {
        const file_size_limit limit(fs::file_size(model) / 4);
        message = message_of([&] { (void)load_model(model); }, error_kind::io_error);
    }
    CAPTURE(message);
    CHECK(contains(message, "cannot check model file '" + model.string() + "'"));
    CHECK(contains(message, "checked copy"));
    CHECK(contains(message, "file size limit"));
    CHECK_FALSE(contains(message, "not a valid"));
    (void)load_model(model);  // and without the limit it loads
}

TEST_CASE("quantize() from two threads at once gives what each gives alone") {
    using versatil::testing::smooth_batches;
    const quantize_data data{smooth_batches(4, 16, 1), smooth_batches(2, 16, 2)};
    const quantize_options options{.per_layer = false, .progress = false};
    const ::torch::jit::Module cnn = small_cnn_mlp(0);
    const auto quantizer = [](std::string_view spec) {
        return *runtime_quantizer::compose({{"", *parse_backend_spec(spec)}});
    };
    const at::Tensor probe = data.evaluation.front().input();
    const auto run_quantized = [&](const quantization_result& result) {
        const engine_scope scope(result.model.plan.engine);
        ::torch::jit::Module module = result.model.module.deepcopy();
        return module.forward({probe}).toTensor();
    };
    const at::QEngine engine_before = at::globalContext().qEngine();

    // Different engines (oneDNN, QNNPACK), then the same model and backend twice.
    for (const auto& [first, second] : {std::pair{"x86_inductor", "xnnpack"}, std::pair{"xnnpack", "xnnpack"}}) {
        CAPTURE(first);
        CAPTURE(second);
        const quantization_result alone_first = quantize(cnn, quantizer(first), data, options);
        const quantization_result alone_second = quantize(cnn, quantizer(second), data, options);
        auto concurrent_first =
            std::async(std::launch::async, [&] { return quantize(cnn, quantizer(first), data, options); });
        auto concurrent_second =
            std::async(std::launch::async, [&] { return quantize(cnn, quantizer(second), data, options); });
        const quantization_result together_first = concurrent_first.get();
        const quantization_result together_second = concurrent_second.get();
        CHECK(together_first.report.sqnr_db == alone_first.report.sqnr_db);
        CHECK(together_second.report.sqnr_db == alone_second.report.sqnr_db);
        CHECK(at::equal(run_quantized(together_first), run_quantized(alone_first)));
        CHECK(at::equal(run_quantized(together_second), run_quantized(alone_second)));
    }
    CHECK(engine_name(at::globalContext().qEngine()) == engine_name(engine_before));
}

TEST_CASE("an engine scope on one thread holds the LibTorch state lock against every other thread") {
    const engine_scope scope(at::QEngine::QNNPACK);
    const bool other_thread_got_it = std::async(std::launch::async, [] {
                                         std::recursive_mutex& state = libtorch::detail::libtorch_state_mutex();
                                         const bool locked = state.try_lock();
                                         if (locked) state.unlock();
                                         return locked;
                                     }).get();
    CHECK_FALSE(other_thread_got_it);
    CHECK(libtorch::detail::libtorch_state_mutex().try_lock());  // recursive: the holder's own thread may nest
    libtorch::detail::libtorch_state_mutex().unlock();
}
