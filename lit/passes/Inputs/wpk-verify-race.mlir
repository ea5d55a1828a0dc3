// Input of wpk-verify.mlir (RACE): a dropped wait between two workers. Not a test by itself.
builtin.module attributes {wave.cohort = 2 : i64, wpk.workers = 2 : i64, wpk.counters = 3 : i64, wpk.arena_bytes = {weights = 0 : i64, state = 0 : i64, act = 64 : i64, input = 64 : i64, output = 64 : i64}, wpk.act_lower_bound = 64 : i64} {
  wpk.buffer "in.x" {model_name = "x", shape = array<i64: 8>, cohort_axis = -1 : i64, arena = "input", role = "input", bytes = 32 : i64, session_stride = 32 : i64, offset = 0 : i64}
  wpk.buffer "t1" {arena = "act", role = "act", bytes = 32 : i64, session_stride = 32 : i64, offset = 0 : i64}
  wpk.buffer "out.y" {model_name = "y", shape = array<i64: 8>, cohort_axis = -1 : i64, arena = "output", role = "output", bytes = 32 : i64, session_stride = 32 : i64, offset = 0 : i64}
  wpk.phase "ewise_1" attributes {op = "wave.ewise"} {
    wpk.tasks "ewise" {inputs = ["in.x"], input_offsets = array<i64: 0>, output = "t1", output_offset = 0 : i64, params = array<i64: 1, 1, 8, 1, 1, 1, 2, 1099511627776, 3307124817920, -1>, sessions = array<i64: 0, 1, 1, 2>, elems = array<i64: 0, 8, 0, 8>, worker = array<i64: 0, 1>, order = array<i64: 0, 0>, n_waits = array<i64: 0, 0>, waits = array<i64>, signal = array<i64: 1, 1>, signal_phase = array<i64: 0, 0>, payload = array<i32: 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0, 0, 32, 131075, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 2, 0, 8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0, 0, 32, 131075>}
  }
  wpk.phase "output_y" attributes {op = "wave.output"} {
    wpk.tasks "ewise" {inputs = ["t1"], input_offsets = array<i64: 0>, output = "out.y", output_offset = 0 : i64, params = array<i64: 1, 1, 8, 1, 1, 1, 1, 1099511627776, -1>, sessions = array<i64: 0, 1, 1, 2>, elems = array<i64: 0, 8, 0, 8>, worker = array<i64: 1, 0>, order = array<i64: 1, 1>, n_waits = array<i64: 0, 1>, waits = array<i64: 1, 2>, signal = array<i64: 2, 2>, signal_phase = array<i64: 0, 0>, payload = array<i32: 1, 1, 2, 2, 1, 0, 0, 2, 0, 0, 0, 1, 0, 8, 10, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0, 0, 32, 262146, 1, 65536, 3, 2, 1, 0, 0, 2, 0, 0, 1, 2, 0, 8, 10, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0, 0, 32, 262146>}
  }
}
