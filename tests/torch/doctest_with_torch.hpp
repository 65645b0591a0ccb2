// Include this first in every LibTorch test. LibTorch defines a glog-style CHECK
// (c10/util/logging_is_not_google_glog.h) that aborts instead of reporting, and whichever
// definition comes last wins: LibTorch first, its CHECK dropped, then doctest.
#pragma once

#include <torch/script.h>
#undef CHECK
#include <doctest/doctest.h>
