/* A C program calling an exported model through its C entry points: the header compiled as C
   declares <name>_run and <name>_run_in_arena and the sizes; one C++ file (c_entry_glue.cpp)
   defines them. Runs eight inputs of a fixed pseudo-random sequence through both entry points
   and prints each sample's int8 outputs, as c_entry_reference.cpp prints the host runtime's
   (check_c_header.py compares the bytes, on the host and under QEMU).

     -DVERSATIL_MODEL_HEADER='"model.hpp"' -DVERSATIL_MODEL_C_NAME=name -DVERSATIL_MODEL_C_MACRO=NAME */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include VERSATIL_MODEL_HEADER

#define PASTE_(a, b) a##b
#define PASTE(a, b) PASTE_(a, b)
#define MODEL(suffix) PASTE(VERSATIL_MODEL_C_NAME, suffix)
#define SIZE(suffix) PASTE(VERSATIL_MODEL_C_MACRO, suffix)

void print_text(const char* text); /* c_entry_glue.cpp: the board's console or the host's */

static uint32_t state = 2463534242u;

static uint32_t next_random(void) { /* xorshift32, as c_entry_reference.cpp */
    state ^= state << 13;
    state ^= state >> 17;
    state ^= state << 5;
    return state;
}

static void print_int(char* line, size_t* at, int value) {
    char digits[12];
    int n = 0;
    unsigned magnitude = value < 0 ? (unsigned)(-value) : (unsigned)value;
    do {
        digits[n++] = (char)('0' + magnitude % 10);
        magnitude /= 10;
    } while (magnitude != 0);
    if (value < 0) line[(*at)++] = '-';
    while (n > 0) line[(*at)++] = digits[--n];
}

static int8_t input[SIZE(_INPUT_SIZE)];
static int8_t output[SIZE(_OUTPUT_SIZE)], output_in_arena[SIZE(_OUTPUT_SIZE)];
static unsigned char arena[SIZE(_ARENA_BYTES)];

int main(void) {
    for (int sample = 0; sample < 8; ++sample) {
        for (size_t i = 0; i < SIZE(_INPUT_SIZE); ++i) input[i] = (int8_t)(next_random() >> 24);
        MODEL(_run)(input, output);
        MODEL(_run_in_arena)(input, output_in_arena, arena);
        if (memcmp(output, output_in_arena, sizeof output) != 0) {
            print_text("the two entry points differ\n");
            return 1;
        }
        for (size_t start = 0; start < SIZE(_OUTPUT_SIZE); start += 16) {
            char line[16 * 5 + 32];
            size_t at = 0;
            memcpy(line, "sample ", 7);
            at = 7;
            print_int(line, &at, sample);
            for (size_t c = start; c < start + 16 && c < SIZE(_OUTPUT_SIZE); ++c) {
                line[at++] = ' ';
                print_int(line, &at, output[c]);
            }
            line[at++] = '\n';
            line[at] = '\0';
            print_text(line);
        }
    }
    return 0;
}
