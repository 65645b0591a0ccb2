// The freestanding int8 runtime in one include: kernels, layers and the arena planner. An
// exported model header (codegen/header_writer.hpp) includes this.
#pragma once

#include "versatil/firmware/add.hpp"
#include "versatil/firmware/arena_planner.hpp"
#include "versatil/firmware/avg_pool2d.hpp"
#include "versatil/firmware/clamp.hpp"
#include "versatil/firmware/convolution/conv2d.hpp"
#include "versatil/firmware/convolution/conv2d_im2col.hpp"
#include "versatil/firmware/convolution/depthwise_conv2d_3x3.hpp"
#include "versatil/firmware/dot.hpp"
#include "versatil/firmware/fully_connected/linear.hpp"
#include "versatil/firmware/fully_connected/linear_blocked.hpp"
#include "versatil/firmware/in_place.hpp"
#include "versatil/firmware/kernel_choice.hpp"
#include "versatil/firmware/layer.hpp"
#include "versatil/firmware/layer_callback.hpp"
#include "versatil/firmware/max_pool2d.hpp"
#include "versatil/firmware/output_stage.hpp"
#include "versatil/firmware/shape.hpp"
