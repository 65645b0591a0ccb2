// Which process of how many this is, and where they meet: torchrun's conventions (RANK,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT), from flags of the same names or the environment, so a
// command that runs under torchrun or a cluster scheduler runs here unchanged. Only the
// description: joining is process_group.hpp, and a world of one process never joins anything.
#pragma once

#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "versatil/libtorch/error.hpp"

namespace versatil::libtorch {

struct world_config {
    int rank = 0;
    int size = 1;
    std::string master_addr;      // rank 0's host: its rendezvous store listens there
    std::uint16_t master_port = 0;  // 0 on rank 0: a port the OS picks (process_group::join)
    // How long to wait for the others: to join at start, and for each exchange after. A rank
    // that dies or never starts makes the rest fail within this instead of hanging.
    std::chrono::milliseconds timeout{std::chrono::seconds(300)};

    bool is_distributed() const { return size > 1; }
    // Outputs are written by one process only: rank 0, as torch.distributed programs do.
    bool writes_outputs() const { return rank == 0; }
};

// Values given on the command line; an empty one falls back to the environment variable of
// the same name.
struct world_flags {
    std::optional<std::string> rank{}, world_size{}, master_addr{},
        master_port{};  // {}: designated initializers may leave any out
    std::optional<double> timeout_seconds{};
};

namespace detail {

inline std::optional<std::string> flag_or_environment(const std::optional<std::string>& flag, const char* name) {
    if (flag) return flag;
    if (const char* value = std::getenv(name); value != nullptr && *value != '\0') return std::string(value);
    return std::nullopt;
}

// A whole decimal integer in [low, high], or an error naming the variable.
inline std::int64_t parse_world_integer(const std::string& text, const char* name, std::int64_t low,
                                        std::int64_t high) {
    std::int64_t value = 0;
    const auto [end, failure] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (failure != std::errc{} || end != text.data() + text.size() || value < low || value > high)
        throw error(error_kind::invalid_argument, std::string(name) + " is '" + text +
                                                      "'; it must be an integer from " + std::to_string(low) + " to " +
                                                      std::to_string(high));
    return value;
}

}  // namespace detail

// The world as flags (first) or the environment describe it. Neither giving WORLD_SIZE means
// one process, whatever else is set; with more, RANK, MASTER_ADDR and MASTER_PORT are needed.
inline world_config world_from(const world_flags& flags = {}) {
    world_config world;
    if (flags.timeout_seconds) {
        if (!(*flags.timeout_seconds > 0) || *flags.timeout_seconds > 86400)
            throw error(error_kind::invalid_argument, "the distributed timeout must be from 0 to 86400 seconds");
        world.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(*flags.timeout_seconds * 1000));
    }
    const std::optional<std::string> size = detail::flag_or_environment(flags.world_size, "WORLD_SIZE");
    if (!size) return world;
    world.size = static_cast<int>(detail::parse_world_integer(*size, "WORLD_SIZE", 1, 65536));
    const std::optional<std::string> rank = detail::flag_or_environment(flags.rank, "RANK");
    if (world.size == 1) {
        if (rank) world.rank = static_cast<int>(detail::parse_world_integer(*rank, "RANK", 0, 0));
        return world;
    }
    const std::optional<std::string> address = detail::flag_or_environment(flags.master_addr, "MASTER_ADDR");
    const std::optional<std::string> port = detail::flag_or_environment(flags.master_port, "MASTER_PORT");
    const std::string world_text = "WORLD_SIZE is " + *size;
    if (!rank)
        throw error(
            error_kind::invalid_argument,
            world_text + " but RANK is not set: give each process its rank, 0 to " + std::to_string(world.size - 1));
    if (!address)
        throw error(error_kind::invalid_argument,
                    world_text + " but MASTER_ADDR is not set: give rank 0's host name or address");
    if (!port)
        throw error(error_kind::invalid_argument,
                    world_text + " but MASTER_PORT is not set: give a free TCP port on rank 0's host");
    world.rank = static_cast<int>(detail::parse_world_integer(*rank, "RANK", 0, world.size - 1));
    world.master_addr = *address;
    // Port 0: rank 0 serves the rendezvous on a port the OS picks and announces it
    // (process_group::join); the others must be given that port.
    world.master_port = static_cast<std::uint16_t>(
        detail::parse_world_integer(*port, "MASTER_PORT", world.rank == 0 ? 0 : 1, 65535));
    return world;
}

inline std::string describe(const world_config& world) {
    return "rank " + std::to_string(world.rank) + " of " + std::to_string(world.size);
}

}  // namespace versatil::libtorch
