// What the fuzz targets share: a check that stops the run (libFuzzer records the input as a
// crash) when an invariant breaks, naming it.
#pragma once

#include <cstdio>
#include <cstdlib>

#define VERSATIL_FUZZ_CHECK(condition)                                                          \
    do {                                                                                        \
        if (!(condition)) {                                                                     \
            std::fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, __LINE__, #condition); \
            std::abort();                                                                       \
        }                                                                                       \
    } while (false)
