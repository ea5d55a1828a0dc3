// RUN: not wavec-opt %s 2>&1 | filecheck %s
// A verifier's error names the op's result and the line that defines it, not only the op's kind: of two
// wave.ewise ops, the second is ill-shaped.

func.func @second_of_two() {
  %x = wave.input "x" : tensor<4x8xf32>
  %y = wave.ewise "relu(%0)"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %z = wave.ewise "relu(%0)"(%y) : (tensor<4x8xf32>) -> tensor<4x9xf32>
  wave.output "y", %z : tensor<4x9xf32>
  func.return
}
// CHECK: wavec-opt: error: {{.*}}wave-invalid-location.mlir:8: %z = wave.ewise: inputs [(4, 8)] do not broadcast to the result shape [4, 9]
