// RUN: wavec-opt %s --split-input-file -p 'wave-to-wpk{outputs-in-place=false states-in-place=false workers=1},wpk-arena,wpk-schedule{workers=1},wpk-payload,wpk-verify' --verify-diagnostics | filecheck %s
// RUN: wavec-opt %s --split-input-file -p 'wave-to-wpk{outputs-in-place=false states-in-place=false workers=1},wpk-arena{granularity=op},wpk-schedule{workers=1}' --verify-diagnostics | filecheck %s --check-prefix=OP
// RUN: wavec-opt %s --split-input-file -p 'wave-to-wpk{outputs-in-place=false states-in-place=false workers=1},wpk-arena{max-tile-words=255},wpk-schedule{workers=1}' --verify-diagnostics | filecheck %s --check-prefix=OP
// RUN: wavec-opt %s --split-input-file -p 'wave-to-wpk{outputs-in-place=false states-in-place=false workers=1},wpk-arena{max-dedicated-bytes=4096},wpk-schedule{workers=1}' --verify-diagnostics | filecheck %s --check-prefix=DEDICATED

// A chain a -> b -> c -> d: `a` is dead once `b` is computed, so `c` reuses its bytes; the activation
// arena peaks at two live buffers (the lower bound), not four. Within max-dedicated-bytes (the cohort's
// 2,048 activation bytes, each buffer in bytes of its own) nothing is recycled: four offsets, and no
// writer waits for the readers of bytes it would have reused.
builtin.module attributes {wave.cohort = 2 : i64} {
  func.func @recycled_chain() {
    %x = wave.input "x" : tensor<2x64xf32>
    %a = wave.ewise "exp(%0)"(%x) : (tensor<2x64xf32>) -> tensor<2x64xf32>
    %b = wave.ewise "log(%0)"(%a) : (tensor<2x64xf32>) -> tensor<2x64xf32>
    %c = wave.ewise "sin(%0)"(%b) : (tensor<2x64xf32>) -> tensor<2x64xf32>
    %d = wave.ewise "cos(%0)"(%c) : (tensor<2x64xf32>) -> tensor<2x64xf32>
    wave.output "d", %d : tensor<2x64xf32>
    func.return
  }
}
// CHECK:       wpk.arena_bytes = {weights = 0 : i64, state = 0 : i64, act = 1024 : i64, input = 512 : i64, output = 512 : i64}, wpk.act_lower_bound = 1024 : i64
// CHECK:       wpk.buffer "t[[A:[0-9]+]]" {arena = "act", role = "act", bytes = 256 : i64, session_stride = 512 : i64, offset = [[OA:[0-9]+]] : i64}
// CHECK-NEXT:  wpk.buffer "t{{[0-9]+}}" {arena = "act", role = "act", bytes = 256 : i64, session_stride = 512 : i64, offset = [[OB:[0-9]+]] : i64}
// CHECK-NEXT:  wpk.buffer "t{{[0-9]+}}" {arena = "act", role = "act", bytes = 256 : i64, session_stride = 512 : i64, offset = [[OA]] : i64}
// CHECK-NEXT:  wpk.buffer "t{{[0-9]+}}" {arena = "act", role = "act", bytes = 256 : i64, session_stride = 512 : i64, offset = [[OB]] : i64}
// DEDICATED:       wpk.arena_granularity = "none", wpk.arena_granularity_why = "auto: 2,048 activation bytes unrecycled, within max-dedicated-bytes 4,096", wpk.arena_bytes = {weights = 0 : i64, state = 0 : i64, act = 2048 : i64, input = 512 : i64, output = 512 : i64}, wpk.act_lower_bound = 1024 : i64
// DEDICATED:       wpk.buffer "t{{[0-9]+}}" {arena = "act", role = "act", bytes = 256 : i64, session_stride = 1024 : i64, offset = 0 : i64}
// DEDICATED-NEXT:  wpk.buffer "t{{[0-9]+}}" {arena = "act", role = "act", bytes = 256 : i64, session_stride = 1024 : i64, offset = 256 : i64}
// DEDICATED-NEXT:  wpk.buffer "t{{[0-9]+}}" {arena = "act", role = "act", bytes = 256 : i64, session_stride = 1024 : i64, offset = 512 : i64}
// DEDICATED-NEXT:  wpk.buffer "t{{[0-9]+}}" {arena = "act", role = "act", bytes = 256 : i64, session_stride = 1024 : i64, offset = 768 : i64}

// -----

// Tile granularity: `a`'s low half is dead once `lo` (sin of it) is computed, so `hi` (cos of the high
// half, written by the next phase, while that half is still read) takes those bytes: 768 bytes per session
// (the lower bound at tile granularity), where whole-buffer liveness (granularity=op) keeps all of `a`
// until `hi` is written: 1024. (The halves themselves are no buffers: a slice of a contiguous block is
// read in place.) granularity=auto (the default) runs tile while one session's activations hold at most
// max-tile-words words (these hold 320: at max-tile-words=255 it falls back to op).
// wpk-schedule orders `hi`'s writer after `lo`'s reader of those bytes (write-after-read); wpk-verify, in the
// first RUN's pipeline, proves the program race-free.
builtin.module attributes {wave.cohort = 2 : i64} {
  func.func @tile_recycles_consumed_slices() {
    %x = wave.input "x" : tensor<2x128xf32>
    %a = wave.ewise "exp(%0)"(%x) : (tensor<2x128xf32>) -> tensor<2x128xf32>
    %a_lo = wave.slice %a {starts = array<i64: 0, 0>, steps = array<i64: 1, 1>} : (tensor<2x128xf32>) -> tensor<2x64xf32>
    %a_hi = wave.slice %a {starts = array<i64: 0, 64>, steps = array<i64: 1, 1>} : (tensor<2x128xf32>) -> tensor<2x64xf32>
    %lo = wave.ewise "sin(%0)"(%a_lo) : (tensor<2x64xf32>) -> tensor<2x64xf32>
    %hi = wave.ewise "cos(%0)"(%a_hi) : (tensor<2x64xf32>) -> tensor<2x64xf32>
    %d = wave.ewise "mul(%0, %1)"(%lo, %hi) : (tensor<2x64xf32>, tensor<2x64xf32>) -> tensor<2x64xf32>
    wave.output "d", %d : tensor<2x64xf32>
    func.return
  }
}
// CHECK:       wpk.arena_granularity = "tile", wpk.arena_granularity_why = "auto: 320 activation words a session, within max-tile-words 67,108,864", wpk.arena_bytes = {weights = 0 : i64, state = 0 : i64, act = 1536 : i64, input = 1024 : i64, output = 512 : i64}, wpk.act_lower_bound = 1536 : i64
// CHECK:       wpk.buffer "t[[A:[0-9]+]]" {arena = "act", role = "act", bytes = 512 : i64, session_stride = 768 : i64, offset = 0 : i64}
// CHECK-NEXT:  wpk.buffer "t{{[0-9]+}}" {arena = "act", role = "act", bytes = 256 : i64, session_stride = 768 : i64, offset = 512 : i64}
// CHECK-NEXT:  wpk.buffer "t{{[0-9]+}}" {arena = "act", role = "act", bytes = 256 : i64, session_stride = 768 : i64, offset = 0 : i64}
// OP:          wpk.arena_granularity = "op", {{(wpk.arena_granularity_why = "auto: 320 activation words a session, over max-tile-words 255", )?}}wpk.arena_bytes = {weights = 0 : i64, state = 0 : i64, act = 2048 : i64, input = 1024 : i64, output = 512 : i64}, wpk.act_lower_bound = 2048 : i64
// OP:          wpk.buffer "t{{[0-9]+}}" {arena = "act", role = "act", bytes = 256 : i64, session_stride = 1024 : i64, offset = 768 : i64}

// -----

// Placement needs session slots, hence the cohort.
builtin.module {
  wpk.buffer "t0" {arena = "act", role = "act", bytes = 16 : i64, session_stride = 16 : i64}
}
// CHECK: wave-to-wpk: the module has no wave.cohort attribute; run wave-cohort first
