// RUN: wavec-opt %s --split-input-file -p 'wave-cohort{sessions=64}' | filecheck %s
// RUN: wavec-opt %s --split-input-file -p 'wave-cohort{sessions=64},wave-cohort{sessions=64}' --verify-diagnostics | filecheck %s --check-prefix=TWICE
// RUN: not wavec-opt %S/Inputs/wave-cohort-two-blocks.mlir -p 'wave-cohort{sessions=2}' 2>&1 | filecheck %s --check-prefix=BLOCKS

// Silero's state is [2, batch, 128] in the model; per session it is [2, 1, 128] with cohort_axis 1.
// After the pass every per-session value has the cohort axis outermost; weights keep their shapes.
func.func @lstm_gates_batched() {
  %x = wave.input "x" {cohort_axis = 0 : i64} : tensor<1x128xf32>
  %h = wave.state "state" {cohort_axis = 1 : i64} : tensor<2x1x128xf32>
  %w = wave.weight "w" : tensor<128x512xf32>
  %g = wave.matmul %x, %w : (tensor<1x128xf32>, tensor<128x512xf32>) -> tensor<1x512xf32>
  %s = wave.reduce "sum" %g {axes = array<i64: 1>, keepdims = false} : (tensor<1x512xf32>) -> tensor<1xf32>
  wave.state_write "state", %h : tensor<2x1x128xf32>
  wave.output "s", %s : tensor<1xf32>
  func.return
}
// CHECK:       builtin.module attributes {wave.cohort = 64 : i64}
// CHECK-LABEL: func.func @lstm_gates_batched
// CHECK:         wave.input "x" {cohort_axis = 0 : i64} : tensor<64x1x128xf32>
// CHECK:         wave.state "state" {cohort_axis = 1 : i64} : tensor<64x2x1x128xf32>
// CHECK:         wave.weight "w" : tensor<128x512xf32>
// CHECK:         wave.matmul %x, %w : (tensor<64x1x128xf32>, tensor<128x512xf32>) -> tensor<64x1x512xf32>
// CHECK:         wave.reduce "sum" %g {axes = array<i64: 2>, keepdims = false} : (tensor<64x1x512xf32>) -> tensor<64x1xf32>

// -----

// A value computed from weights alone stays shared; it is broadcast only where it becomes an output.
func.func @shared_constant_output() {
  %w = wave.weight "w" : tensor<4xf32>
  %c = wave.ewise "mul(%0, 2.0)"(%w) : (tensor<4xf32>) -> tensor<4xf32>
  wave.output "c", %c : tensor<4xf32>
  func.return
}
// CHECK-LABEL: func.func @shared_constant_output
// CHECK:         %c = wave.ewise "mul(%0, 2.0)"(%w) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    %[[B:.*]] = wave.ewise "%0"(%c) : (tensor<4xf32>) -> tensor<64x4xf32>
// CHECK-NEXT:    wave.output "c", %[[B]] : tensor<64x4xf32>

// TWICE: wave-cohort: the module already has wave.cohort = 64

// -----

// A per-session b of lower rank than the matmul's result (one K^T [8, 6] read by every query row [4, 1, 8])
// gets a unit axis after the cohort axis, [64, 1, 8, 6], so that the batch axes still pair from the right
// (as [64, 8, 6] the cohort axis would pair with the query rows' 4, an IR the verifier refuses).
func.func @lower_rank_b() {
  %q = wave.input "q" {cohort_axis = 0 : i64} : tensor<4x1x8xf32>
  %k = wave.input "k" {cohort_axis = 0 : i64} : tensor<8x6xf32>
  %s = wave.matmul %q, %k : (tensor<4x1x8xf32>, tensor<8x6xf32>) -> tensor<4x1x6xf32>
  wave.output "s", %s : tensor<4x1x6xf32>
  func.return
}
// CHECK-LABEL: func.func @lower_rank_b
// CHECK:         %[[K1:.*]] = wave.reshape %k : (tensor<64x8x6xf32>) -> tensor<64x1x8x6xf32>
// CHECK-NEXT:    wave.matmul %q, %[[K1]] : (tensor<64x4x1x8xf32>, tensor<64x1x8x6xf32>) -> tensor<64x4x1x6xf32>

// A wave graph is one block: a function with control flow is refused by name, with what to do.
// BLOCKS: wavec-opt: error: @two_blocks has 2 blocks; a wave graph is one block (no control flow): put every op in the function's entry block
