// RUN: wavec-opt %s --split-input-file -p 'wave-to-wpk{workers=1},wpk-arena,wpk-schedule{workers=1}' --verify-diagnostics | filecheck %s

// A chain a -> b -> c -> d: `a` is dead once `b` is computed, so `c` reuses its bytes; the activation
// arena peaks at two live buffers (the lower bound), not four.
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

// -----

// Placement needs session slots, hence the cohort.
builtin.module {
  wpk.buffer "t0" {arena = "act", role = "act", bytes = 16 : i64, session_stride = 16 : i64}
}
// CHECK: wave-to-wpk: the module has no wave.cohort attribute; run wave-cohort first
