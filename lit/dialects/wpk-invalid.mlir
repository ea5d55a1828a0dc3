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
    wpk.tasks "ewise" {inputs = ["a"], input_offsets = array<i64: 0>, output = "b", output_offset = 0 : i64, params = array<i64: 1, 1, 8, 1, 1, 1, 1, 1099511627776, -1>, sessions = array<i64: 0, 2, 2, 2>, elems = array<i64: 0, 8, 0, 8>}
  }
}
// CHECK: wpk.tasks 'ewise' writing 'b' in phase 'p': sessions must be non-empty [begin, end) ranges; task 1 has [2, 2]

// -----

// A schedule sets every column, one entry per task, each within its payload field.
builtin.module {
  wpk.phase "p" attributes {op = "wave.ewise"} {
    wpk.tasks "ewise" {inputs = ["a"], input_offsets = array<i64: 0>, output = "b", output_offset = 0 : i64, params = array<i64: 1, 1, 8, 1, 1, 1, 1, 1099511627776, -1>, sessions = array<i64: 0, 1, 1, 2>, elems = array<i64: 0, 8, 0, 8>, worker = array<i64: 0>}
  }
}
// CHECK: wpk.tasks 'ewise' writing 'b' in phase 'p': a schedule sets worker, order, signal, signal_phase, n_waits, waits; order, signal, signal_phase, n_waits, waits missing

// -----

builtin.module {
  wpk.phase "p" attributes {op = "wave.ewise"} {
    wpk.tasks "ewise" {inputs = ["a"], input_offsets = array<i64: 0>, output = "b", output_offset = 0 : i64, params = array<i64: 1, 1, 8, 1, 1, 1, 1, 1099511627776, -1>, sessions = array<i64: 0, 1, 1, 2>, elems = array<i64: 0, 8, 0, 8>, worker = array<i64: 0>, order = array<i64: 0, 0>, signal = array<i64: 1, 1>, signal_phase = array<i64: 0, 0>, n_waits = array<i64: 0, 0>, waits = array<i64>}
  }
}
// CHECK: wpk.tasks 'ewise' writing 'b' in phase 'p': worker has 1 entries for 2 tasks

// -----

builtin.module {
  wpk.phase "p" attributes {op = "wave.ewise"} {
    wpk.tasks "ewise" {inputs = ["a"], input_offsets = array<i64: 0>, output = "b", output_offset = 0 : i64, params = array<i64: 1, 1, 8, 1, 1, 1, 1, 1099511627776, -1>, sessions = array<i64: 0, 1>, elems = array<i64: 0, 8>, worker = array<i64: 70000>, order = array<i64: 0>, signal = array<i64: 1>, signal_phase = array<i64: 0>, n_waits = array<i64: 0>, waits = array<i64>}
  }
}
// CHECK: wpk.tasks 'ewise' writing 'b' in phase 'p': worker of task 0 is 70000; it must be in [0, 65535]

// -----

// Columns are i64 arrays.
builtin.module {
  wpk.phase "p" attributes {op = "wave.ewise"} {
    wpk.tasks "ewise" {inputs = ["a"], input_offsets = array<i64: 0>, output = "b", output_offset = 0 : i64, params = array<i64: 1, 1, 8, 1, 1, 1, 1, 1099511627776, -1>, sessions = array<i32: 0, 1>, elems = array<i64: 0, 8>}
  }
}
// CHECK: wpk.tasks 'ewise' writing 'b' in phase 'p': sessions must be an array<i64: ...>, got array<i32>

// -----

// A payload has room for three waits.
builtin.module {
  wpk.phase "p" attributes {op = "wave.ewise"} {
    wpk.tasks "ewise" {inputs = ["a"], input_offsets = array<i64: 0>, output = "b", output_offset = 0 : i64, params = array<i64: 1, 1, 8, 1, 1, 1, 1, 1099511627776, -1>, sessions = array<i64: 0, 1>, elems = array<i64: 0, 8>, worker = array<i64: 0>, order = array<i64: 0>, signal = array<i64: 1>, signal_phase = array<i64: 0>, n_waits = array<i64: 4>, waits = array<i64: 1, 1, 2, 1, 3, 1, 4, 1>}
  }
}
// CHECK: wpk.tasks 'ewise' writing 'b' in phase 'p': n_waits of task 0 is 4; it must be in [0, 3]

// -----

builtin.module {
  wpk.phase "p" attributes {op = "wave.ewise"} {
    wpk.tasks "matmul" {inputs = ["a"], input_offsets = array<i64: 0>, output = "b", output_offset = 0 : i64, params = array<i64: 1>, sessions = array<i64: 0, 2>, elems = array<i64: 0, 8>}
  }
}
// CHECK: wpk.tasks 'matmul' writing 'b' in phase 'p': params block is not a matmul block

// -----

// The parameter block decodes as its opcode's (wavec/opcodes.py).
builtin.module {
  wpk.phase "p" attributes {op = "wave.ewise"} {
    wpk.tasks "ewise" {inputs = ["a"], input_offsets = array<i64: 0>, output = "b", output_offset = 0 : i64, params = array<i64: 1, 1>, sessions = array<i64: 0, 2>, elems = array<i64: 0, 8>}
  }
}
// CHECK: wpk.tasks 'ewise' writing 'b' in phase 'p': params block (2 words) does not decode as the ewise opcode's block (wavec.opcodes)
