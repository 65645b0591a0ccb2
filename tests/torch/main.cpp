#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdlib>

// Test cases in the doctest suite "yardstick" measure accuracy or rankings at scale (trained
// models, searches, every configuration) through code that faster cases also run. The
// sanitizer run of CI (tools/test --sanitize) sets VERSATIL_TEST_SKIP_SUITES=yardstick: its
// findings come from the code paths, which the other cases cover, and the yardsticks would
// double its time. Without the variable every case runs.
int main(int argc, char** argv) {
    doctest::Context context;
    if (const char* suites = std::getenv("VERSATIL_TEST_SKIP_SUITES")) context.addFilter("test-suite-exclude", suites);
    context.applyCommandLine(argc, argv);
    return context.run();
}
