// Text out for the firmware examples, the same bytes on the board (semihosting, with
// VERSATIL_BOARD_MPS2_AN386) and on the host (stdout): one line at a time, integers in
// decimal and hexadecimal, no printf (newlib's would bring malloc into the image).
#pragma once

#include <cstddef>
#include <cstdint>

#ifdef VERSATIL_BOARD_MPS2_AN386
#include "mps2_an386/semihosting.hpp"
#else
#include <cstdio>
#endif

namespace console {

struct hex {
    std::uint32_t value;
};

class line {
public:
    line() = default;
    line(const line&) = delete;
    line& operator=(const line&) = delete;

    line& operator<<(const char* text) noexcept {
        while (*text != '\0') put(*text++);
        return *this;
    }
    line& operator<<(int value) noexcept {
        char digits[12];
        int n = 0;
        unsigned magnitude = value < 0 ? 0U - static_cast<unsigned>(value) : static_cast<unsigned>(value);
        do digits[n++] = static_cast<char>('0' + magnitude % 10); while ((magnitude /= 10) != 0);
        if (value < 0) put('-');
        while (n > 0) put(digits[--n]);
        return *this;
    }
    line& operator<<(hex h) noexcept {
        put('0');
        put('x');
        for (int shift = 28; shift >= 0; shift -= 4) put("0123456789abcdef"[(h.value >> shift) & 0xFU]);
        return *this;
    }
    ~line() {
#ifdef VERSATIL_BOARD_MPS2_AN386
        mps2_an386::write_stdout(text_, length_);
#else
        std::fwrite(text_, 1, length_, stdout);
#endif
    }

private:
    void put(char c) noexcept {
        if (length_ < sizeof text_) text_[length_++] = c;
    }
    char text_[256];
    std::size_t length_ = 0;
};

}  // namespace console
