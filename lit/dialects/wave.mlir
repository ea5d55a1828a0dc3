// RUN: WAVEC_ROUNDTRIP
// The wave dialect's ops print in their custom form and survive a generic round trip.

func.func @session_boundary() {
  %x = wave.input "input" {cohort_axis = 0 : i64} : tensor<1x8xf32>
  %w = wave.weight "w" : tensor<8x4xf32>
  %h = wave.state "h" : tensor<1x4xf32>
  %y = wave.matmul %x, %w : (tensor<1x8xf32>, tensor<8x4xf32>) -> tensor<1x4xf32>
  %z = wave.ewise "tanh(add(%0, %1))"(%y, %h) : (tensor<1x4xf32>, tensor<1x4xf32>) -> tensor<1x4xf32>
  wave.state_write "h", %z : tensor<1x4xf32>
  wave.output "y", %z : tensor<1x4xf32>
  func.return
}
// CHECK-LABEL: func.func @session_boundary() {
// CHECK-NEXT:    %x = wave.input "input" {cohort_axis = 0 : i64} : tensor<1x8xf32>
// CHECK-NEXT:    %w = wave.weight "w" : tensor<8x4xf32>
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
