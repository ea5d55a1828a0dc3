// RUN: WAVEC_ROUNDTRIP

// A buffer, a phase and a scheduled, encoded task print back as they were written.
builtin.module attributes {wave.cohort = 2 : i64} {
  wpk.buffer "in.x" {arena = "input", role = "input", bytes = 32 : i64, session_stride = 32 : i64, offset = 0 : i64}
  wpk.buffer "t0" {arena = "act", role = "act", bytes = 32 : i64, session_stride = 32 : i64, offset = 0 : i64}
  wpk.phase "relu_0" attributes {op = "wave.ewise"} {
    wpk.task "ewise" {inputs = ["in.x"], input_offsets = array<i64: 0>, output = "t0", output_offset = 0 : i64, sessions = array<i64: 0, 2>, elems = array<i64: 0, 8>, params = array<i64: 1, 1, 8, 1, 1, 1, 2, 1099511627776, 3298534883330, -1>, worker = 0 : i64, order = 0 : i64, waits = array<i64>, signal = 1 : i64}
  }
}
// CHECK:      wpk.buffer "in.x" {arena = "input", role = "input", bytes = 32 : i64, session_stride = 32 : i64, offset = 0 : i64}
// CHECK:      wpk.phase "relu_0" attributes {op = "wave.ewise"} {
// CHECK-NEXT:   wpk.task "ewise" {inputs = ["in.x"], input_offsets = array<i64: 0>, output = "t0", output_offset = 0 : i64, sessions = array<i64: 0, 2>, elems = array<i64: 0, 8>, params = array<i64: 1, 1, 8, 1, 1, 1, 2, 1099511627776, 3298534883330, -1>, worker = 0 : i64, order = 0 : i64, waits = array<i64>, signal = 1 : i64}
// CHECK-NEXT: }
