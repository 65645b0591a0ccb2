// The processes of a world joined into one LibTorch process group: c10d's TCPStore for the
// rendezvous (rank 0 serves it at MASTER_ADDR:MASTER_PORT) and ProcessGroupGloo for the
// collectives, the engine torch.distributed runs on CPUs. No networking of this library's own.
//
// Every failure of the others (one never starts, dies, hangs past the timeout) surfaces here
// as error_kind::distributed_failure naming this rank, the exchange and the timeout; LibTorch
// and Gloo throw several exception types with multi-line backtraces for these.
//
// Needs LibTorch built with Gloo (Debian's is; the headers come from libgloo-dev) and
// USE_C10D_GLOO defined before any c10d header: ProcessGroupGloo.hpp is empty without it.
#pragma once

#ifndef USE_C10D_GLOO
// Define USE_C10D_GLOO (the meson dependency versatil-libtorch-distributed does) and install libgloo-dev.
#error "versatil/libtorch/distributed needs LibTorch's Gloo process group: define USE_C10D_GLOO"
#endif

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "versatil/libtorch/distributed/world.hpp"
#include "versatil/libtorch/error.hpp"

namespace versatil::libtorch {

class process_group {
public:
    // Joins the world; blocks until every rank has, or fails after world.timeout. A world of
    // one process joins nothing (no store, no sockets, no thread): nullopt. Rank 0 calls
    // `listening` with its rendezvous port before it waits for the others: with MASTER_PORT 0
    // the OS picks that port, which a launcher then passes on to the other ranks (a port
    // probed free and handed over instead could be taken by another process in between).
    static std::optional<process_group> join(const world_config& world,
                                             const std::function<void(std::uint16_t port)>& listening = {}) {
        if (!world.is_distributed()) return std::nullopt;
        return process_group(world, listening);
    }

    const world_config& world() const { return world_; }
    int rank() const { return world_.rank; }
    int size() const { return world_.size; }
    // Time spent in collectives so far (waiting for slower ranks included), for the benchmark's
    // split of computation and communication.
    double communication_seconds() const { return communication_seconds_; }

    // `tensor` (contiguous, CPU) reduced elementwise over every rank, in place; all ranks call
    // with the same shape and dtype in the same order. `what` names the exchange in errors.
    void all_reduce(at::Tensor& tensor, c10d::ReduceOp op, const std::string& what) {
        run(what, [&] {
            std::vector<at::Tensor> tensors{tensor};
            c10d::AllreduceOptions options;
            options.reduceOp = op;
            options.timeout = world_.timeout;
            group_->allreduce(tensors, options)->wait(world_.timeout);
        });
    }

    // Rank `root`'s `tensor` (contiguous, CPU) copied into every rank's, in place; shapes and
    // dtypes as for all_reduce.
    void broadcast(at::Tensor& tensor, int root, const std::string& what) {
        run(what, [&] {
            std::vector<at::Tensor> tensors{tensor};
            c10d::BroadcastOptions options;
            options.rootRank = root;
            options.timeout = world_.timeout;
            group_->broadcast(tensors, options)->wait(world_.timeout);
        });
    }

    // Each rank's `value`, indexed by rank.
    std::vector<std::int64_t> all_gather(std::int64_t value, const std::string& what) {
        at::Tensor values = at::zeros({size()}, at::kLong);
        values[rank()] = value;
        all_reduce(values, c10d::ReduceOp::SUM, what);
        return {values.data_ptr<std::int64_t>(), values.data_ptr<std::int64_t>() + size()};
    }

    // Waits for every rank to arrive here.
    void barrier(const std::string& what) {
        at::Tensor token = at::zeros({1}, at::kLong);
        all_reduce(token, c10d::ReduceOp::SUM, what);
    }

private:
    world_config world_;
    c10::intrusive_ptr<c10d::TCPStore> store_;
    c10::intrusive_ptr<c10d::ProcessGroupGloo> group_;
    double communication_seconds_ = 0.0;

    static std::string seconds(std::chrono::milliseconds timeout) {
        return std::to_string(timeout.count() / 1000) +
               (timeout.count() % 1000 ? "." + std::to_string(timeout.count() % 1000 / 100) : "") + " s";
    }

    [[noreturn]] void fail(const std::string& what, const std::string& cause) const {
        throw error(error_kind::distributed_failure, describe(world_) + ": " + what + " failed (" + cause +
                                                         "); another process of the world never joined, died "
                                                         "or stopped answering within the timeout of " +
                                                         seconds(world_.timeout) +
                                                         ", so this one stops without writing anything");
    }

    template <class Body>
    void run(const std::string& what, Body body) {
        const auto start = std::chrono::steady_clock::now();
        try {
            body();
        } catch (const error&) {
            throw;
        } catch (const std::exception& failure) {
            fail(what, detail::first_line(failure.what()));
        }
        communication_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }

    // Gloo's sockets bind to GLOO_SOCKET_IFNAME's interface when set (as in PyTorch), to
    // loopback for a world on one machine, and else to the address this host's name resolves to.
    static std::shared_ptr<::gloo::transport::Device> device(const world_config& world) {
        if (const char* interface = std::getenv("GLOO_SOCKET_IFNAME"); interface != nullptr && *interface != '\0')
            return c10d::ProcessGroupGloo::createDeviceForInterface(interface);
        if (world.master_addr == "127.0.0.1" || world.master_addr == "localhost" || world.master_addr == "::1")
            return c10d::ProcessGroupGloo::createDeviceForHostname(world.master_addr);
        return c10d::ProcessGroupGloo::createDefaultDevice();
    }

    process_group(const world_config& world, const std::function<void(std::uint16_t)>& listening) : world_(world) {
        const std::string where = world.master_addr + ":" + std::to_string(world.master_port);
        run("joining the world at " + where, [&] {
            c10d::TCPStoreOptions options;
            options.port = world.master_port;
            options.isServer = world.rank == 0;
            options.numWorkers = static_cast<std::size_t>(world.size);
            options.waitWorkers = false;  // below, once rank 0 has said where it listens
            options.timeout = world.timeout;
            store_ = c10::make_intrusive<c10d::TCPStore>(world.master_addr, options);
            world_.master_port = store_->getPort();  // the server's bound port: the OS's pick for port 0
            if (world.rank == 0 && listening) listening(world_.master_port);
            store_->waitForWorkers();
            auto gloo = c10d::ProcessGroupGloo::Options::create(world.timeout);
            gloo->devices.push_back(device(world));
            group_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store_, world.rank, world.size, gloo);
        });
        communication_seconds_ = 0.0;  // joining is start-up, not communication
    }
};

}  // namespace versatil::libtorch
