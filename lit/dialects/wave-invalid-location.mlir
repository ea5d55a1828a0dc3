// RUN: not wavec-opt %s 2>&1 | filecheck %s
// RUN: not wavec-opt - < %s 2>&1 | filecheck %s --check-prefix=STDIN
// A verifier's error names the op's result and the line that defines it, not only the op's kind: of two
// wave.ewise ops, the second is ill-shaped. Read from stdin (`-`, as mlir-opt reads it) there is no file to
// name a line of.

func.func @second_of_two() {
  %x = wave.input "x" : tensor<4x8xf32>
  %y = wave.ewise "relu(%0)"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %z = wave.ewise "relu(%0)"(%y) : (tensor<4x8xf32>) -> tensor<4x9xf32>
  wave.output "y", %z : tensor<4x9xf32>
  func.return
}
// CHECK: wavec-opt: error: {{.*}}wave-invalid-location.mlir:10: %z = wave.ewise: inputs [(4, 8)] do not broadcast to the result shape [4, 9]
// STDIN: wavec-opt: error: %z = wave.ewise: inputs [(4, 8)] do not broadcast to the result shape [4, 9]
