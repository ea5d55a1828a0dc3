// RUN: WAVEC_VERIFY_DIAG | filecheck %s
// The wave verifiers reject ill-formed graphs with a message naming the op and the fault.

func.func @broadcast_mismatch() {
  %x = wave.input "x" : tensor<3xf32>
  %y = wave.input "y" : tensor<4xf32>
  %z = wave.ewise "add(%0, %1)"(%x, %y) : (tensor<3xf32>, tensor<4xf32>) -> tensor<4xf32>
  wave.output "z", %z : tensor<4xf32>
  func.return
}
// CHECK: wave.ewise: inputs [(3,), (4,)] do not broadcast to the result shape [4]

// -----

func.func @unknown_function() {
  %x = wave.input "x" : tensor<3xf32>
  %z = wave.ewise "gelu(%0)"(%x) : (tensor<3xf32>) -> tensor<3xf32>
  wave.output "z", %z : tensor<3xf32>
  func.return
}
// CHECK: wave.ewise: expression 'gelu(%0)': unknown function 'gelu'

// -----

func.func @weight_dtype() {
  %w = wave.weight "w" {dtype = "fp8"} : tensor<4xf32>
  wave.output "y", %w : tensor<4xf32>
  func.return
}
// CHECK: wave.weight 'w': dtype 'fp8' is not "bf16"; omit it for float32 values

// -----

func.func @matmul_contraction() {
  %x = wave.input "x" : tensor<1x8xf32>
  %w = wave.weight "w" : tensor<4x4xf32>
  %y = wave.matmul %x, %w : (tensor<1x8xf32>, tensor<4x4xf32>) -> tensor<1x4xf32>
  wave.output "y", %y : tensor<1x4xf32>
  func.return
}
// CHECK: wave.matmul: contraction mismatch [1, 8] x [4, 4]

// -----

func.func @state_without_write() {
  %h = wave.state "h" : tensor<4xf32>
  wave.output "h", %h : tensor<4xf32>
  func.return
}
// CHECK: wave.state 'h' must have exactly one wave.state_write, found 0

// -----

func.func @slice_out_of_bounds() {
  %x = wave.input "x" : tensor<4xf32>
  %s = wave.slice %x {starts = array<i64: 2>, steps = array<i64: 1>} : (tensor<4xf32>) -> tensor<4xf32>
  wave.output "s", %s : tensor<4xf32>
  func.return
}
// CHECK: wave.slice: axis 0 reads 2..5 step 1 outside [0, 4)

// -----

func.func @epilogue_reads_missing_input() {
  %x = wave.input "x" : tensor<2x4xf32>
  %w = wave.weight "w" : tensor<4x3xf32>
  %b = wave.weight "b" : tensor<3xf32>
  %y = wave.matmul %x, %w epilogue "add(%0, %3)"(%b) : (tensor<2x4xf32>, tensor<4x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  wave.output "y", %y : tensor<2x3xf32>
  func.return
}
// CHECK: wave.matmul: epilogue uses %3 but the op has 1 epilogue inputs (%1..%1)

// -----

func.func @prologue_input_varies_along_rows_and_k() {
  %x = wave.input "x" : tensor<2x4xf32>
  %w = wave.weight "w" : tensor<4x3xf32>
  %s = wave.input "s" : tensor<2x4xf32>
  %y = wave.matmul %x, %w prologue "mul(%0, %1)"(%s) : (tensor<2x4xf32>, tensor<4x3xf32>, tensor<2x4xf32>) -> tensor<2x3xf32>
  wave.output "y", %y : tensor<2x3xf32>
  func.return
}
// CHECK: wave.matmul: prologue input [2, 4] varies along both the rows and the k axis of a [2, 4]; a prologue input is per row (last axis 1) or per k (every other axis 1)

// -----

func.func @prologue_input_does_not_broadcast_to_a() {
  %x = wave.input "x" : tensor<2x4xf32>
  %w = wave.weight "w" : tensor<4x3xf32>
  %s = wave.input "s" : tensor<3x1xf32>
  %y = wave.matmul %x, %w prologue "mul(%0, %1)"(%s) : (tensor<2x4xf32>, tensor<4x3xf32>, tensor<3x1xf32>) -> tensor<2x3xf32>
  wave.output "y", %y : tensor<2x3xf32>
  func.return
}
// CHECK: wave.matmul: prologue input [3, 1] does not broadcast to a's shape [2, 4]

// -----

func.func @prologue_reads_missing_input() {
  %x = wave.input "x" : tensor<2x4xf32>
  %w = wave.weight "w" : tensor<4x3xf32>
  %y = wave.matmul %x, %w prologue "mul(%0, %1)"() : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  wave.output "y", %y : tensor<2x3xf32>
  func.return
}
// CHECK: wave.matmul: prologue uses %1 but the op has 0 prologue inputs (%1..%0)

// -----

func.func @conv_stride_zero() {
  %x = wave.input "x" : tensor<1x8x16xf32>
  %w = wave.weight "w" : tensor<4x8x3xf32>
  %y = wave.conv %x, %w {strides = array<i64: 0>, pads = array<i64: 1, 1>, dilations = array<i64: 1>, group = 1 : i64} : tensor<1x8x16xf32>, tensor<4x8x3xf32> -> tensor<1x4x16xf32>
  wave.output "y", %y : tensor<1x4x16xf32>
  func.return
}
// CHECK: wave.conv: strides [0] and dilations [1] must be >= 1, pads [1, 1] >= 0
