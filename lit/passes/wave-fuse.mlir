// RUN: wavec-opt %s --split-input-file -p wave-fuse | filecheck %s
// RUN: wavec-opt %s --split-input-file -p 'wave-fuse{max-inputs=1}' | filecheck %s --check-prefix=NARROW
// RUN: wavec-opt %s --split-input-file -p 'wave-fuse{recompute-max-bytes=4}' | filecheck %s --check-prefix=NOCOMPUTE
// RUN: not wavec-opt %s -p 'wave-fuse{max-inputs=5}' 2>&1 | filecheck %s --check-prefix=BADOPT

// The magnitude of an STFT bin (Silero's front end): four elementwise ops become one.
func.func @fuse_magnitude_chain() {
  %re = wave.input "re" : tensor<129x4xf32>
  %im = wave.input "im" : tensor<129x4xf32>
  %a = wave.ewise "pow(%0, 2.0)"(%re) : (tensor<129x4xf32>) -> tensor<129x4xf32>
  %b = wave.ewise "pow(%0, 2.0)"(%im) : (tensor<129x4xf32>) -> tensor<129x4xf32>
  %c = wave.ewise "add(%0, %1)"(%a, %b) : (tensor<129x4xf32>, tensor<129x4xf32>) -> tensor<129x4xf32>
  %d = wave.ewise "sqrt(%0)"(%c) : (tensor<129x4xf32>) -> tensor<129x4xf32>
  wave.output "mag", %d : tensor<129x4xf32>
  func.return
}
// Three 129x4 intermediates are no longer written and read back: 3 x 2 x 4 x 516 bytes per session.
// CHECK:       builtin.module attributes {wave.fused_bytes_per_session = 12384 : i64}
// CHECK-LABEL: func.func @fuse_magnitude_chain
// CHECK:         %{{.*}} = wave.ewise "sqrt(add(pow(%0, 2.0), pow(%1, 2.0)))"(%re, %im)
// CHECK-NOT:     wave.ewise
// CHECK:         wave.output "mag"
// Capped at one input per fused op, nothing here fuses: each fusion would read both re and im.
// NARROW-LABEL: func.func @fuse_magnitude_chain
// NARROW:         wave.ewise "add(%0, %1)"(%a, %b)
// NARROW-NEXT:    wave.ewise "sqrt(%0)"(%c)
// BADOPT: wavec-opt: error: wave-fuse: max-inputs must be between 1 and 4, got 5

// -----

// A producer that is also written to state (or read twice) must stay: its value is needed as is. Its small
// inputs (8 bytes a session, within recompute-max-bytes) let its user compute it again instead of waiting
// for it; past the limit (recompute-max-bytes=4) the user reads it. A producer that reads a state is not
// recomputed: the state's write waits for every reader of the old value.
func.func @recompute_across_state_write() {
  %x = wave.input "x" : tensor<2xf32>
  %u = wave.input "u" : tensor<2xf32>
  %h = wave.state "h" : tensor<2xf32>
  %g = wave.state "g" : tensor<2xf32>
  %n = wave.ewise "tanh(add(%0, %1))"(%x, %u) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %y = wave.ewise "mul(%0, 0.5)"(%n) : (tensor<2xf32>) -> tensor<2xf32>
  %m = wave.ewise "tanh(add(%0, %1))"(%x, %g) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %z = wave.ewise "mul(%0, 0.5)"(%m) : (tensor<2xf32>) -> tensor<2xf32>
  wave.state_write "h", %n : tensor<2xf32>
  wave.state_write "g", %m : tensor<2xf32>
  wave.output "y", %y : tensor<2xf32>
  wave.output "z", %z : tensor<2xf32>
  func.return
}
// CHECK-LABEL: func.func @recompute_across_state_write
// CHECK:         %n = wave.ewise "tanh(add(%0, %1))"(%x, %u)
// CHECK-NEXT:    %y = wave.ewise "mul(tanh(add(%0, %1)), 0.5)"(%x, %u)
// CHECK-NEXT:    %m = wave.ewise "tanh(add(%0, %1))"(%x, %g)
// CHECK-NEXT:    %z = wave.ewise "mul(%0, 0.5)"(%m)
// NOCOMPUTE-LABEL: func.func @recompute_across_state_write
// NOCOMPUTE:         %n = wave.ewise "tanh(add(%0, %1))"(%x, %u)
// NOCOMPUTE-NEXT:    %y = wave.ewise "mul(%0, 0.5)"(%n)

// -----

// Silero's LSTM cell: h is the state's and, reshaped, relu's input. relu computes h again from o and c,
// each reshaped as h was, so the decoder no longer waits for h's phase; h's reshape, unread, is erased. c (four inputs) would take relu to
// five, more than a task reads: it stays an input.
func.func @recompute_through_reshape() {
  %o = wave.input "o" : tensor<1x128xf32>
  %c = wave.input "c" : tensor<1x128xf32>
  %h = wave.ewise "mul(sigmoid(%0), tanh(%1))"(%o, %c) : (tensor<1x128xf32>, tensor<1x128xf32>) -> tensor<1x128xf32>
  %v = wave.reshape %h : (tensor<1x128xf32>) -> tensor<1x128x1xf32>
  %r = wave.ewise "relu(%0)"(%v) : (tensor<1x128x1xf32>) -> tensor<1x128x1xf32>
  wave.state_write "h", %h : tensor<1x128xf32>
  wave.output "r", %r : tensor<1x128x1xf32>
  func.return
}
// CHECK-LABEL: func.func @recompute_through_reshape
// CHECK:         %h = wave.ewise "mul(sigmoid(%0), tanh(%1))"(%o, %c)
// CHECK-NEXT:    %[[O:.*]] = wave.reshape %o : (tensor<1x128xf32>) -> tensor<1x128x1xf32>
// CHECK-NEXT:    %[[C:.*]] = wave.reshape %c : (tensor<1x128xf32>) -> tensor<1x128x1xf32>
// CHECK-NEXT:    %{{.*}} = wave.ewise "relu(mul(sigmoid(%0), tanh(%1)))"(%[[O]], %[[C]]) : (tensor<1x128x1xf32>, tensor<1x128x1xf32>) -> tensor<1x128x1xf32>
// Past the limit relu reads h.
// NOCOMPUTE-LABEL: func.func @recompute_through_reshape
// NOCOMPUTE:         %r = wave.ewise "relu(%0)"(%v)

// -----

// Through a reshape a producer with broadcast inputs cannot be refolded (its bias would need a reshape that
// broadcasts differently): relu reads it.
func.func @no_recompute_of_broadcast_through_reshape() {
  %x = wave.input "x" : tensor<2x4xf32>
  %b = wave.weight "b" : tensor<4xf32>
  %y = wave.ewise "add(%0, %1)"(%x, %b) : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %v = wave.reshape %y : (tensor<2x4xf32>) -> tensor<8xf32>
  %r = wave.ewise "relu(%0)"(%v) : (tensor<8xf32>) -> tensor<8xf32>
  wave.output "r", %r : tensor<8xf32>
  func.return
}
// CHECK-LABEL: func.func @no_recompute_of_broadcast_through_reshape
// CHECK:         %r = wave.ewise "relu(%0)"(%v)

// -----

// Broadcasting composes: a bias over the last axis is folded into its user's expression.
func.func @fuse_broadcast_bias() {
  %x = wave.input "x" : tensor<2x4xf32>
  %b = wave.weight "b" : tensor<4xf32>
  %y = wave.ewise "add(%0, %1)"(%x, %b) : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %z = wave.ewise "relu(%0)"(%y) : (tensor<2x4xf32>) -> tensor<2x4xf32>
  wave.output "z", %z : tensor<2x4xf32>
  func.return
}
// CHECK-LABEL: func.func @fuse_broadcast_bias
// CHECK:         wave.ewise "relu(add(%0, %1))"(%x, %b) : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>

// -----

// A bias add and a relu after a matmul become its epilogue: %0 is the accumulated value, the bias an
// epilogue input. The ewise disappears.
func.func @fuse_bias_relu_into_matmul() {
  %x = wave.input "x" : tensor<2x4xf32>
  %w = wave.weight "w" : tensor<4x3xf32>
  %b = wave.weight "b" : tensor<3xf32>
  %m = wave.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %y = wave.ewise "add(%0, %1)"(%m, %b) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %z = wave.ewise "relu(%0)"(%y) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  wave.output "z", %z : tensor<2x3xf32>
  func.return
}
// CHECK-LABEL: func.func @fuse_bias_relu_into_matmul
// CHECK:         %{{.*}} = wave.matmul %x, %w epilogue "relu(add(%0, %1))"(%b) : (tensor<2x4xf32>, tensor<4x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
// CHECK-NOT:     wave.ewise
// CHECK:         wave.output "z"
// A matmul already reads two inputs: with max-inputs=1 nothing joins it.
// NARROW-LABEL: func.func @fuse_bias_relu_into_matmul
// NARROW:         %m = wave.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
// NARROW-NEXT:    wave.ewise "add(%0, %1)"(%m, %b)

// -----

// Silero's encoder: conv (with its own bias) then relu; the relu becomes the conv's epilogue.
func.func @conv_relu_epilogue() {
  %x = wave.input "x" : tensor<1x2x8xf32>
  %w = wave.weight "w" : tensor<3x2x3xf32>
  %b = wave.weight "b" : tensor<3xf32>
  %c = wave.conv %x, %w bias %b {strides = array<i64: 1>, pads = array<i64: 1, 1>, dilations = array<i64: 1>, group = 1 : i64} : tensor<1x2x8xf32>, tensor<3x2x3xf32>, tensor<3xf32> -> tensor<1x3x8xf32>
  %r = wave.ewise "relu(%0)"(%c) : (tensor<1x3x8xf32>) -> tensor<1x3x8xf32>
  wave.output "r", %r : tensor<1x3x8xf32>
  func.return
}
// CHECK-LABEL: func.func @conv_relu_epilogue
// CHECK:         %{{.*}} = wave.conv %x, %w bias %b epilogue "relu(%0)"() {{.*}} : tensor<1x2x8xf32>, tensor<3x2x3xf32>, tensor<3xf32> -> tensor<1x3x8xf32>
// CHECK-NOT:     wave.ewise
// CHECK:         wave.output "r"

// -----

// A conv result read twice (by the relu and by an output) must be stored as is: no epilogue.
func.func @no_epilogue_when_conv_has_two_uses() {
  %x = wave.input "x" : tensor<1x2x8xf32>
  %w = wave.weight "w" : tensor<3x2x3xf32>
  %c = wave.conv %x, %w {strides = array<i64: 1>, pads = array<i64: 1, 1>, dilations = array<i64: 1>, group = 1 : i64} : tensor<1x2x8xf32>, tensor<3x2x3xf32> -> tensor<1x3x8xf32>
  %r = wave.ewise "relu(%0)"(%c) : (tensor<1x3x8xf32>) -> tensor<1x3x8xf32>
  wave.output "c", %c : tensor<1x3x8xf32>
  wave.output "r", %r : tensor<1x3x8xf32>
  func.return
}
// CHECK-LABEL: func.func @no_epilogue_when_conv_has_two_uses
// CHECK:         %c = wave.conv %x, %w {
// CHECK-NOT:     epilogue
// CHECK-NEXT:    %r = wave.ewise "relu(%0)"(%c)

// -----

// RMS norm before a matmul: the normalizing ewise (with the per-row reciprocal deviation fused into it)
// becomes the matmul's prologue; x is its a, the row mean of squares and the scale g its prologue inputs.
// The normalized [4, 8] and the [4, 1] deviation are no longer stored: (2 x 4 x 32) + (2 x 4 x 4) bytes.
func.func @fuse_rms_norm_prologue() {
  %x = wave.input "x" : tensor<4x8xf32>
  %w = wave.weight "w" : tensor<8x5xf32>
  %g = wave.weight "g" : tensor<8xf32>
  %sq = wave.ewise "mul(%0, %0)"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %ms = wave.reduce "mean" %sq {axes = array<i64: 1>, keepdims = true} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %r = wave.ewise "reciprocal(sqrt(add(%0, 1e-06)))"(%ms) : (tensor<4x1xf32>) -> tensor<4x1xf32>
  %n = wave.ewise "mul(mul(%0, %1), %2)"(%x, %r, %g) : (tensor<4x8xf32>, tensor<4x1xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %y = wave.matmul %n, %w : (tensor<4x8xf32>, tensor<8x5xf32>) -> tensor<4x5xf32>
  wave.output "y", %y : tensor<4x5xf32>
  func.return
}
// CHECK:       builtin.module attributes {wave.fused_bytes_per_session = 288 : i64}
// CHECK-LABEL: func.func @fuse_rms_norm_prologue
// CHECK:         %ms = wave.reduce "mean" %sq
// CHECK-NEXT:    %{{.*}} = wave.matmul %x, %w prologue "mul(mul(%0, reciprocal(sqrt(add(%2, {{.*}})))), %1)"(%g, %ms) : (tensor<4x8xf32>, tensor<8x5xf32>, tensor<8xf32>, tensor<4x1xf32>) -> tensor<4x5xf32>
// CHECK-NOT:     wave.ewise
// CHECK:         wave.output "y"
// A matmul already reads two inputs: with max-inputs=1 it takes no prologue.
// NARROW-LABEL: func.func @fuse_rms_norm_prologue
// NARROW:         wave.matmul %n, %w :

// -----

// Layer norm (as the ONNX frontend lowers LayerNormalization without a bias): d = x - mean is stored (the
// variance reads it too); the normalizing ewise becomes the prologue of the matmul, with d as its a.
func.func @fuse_layer_norm_prologue() {
  %x = wave.input "x" : tensor<4x8xf32>
  %w = wave.weight "w" : tensor<8x5xf32>
  %g = wave.weight "g" : tensor<8xf32>
  %m = wave.reduce "mean" %x {axes = array<i64: 1>, keepdims = true} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %d = wave.ewise "sub(%0, %1)"(%x, %m) : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %ss = wave.reduce "sumsquare" %d {axes = array<i64: 1>, keepdims = true} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %r = wave.ewise "reciprocal(sqrt(add(mul(%0, 0.125), 1e-05)))"(%ss) : (tensor<4x1xf32>) -> tensor<4x1xf32>
  %n = wave.ewise "mul(mul(%0, %1), %2)"(%d, %r, %g) : (tensor<4x8xf32>, tensor<4x1xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %y = wave.matmul %n, %w : (tensor<4x8xf32>, tensor<8x5xf32>) -> tensor<4x5xf32>
  wave.output "y", %y : tensor<4x5xf32>
  func.return
}
// CHECK:       builtin.module attributes {wave.fused_bytes_per_session = 288 : i64}
// CHECK-LABEL: func.func @fuse_layer_norm_prologue
// CHECK:         %d = wave.ewise "sub(%0, %1)"(%x, %m)
// CHECK-NEXT:    %ss = wave.reduce "sumsquare" %d
// CHECK-NEXT:    %{{.*}} = wave.matmul %d, %w prologue "mul(mul(%0, reciprocal(sqrt(add(mul(%2, 0.125), {{.*}})))), %1)"(%g, %ss) : (tensor<4x8xf32>, tensor<8x5xf32>, tensor<8xf32>, tensor<4x1xf32>) -> tensor<4x5xf32>
// CHECK-NOT:     wave.ewise
// CHECK:         wave.output "y"

// -----

// The normalized tensor is also an output: it must be stored, so the matmul reads it and has no prologue.
func.func @no_prologue_when_normalized_tensor_has_second_use() {
  %x = wave.input "x" : tensor<4x8xf32>
  %w = wave.weight "w" : tensor<8x5xf32>
  %r = wave.input "r" : tensor<4x1xf32>
  %g = wave.weight "g" : tensor<8xf32>
  %n = wave.ewise "mul(mul(%0, %1), %2)"(%x, %r, %g) : (tensor<4x8xf32>, tensor<4x1xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %y = wave.matmul %n, %w : (tensor<4x8xf32>, tensor<8x5xf32>) -> tensor<4x5xf32>
  wave.output "n", %n : tensor<4x8xf32>
  wave.output "y", %y : tensor<4x5xf32>
  func.return
}
// CHECK-LABEL: func.func @no_prologue_when_normalized_tensor_has_second_use
// CHECK:         %n = wave.ewise "mul(mul(%0, %1), %2)"(%x, %r, %g)
// CHECK-NEXT:    %y = wave.matmul %n, %w : (tensor<4x8xf32>, tensor<8x5xf32>) -> tensor<4x5xf32>

// -----

// Attention's P @ V: P, the softmax of the scores, feeds a matmul of two computed operands, which may run on
// the lane-group body (a prologue there is applied once per output column), so P is stored, not fused.
func.func @no_prologue_against_a_computed_b() {
  %s = wave.input "s" : tensor<2x1x8xf32>
  %v = wave.input "v" : tensor<2x8x4xf32>
  %m = wave.reduce "max" %s {axes = array<i64: 2>, keepdims = true} : (tensor<2x1x8xf32>) -> tensor<2x1x1xf32>
  %e = wave.ewise "exp(sub(%0, %1))"(%s, %m) : (tensor<2x1x8xf32>, tensor<2x1x1xf32>) -> tensor<2x1x8xf32>
  %z = wave.reduce "sum" %e {axes = array<i64: 2>, keepdims = true} : (tensor<2x1x8xf32>) -> tensor<2x1x1xf32>
  %p = wave.ewise "div(%0, %1)"(%e, %z) : (tensor<2x1x8xf32>, tensor<2x1x1xf32>) -> tensor<2x1x8xf32>
  %o = wave.matmul %p, %v : (tensor<2x1x8xf32>, tensor<2x8x4xf32>) -> tensor<2x1x4xf32>
  wave.output "o", %o : tensor<2x1x4xf32>
  func.return
}
// CHECK-LABEL: func.func @no_prologue_against_a_computed_b
// CHECK:         %p = wave.ewise "div(%0, %1)"(%e, %z)
// CHECK-NEXT:    %o = wave.matmul %p, %v : (tensor<2x1x8xf32>, tensor<2x8x4xf32>) -> tensor<2x1x4xf32>

// -----

// A layer norm with a scale and a shift reads d, the row sums, g and b: with a and b of the matmul that
// is five input slots, more than a task has (4), so the normalizing ewise stays.
func.func @no_prologue_when_slots_exceed() {
  %x = wave.input "x" : tensor<4x8xf32>
  %w = wave.weight "w" : tensor<8x5xf32>
  %g = wave.weight "g" : tensor<8xf32>
  %b = wave.weight "b" : tensor<8xf32>
  %m = wave.reduce "mean" %x {axes = array<i64: 1>, keepdims = true} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %d = wave.ewise "sub(%0, %1)"(%x, %m) : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %ss = wave.reduce "sumsquare" %d {axes = array<i64: 1>, keepdims = true} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %r = wave.ewise "reciprocal(sqrt(add(mul(%0, 0.125), 1e-05)))"(%ss) : (tensor<4x1xf32>) -> tensor<4x1xf32>
  %n = wave.ewise "add(mul(mul(%0, %1), %2), %3)"(%d, %r, %g, %b) : (tensor<4x8xf32>, tensor<4x1xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %y = wave.matmul %n, %w : (tensor<4x8xf32>, tensor<8x5xf32>) -> tensor<4x5xf32>
  wave.output "y", %y : tensor<4x5xf32>
  func.return
}
// CHECK-LABEL: func.func @no_prologue_when_slots_exceed
// CHECK:         %n = wave.ewise "add(mul(mul(%0, reciprocal(sqrt(add(mul(%3, 0.125), {{.*}})))), %1), %2)"(%d, %g, %b, %ss)
// CHECK-NEXT:    %y = wave.matmul %n, %w : (tensor<4x8xf32>, tensor<8x5xf32>) -> tensor<4x5xf32>
// CHECK-NOT:     prologue
