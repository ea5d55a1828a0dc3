// RUN: wavec-opt %s --split-input-file -p wave-hoist | filecheck %s
// RUN: wavec-opt %s --split-input-file -p 'wave-cohort{sessions=16},wave-hoist' | filecheck %s --check-prefix=C16
// RUN: wavec-opt %s --split-input-file -p 'wave-cohort{sessions=17},wave-hoist' | filecheck %s --check-prefix=C17
// RUN: not wavec-opt %s -p 'wave-hoist{max-sessions=0}' 2>&1 | filecheck %s --check-prefix=BADOPT

// One LSTM step from its state: h R^T reads only the state and a weight, so it moves ahead of the input's
// matmul, which adds it as its epilogue; the input's chain keeps its order behind it.
func.func @recurrent_matmul_first() {
  %x = wave.input "x" : tensor<1x8xf32>
  %w = wave.weight "w" : tensor<8x16xf32>
  %xw0 = wave.matmul %x, %w : (tensor<1x8xf32>, tensor<8x16xf32>) -> tensor<1x16xf32>
  %s = wave.state "h" : tensor<1x4xf32>
  %r = wave.weight "r" : tensor<4x16xf32>
  %hr = wave.matmul %s, %r : (tensor<1x4xf32>, tensor<4x16xf32>) -> tensor<1x16xf32>
  %g = wave.ewise "add(%0, %1)"(%xw0, %hr) : (tensor<1x16xf32>, tensor<1x16xf32>) -> tensor<1x16xf32>
  %h = wave.slice %g {starts = array<i64: 0, 0>, steps = array<i64: 1, 1>} : (tensor<1x16xf32>) -> tensor<1x4xf32>
  wave.state_write "h", %h : tensor<1x4xf32>
  wave.output "g", %g : tensor<1x16xf32>
  func.return
}
// CHECK-LABEL: func.func @recurrent_matmul_first
// CHECK-NEXT:    %w = wave.weight "w"
// CHECK-NEXT:    %s = wave.state "h"
// CHECK-NEXT:    %r = wave.weight "r"
// CHECK-NEXT:    %hr = wave.matmul %s, %r
// CHECK-NEXT:    %x = wave.input "x"
// CHECK-NEXT:    %xw0 = wave.matmul %x, %w
// CHECK-NEXT:    %g = wave.ewise "add(%0, %1)"(%xw0, %hr)
// CHECK-NEXT:    %h = wave.slice %g

// A cohort of up to max-sessions (16) is hoisted; a larger one keeps its order (the pass's docstring says why).
// C16-LABEL: func.func @recurrent_matmul_first
// C16:         %hr = wave.matmul %s, %r
// C16:         %x = wave.input "x"
// C17-LABEL: func.func @recurrent_matmul_first
// C17:         %x = wave.input "x"
// C17:         %hr = wave.matmul %s, %r

// -----

// A state write and an output stay where they are, even of a value that only the state computes; an op
// that mixes the state with the input waits for the input, so it stays too.
func.func @sinks_and_mixed_ops_stay() {
  %x = wave.input "x" : tensor<4xf32>
  %y = wave.ewise "mul(%0, 2.0)"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %pos = wave.state "pos" : tensor<1xf32>
  %next = wave.ewise "add(%0, 1.0)"(%pos) : (tensor<1xf32>) -> tensor<1xf32>
  %mix = wave.ewise "add(%0, %1)"(%y, %pos) : (tensor<4xf32>, tensor<1xf32>) -> tensor<4xf32>
  wave.state_write "pos", %next : tensor<1xf32>
  wave.output "y", %mix : tensor<4xf32>
  func.return
}
// CHECK-LABEL: func.func @sinks_and_mixed_ops_stay
// CHECK-NEXT:    %pos = wave.state "pos"
// CHECK-NEXT:    %next = wave.ewise "add(%0, 1.0)"(%pos)
// CHECK-NEXT:    %x = wave.input "x"
// CHECK-NEXT:    %y = wave.ewise "mul(%0, 2.0)"(%x)
// CHECK-NEXT:    %mix = wave.ewise "add(%0, %1)"(%y, %pos)
// CHECK-NEXT:    wave.state_write "pos", %next
// CHECK-NEXT:    wave.output "y", %mix

// -----

// Already in order: nothing moves.
func.func @in_order() {
  %s = wave.state "h" : tensor<4xf32>
  %d = wave.ewise "mul(%0, 0.5)"(%s) : (tensor<4xf32>) -> tensor<4xf32>
  %x = wave.input "x" : tensor<4xf32>
  %n = wave.ewise "add(%0, %1)"(%d, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  wave.state_write "h", %n : tensor<4xf32>
  func.return
}
// CHECK-LABEL: func.func @in_order
// CHECK-NEXT:    %s = wave.state "h"
// CHECK-NEXT:    %d = wave.ewise "mul(%0, 0.5)"(%s)
// CHECK-NEXT:    %x = wave.input "x"
// CHECK-NEXT:    %n = wave.ewise "add(%0, %1)"(%d, %x)
// CHECK-NEXT:    wave.state_write "h", %n

// -----

// Only wave ops move: an op of another dialect (here with a region, whose captured %s is no operand) stays,
// as do terminators and what reads such an op.
func.func @other_dialects_stay() {
  %x = wave.input "x" : tensor<4xf32>
  %y = wave.ewise "mul(%0, 2.0)"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %s = wave.state "h" : tensor<4xf32>
  %r = scf.execute_region -> (tensor<4xf32>) {
    scf.yield %s : tensor<4xf32>
  }
  %n = wave.ewise "add(%0, 1.0)"(%r) : (tensor<4xf32>) -> tensor<4xf32>
  wave.state_write "h", %n : tensor<4xf32>
  wave.output "y", %y : tensor<4xf32>
  func.return
}
// CHECK-LABEL: func.func @other_dialects_stay
// CHECK-NEXT:    %s = wave.state "h"
// CHECK-NEXT:    %x = wave.input "x"
// CHECK-NEXT:    %y = wave.ewise "mul(%0, 2.0)"(%x)
// CHECK-NEXT:    %r = scf.execute_region
// CHECK:         %n = wave.ewise "add(%0, 1.0)"(%r)

// BADOPT: wavec-opt: error: wave-hoist: max-sessions must be >= 1, got 0
