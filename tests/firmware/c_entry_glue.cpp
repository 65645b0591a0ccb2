// The one C++ file of c_entry.c's program: it defines the model's C entry points (by
// VERSATIL_C_ENTRY_POINTS before the header) and gives the C side a console.
#define VERSATIL_C_ENTRY_POINTS
#include VERSATIL_MODEL_HEADER
#include "console.hpp"

extern "C" void print_text(const char* text) { console::line() << text; }
