// The process-wide LibTorch state that quantized lowering and inference depend on: the
// quantized engine (weights are packed for it), denormal flushing and the intra-op thread
// count. `engine_scope` sets them and restores the exact previous values when it ends, as
// the core's scoped_environment does for environment variables.
//
// Two threads quantizing at once would cross engines (weights packed for one engine and run
// under the other). So everything in this layer that sets that state, or forks, holds one
// recursive lock, libtorch_state_mutex: quantize() for its whole run, engine_scope for its
// lifetime, the model-file check around its fork (a child forked while another thread is
// inside LibTorch could inherit a mutex held locked, and wait on it forever). Calls from
// several threads work; they take turns.
#pragma once

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <c10/core/QEngine.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include "versatil/libtorch/error.hpp"

namespace versatil::libtorch {

namespace detail {
inline std::recursive_mutex& libtorch_state_mutex() {
    static std::recursive_mutex mutex;
    return mutex;
}
}  // namespace detail

inline std::string engine_name(at::QEngine engine) {
    switch (engine) {
        case at::QEngine::ONEDNN: return "onednn";
        case at::QEngine::QNNPACK: return "qnnpack";
        case at::QEngine::FBGEMM: return "fbgemm";
        case at::QEngine::X86: return "x86";
        case at::QEngine::NoQEngine: return "none";
    }
    return "unknown";
}

inline at::QEngine parse_engine_name(std::string_view name) {
    for (at::QEngine engine : {at::QEngine::ONEDNN, at::QEngine::QNNPACK, at::QEngine::FBGEMM, at::QEngine::X86})
        if (engine_name(engine) == name) return engine;
    throw error(error_kind::invalid_argument, "unknown quantized engine '" + std::string(name) + "'");
}

// Whether denormals are flushed (FTZ and DAZ) on this thread. LibTorch can set the mode but
// not report it, so it is read from the MXCSR register where there is one.
inline std::optional<bool> flush_denormal_state() {
#if defined(__x86_64__) || defined(__i386__)
    constexpr unsigned flush_to_zero = 0x8000, denormals_are_zero = 0x0040;
    return (_mm_getcsr() & (flush_to_zero | denormals_are_zero)) != 0;
#else
    return std::nullopt;
#endif
}

// Sets the intra-op thread count for a scope and puts the previous one back; `threads` <= 0
// leaves it alone. Set even when at::get_num_threads() already gives it: that is OpenMP's
// count, while QNNPACK's pthreadpool starts with one thread per core and only
// at::set_num_threads resizes it (Debian's LibTorch reports 1 on a 2-core machine and ran
// QNNPACK's ops on 2 spinning threads at --threads 1, 3-30x slower on a busy machine).
class scoped_num_threads {
public:
    explicit scoped_num_threads(int threads) : previous_(at::get_num_threads()), set_(threads > 0) {
        if (set_) at::set_num_threads(threads);
    }
    ~scoped_num_threads() {
        if (set_) at::set_num_threads(previous_);
    }
    scoped_num_threads(const scoped_num_threads&) = delete;
    scoped_num_threads& operator=(const scoped_num_threads&) = delete;

private:
    int previous_;
    bool set_;
};

struct engine_settings {
    at::QEngine engine = at::QEngine::ONEDNN;
    std::optional<int> threads;          // intra-op threads; unchanged when empty
    std::optional<bool> flush_denormal;  // unchanged when empty
};

class [[nodiscard("an unnamed scope restores the engine at once")]] engine_scope {
public:
    explicit engine_scope(const engine_settings& settings)
        : serialized_(detail::libtorch_state_mutex()),
          previous_engine_(at::globalContext().qEngine()),
          threads_(settings.threads.value_or(0)),
          previous_flush_(flush_denormal_state()) {
        const auto& supported = at::globalContext().supportedQEngines();
        if (std::find(supported.begin(), supported.end(), settings.engine) == supported.end())
            throw error(error_kind::unsupported_composition,
                        "quantized engine '" + engine_name(settings.engine) + "' is not built into this LibTorch");
        at::globalContext().setQEngine(settings.engine);
        if (settings.flush_denormal) at::globalContext().setFlushDenormal(*settings.flush_denormal);
    }

    explicit engine_scope(at::QEngine engine) : engine_scope(engine_settings{engine, std::nullopt, std::nullopt}) {}

    engine_scope(const engine_scope&) = delete;
    engine_scope& operator=(const engine_scope&) = delete;

    ~engine_scope() {
        at::globalContext().setQEngine(previous_engine_);
        if (previous_flush_ && flush_denormal_state() != previous_flush_)
            at::globalContext().setFlushDenormal(*previous_flush_);
    }

private:
    std::unique_lock<std::recursive_mutex> serialized_;  // first: taken before, released after the state
    at::QEngine previous_engine_;
    scoped_num_threads threads_;
    std::optional<bool> previous_flush_;
};

}  // namespace versatil::libtorch
