// The LibTorch layer: quantize TorchScript models with the core's backends (prepare,
// calibrate, convert, lower), measure the result, save it. Header-only, on top of LibTorch.
//   versatil/torch/pipeline/  the quantization flow, its graph passes, measurements and report
//   versatil/torch/files/     reading untrusted files (archive, pickle and tensor checks), saving
//                             whole or not at all, checked writes, cleanup on signals
//   versatil/torch/demo/      the models, blocks and Fashion-MNIST reader of the CLI default,
//                             tests and benchmarks (not included here)
#pragma once

#include "versatil/torch/error.hpp"
#include "versatil/torch/files/cleanup_on_signals.hpp"
#include "versatil/torch/files/output_file.hpp"
#include "versatil/torch/files/save.hpp"
#include "versatil/torch/pipeline/batch.hpp"
#include "versatil/torch/pipeline/calibrate.hpp"
#include "versatil/torch/pipeline/convert.hpp"
#include "versatil/torch/pipeline/engine.hpp"
#include "versatil/torch/pipeline/inference_graph.hpp"
#include "versatil/torch/pipeline/lowering.hpp"
#include "versatil/torch/pipeline/lower.hpp"
#include "versatil/torch/pipeline/measure.hpp"
#include "versatil/torch/pipeline/observers.hpp"
#include "versatil/torch/pipeline/plan.hpp"
#include "versatil/torch/pipeline/prepare.hpp"
#include "versatil/torch/pipeline/quantize.hpp"
#include "versatil/torch/pipeline/report.hpp"
#include "versatil/torch/pipeline/shared_types.hpp"
#include "versatil/versatil.hpp"
