// RUN: WAVEC_VERIFY_DIAG | filecheck %s
// The wpk verifiers reject malformed buffers and tasks.

builtin.module {
  wpk.buffer "t0" {arena = "scratch", role = "act", bytes = 16 : i64, session_stride = 16 : i64}
}
// CHECK: wpk.buffer 't0': unknown arena 'scratch'

// -----

builtin.module {
  wpk.buffer "t0" {arena = "act", role = "act", bytes = 64 : i64, session_stride = 32 : i64}
}
// CHECK: wpk.buffer 't0': session stride 32 < size 64: sessions would overlap

// -----

builtin.module {
  wpk.phase "p" attributes {op = "wave.ewise"} {
    wpk.tasks "ewise" {inputs = ["a"], input_offsets = array<i64: 0>, output = "b", output_offset = 0 : i64, params = array<i64: 1>, sessions = array<i64: 0, 2, 2, 2>, elems = array<i64: 0, 8, 0, 8>}
  }
}
// CHECK: wpk.tasks: sessions must be non-empty [begin, end) ranges; task 1 has [2, 2]

// -----

// A schedule column holds one entry per task.
builtin.module {
  wpk.phase "p" attributes {op = "wave.ewise"} {
    wpk.tasks "ewise" {inputs = ["a"], input_offsets = array<i64: 0>, output = "b", output_offset = 0 : i64, params = array<i64: 1>, sessions = array<i64: 0, 1, 1, 2>, elems = array<i64: 0, 8, 0, 8>, worker = array<i64: 0>}
  }
}
// CHECK: wpk.tasks: worker has 1 entries for 2 tasks

// -----

// A payload has room for three waits.
builtin.module {
  wpk.phase "p" attributes {op = "wave.ewise"} {
    wpk.tasks "ewise" {inputs = ["a"], input_offsets = array<i64: 0>, output = "b", output_offset = 0 : i64, params = array<i64: 1>, sessions = array<i64: 0, 1>, elems = array<i64: 0, 8>, n_waits = array<i64: 4>, waits = array<i64: 1, 1, 2, 1, 3, 1, 4, 1>}
  }
}
// CHECK: wpk.tasks: a task has 4 waits; a payload holds at most 3

// -----

builtin.module {
  wpk.phase "p" attributes {op = "wave.ewise"} {
    wpk.tasks "matmul" {inputs = ["a"], input_offsets = array<i64: 0>, output = "b", output_offset = 0 : i64, params = array<i64: 1>, sessions = array<i64: 0, 2>, elems = array<i64: 0, 8>}
  }
}
// CHECK: wpk.tasks: params block is not a matmul block
