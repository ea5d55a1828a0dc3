// RUN: wavec-opt %s --split-input-file -p 'wave-to-wpk{workers=4}' --verify-diagnostics | filecheck %s
// RUN: wavec-opt %s --split-input-file -p 'wave-to-wpk{workers=4 concats-into-copies=false}' --verify-diagnostics | filecheck %s --check-prefix=NOFOLD
// RUN: wavec-opt %s --split-input-file -p 'wave-to-wpk{workers=4 concats-in-place=false}' --verify-diagnostics | filecheck %s --check-prefix=NOPLACE

// A state is reset (select on the session's flag) before the graph; its new value is computed in the
// state's own slot (the ewise reads the old h element for element, and nothing else reads it), so there is
// no write-back copy; the output is copied into the output arena. Two sessions on four workers: the matmul reads a weight shared
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
// CHECK-NEXT:    wpk.tasks "ewise" {inputs = ["t{{[0-9]+}}", "s.h"], {{.*}}output = "s.h", output_offset = 0
// CHECK:       wpk.phase "output_y" attributes {op = "wave.output"}
// CHECK-NEXT:    wpk.tasks "ewise" {inputs = ["s.h"]
// CHECK-NOT:   wpk.phase
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

// A slice read only by elementwise ops is no task: the ewise reads x through it, at the slice's element
// offset (the imaginary half starts 4 x 4 = 16 elements in) and strides. Silero's STFT magnitude is this.
builtin.module attributes {wave.cohort = 2 : i64} {
  func.func @stft_magnitude() {
    %x = wave.input "x" {cohort_axis = 0 : i64} : tensor<2x8x4xf32>
    %re = wave.slice %x {starts = array<i64: 0, 0, 0>, steps = array<i64: 1, 1, 1>} : (tensor<2x8x4xf32>) -> tensor<2x4x4xf32>
    %im = wave.slice %x {starts = array<i64: 0, 4, 0>, steps = array<i64: 1, 1, 1>} : (tensor<2x8x4xf32>) -> tensor<2x4x4xf32>
    %m = wave.ewise "sqrt(add(mul(%0, %0), mul(%1, %1)))"(%re, %im) : (tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
    wave.output "m", %m {cohort_axis = 0 : i64} : tensor<2x4x4xf32>
    func.return
  }
}
// CHECK-NOT:   wpk.phase "slice
// CHECK:       wpk.phase "ewise_3"
// CHECK-NEXT:    wpk.tasks "ewise" {inputs = ["in.x", "in.x"], input_offsets = array<i64: 0, 16>,

// -----

// A concat copies its parts through strided views, so it reads a reversed slice in place too: Silero's
// reflection pad (the frame with its edge mirrored) is one phase, the edge's part reading x from
// element 6 at stride -1. Read only by the output, the concat is that output's copy.
builtin.module attributes {wave.cohort = 2 : i64} {
  func.func @reflect_pad() {
    %x = wave.input "x" {cohort_axis = 0 : i64} : tensor<2x8xf32>
    %edge = wave.slice %x {starts = array<i64: 0, 6>, steps = array<i64: 1, -1>} : (tensor<2x8xf32>) -> tensor<2x3xf32>
    %p = wave.concat %x, %edge {axis = 1 : i64} : (tensor<2x8xf32>, tensor<2x3xf32>) -> tensor<2x11xf32>
    wave.output "p", %p {cohort_axis = 0 : i64} : tensor<2x11xf32>
    func.return
  }
}
// CHECK-NOT:   wpk.phase "slice
// CHECK-NOT:   wpk.phase "concat_2"
// CHECK:       wpk.phase "output_p"
// CHECK-NEXT:    wpk.tasks "ewise" {inputs = ["in.x"], input_offsets = array<i64: 0>,
// CHECK-NEXT:    wpk.tasks "ewise" {inputs = ["in.x"], input_offsets = array<i64: 6>, {{.*}}params = array<i64: 1, 1, 3, 1, 1, -1,

// -----

// A slice of whole rows is a contiguous block of x: any op reads it in place, at its offset (row 1 of 8
// words), as it reads a reshape. Silero's LSTM reads its state's two halves so.
builtin.module attributes {wave.cohort = 2 : i64} {
  func.func @rows_block() {
    %x = wave.input "x" {cohort_axis = 0 : i64} : tensor<2x4x8xf32>
    %w = wave.weight "w" : tensor<8x8xf32>
    %r = wave.slice %x {starts = array<i64: 0, 1, 0>, steps = array<i64: 1, 1, 1>} : (tensor<2x4x8xf32>) -> tensor<2x2x8xf32>
    %y = wave.matmul %r, %w : (tensor<2x2x8xf32>, tensor<8x8xf32>) -> tensor<2x2x8xf32>
    wave.output "y", %y {cohort_axis = 0 : i64} : tensor<2x2x8xf32>
    func.return
  }
}
// CHECK-NOT:   wpk.phase "slice
// CHECK:       wpk.phase "matmul_3"
// CHECK-NEXT:    wpk.tasks "matmul" {inputs = ["in.x", "w.w"], input_offsets = array<i64: 8, 0>,

// -----

// A mean over an axis of size 1 gives its element back: no task, the output copies x. (An l2 or a sum of
// squares over it would change the element and stays a task.) Silero ends with this mean.
builtin.module attributes {wave.cohort = 2 : i64} {
  func.func @mean_of_one_frame() {
    %x = wave.input "x" {cohort_axis = 0 : i64} : tensor<2x1x1xf32>
    %m = wave.reduce "mean" %x {axes = array<i64: 2>, keepdims = false} : (tensor<2x1x1xf32>) -> tensor<2x1xf32>
    wave.output "m", %m {cohort_axis = 0 : i64} : tensor<2x1xf32>
    func.return
  }
}
// CHECK-NOT:   wpk.phase "reduce
// CHECK:       wpk.phase "output_m"
// CHECK-NEXT:    wpk.tasks "ewise" {inputs = ["in.x"]

// -----

// A conv whose weight the cohort shares is tiled like the weight matmul: sessions x whole output channels
// (6 outputs each). Splitting only sessions would give 2 tiles of 1 session, each reading all 64 channels'
// weights (64 x 16 x 5 words); the split of least bytes per wave keeps both sessions in each of 4 tiles of
// 16 channels: each weight word is read once for the cohort.
builtin.module attributes {wave.cohort = 2 : i64} {
  func.func @conv_cohort() {
    %x = wave.input "x" {cohort_axis = 0 : i64} : tensor<2x16x6xf32>
    %w = wave.weight "w" : tensor<64x16x5xf32>
    %y = wave.conv %x, %w {strides = array<i64: 1>, pads = array<i64: 2, 2>, dilations = array<i64: 1>, group = 1 : i64} : tensor<2x16x6xf32>, tensor<64x16x5xf32> -> tensor<2x64x6xf32>
    wave.output "y", %y {cohort_axis = 0 : i64} : tensor<2x64x6xf32>
    func.return
  }
}
// CHECK-LABEL: wpk.phase "conv_2"
// CHECK-NEXT:    wpk.tasks "conv" {{.*}}sessions = array<i64: 0, 2, 0, 2, 0, 2, 0, 2>, elems = array<i64: 0, 96, 96, 192, 192, 288, 288, 384>}

// -----

// A cohort that fills the tiled GEMM's 64-row blocks: the byte-balanced split (32 sessions x 16 channels, 4
// tiles) leaves each tile 32 rows, too few for the tiled GEMM, so its lane groups would run them; the tiled
// split's 2 tiles of 64 sessions x 16 channels (one block each, K = 64 x 3) model 19,796 cycles against the
// lane groups' 24,576 (tiled_conv_split, lane_conv_cycles).
builtin.module attributes {wave.cohort = 64 : i64} {
  func.func @conv_blocks() {
    %x = wave.input "x" {cohort_axis = 0 : i64} : tensor<64x64x1xf32>
    %w = wave.weight "w" : tensor<32x64x3xf32>
    %y = wave.conv %x, %w {strides = array<i64: 1>, pads = array<i64: 1, 1>, dilations = array<i64: 1>, group = 1 : i64} : tensor<64x64x1xf32>, tensor<32x64x3xf32> -> tensor<64x32x1xf32>
    wave.output "y", %y {cohort_axis = 0 : i64} : tensor<64x32x1xf32>
    func.return
  }
}
// CHECK-LABEL: wpk.phase "conv_2"
// CHECK-NEXT:    wpk.tasks "conv" {{.*}}sessions = array<i64: 0, 64, 0, 64>, elems = array<i64: 0, 16, 16, 32>}

// -----

// Two states swapped: the state writes run after the graph, one after another, so a new value that is an
// old state is held in an activation during the graph; otherwise `b`'s write would read `a` already
// overwritten with `b`.
builtin.module attributes {wave.cohort = 2 : i64} {
  func.func @swap_states() {
    %a = wave.state "a" {cohort_axis = 0 : i64} : tensor<2x4xf32>
    %b = wave.state "b" {cohort_axis = 0 : i64} : tensor<2x4xf32>
    wave.state_write "a", %b : tensor<2x4xf32>
    wave.state_write "b", %a : tensor<2x4xf32>
    func.return
  }
}
// CHECK:       wpk.phase "state_hold_a"
// CHECK-NEXT:    wpk.tasks "ewise" {inputs = ["s.b"], input_offsets = array<i64: 0>, output = "[[HB:t[0-9]+]]"
// CHECK:       wpk.phase "state_hold_b"
// CHECK-NEXT:    wpk.tasks "ewise" {inputs = ["s.a"], input_offsets = array<i64: 0>, output = "[[HA:t[0-9]+]]"
// CHECK:       wpk.phase "state_write_a"
// CHECK-NEXT:    wpk.tasks "ewise" {inputs = ["[[HB]]"], {{.*}}output = "s.a"
// CHECK:       wpk.phase "state_write_b"
// CHECK-NEXT:    wpk.tasks "ewise" {inputs = ["[[HA]]"], {{.*}}output = "s.b"

// -----

// Without the cohort axis the lowering cannot lay out session slots.
func.func @not_batched() {
  %x = wave.input "x" : tensor<4xf32>
  wave.output "x", %x : tensor<4xf32>
  func.return
}
// CHECK: wave-to-wpk: the module has no wave.cohort attribute; run wave-cohort first

// -----

// Two outputs of one name are refused, whichever of them its op computes in place.
builtin.module attributes {wave.cohort = 2 : i64} {
  func.func @two_outputs_named_y() {
    %x = wave.input "x" {cohort_axis = 0 : i64} : tensor<2x4xf32>
    %a = wave.ewise "tanh(%0)"(%x) : (tensor<2x4xf32>) -> tensor<2x4xf32>
    %b = wave.ewise "exp(%0)"(%a) : (tensor<2x4xf32>) -> tensor<2x4xf32>
    wave.output "y", %a {cohort_axis = 0 : i64} : tensor<2x4xf32>
    wave.output "y", %b {cohort_axis = 0 : i64} : tensor<2x4xf32>
    func.return
  }
}
// CHECK: wave-to-wpk: two values named 'out.y'; names of inputs, weights, states and outputs must be unique

// -----

// A state write needs its state declared.
builtin.module attributes {wave.cohort = 2 : i64} {
  func.func @write_of_no_state() {
    %x = wave.input "x" {cohort_axis = 0 : i64} : tensor<2x4xf32>
    wave.state_write "nope", %x : tensor<2x4xf32>
    func.return
  }
}
// CHECK: wave-to-wpk: wave.state_write 'nope' writes no state: declare it with wave.state 'nope' first

// -----

// A ring cache written twice a beat (two model steps), each step's attention reading its version: both
// writes select into the state's own buffer (element for element), and the state write is no copy. The
// first step's reader comes before the second write in block order, which the lowering keeps. r1, which
// nothing but its output reads, is computed into the output buffer; c2, also the state's, is copied there.
builtin.module attributes {wave.cohort = 2 : i64} {
  func.func @ring_two_steps() {
    %c = wave.state "kv" {cohort_axis = 0 : i64} : tensor<2x4x8xf32>
    %i = wave.weight "iota" : tensor<4x1xf32>
    %p = wave.input "pos" {cohort_axis = 0 : i64} : tensor<2x1x1xf32>
    %n = wave.input "new" {cohort_axis = 0 : i64} : tensor<2x1x8xf32>
    %c1 = wave.ewise "select(eq(%0, fmod(%1, 4.0)), %2, %3)"(%i, %p, %n, %c) : (tensor<4x1xf32>, tensor<2x1x1xf32>, tensor<2x1x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %r1 = wave.ewise "mul(%0, 2.0)"(%c1) : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %c2 = wave.ewise "select(eq(%0, fmod(add(%1, 1.0), 4.0)), %2, %3)"(%i, %p, %n, %c1) : (tensor<4x1xf32>, tensor<2x1x1xf32>, tensor<2x1x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    wave.state_write "kv", %c2 : tensor<2x4x8xf32>
    wave.output "r1", %r1 {cohort_axis = 0 : i64} : tensor<2x4x8xf32>
    wave.output "c2", %c2 {cohort_axis = 0 : i64} : tensor<2x4x8xf32>
    func.return
  }
}
// CHECK-LABEL: wpk.phase "reset_kv"
// CHECK:       wpk.phase "ewise_4"
// CHECK-NEXT:    wpk.tasks "ewise" {inputs = ["w.iota", "in.pos", "in.new", "s.kv"], {{.*}}output = "s.kv"
// CHECK:       wpk.phase "ewise_5"
// CHECK-NEXT:    wpk.tasks "ewise" {inputs = ["s.kv"], {{.*}}output = "out.r1"
// CHECK:       wpk.phase "ewise_6"
// CHECK-NEXT:    wpk.tasks "ewise" {inputs = ["w.iota", "in.pos", "in.new", "s.kv"], {{.*}}output = "s.kv"
// CHECK:       wpk.phase "output_c2"
// CHECK-NOT:   wpk.phase "state_write_kv"

// -----

// A ring write in place is tiled in whole rows of the cache (the body evaluates its condition once a row and
// stores only the selected row, targets/cuda/tvm_ewise.py flagged_rows): 2 sessions on 4 workers split each
// session's 5 x 4096 elements in two, 3 rows a tile where an even split would make 2.5. The doubling after
// it is split evenly.
builtin.module attributes {wave.cohort = 2 : i64} {
  func.func @ring_rows() {
    %c = wave.state "kv" {cohort_axis = 0 : i64} : tensor<2x5x4096xf32>
    %i = wave.weight "iota" : tensor<5x1xf32>
    %p = wave.input "pos" {cohort_axis = 0 : i64} : tensor<2x1x1xf32>
    %n = wave.input "new" {cohort_axis = 0 : i64} : tensor<2x1x4096xf32>
    %c1 = wave.ewise "select(eq(%0, fmod(%1, 5.0)), %2, %3)"(%i, %p, %n, %c) : (tensor<5x1xf32>, tensor<2x1x1xf32>, tensor<2x1x4096xf32>, tensor<2x5x4096xf32>) -> tensor<2x5x4096xf32>
    %d = wave.ewise "mul(%0, 2.0)"(%c1) : (tensor<2x5x4096xf32>) -> tensor<2x5x4096xf32>
    wave.state_write "kv", %c1 : tensor<2x5x4096xf32>
    wave.output "d", %d {cohort_axis = 0 : i64} : tensor<2x5x4096xf32>
    func.return
  }
}
// CHECK:       wpk.phase "ewise_4"
// CHECK-NEXT:    wpk.tasks "ewise" {{.*}}output = "s.kv", {{.*}}elems = array<i64: 0, 12288, 12288, 20480, 0, 12288, 12288, 20480>}
// CHECK:       wpk.phase "ewise_5"
// CHECK-NEXT:    wpk.tasks "ewise" {{.*}}elems = array<i64: 0, 10240, 10240, 20480, 0, 10240, 10240, 20480>}

// -----

// The first version is also an output, and outputs are copied after the graph: the second write may not
// write over it, so neither select updates the state in place (storing only its row). The second still
// computes the whole new cache in the state's slot (states-in-place: it reads the first version, and the
// old cache's only reader comes before it), so there is no write-back copy.
builtin.module attributes {wave.cohort = 2 : i64} {
  func.func @ring_version_output() {
    %c = wave.state "cache" {cohort_axis = 0 : i64} : tensor<2x4x8xf32>
    %i = wave.weight "iota" : tensor<4x1xf32>
    %p = wave.input "pos" {cohort_axis = 0 : i64} : tensor<2x1x1xf32>
    %n = wave.input "new" {cohort_axis = 0 : i64} : tensor<2x1x8xf32>
    %c1 = wave.ewise "select(eq(%0, fmod(%1, 4.0)), %2, %3)"(%i, %p, %n, %c) : (tensor<4x1xf32>, tensor<2x1x1xf32>, tensor<2x1x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %c2 = wave.ewise "select(eq(%0, fmod(add(%1, 1.0), 4.0)), %2, %3)"(%i, %p, %n, %c1) : (tensor<4x1xf32>, tensor<2x1x1xf32>, tensor<2x1x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    wave.state_write "cache", %c2 : tensor<2x4x8xf32>
    wave.output "c1", %c1 {cohort_axis = 0 : i64} : tensor<2x4x8xf32>
    func.return
  }
}
// CHECK-LABEL: wpk.phase "reset_cache"
// CHECK:       wpk.phase "ewise_4"
// CHECK-NEXT:    wpk.tasks "ewise" {{.*}}output = "t{{[0-9]+}}"
// CHECK:       wpk.phase "ewise_5"
// CHECK-NEXT:    wpk.tasks "ewise" {{.*}}output = "s.cache"
// CHECK-NOT:   wpk.phase "state_write_cache"

// -----

// Attention over a ring cache [C, H, D] = [6, 4, 4], both transposes read in place (no transpose phase): V
// read as [H, C, D] keeps its columns (D) contiguous, the streaming GEMM's form; K read as [H, D, C] has its
// columns H x D apart but its k contiguous, and one query row a head reads it, the column GEMM's form (b
// strides 4, 0, 16, 1: head, row, column, k). Its matrices are small (96 bytes), so a tile holds one session
// and whole heads, as many pieces of the session as the workers have for it: two heads a tile.
builtin.module attributes {wave.cohort = 2 : i64} {
  func.func @attention_views() {
    %kc = wave.input "k" {cohort_axis = 0 : i64} : tensor<2x6x4x4xf32>
    %vc = wave.input "v" {cohort_axis = 0 : i64} : tensor<2x6x4x4xf32>
    %q = wave.input "q" {cohort_axis = 0 : i64} : tensor<2x4x1x4xf32>
    %kt = wave.transpose %kc {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x6x4x4xf32>) -> tensor<2x4x4x6xf32>
    %s = wave.matmul %q, %kt : (tensor<2x4x1x4xf32>, tensor<2x4x4x6xf32>) -> tensor<2x4x1x6xf32>
    %vt = wave.transpose %vc {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x6x4x4xf32>) -> tensor<2x4x6x4xf32>
    %o = wave.matmul %s, %vt : (tensor<2x4x1x6xf32>, tensor<2x4x6x4xf32>) -> tensor<2x4x1x4xf32>
    wave.output "o", %o {cohort_axis = 0 : i64} : tensor<2x4x1x4xf32>
    func.return
  }
}
// CHECK-NOT:   wpk.phase "transpose
// CHECK-LABEL: wpk.phase "matmul_4"
// CHECK-NEXT:    wpk.tasks "matmul" {inputs = ["in.q", "in.k"], {{.*}}params = array<i64: 2, 3, 4, 1, 6, 4, 0, 6, 6, 1, 4, 4, 0, 1, 4, 0, 16, 1,
// CHECK-SAME:    sessions = array<i64: 0, 1, 0, 1, 1, 2, 1, 2>, elems = array<i64: 0, 12, 12, 24, 0, 12, 12, 24>}
// CHECK-NOT:   wpk.phase "transpose
// CHECK:       wpk.phase "matmul_6"
// CHECK-NEXT:    wpk.tasks "matmul" {inputs = ["t{{[0-9]+}}", "in.v"]

// -----

// A weight whose values are bf16 numbers ({dtype = "bf16"}) makes a MATMUL's b of TF32 values, read through a
// transpose too (here a copy, t2: the weight's rows are b's columns): the word after K (b_tf32) is 1, so the
// tensor-core body uses b's bits unsplit. A float32 weight's word is 0.
builtin.module attributes {wave.cohort = 2 : i64} {
  func.func @bf16_weights() {
    %x = wave.input "x" {cohort_axis = 0 : i64} : tensor<2x1x8xf32>
    %wb = wave.weight "wb" {dtype = "bf16"} : tensor<4x8xf32>
    %wt = wave.transpose %wb {perm = array<i64: 1, 0>} : (tensor<4x8xf32>) -> tensor<8x4xf32>
    %y = wave.matmul %x, %wt : (tensor<2x1x8xf32>, tensor<8x4xf32>) -> tensor<2x1x4xf32>
    %wf = wave.weight "wf" : tensor<4x4xf32>
    %z = wave.matmul %y, %wf : (tensor<2x1x4xf32>, tensor<4x4xf32>) -> tensor<2x1x4xf32>
    wave.output "z", %z {cohort_axis = 0 : i64} : tensor<2x1x4xf32>
    func.return
  }
}
// CHECK-LABEL: wpk.phase "matmul_3"
// CHECK-NEXT:    wpk.tasks "matmul" {inputs = ["in.x", "t2"], {{.*}}params = array<i64: 2, 2, 1, 4, 8, 1,
// CHECK-LABEL: wpk.phase "matmul_5"
// CHECK-NEXT:    wpk.tasks "matmul" {inputs = ["t3", "w.wf"], {{.*}}params = array<i64: 2, 2, 1, 4, 4, 0,

// -----

// K^T read in place in 64 KB matrices (STREAM_MIN_B_BYTES), a ring cache [C, H, D] = [256, 2, 64] read as
// [H, D, C] (b strides 64, 0, 128, 1: head, row, column, k): tiles of one session and one head. Nine query rows
// a head (more than wavec.opcodes.COLUMN_GEMM_ROWS) keep the copy.
builtin.module attributes {wave.cohort = 2 : i64} {
  func.func @k_in_place() {
    %kc = wave.input "k" {cohort_axis = 0 : i64} : tensor<2x256x2x64xf32>
    %q = wave.input "q" {cohort_axis = 0 : i64} : tensor<2x2x1x64xf32>
    %kt = wave.transpose %kc {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x256x2x64xf32>) -> tensor<2x2x64x256xf32>
    %s = wave.matmul %q, %kt : (tensor<2x2x1x64xf32>, tensor<2x2x64x256xf32>) -> tensor<2x2x1x256xf32>
    wave.output "s", %s {cohort_axis = 0 : i64} : tensor<2x2x1x256xf32>
    func.return
  }
}
// CHECK-NOT:   wpk.phase "transpose
// CHECK-LABEL: wpk.phase "matmul_3"
// CHECK-NEXT:    wpk.tasks "matmul" {inputs = ["in.q", "in.k"], {{.*}}params = array<i64: 2, 3, 2, 1, 256, 64, 0, 256, 256, 1, 64, 64, 0, 1, 64, 0, 128, 1,
// CHECK-SAME:    sessions = array<i64: 0, 1, 0, 1, 1, 2, 1, 2>, elems = array<i64: 0, 256, 256, 512, 0, 256, 256, 512>}

// -----

builtin.module attributes {wave.cohort = 2 : i64} {
  func.func @many_queries_copy_k() {
    %kc = wave.input "k" {cohort_axis = 0 : i64} : tensor<2x256x2x64xf32>
    %q = wave.input "q" {cohort_axis = 0 : i64} : tensor<2x2x9x64xf32>
    %kt = wave.transpose %kc {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x256x2x64xf32>) -> tensor<2x2x64x256xf32>
    %s = wave.matmul %q, %kt : (tensor<2x2x9x64xf32>, tensor<2x2x64x256xf32>) -> tensor<2x2x9x256xf32>
    wave.output "s", %s {cohort_axis = 0 : i64} : tensor<2x2x9x256xf32>
    func.return
  }
}
// CHECK-LABEL: wpk.phase "transpose_2"
// CHECK-NEXT:    wpk.tasks "ewise" {inputs = ["in.k"]
// CHECK:       wpk.phase "matmul_3"
// CHECK-NEXT:    wpk.tasks "matmul" {inputs = ["in.q", "t2"]

// -----

// A matrix-vector product over a per-session matrix of 64 KB (a Mamba2 state read out, y = h @ c) is lowered
// as its transpose c^T h^T: inputs swapped (c, h), one row of 256 columns, h read as a k-contiguous b (strides
// 64, 1), the column GEMM's form. The same product over 16 KB keeps its form (h as a, c as b).
builtin.module attributes {wave.cohort = 2 : i64} {
  func.func @readout() {
    %h = wave.input "h" {cohort_axis = 0 : i64} : tensor<2x4x64x64xf32>
    %c = wave.input "c" {cohort_axis = 0 : i64} : tensor<2x1x64x1xf32>
    %y = wave.matmul %h, %c : (tensor<2x4x64x64xf32>, tensor<2x1x64x1xf32>) -> tensor<2x4x64x1xf32>
    %s = wave.input "s" {cohort_axis = 0 : i64} : tensor<2x4x16x64xf32>
    %z = wave.matmul %s, %c : (tensor<2x4x16x64xf32>, tensor<2x1x64x1xf32>) -> tensor<2x4x16x1xf32>
    wave.output "y", %y {cohort_axis = 0 : i64} : tensor<2x4x64x1xf32>
    wave.output "z", %z {cohort_axis = 0 : i64} : tensor<2x4x16x1xf32>
    func.return
  }
}
// CHECK-LABEL: wpk.phase "matmul_2"
// CHECK-NEXT:    wpk.tasks "matmul" {inputs = ["in.c", "in.h"], {{.*}}params = array<i64: 2, 2, 1, 256, 64, 0, 256, 1, 0, 0, 1, 0, 64, 1,
// CHECK:       wpk.phase "matmul_4"
// CHECK-NEXT:    wpk.tasks "matmul" {inputs = ["in.s", "in.c"], {{.*}}params = array<i64: 2, 3, 4, 16, 1, 64, 0,

// -----

// Outputs in place: Silero's last ops, a conv whose one frame is reshaped and averaged over that frame (a
// unit reduction), write the output buffer themselves, and the output is no copy phase. A value that a
// second op also reads keeps its copy.
builtin.module attributes {wave.cohort = 2 : i64} {
  func.func @outputs_in_place() {
    %x = wave.input "x" {cohort_axis = 0 : i64} : tensor<2x4x1xf32>
    %w = wave.weight "w" : tensor<1x4x1xf32>
    %y = wave.conv %x, %w {strides = array<i64: 1>, pads = array<i64: 0, 0>, dilations = array<i64: 1>, group = 1 : i64} : tensor<2x4x1xf32>, tensor<1x4x1xf32> -> tensor<2x1x1xf32>
    %r = wave.reshape %y : (tensor<2x1x1xf32>) -> tensor<2x1xf32>
    %m = wave.reduce "mean" %r {axes = array<i64: 1>, keepdims = false} : (tensor<2x1xf32>) -> tensor<2xf32>
    %h = wave.ewise "tanh(%0)"(%x) : (tensor<2x4x1xf32>) -> tensor<2x4x1xf32>
    %g = wave.ewise "mul(%0, 2.0)"(%h) : (tensor<2x4x1xf32>) -> tensor<2x4x1xf32>
    wave.output "prob", %m {cohort_axis = 0 : i64} : tensor<2xf32>
    wave.output "h", %h {cohort_axis = 0 : i64} : tensor<2x4x1xf32>
    wave.output "g", %g {cohort_axis = 0 : i64} : tensor<2x4x1xf32>
    func.return
  }
}
// CHECK:       wpk.phase "conv_2"
// CHECK-NEXT:    wpk.tasks "conv" {inputs = ["in.x", "w.w"], {{.*}}output = "out.prob"
// CHECK:       wpk.phase "ewise_5"
// CHECK-NEXT:    wpk.tasks "ewise" {inputs = ["in.x"], {{.*}}output = "[[H:t[0-9]+]]"
// CHECK:       wpk.phase "ewise_6"
// CHECK-NEXT:    wpk.tasks "ewise" {inputs = ["[[H]]"], {{.*}}output = "out.g"
// CHECK-NOT:   wpk.phase "output_prob"
// CHECK-NOT:   wpk.phase "output_g"
// CHECK:       wpk.phase "output_h"
// CHECK-NEXT:    wpk.tasks "ewise" {inputs = ["[[H]]"], {{.*}}output = "out.h"
// CHECK-NOT:   wpk.phase
// CHECK:       // -----

// -----

// Silero's new LSTM state: [h, c] concatenated, then reported (stateN) and written back. Read only by those
// copies, the concat is no phase: each copies h and c into its parts itself, one handoff fewer before the
// beat's end. A concat with a part read from a state stays (the writes back run one after another, and
// state "s" could be written before "t"'s copy read it).
builtin.module attributes {wave.cohort = 2 : i64} {
  func.func @concat_into_copies() {
    %x = wave.input "x" {cohort_axis = 0 : i64} : tensor<2x1x4xf32>
    %s = wave.state "s" {cohort_axis = 0 : i64} : tensor<2x2x4xf32>
    %t = wave.state "t" {cohort_axis = 0 : i64} : tensor<2x2x4xf32>
    %h = wave.ewise "tanh(%0)"(%x) : (tensor<2x1x4xf32>) -> tensor<2x1x4xf32>
    %c = wave.ewise "exp(%0)"(%x) : (tensor<2x1x4xf32>) -> tensor<2x1x4xf32>
    %hc = wave.concat %h, %c {axis = 1 : i64} : (tensor<2x1x4xf32>, tensor<2x1x4xf32>) -> tensor<2x2x4xf32>
    %s0 = wave.slice %s {starts = array<i64: 0, 0, 0>, steps = array<i64: 1, 1, 1>} : (tensor<2x2x4xf32>) -> tensor<2x1x4xf32>
    %hs = wave.concat %h, %s0 {axis = 1 : i64} : (tensor<2x1x4xf32>, tensor<2x1x4xf32>) -> tensor<2x2x4xf32>
    wave.output "sN", %hc {cohort_axis = 0 : i64} : tensor<2x2x4xf32>
    wave.state_write "s", %hc : tensor<2x2x4xf32>
    wave.state_write "t", %hs : tensor<2x2x4xf32>
    func.return
  }
}
// CHECK:       wpk.phase "ewise_3"
// CHECK:       wpk.phase "ewise_4"
// CHECK-NOT:   wpk.phase "concat_5"
// CHECK:       wpk.phase "concat_7"
// CHECK:       wpk.phase "output_sN"
// CHECK-NEXT:    wpk.tasks "ewise" {inputs = ["[[H:t[0-9]+]]"], input_offsets = array<i64: 0>, output = "out.sN", output_offset = 0 : i64
// CHECK-NEXT:    wpk.tasks "ewise" {inputs = ["[[C:t[0-9]+]]"], input_offsets = array<i64: 0>, output = "out.sN", output_offset = 4 : i64
// CHECK:       wpk.phase "state_write_s"
// CHECK-NEXT:    wpk.tasks "ewise" {inputs = ["[[H]]"], input_offsets = array<i64: 0>, output = "s.s", output_offset = 0 : i64
// CHECK-NEXT:    wpk.tasks "ewise" {inputs = ["[[C]]"], input_offsets = array<i64: 0>, output = "s.s", output_offset = 4 : i64
// CHECK:       wpk.phase "state_write_t"
// CHECK-NEXT:    wpk.tasks "ewise" {inputs = ["t{{[0-9]+}}"], input_offsets = array<i64: 0>, output = "s.t", output_offset = 0 : i64

// -----

// States in place: each part of a state's new value is computed in the state's slot when every other
// reader of the old value comes before it and it reads the old value only where it writes. Silero's LSTM:
// the matmul reads the old h first; c reads the old c element for element; h reads the new c. Both land in
// "s" itself, so there is no write-back phase; the output copies the new value from the state.
builtin.module attributes {wave.cohort = 2 : i64} {
  func.func @lstm_state_in_place() {
    %x = wave.input "x" {cohort_axis = 0 : i64} : tensor<2x1x4xf32>
    %s = wave.state "s" {cohort_axis = 0 : i64} : tensor<2x2x4xf32>
    %w = wave.weight "w" : tensor<4x4xf32>
    %h0 = wave.slice %s {starts = array<i64: 0, 0, 0>, steps = array<i64: 1, 1, 1>} : (tensor<2x2x4xf32>) -> tensor<2x1x4xf32>
    %c0 = wave.slice %s {starts = array<i64: 0, 1, 0>, steps = array<i64: 1, 1, 1>} : (tensor<2x2x4xf32>) -> tensor<2x1x4xf32>
    %g = wave.matmul %h0, %w epilogue "add(%0, %1)"(%x) : (tensor<2x1x4xf32>, tensor<4x4xf32>, tensor<2x1x4xf32>) -> tensor<2x1x4xf32>
    %c = wave.ewise "add(mul(sigmoid(%0), %1), %0)"(%g, %c0) : (tensor<2x1x4xf32>, tensor<2x1x4xf32>) -> tensor<2x1x4xf32>
    %h = wave.ewise "mul(sigmoid(%0), tanh(%1))"(%g, %c) : (tensor<2x1x4xf32>, tensor<2x1x4xf32>) -> tensor<2x1x4xf32>
    %hc = wave.concat %h, %c {axis = 1 : i64} : (tensor<2x1x4xf32>, tensor<2x1x4xf32>) -> tensor<2x2x4xf32>
    wave.output "sN", %hc {cohort_axis = 0 : i64} : tensor<2x2x4xf32>
    wave.state_write "s", %hc : tensor<2x2x4xf32>
    func.return
  }
}
// CHECK-LABEL: wpk.phase "matmul_5"
// CHECK-NEXT:    wpk.tasks "matmul" {inputs = ["s.s", "w.w", "in.x"], input_offsets = array<i64: 0, 0, 0>
// CHECK:       wpk.phase "ewise_6"
// CHECK-NEXT:    wpk.tasks "ewise" {inputs = ["[[G:t[0-9]+]]", "s.s"], input_offsets = array<i64: 0, 4>, output = "s.s", output_offset = 4 : i64
// CHECK:       wpk.phase "ewise_7"
// CHECK-NEXT:    wpk.tasks "ewise" {inputs = ["[[G]]", "s.s"], input_offsets = array<i64: 0, 4>, output = "s.s", output_offset = 0 : i64
// CHECK:       wpk.phase "output_sN"
// CHECK-NEXT:    wpk.tasks "ewise" {inputs = ["s.s"], input_offsets = array<i64: 0>, output = "out.sN", output_offset = 0 : i64
// CHECK-NEXT:    wpk.tasks "ewise" {inputs = ["s.s"], input_offsets = array<i64: 4>, output = "out.sN", output_offset = 4 : i64
// CHECK-NOT:   wpk.phase
// CHECK:       // -----
// With the concat a phase of its own (concats-into-copies=false), it would copy the parts out of the state
// and the write back in again: the parts are computed in activation buffers instead.
// NOFOLD-LABEL: wpk.tasks "matmul" {inputs = ["s.s", "w.w", "in.x"]
// NOFOLD:       wpk.phase "ewise_6"
// NOFOLD-NEXT:    wpk.tasks "ewise" {{.*}}output = "t{{[0-9]+}}"
// NOFOLD:       wpk.phase "concat_8"
// NOFOLD:       wpk.phase "state_write_s"

// -----

// Refused: the old h is read again after the new h would overwrite it (the matmul comes last), and the new
// c reads the old c reversed, other elements than those it writes. Both are computed elsewhere and copied.
builtin.module attributes {wave.cohort = 2 : i64} {
  func.func @state_in_place_refused() {
    %x = wave.input "x" {cohort_axis = 0 : i64} : tensor<2x1x4xf32>
    %s = wave.state "s" {cohort_axis = 0 : i64} : tensor<2x2x4xf32>
    %w = wave.weight "w" : tensor<4x4xf32>
    %h0 = wave.slice %s {starts = array<i64: 0, 0, 0>, steps = array<i64: 1, 1, 1>} : (tensor<2x2x4xf32>) -> tensor<2x1x4xf32>
    %r0 = wave.slice %s {starts = array<i64: 0, 1, 3>, steps = array<i64: 1, 1, -1>} : (tensor<2x2x4xf32>) -> tensor<2x1x4xf32>
    %c = wave.ewise "tanh(add(%0, %1))"(%x, %r0) : (tensor<2x1x4xf32>, tensor<2x1x4xf32>) -> tensor<2x1x4xf32>
    %h = wave.ewise "exp(%0)"(%x) : (tensor<2x1x4xf32>) -> tensor<2x1x4xf32>
    %g = wave.matmul %h0, %w : (tensor<2x1x4xf32>, tensor<4x4xf32>) -> tensor<2x1x4xf32>
    %hc = wave.concat %h, %c {axis = 1 : i64} : (tensor<2x1x4xf32>, tensor<2x1x4xf32>) -> tensor<2x2x4xf32>
    wave.output "g", %g {cohort_axis = 0 : i64} : tensor<2x1x4xf32>
    wave.state_write "s", %hc : tensor<2x2x4xf32>
    func.return
  }
}
// CHECK-LABEL: wpk.phase "ewise_5"
// CHECK-NEXT:    wpk.tasks "ewise" {inputs = ["in.x", "s.s"], {{.*}}output = "[[C:t[0-9]+]]"
// CHECK:       wpk.phase "ewise_6"
// CHECK-NEXT:    wpk.tasks "ewise" {inputs = ["in.x"], {{.*}}output = "[[H:t[0-9]+]]"
// CHECK:       wpk.phase "state_write_s"
// CHECK-NEXT:    wpk.tasks "ewise" {inputs = ["[[H]]"], {{.*}}output = "s.s", output_offset = 0 : i64
// CHECK-NEXT:    wpk.tasks "ewise" {inputs = ["[[C]]"], {{.*}}output = "s.s", output_offset = 4 : i64

// -----

// wave-stack-matmuls' form: one matmul over [y, h] and [W; R]. The concat of weights is one weight of its
// own, its parts named for profile emission to concatenate, and the weights it is made of get no buffers. y,
// which only the concat reads, is computed into its part of the concat's buffer (marked in part_bytes for
// wpk-verify), so the concat's phase copies h alone.
builtin.module attributes {wave.cohort = 2 : i64} {
  func.func @stacked_k_in_place() {
    %x = wave.input "x" {cohort_axis = 0 : i64} : tensor<2x1x8xf32>
    %h = wave.input "h" {cohort_axis = 0 : i64} : tensor<2x1x4xf32>
    %w = wave.weight "w" : tensor<8x16xf32>
    %r = wave.weight "r" : tensor<4x16xf32>
    %y = wave.ewise "relu(%0)"(%x) : (tensor<2x1x8xf32>) -> tensor<2x1x8xf32>
    %a = wave.concat %y, %h {axis = 2 : i64} : (tensor<2x1x8xf32>, tensor<2x1x4xf32>) -> tensor<2x1x12xf32>
    %b = wave.concat %w, %r {axis = 0 : i64} : (tensor<8x16xf32>, tensor<4x16xf32>) -> tensor<12x16xf32>
    %g = wave.matmul %a, %b : (tensor<2x1x12xf32>, tensor<12x16xf32>) -> tensor<2x1x16xf32>
    wave.output "g", %g {cohort_axis = 0 : i64} : tensor<2x1x16xf32>
    func.return
  }
}
// CHECK-NOT:   wpk.buffer "w.w"
// CHECK:       wpk.buffer "[[A:t[0-9]+]]" {part_bytes = array<i64: 0, 32>, arena = "act"
// CHECK-NEXT:  wpk.buffer "w.concat0(w, r)" {blob = "concat0(w, r)", parts = ["w", "r"], axis = 0 : i64, arena = "weights"
// CHECK-NOT:   wpk.buffer "w.r"
// CHECK:       wpk.phase "ewise_4"
// CHECK-NEXT:    wpk.tasks "ewise" {inputs = ["in.x"], input_offsets = array<i64: 0>, output = "[[A]]", output_offset = 0 : i64
// CHECK:       wpk.phase "concat_5"
// CHECK-NEXT:    wpk.tasks "ewise" {inputs = ["in.h"], input_offsets = array<i64: 0>, output = "[[A]]", output_offset = 8 : i64
// CHECK-NEXT:  }
// CHECK-NEXT:  wpk.phase "matmul_7"
// CHECK-NEXT:    wpk.tasks "matmul" {inputs = ["[[A]]", "w.concat0(w, r)"]
// Without concats-in-place, the concat copies both parts.
// NOPLACE-LABEL: wpk.phase "concat_5"
// NOPLACE-NEXT:    wpk.tasks "ewise" {inputs = ["t2"]
// NOPLACE-NEXT:    wpk.tasks "ewise" {inputs = ["in.h"]
