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
    wpk.task "ewise" {inputs = ["a"], input_offsets = array<i64: 0>, output = "b", output_offset = 0 : i64, sessions = array<i64: 2, 2>, elems = array<i64: 0, 8>, params = array<i64: 1>}
  }
}
// CHECK: wpk.task: sessions must be a non-empty [begin, end) range, got [2, 2]

// -----

builtin.module {
  wpk.phase "p" attributes {op = "wave.ewise"} {
    wpk.task "matmul" {inputs = ["a"], input_offsets = array<i64: 0>, output = "b", output_offset = 0 : i64, sessions = array<i64: 0, 2>, elems = array<i64: 0, 8>, params = array<i64: 1>}
  }
}
// CHECK: wpk.task: params block is not a matmul block
