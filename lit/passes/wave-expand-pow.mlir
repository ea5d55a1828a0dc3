// RUN: wavec-opt %s --split-input-file -p wave-expand-pow | filecheck %s
// RUN: wavec-opt %s --split-input-file -p 'wave-expand-pow{max-exponent=2}' | filecheck %s --check-prefix=MAX2
// RUN: not wavec-opt %s -p 'wave-expand-pow{max-exponent=x}' 2>&1 | filecheck %s --check-prefix=BADOPT

// Silero's STFT magnitude: both squares become products, the root is kept.
func.func @stft_magnitude() {
  %re = wave.input "re" : tensor<129x4xf32>
  %im = wave.input "im" : tensor<129x4xf32>
  %m = wave.ewise "sqrt(add(pow(%0, 2.0), pow(%1, 2.0)))"(%re, %im) : (tensor<129x4xf32>, tensor<129x4xf32>) -> tensor<129x4xf32>
  wave.output "m", %m : tensor<129x4xf32>
  func.return
}
// CHECK-LABEL: func.func @stft_magnitude
// CHECK:         wave.ewise "sqrt(add(mul(%0, %0), mul(%1, %1)))"
// CHECK-NOT:     pow

// -----

// A cube expands under the default limit but not under max-exponent=2; a non-integer power stays.
func.func @cube_and_fraction() {
  %x = wave.input "x" : tensor<8xf32>
  %c = wave.ewise "pow(%0, 3.0)"(%x) : (tensor<8xf32>) -> tensor<8xf32>
  %f = wave.ewise "pow(%0, 1.5)"(%x) : (tensor<8xf32>) -> tensor<8xf32>
  %h = wave.ewise "pow(%0, 0.5)"(%x) : (tensor<8xf32>) -> tensor<8xf32>
  wave.output "c", %c : tensor<8xf32>
  wave.output "f", %f : tensor<8xf32>
  wave.output "h", %h : tensor<8xf32>
  func.return
}
// CHECK-LABEL: func.func @cube_and_fraction
// CHECK:         wave.ewise "mul(mul(%0, %0), %0)"(%x)
// CHECK:         wave.ewise "pow(%0, 1.5)"(%x)
// CHECK:         wave.ewise "sqrt(%0)"(%x)
// MAX2-LABEL:  func.func @cube_and_fraction
// MAX2:          wave.ewise "pow(%0, 3.0)"(%x)

// BADOPT: wavec-opt: error: wave-expand-pow: option max-exponent takes one int (e.g. 4), got 'x'
