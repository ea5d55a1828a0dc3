// RUN: wavec-opt %s --split-input-file -p wave-fuse | filecheck %s
// RUN: wavec-opt %s --split-input-file -p 'wave-fuse{max-inputs=1}' | filecheck %s --check-prefix=NARROW
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

// A producer that is also written to state (or read twice) must stay: its value is needed as is.
func.func @no_fusion_across_state_write() {
  %x = wave.input "x" : tensor<4xf32>
  %h = wave.state "h" : tensor<4xf32>
  %n = wave.ewise "tanh(add(%0, %1))"(%x, %h) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %y = wave.ewise "mul(%0, 0.5)"(%n) : (tensor<4xf32>) -> tensor<4xf32>
  wave.state_write "h", %n : tensor<4xf32>
  wave.output "y", %y : tensor<4xf32>
  func.return
}
// CHECK-LABEL: func.func @no_fusion_across_state_write
// CHECK:         %n = wave.ewise "tanh(add(%0, %1))"(%x, %h)
// CHECK-NEXT:    %y = wave.ewise "mul(%0, 0.5)"(%n)

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
