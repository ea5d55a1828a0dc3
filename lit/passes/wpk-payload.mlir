// RUN: wavec-opt %s -p 'wave-to-wpk{workers=2},wpk-arena,wpk-schedule{workers=2},wpk-payload' --verify-diagnostics | filecheck %s

// Each task's 128-byte record as 32 int32 words, the records of a wpk.tasks op one after another (wavec payload-layout): word 0 opcode (1 = ewise) |
// signal_phase << 16, word 1 worker | n_waits << 16, word 2 task id, word 3 signal (one counter per
// group: the tasks of a phase on one session range), words 10-13 the session and element
// tile, word 14 the params word offset, word 15 the input count; words 16-25 the operand byte offsets
// (64-bit), 26-30 their session strides, 31 the arena of each operand in 4 bits (input 3, output 4).
builtin.module attributes {wave.cohort = 4 : i64} {
  func.func @copy_out() {
    %x = wave.input "x" : tensor<4x8xf32>
    wave.output "y", %x : tensor<4x8xf32>
    func.return
  }
}
// CHECK:      wpk.phase "output_y"
// CHECK-NEXT:   wpk.tasks "ewise" {{.*}}payload = array<i32:
// Task 0: sessions [0, 2) on worker 0.
// CHECK-SAME:     1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0, 0, 32, 262147,
// Task 1: sessions [2, 4) on worker 1.
// CHECK-SAME:     1, 1, 1, 2, 0, 0, 0, 0, 0, 0, 2, 4, 0, 8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0, 0, 32, 262147>}
