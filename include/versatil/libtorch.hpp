// The LibTorch layer: quantize TorchScript models with the core's backends (prepare,
// calibrate, convert, lower), measure the result, save it. Header-only, on top of LibTorch.
//   versatil/libtorch/pipeline/  the quantization flow, its graph passes, measurements and report
//   versatil/libtorch/files/     reading untrusted files (archive, pickle and tensor checks), saving
//                             whole or not at all, checked writes, cleanup on signals
//   versatil/libtorch/demo/      the models, blocks and Fashion-MNIST reader of the CLI default,
//                             tests and benchmarks (not included here)
#pragma once

#include "versatil/libtorch/error.hpp"
#include "versatil/libtorch/files/cleanup_on_signals.hpp"
#include "versatil/libtorch/files/output_file.hpp"
#include "versatil/libtorch/files/save.hpp"
#include "versatil/libtorch/pipeline/accuracy_target.hpp"
#include "versatil/libtorch/pipeline/batch.hpp"
#include "versatil/libtorch/pipeline/bias_correction.hpp"
#include "versatil/libtorch/pipeline/calibrate.hpp"
#include "versatil/libtorch/pipeline/convert.hpp"
#include "versatil/libtorch/pipeline/engine.hpp"
#include "versatil/libtorch/pipeline/equalize.hpp"
#include "versatil/libtorch/pipeline/gptq.hpp"
#include "versatil/libtorch/pipeline/inference_graph.hpp"
#include "versatil/libtorch/pipeline/layer_graph.hpp"
#include "versatil/libtorch/pipeline/layer_ops.hpp"
#include "versatil/libtorch/pipeline/lowering.hpp"
#include "versatil/libtorch/pipeline/lower.hpp"
#include "versatil/libtorch/pipeline/measure.hpp"
#include "versatil/libtorch/pipeline/observers.hpp"
#include "versatil/libtorch/pipeline/plan.hpp"
#include "versatil/libtorch/pipeline/prepare.hpp"
#include "versatil/libtorch/pipeline/quantize.hpp"
#include "versatil/libtorch/pipeline/report.hpp"
#include "versatil/libtorch/pipeline/shared_types.hpp"
#include "versatil/versatil.hpp"
