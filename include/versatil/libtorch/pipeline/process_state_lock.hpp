// LibTorch keeps the quantized engine and the intra-op thread count as process state: two
// threads quantizing at once would cross engines (weights packed for one engine and run under
// the other). So everything in this layer that sets that state, or forks, holds one recursive
// lock: quantize() for its whole run, engine_scope for its lifetime, the model-file check
// around its fork (a child forked while another thread is inside LibTorch could inherit a
// mutex held locked, and wait on it forever). Calls from several threads work; they take turns.
#pragma once

#include <mutex>

namespace versatil::libtorch::detail {

inline std::recursive_mutex& libtorch_state_mutex() {
    static std::recursive_mutex mutex;
    return mutex;
}

}  // namespace versatil::libtorch::detail
