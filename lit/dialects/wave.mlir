// RUN: WAVEC_ROUNDTRIP
// The wave dialect's ops print in their custom form and survive a generic round trip. A weight may promise
// bfloat16 values ({dtype = "bf16"}).

func.func @session_boundary() {
  %x = wave.input "input" {cohort_axis = 0 : i64} : tensor<1x8xf32>
  %w = wave.weight "w" {dtype = "bf16"} : tensor<8x4xf32>
  %h = wave.state "h" : tensor<1x4xf32>
  %y = wave.matmul %x, %w : (tensor<1x8xf32>, tensor<8x4xf32>) -> tensor<1x4xf32>
  %z = wave.ewise "tanh(add(%0, %1))"(%y, %h) : (tensor<1x4xf32>, tensor<1x4xf32>) -> tensor<1x4xf32>
  wave.state_write "h", %z : tensor<1x4xf32>
  wave.output "y", %z : tensor<1x4xf32>
  func.return
}
// CHECK-LABEL: func.func @session_boundary() {
// CHECK-NEXT:    %x = wave.input "input" {cohort_axis = 0 : i64} : tensor<1x8xf32>
// CHECK-NEXT:    %w = wave.weight "w" {dtype = "bf16"} : tensor<8x4xf32>
// CHECK-NEXT:    %h = wave.state "h" : tensor<1x4xf32>
// CHECK-NEXT:    %y = wave.matmul %x, %w : (tensor<1x8xf32>, tensor<8x4xf32>) -> tensor<1x4xf32>
// CHECK-NEXT:    %z = wave.ewise "tanh(add(%0, %1))"(%y, %h) : (tensor<1x4xf32>, tensor<1x4xf32>) -> tensor<1x4xf32>
// CHECK-NEXT:    wave.state_write "h", %z : tensor<1x4xf32>
// CHECK-NEXT:    wave.output "y", %z : tensor<1x4xf32>

// -----

func.func @data_movement() {
  %x = wave.input "x" : tensor<4x6xf32>
  %s = wave.slice %x {starts = array<i64: 0, 5>, steps = array<i64: 1, -1>} : (tensor<4x6xf32>) -> tensor<4x6xf32>
  %t = wave.transpose %s {perm = array<i64: 1, 0>} : (tensor<4x6xf32>) -> tensor<6x4xf32>
  %r = wave.reshape %t : (tensor<6x4xf32>) -> tensor<24xf32>
  %c = wave.concat %r, %r {axis = 0 : i64} : (tensor<24xf32>, tensor<24xf32>) -> tensor<48xf32>
  %m = wave.reduce "max" %x {axes = array<i64: 1>, keepdims = false} : (tensor<4x6xf32>) -> tensor<4xf32>
  wave.output "c", %c : tensor<48xf32>
  wave.output "m", %m : tensor<4xf32>
  func.return
}
// CHECK-LABEL: func.func @data_movement() {
// CHECK:         wave.slice %x {starts = array<i64: 0, 5>, steps = array<i64: 1, -1>}
// CHECK:         wave.transpose %s {perm = array<i64: 1, 0>}
// CHECK:         wave.concat %r, %r {axis = 0 : i64} : (tensor<24xf32>, tensor<24xf32>) -> tensor<48xf32>
// CHECK:         wave.reduce "max" %x {axes = array<i64: 1>, keepdims = false}

// -----

func.func @conv_with_bias() {
  %x = wave.input "x" : tensor<2x16xf32>
  %w = wave.weight "w" : tensor<4x2x3xf32>
  %b = wave.weight "b" : tensor<4xf32>
  %y = wave.conv %x, %w bias %b {strides = array<i64: 2>, pads = array<i64: 1, 1>, dilations = array<i64: 1>, group = 1 : i64} : tensor<2x16xf32>, tensor<4x2x3xf32>, tensor<4xf32> -> tensor<4x8xf32>
  wave.output "y", %y : tensor<4x8xf32>
  func.return
}
// CHECK-LABEL: func.func @conv_with_bias() {
// CHECK:         wave.conv %x, %w bias %b {strides = array<i64: 2>, pads = array<i64: 1, 1>, dilations = array<i64: 1>, group = 1 : i64} : tensor<2x16xf32>, tensor<4x2x3xf32>, tensor<4xf32> -> tensor<4x8xf32>

// -----

// Epilogues (wave-fuse folds bias, activation and residual into a matmul or conv): %0 is the accumulated
// value, %1.. the epilogue inputs.
func.func @epilogues() {
  %x = wave.input "x" : tensor<2x4xf32>
  %w = wave.weight "w" : tensor<4x3xf32>
  %b = wave.weight "b" : tensor<3xf32>
  %y = wave.matmul %x, %w epilogue "relu(add(%0, %1))"(%b) : (tensor<2x4xf32>, tensor<4x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %cx = wave.input "cx" : tensor<1x2x8xf32>
  %cw = wave.weight "cw" : tensor<3x2x3xf32>
  %r = wave.input "r" : tensor<1x3x8xf32>
  %c = wave.conv %cx, %cw epilogue "sigmoid(add(%0, %1))"(%r) {strides = array<i64: 1>, pads = array<i64: 1, 1>, dilations = array<i64: 1>, group = 1 : i64} : tensor<1x2x8xf32>, tensor<3x2x3xf32> epilogue(tensor<1x3x8xf32>) -> tensor<1x3x8xf32>
  wave.output "y", %y : tensor<2x3xf32>
  wave.output "c", %c : tensor<1x3x8xf32>
  func.return
}
// CHECK-LABEL: func.func @epilogues() {
// CHECK:         %y = wave.matmul %x, %w epilogue "relu(add(%0, %1))"(%b) : (tensor<2x4xf32>, tensor<4x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
// CHECK:         %c = wave.conv %cx, %cw epilogue "sigmoid(add(%0, %1))"(%r) {strides = array<i64: 1>, pads = array<i64: 1, 1>, dilations = array<i64: 1>, group = 1 : i64} : tensor<1x2x8xf32>, tensor<3x2x3xf32> epilogue(tensor<1x3x8xf32>) -> tensor<1x3x8xf32>

// -----

// Prologues (wave-fuse folds a norm's normalizing step into the matmul that reads it): applied to each
// element of a as it is loaded; %0 is the element, %1.. the prologue inputs (per row of a, or per k).
func.func @prologues() {
  %x = wave.input "x" : tensor<2x4xf32>
  %w = wave.weight "w" : tensor<4x3xf32>
  %ms = wave.input "ms" : tensor<2x1xf32>
  %g = wave.weight "g" : tensor<4xf32>
  %b = wave.weight "b" : tensor<3xf32>
  %y = wave.matmul %x, %w prologue "mul(mul(%0, %1), %2)"(%ms, %g) : (tensor<2x4xf32>, tensor<4x3xf32>, tensor<2x1xf32>, tensor<4xf32>) -> tensor<2x3xf32>
  %z = wave.matmul %x, %w prologue "mul(%0, %1)"(%g) epilogue "add(%0, %1)"(%b) {tag = 1 : i64} : (tensor<2x4xf32>, tensor<4x3xf32>, tensor<4xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  wave.output "y", %y : tensor<2x3xf32>
  wave.output "z", %z : tensor<2x3xf32>
  func.return
}
// CHECK-LABEL: func.func @prologues() {
// CHECK:         %y = wave.matmul %x, %w prologue "mul(mul(%0, %1), %2)"(%ms, %g) : (tensor<2x4xf32>, tensor<4x3xf32>, tensor<2x1xf32>, tensor<4xf32>) -> tensor<2x3xf32>
// CHECK:         %z = wave.matmul %x, %w prologue "mul(%0, %1)"(%g) epilogue "add(%0, %1)"(%b) {tag = 1 : i64} : (tensor<2x4xf32>, tensor<4x3xf32>, tensor<4xf32>, tensor<3xf32>) -> tensor<2x3xf32>
