// RUN: WAVEC_ROUNDTRIP

// A buffer, a phase and a scheduled table of two tasks print back as they were written.
builtin.module attributes {wave.cohort = 2 : i64} {
  wpk.buffer "in.x" {arena = "input", role = "input", bytes = 32 : i64, session_stride = 32 : i64, offset = 0 : i64}
  wpk.buffer "t0" {arena = "act", role = "act", bytes = 32 : i64, session_stride = 32 : i64, offset = 0 : i64}
  wpk.phase "relu_0" attributes {op = "wave.ewise"} {
    wpk.tasks "ewise" {inputs = ["in.x"], input_offsets = array<i64: 0>, output = "t0", output_offset = 0 : i64, params = array<i64: 1, 1, 8, 1, 1, 1, 2, 1099511627776, 3298534883330, -1>, sessions = array<i64: 0, 1, 1, 2>, elems = array<i64: 0, 8, 0, 8>, worker = array<i64: 0, 1>, order = array<i64: 0, 0>, n_waits = array<i64: 0, 1>, waits = array<i64: 1, 1>, signal = array<i64: 1, 2>, signal_phase = array<i64: 0, 0>}
  }
}
// CHECK:      wpk.buffer "in.x" {arena = "input", role = "input", bytes = 32 : i64, session_stride = 32 : i64, offset = 0 : i64}
// CHECK:      wpk.phase "relu_0" attributes {op = "wave.ewise"} {
// CHECK-NEXT:   wpk.tasks "ewise" {inputs = ["in.x"], input_offsets = array<i64: 0>, output = "t0", output_offset = 0 : i64, params = array<i64: 1, 1, 8, 1, 1, 1, 2, 1099511627776, 3298534883330, -1>, sessions = array<i64: 0, 1, 1, 2>, elems = array<i64: 0, 8, 0, 8>, worker = array<i64: 0, 1>, order = array<i64: 0, 0>, n_waits = array<i64: 0, 1>, waits = array<i64: 1, 1>, signal = array<i64: 1, 2>, signal_phase = array<i64: 0, 0>}
// CHECK-NEXT: }
