// RUN: wavec-opt %s --split-input-file -p 'wave-to-wpk{workers=4}' --verify-diagnostics | filecheck %s

// A state is reset (select on the session's flag) before the graph, written back after it; the
// output is copied into the output arena. Two sessions on four workers: the matmul reads a weight shared
// by the cohort, so its tiles keep both sessions and split the 512 columns in four (each weight slice is
// read once for the cohort); the copies, at no arithmetic per element, stay one tile per session.
builtin.module attributes {wave.cohort = 2 : i64} {
  func.func @rnn_step() {
    %x = wave.input "x" {cohort_axis = 0 : i64} : tensor<2x1x64xf32>
    %h = wave.state "h" {cohort_axis = 0 : i64} : tensor<2x1x512xf32>
    %w = wave.weight "w" : tensor<64x512xf32>
    %g = wave.matmul %x, %w : (tensor<2x1x64xf32>, tensor<64x512xf32>) -> tensor<2x1x512xf32>
    %n = wave.ewise "tanh(add(%0, %1))"(%g, %h) : (tensor<2x1x512xf32>, tensor<2x1x512xf32>) -> tensor<2x1x512xf32>
    wave.state_write "h", %n : tensor<2x1x512xf32>
    wave.output "y", %n {cohort_axis = 0 : i64} : tensor<2x1x512xf32>
    func.return
  }
}
// CHECK:       wpk.buffer "in.x" {model_name = "x", shape = array<i64: 64>, cohort_axis = 0 : i64, arena = "input", role = "input", bytes = 256 : i64, session_stride = 256 : i64}
// CHECK:       wpk.buffer "s.h" {{.*}}arena = "state", role = "state", bytes = 2048 : i64, session_stride = 2048 : i64}
// CHECK:       wpk.buffer "reset" {arena = "input", role = "reset"
// CHECK:       wpk.buffer "w.w" {blob = "w", arena = "weights", role = "weight", bytes = 131072 : i64, session_stride = 0 : i64}
// CHECK:       wpk.phase "reset_h" attributes {op = "wave.state"} {
// Each wpk.tasks op is a table: one [begin, end) pair per task in `sessions` and in `elems`.
// CHECK-NEXT:    wpk.tasks "ewise" {inputs = ["reset", "init.h", "s.h"], {{.*}}sessions = array<i64: 0, 1, 1, 2>, elems = array<i64: 0, 512, 0, 512>}
// CHECK:       wpk.phase "matmul_3" attributes {op = "wave.matmul"} {
// CHECK-NEXT:    wpk.tasks "matmul" {inputs = ["in.x", "w.w"], {{.*}}sessions = array<i64: 0, 2, 0, 2, 0, 2, 0, 2>, elems = array<i64: 0, 128, 128, 256, 256, 384, 384, 512>}
// CHECK:       wpk.phase "ewise_4"
// CHECK:       wpk.phase "output_y" attributes {op = "wave.output"}
// CHECK:       wpk.phase "state_write_h" attributes {op = "wave.state_write"}
// CHECK-NOT:   func.func

// -----

// A cohort of 64 against a 256 x 64 weight: splitting only columns would read all 64 sessions' rows of x
// in every tile, splitting only sessions the whole weight in every tile; the balanced split (2 x 2)
// reads 4 * 256 * (32 + 32) bytes per tile, the fewest.
builtin.module attributes {wave.cohort = 64 : i64} {
  func.func @cohort_gemm() {
    %x = wave.input "x" {cohort_axis = 0 : i64} : tensor<64x1x256xf32>
    %w = wave.weight "w" : tensor<256x64xf32>
    %y = wave.matmul %x, %w : (tensor<64x1x256xf32>, tensor<256x64xf32>) -> tensor<64x1x64xf32>
    wave.output "y", %y {cohort_axis = 0 : i64} : tensor<64x1x64xf32>
    func.return
  }
}
// CHECK-LABEL: wpk.phase "matmul_2"
// CHECK-NEXT:    wpk.tasks "matmul" {{.*}}sessions = array<i64: 0, 32, 0, 32, 32, 64, 32, 64>, elems = array<i64: 0, 32, 32, 64, 0, 32, 32, 64>}
// CHECK-NEXT:  }

// -----

// Without the cohort axis the lowering cannot lay out session slots.
func.func @not_batched() {
  %x = wave.input "x" : tensor<4xf32>
  wave.output "x", %x : tensor<4xf32>
  func.return
}
// CHECK: wave-to-wpk: the module has no wave.cohort attribute; run wave-cohort first
