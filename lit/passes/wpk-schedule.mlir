// RUN: wavec-opt %s --split-input-file -p 'wave-to-wpk{workers=2},wpk-schedule{workers=2}' --verify-diagnostics | filecheck %s

// Phase p signals counter p+1 (counter 0 ends the beat); each task of the next phase waits for every
// task of the previous one: counter 1 reaching 2 signals per beat. Tasks are dealt round robin.
builtin.module attributes {wave.cohort = 4 : i64} {
  func.func @two_phases() {
    %x = wave.input "x" : tensor<4x8xf32>
    %y = wave.ewise "relu(%0)"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
    wave.output "y", %y : tensor<4x8xf32>
    func.return
  }
}
// CHECK:       wpk.counters = 3 : i64
// CHECK:       wpk.phase "ewise_1"
// CHECK-NEXT:    wpk.task "ewise" {{.*}}sessions = array<i64: 0, 2>{{.*}}worker = 0 : i64, order = 0 : i64, waits = array<i64>, signal = 1 : i64}
// CHECK-NEXT:    wpk.task "ewise" {{.*}}sessions = array<i64: 2, 4>{{.*}}worker = 1 : i64, order = 0 : i64, waits = array<i64>, signal = 1 : i64}
// CHECK:       wpk.phase "output_y"
// CHECK-NEXT:    wpk.task "ewise" {{.*}}worker = 0 : i64, order = 1 : i64, waits = array<i64: 1, 2>, signal = 2 : i64}
// CHECK-NEXT:    wpk.task "ewise" {{.*}}worker = 1 : i64, order = 1 : i64, waits = array<i64: 1, 2>, signal = 2 : i64}

// -----

// Scheduling needs the phases that wave-to-wpk makes.
builtin.module {
}
// CHECK: wave-to-wpk: the module has no wave.cohort attribute; run wave-cohort first
