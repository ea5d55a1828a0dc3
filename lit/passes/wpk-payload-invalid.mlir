// RUN: wavec-opt %s --split-input-file -p wpk-payload --verify-diagnostics | filecheck %s

// Encoding needs every buffer placed: without wpk-arena there is no offset to write.
builtin.module attributes {wave.cohort = 1 : i64, wpk.workers = 1 : i64} {
  wpk.buffer "a" {arena = "act", role = "act", bytes = 16 : i64, session_stride = 16 : i64}
  wpk.phase "p" attributes {op = "wave.ewise"} {
    wpk.tasks "ewise" {inputs = ["a"], input_offsets = array<i64: 0>, output = "a", output_offset = 0 : i64, params = array<i64: 1, 1, 4, 1, 1, 1, 1, 1099511627776, -1>, sessions = array<i64: 0, 1>, elems = array<i64: 0, 4>, worker = array<i64: 0>, order = array<i64: 0>, n_waits = array<i64: 0>, waits = array<i64>, signal = array<i64: 1>, signal_phase = array<i64: 0>}
  }
}
// CHECK: wpk-payload: buffer 'a' has no offset; run wpk-arena first

// -----

// Every buffer a task names must be declared.
builtin.module attributes {wave.cohort = 1 : i64, wpk.workers = 1 : i64} {
  wpk.buffer "a" {arena = "act", role = "act", bytes = 16 : i64, session_stride = 16 : i64, offset = 0 : i64}
  wpk.phase "p" attributes {op = "wave.ewise"} {
    wpk.tasks "ewise" {inputs = ["nope"], input_offsets = array<i64: 0>, output = "a", output_offset = 0 : i64, params = array<i64: 1, 1, 4, 1, 1, 1, 1, 1099511627776, -1>, sessions = array<i64: 0, 1>, elems = array<i64: 0, 4>, worker = array<i64: 0>, order = array<i64: 0>, n_waits = array<i64: 0>, waits = array<i64>, signal = array<i64: 1>, signal_phase = array<i64: 0>}
  }
}
// CHECK: wpk-payload: wpk.tasks 'ewise' writing 'a' in phase 'p' uses buffer 'nope', which no wpk.buffer declares
