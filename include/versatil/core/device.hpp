// Device types and constexpr device sets: a backend declares where it runs, a composed
// quantizer runs where all of its backends do (the intersection).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string_view>

namespace versatil {

// PyTorch's device types, and `mcu`: a microcontroller, where a model runs as exported firmware
// (no PyTorch there; the LibTorch layer quantizes for it on the host's CPU).
enum class device_type : std::uint8_t { cpu, cuda, mps, xpu, hip, meta, mcu };

inline constexpr std::array all_device_types{device_type::cpu, device_type::cuda, device_type::mps, device_type::xpu,
                                             device_type::hip, device_type::meta, device_type::mcu};

// The spelling PyTorch uses for the device type ("cpu", "cuda", ...); "mcu" is versatil's own.
constexpr std::string_view to_string(device_type device) noexcept {
    switch (device) {
        case device_type::cpu: return "cpu";
        case device_type::cuda: return "cuda";
        case device_type::mps: return "mps";
        case device_type::xpu: return "xpu";
        case device_type::hip: return "hip";
        case device_type::meta: return "meta";
        case device_type::mcu: return "mcu";
    }
    return "unknown";
}

constexpr std::optional<device_type> parse_device_type(std::string_view name) noexcept {
    for (device_type device : all_device_types)
        if (to_string(device) == name) return device;
    return std::nullopt;
}

// A set of device types as a bit mask: a literal type, so sets compare and combine in
// static_assert.
class device_set {
public:
    constexpr device_set() noexcept = default;
    constexpr device_set(std::initializer_list<device_type> devices) noexcept {
        for (device_type device : devices) bits_ |= bit(device);
    }

    static constexpr device_set all() noexcept {
        device_set set;
        for (device_type device : all_device_types) set.bits_ |= bit(device);
        return set;
    }

    constexpr bool contains(device_type device) const noexcept { return (bits_ & bit(device)) != 0; }
    constexpr bool empty() const noexcept { return bits_ == 0; }
    constexpr std::size_t size() const noexcept {
        std::size_t count = 0;
        for (device_type device : all_device_types) count += contains(device) ? 1 : 0;
        return count;
    }

    constexpr device_set intersection(device_set other) const noexcept { return from_bits(bits_ & other.bits_); }
    constexpr device_set union_with(device_set other) const noexcept { return from_bits(bits_ | other.bits_); }
    friend constexpr device_set operator&(device_set a, device_set b) noexcept { return a.intersection(b); }
    friend constexpr device_set operator|(device_set a, device_set b) noexcept { return a.union_with(b); }
    friend constexpr bool operator==(device_set, device_set) noexcept = default;

    // Calls `visit(device_type)` for each member, in declaration order.
    template <class Visitor>
    constexpr void for_each(Visitor&& visit) const {
        for (device_type device : all_device_types)
            if (contains(device)) visit(device);
    }

private:
    static constexpr std::uint8_t bit(device_type device) noexcept {
        return static_cast<std::uint8_t>(1U << static_cast<unsigned>(device));
    }
    static constexpr device_set from_bits(std::uint8_t bits) noexcept {
        device_set set;
        set.bits_ = bits;
        return set;
    }

    std::uint8_t bits_ = 0;
};

}  // namespace versatil
